"""The worker role acts only through postroom's SECURITY DEFINER functions: a worker logged in
as a role granted only "worker" runs jobs of every outcome, and every table-level escape fails."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import postroom
from postroom.queue.backoff import Backoff

from ..roles import login_role
from ..signals import wait_for
from .helpers import running, scalar


@pytest.fixture
def role(client: postroom.Client) -> Iterator[str]:
    """A LOGIN role, dropped after the test."""
    with login_role(client.conninfo, "postroom_wrole") as name:
        yield name


WORKER_ESCAPES = [
    # reading args of jobs it does not hold
    "SELECT args FROM postroom.jobs",
    "SELECT args FROM postroom.finished_jobs",
    "SELECT args FROM postroom.all_jobs",
    "SELECT args FROM postroom.job_schedules",
    "SELECT * FROM postroom.job_dependencies",
    # writing jobs in any state, other leases, arbitrary states
    "INSERT INTO postroom.jobs (kind, state, lease_expires_at, worker)"
    " VALUES ('x', 'running', 'infinity', 'me')",
    "UPDATE postroom.jobs SET state = 'failed'",
    "UPDATE postroom.jobs SET lease_expires_at = 'infinity'",
    "UPDATE postroom.jobs SET args = '{}'",
    "DELETE FROM postroom.jobs",
    "INSERT INTO postroom.finished_jobs (id, queue, kind, args, priority, run_at, attempts,"
    " max_attempts, state, created_at) VALUES (1, 'q', 'k', '{}', 0, now(), 0, 1, 'done', now())",
    "DELETE FROM postroom.finished_jobs",
    "UPDATE postroom.job_limits SET tokens = 1e9",
    "DELETE FROM postroom.job_limits",
    "UPDATE postroom.job_schedules SET next_run_at = 'infinity'",
    "DELETE FROM postroom.job_schedules",
    "INSERT INTO postroom.job_dependencies (parent_id, job_id) VALUES (1, 2)",
    "DELETE FROM postroom.job_dependencies",
    "UPDATE postroom.job_sequences SET last_job_id = 0",
    "INSERT INTO postroom.queue_pauses (queue) VALUES ('default')",
    "TRUNCATE postroom.jobs",
    # the worker registry: only through its functions, only the role's own rows
    "UPDATE postroom.workers SET expires_at = 'infinity'",
    "DELETE FROM postroom.workers",
    "SELECT * FROM postroom.workers",
    # functions that are not the worker's
    "SELECT postroom.pause_queue('default')",
    "SELECT postroom.cancel_job(1)",
    "SELECT postroom.retry_failed_jobs()",
    "SELECT * FROM postroom.enqueue_job('x', '{}', 'default', 0, NULL, NULL, 1, NULL, NULL,"
    " NULL, 'hold')",
    # the claim's helpers run with the caller's rights: no way around the claim
    "SELECT * FROM postroom._claim_some('default', NULL, NULL, 10, 'me', '1 hour', now(),"
    " NULL, NULL)",
    "SELECT postroom._limit_spend('kind', 'x', -1000000, now())",
    "SELECT postroom._parent_succeeded(1)",
]


def test_worker_role_runs_every_outcome_through_functions_only(
    client: postroom.Client, role: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="postroom.worker")
    client.grant(role, "worker")
    conninfo = make_conninfo(client.conninfo, user=role)
    # A job whose worker died: running under an expired lease, to be rescued by the role.
    orphan = client.enqueue("ok", {"n": 0})
    scalar(
        client.conninfo,
        "UPDATE postroom.jobs SET state = 'running', attempts = 1, worker = 'dead',"
        " lease_expires_at = now() - interval '1 minute' WHERE id = %s RETURNING id",
        (orphan.id,),
    )
    done = client.enqueue("ok", {"n": 1})
    retried = client.enqueue("flaky", {"n": 2}, max_attempts=3)
    doomed = client.enqueue("bad", max_attempts=2)
    cancelled = client.enqueue("cancel")
    snoozed = client.enqueue("snooze")
    parent = client.enqueue("ok", {"n": 3})
    child = client.enqueue("ok", {"n": 4}, after=[parent])
    held = client.enqueue("ok", {"n": 5}, after=[doomed])
    dropped = client.enqueue("ok", {"n": 6}, after=[doomed], on_parent_failure="cancel")
    limited = client.enqueue("limited", {"n": 7})

    with postroom.connect(conninfo) as runner:
        ticks: list[int] = []
        flaky_runs: list[int] = []
        snoozes: list[int] = []

        @runner.periodic("* * * * * *")  # every second
        @runner.job("tick")
        def tick() -> None:
            ticks.append(1)

        @runner.job("ok")
        def ok(n: int) -> int:
            return n * 10

        @runner.job("flaky", backoff=Backoff(base=0.01, jitter=0))
        def flaky(n: int) -> int:
            flaky_runs.append(n)
            if len(flaky_runs) < 2:
                raise RuntimeError("not yet")
            return n

        @runner.job("bad", backoff=Backoff(base=0.01, jitter=0))
        def bad() -> None:
            raise RuntimeError("always")

        @runner.job("cancel")
        def cancel() -> None:
            raise postroom.errors.Cancel("given up")

        @runner.job("snooze")
        def snooze() -> str:
            snoozes.append(1)
            if len(snoozes) < 2:
                raise postroom.errors.Snooze(0.05)
            return "woke"

        @runner.job("limited", max_concurrency=1, rate_limit=100)
        def limited_job(n: int) -> int:
            return n

        worker = runner.worker(
            ["default", "spare"], poll_interval=0.05, rescue_interval=0.1, lease=5
        )
        with running(worker):
            assert client.job_handle(done.id).result(timeout=30) == 10
            assert client.job_handle(orphan.id).result(timeout=30) == 0
            assert client.job_handle(retried.id).result(timeout=30) == 2
            assert client.job_handle(snoozed.id).result(timeout=30) == "woke"
            assert client.job_handle(child.id).result(timeout=30) == 40
            assert client.job_handle(limited.id).result(timeout=30) == 7
            with pytest.raises(postroom.errors.JobCancelled):
                client.job_handle(cancelled.id).result(timeout=30)
            with pytest.raises(postroom.errors.JobCancelled):
                client.job_handle(dropped.id).result(timeout=30)
            with pytest.raises(postroom.errors.JobFailed):
                client.job_handle(doomed.id).result(timeout=30)
            assert client.get_job(held.id).state == "held"
            wait_for(lambda: ticks, 15, "a cron tick enqueued and run by the worker role")
    assert client.get_job(retried.id).attempts == 2
    assert client.get_job(snoozed.id).attempts == 1  # a snooze gives its attempt back
    assert client.get_job(cancelled.id).last_error == "given up"
    assert "this role does not own the queue tables" in caplog.text
    assert (
        scalar(
            client.conninfo, "SELECT max_running FROM postroom.job_limits WHERE name = 'limited'"
        )
        == 1
    )

    with psycopg.connect(conninfo, autocommit=True) as conn:
        for statement in WORKER_ESCAPES:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement.encode())
        # The write-backs are fenced: another worker's (or a stale) job is left alone.
        other = client.enqueue("ok", {"n": 8})
        scalar(
            client.conninfo,
            "UPDATE postroom.jobs SET state = 'running', attempts = 1, worker = 'other',"
            " lease_expires_at = now() + interval '1 hour' WHERE id = %s RETURNING id",
            (other.id,),
        )
        ids, stale = [other.id], [uuid.uuid4()]
        conn.execute(
            b"SELECT postroom.fail_jobs('me', %s, %s, ARRAY['x'], ARRAY[0::float8], ARRAY[true])",
            (ids, stale),
        )
        conn.execute(b"SELECT postroom.complete_jobs_deleted('other', %s, %s)", (ids, stale))
        conn.execute(b"SELECT postroom.snooze_jobs('me', %s, %s, ARRAY[0::float8])", (ids, stale))
        beat = conn.execute(
            b"SELECT * FROM postroom.heartbeat_jobs('me', %s, %s, '100 years')", (ids, stale)
        ).fetchall()
        assert beat == []
        info = client.get_job(other.id)
        assert (info.state, info.worker, info.attempts) == ("running", "other", 1)
        # Rescue only takes expired leases; purge only finished jobs.
        assert conn.execute(b"SELECT postroom.rescue_expired_jobs(100)").fetchone() == (0,)
        purged = conn.execute(
            b"SELECT postroom.purge_finished_jobs(now() + interval '1 hour', 'done', 'ok', 1000)"
        ).fetchone()
        assert purged is not None and purged[0] >= 3
        assert client.get_job(other.id).state == "running"


def test_roles_granted_worker_before_0008_lose_their_table_rights(
    client: postroom.Client, role: str
) -> None:
    """An install upgraded from 0006 had workers with table rights on the queue tables;
    migrating takes them back and grants the functions, and the worker still runs jobs."""
    from postroom import _sql

    schema = "upgraded_worker"
    older = [m for m in _sql.migrations() if m.version < 8]
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for migration in older:
            conn.execute(_sql.render(migration.statement, schema))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {s}.schema_migrations (version integer PRIMARY KEY, name text NOT"
                " NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(s=sql.Identifier(schema))
        )
        for migration in older:
            conn.execute(
                sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES (%s, %s)").format(
                    sql.Identifier(schema)
                ),
                (migration.version, migration.name),
            )
        conn.execute(
            sql.SQL(
                # The worker grant before migration 0008:
                "GRANT USAGE ON SCHEMA {s} TO {r};"
                " GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.jobs, {s}.finished_jobs,"
                " {s}.job_limits, {s}.job_schedules, {s}.job_dependencies TO {r};"
                " GRANT SELECT ON {s}.all_jobs, {s}.queue_pauses TO {r};"
                " GRANT EXECUTE ON FUNCTION {s}.unique_key_holders(text[]) TO {r}"
            ).format(s=sql.Identifier(schema), r=sql.Identifier(role))
        )
    with postroom.connect(client.conninfo, schema=schema) as owner:
        assert owner.migrate()[0].startswith("0008_")
        job = owner.enqueue("ok", {"n": 1})
        conninfo = make_conninfo(client.conninfo, user=role)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            for statement in (
                "SELECT args FROM {}.jobs",
                "UPDATE {}.jobs SET state = 'failed'",
                "DELETE FROM {}.finished_jobs",
                "SELECT * FROM {}.all_jobs",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(sql.SQL(statement).format(sql.Identifier(schema)))
        with postroom.connect(conninfo, schema=schema) as runner:

            @runner.job("ok")
            def ok(n: int) -> int:
                return n + 1

            with running(runner.worker(["default"], poll_interval=0.05)):
                assert owner.job_handle(job.id).result(timeout=30) == 2
