"""The worker registry (migration 0038), with the sync and the async worker: an idle worker is
registered with its host, pid, queues and concurrency and keeps beating; a clean stop removes
its row; a row gone for long is pruned by any worker's rescuer, a recently gone one stays; a
role that may not write the registry still runs jobs (one warning); no role writes another
role's row."""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime
from typing import Any, cast

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom

from ..blocking import EventLoopThread, client_on
from ..roles import login_role
from ..signals import wait_for
from .helpers import query, running, scalar

ROW = (
    "SELECT host, pid, queues, concurrency, role_name, started_at, heartbeat_at, expires_at"
    " FROM postroom.workers WHERE worker = %s"
)


def registered(dsn: str, worker: str) -> tuple[Any, ...] | None:
    rows = query(dsn, ROW, (worker,))
    return rows[0] if rows else None


def test_an_idle_worker_is_registered_beats_and_is_removed_on_stop(
    any_client: postroom.Client, dsn: str
) -> None:
    worker = any_client.worker(["reg-a", "reg-b"], concurrency=3, lease=3.0, heartbeat=0.2)
    with running(worker):
        wait_for(lambda: registered(dsn, worker.name), what="the worker registered")
        row = registered(dsn, worker.name)
        assert row is not None
        host, pid, queues, concurrency, role, started, first_beat, expires = row
        assert (host, pid, queues, concurrency) == (
            socket.gethostname(),
            os.getpid(),
            ["reg-a", "reg-b"],
            3,
        )
        assert role == scalar(dsn, "SELECT session_user")
        assert (expires - first_beat).total_seconds() == pytest.approx(3.0)

        def beaten() -> bool:
            now = registered(dsn, worker.name)
            return now is not None and cast(datetime, now[6]) > first_beat

        wait_for(beaten, what="a heartbeat of the idle worker")  # no job held
        assert cast(tuple[Any, ...], registered(dsn, worker.name))[5] == started
    assert registered(dsn, worker.name) is None


def test_rows_gone_for_long_are_pruned_and_recently_gone_ones_stay(
    any_client: postroom.Client, dsn: str
) -> None:
    for name, gone in (("crashed-long-ago", "1 hour"), ("crashed-just-now", "1 minute")):
        scalar(
            dsn,
            "INSERT INTO postroom.workers (worker, role_name, host, pid, queues, concurrency,"
            " started_at, heartbeat_at, expires_at)"
            " VALUES (%s, 'someone', 'h', 1, '{reg}', 1, now() - interval '2 hours',"
            " now() - %s::interval - interval '30 s', now() - %s::interval) RETURNING 1",
            (name, gone, gone),
        )
    worker = any_client.worker(["reg"], lease=2.0, rescue_interval=0.05)
    with running(worker):
        wait_for(lambda: registered(dsn, "crashed-long-ago") is None, what="the stale row pruned")
        assert registered(dsn, "crashed-just-now") is not None  # shown as gone for a while
        assert registered(dsn, worker.name) is not None


def test_a_role_that_may_not_register_still_runs_jobs(
    client: postroom.Client,
    dsn: str,
    client_loop: EventLoopThread | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker role granted before 0038 (here: its rights of 0038 revoked) warns once and
    runs; the dashboard then lists it while it holds jobs."""
    caplog.set_level(logging.WARNING, logger="postroom.worker")
    with login_role(dsn, "postroom_regrole") as role:
        client.grant(role, "worker")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for function in (
                "register_worker(text, text, integer, text[], integer, interval)",
                "worker_heartbeat(text, interval)",
                "unregister_worker(text)",
                "prune_workers(interval)",
            ):
                conn.execute(f"REVOKE EXECUTE ON FUNCTION postroom.{function} FROM {role}")
        with client_on(make_conninfo(dsn, user=role), client_loop) as app:

            @app.job("reg-ok", queue="reg")
            def ok() -> int:
                return 7

            job = client.enqueue("reg-ok", queue="reg")
            worker = app.worker(["reg"], lease=2.0, heartbeat=0.1, rescue_interval=0.05)
            with running(worker):
                assert client.job_handle(job.id).result(timeout=10) == 7
                wait_for(
                    lambda: "worker registry is not available" in caplog.text,
                    what="the warning",
                )
            assert registered(dsn, worker.name) is None
    warnings = [r for r in caplog.records if "worker registry" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


def test_no_role_writes_another_roles_row(client: postroom.Client, dsn: str) -> None:
    with login_role(dsn, "postroom_regother") as role:
        client.grant(role, "worker")
        scalar(
            dsn,
            "SELECT postroom.register_worker('theirs', 'h', 1, '{q}', 1, '1 minute')",
        )
        with psycopg.connect(make_conninfo(dsn, user=role), autocommit=True) as conn:
            calls = (
                "SELECT postroom.register_worker('theirs', 'x', 2, '{q}', 9, '1 hour')",
                "SELECT postroom.worker_heartbeat('theirs', '1 hour')",
                "SELECT postroom.unregister_worker('theirs')",
            )
            assert [conn.execute(c).fetchone() for c in calls] == [(False,), (False,), (False,)]
            for statement in (
                "UPDATE postroom.workers SET expires_at = 'infinity'",
                "DELETE FROM postroom.workers",
                "INSERT INTO postroom.workers VALUES ('x', 'y', 'h', 1, '{q}', 1, now(),"
                " now(), now())",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
        row = registered(dsn, "theirs")
        assert row is not None and row[:4] == ("h", 1, ["q"], 1)


def test_a_schema_without_the_registry_still_runs_jobs(
    any_client: postroom.Client, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On a schema not migrated to 0038 the worker runs and says why it is not registered
    (at its first beat: with no schema at all the fetcher's one line comes alone)."""
    caplog.set_level(logging.WARNING, logger="postroom.worker")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP FUNCTION postroom.register_worker")
        conn.execute("DELETE FROM postroom.schema_migrations WHERE version = 38")

    @any_client.job("reg-old", queue="reg")
    def old() -> int:
        return 8

    job = any_client.enqueue("reg-old", queue="reg")
    with running(any_client.worker(["reg"], lease=2.0, heartbeat=0.1)):
        assert any_client.job_handle(job.id).result(timeout=10) == 8
        wait_for(lambda: "worker registry is not available" in caplog.text, what="the warning")
    assert "register_worker" in caplog.text
