"""The enqueuer role acts only through postroom's SECURITY DEFINER functions: it enqueues
(plain, unique, workflow, SQL) and waits for results, and every table-level escape fails."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom

from ..roles import login_role
from ..signals import wait_for
from .helpers import running


@pytest.fixture
def role(client: postroom.Client) -> Iterator[str]:
    """A LOGIN role, dropped after the test."""
    with login_role(client.conninfo, "postroom_qrole") as name:
        yield name


ENQUEUER_ESCAPES = [
    "SELECT args FROM postroom.jobs",
    "SELECT args FROM postroom.finished_jobs",
    "SELECT args FROM postroom.all_jobs",
    "INSERT INTO postroom.jobs (kind, state, lease_expires_at, worker)"
    " VALUES ('x', 'running', 'infinity', 'me')",
    "UPDATE postroom.jobs SET state = 'failed'",
    "DELETE FROM postroom.jobs",
    "INSERT INTO postroom.finished_jobs (id, queue, kind, args, priority, run_at, attempts,"
    " max_attempts, state, created_at) VALUES (1, 'q', 'k', '{}', 0, now(), 0, 1, 'done', now())",
    "INSERT INTO postroom.job_dependencies (parent_id, job_id) VALUES (1, 2)",
    "UPDATE postroom.job_sequences SET last_job_id = 0",
    "INSERT INTO postroom.queue_pauses (queue) VALUES ('default')",
    "SELECT postroom.pause_queue('default')",
    "SELECT * FROM postroom.claim_jobs(ARRAY['default'], 10, 'me', '1 hour')",
    "SELECT postroom.cancel_job(1)",
    "SELECT postroom.retry_failed_jobs()",
    "UPDATE postroom.job_limits SET tokens = 1e9",
    "SELECT * FROM postroom.job_schedules",
]


def test_enqueuer_role_enqueues_and_waits_through_functions_only(
    client: postroom.Client, role: str
) -> None:
    @client.job("double")
    def double(n: int) -> int:
        return 2 * n

    client.grant(role, "enqueuer")
    conninfo = make_conninfo(client.conninfo, user=role)
    with postroom.connect(conninfo) as enqueuer:
        plain = enqueuer.enqueue("double", {"n": 1})
        first, again = enqueuer.enqueue_batch(
            [
                {"kind": "double", "args": {"n": 2}, "unique_key": "u"},
                {"kind": "double", "args": {"n": 3}, "unique_key": "u"},
            ]
        )
        assert again.id == first.id and not again.created
        after = enqueuer.enqueue("double", {"n": 4}, after=[plain, first], sequence="s")
        with psycopg.connect(conninfo, autocommit=True) as conn:
            row = conn.execute(b"SELECT postroom.enqueue('double', '{\"n\": 5}')").fetchone()
            assert row is not None
            for statement in ENQUEUER_ESCAPES:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement.encode())
        with running(client.worker(["default"], poll_interval=0.05)):
            assert plain.result(timeout=30) == 2
            assert after.result(timeout=30) == 8
            assert enqueuer.job_handle(row[0]).result(timeout=30) == 10
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            enqueuer.get_job(plain.id)
    assert client.get_job(after.id).state == "done"


def test_worker_role_runs_cron_and_workflow_jobs(client: postroom.Client, role: str) -> None:
    """A role granted only "worker": the scheduler enqueues through enqueue_batch, and the
    workflow triggers (release, hold, cancel) run with the worker's rights."""
    parent = client.enqueue("ok")
    child = client.enqueue("ok", after=[parent])
    failing = client.enqueue("bad", max_attempts=1)
    held = client.enqueue("ok", after=[failing])
    dropped = client.enqueue("ok", after=[failing], on_parent_failure="cancel")
    client.grant(role, "worker")
    with postroom.connect(make_conninfo(client.conninfo, user=role)) as runner:
        ticks: list[int] = []

        @runner.periodic("* * * * * *")  # every second
        @runner.job("tick")
        def tick() -> None:
            ticks.append(1)

        @runner.job("ok")
        def ok() -> str:
            return "ok"

        @runner.job("bad")
        def bad() -> None:
            raise RuntimeError("bad")

        with running(runner.worker(["default"], poll_interval=0.05)):
            assert client.job_handle(child.id).result(timeout=30) == "ok"
            with pytest.raises(postroom.errors.JobCancelled):
                client.job_handle(dropped.id).result(timeout=30)
            assert client.get_job(held.id).state == "held"
            wait_for(lambda: ticks, 15, "a cron tick enqueued and run by the worker role")
    assert client.list_jobs(kind="tick")
