"""The runner across a real database restart (a throwaway embedded server, never the shared
one): it reconnects by itself and goes on from the committed cursors; transactional effects
stay exactly once, poll/commit handles every message at least once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

import postroom

from .test_faults import own_server, pg_ctl

__all__ = ["own_server"]  # the fixture, imported for use here


def eventually(check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def publish_retrying(client: postroom.Client, values: list[str]) -> None:
    """Publish once the server is back (the first attempts may meet dropped connections)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            client.publish_batch("t", [{"value": v, "key": v} for v in values])
            return
        except (psycopg.OperationalError, postroom.errors.DatabaseUnavailable):
            assert time.monotonic() < deadline, "the server did not come back"
            time.sleep(0.2)


@pytest.mark.slow
def test_the_runner_goes_on_after_a_database_restart(own_server: tuple[str, Path]) -> None:
    url, pgdata = own_server
    handled: set[str] = set()
    lock = threading.Lock()
    with postroom.connect(url) as client:
        client.create_topic("t", partitions=2)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE effects (value text NOT NULL)")

        @client.subscribe("t", group="plain", session_timeout=2)
        def plain(message: postroom.Message) -> None:
            with lock:
                handled.add(message.text())

        @client.subscribe("t", group="exact", transactional=True, session_timeout=2)
        def exact(message: postroom.Message, conn: psycopg.Connection) -> None:
            conn.execute("INSERT INTO effects VALUES (%s)", [message.text()])

        def effects() -> list[str]:
            with psycopg.connect(url) as conn:
                return [r[0] for r in conn.execute("SELECT value FROM effects")]

        runner = client.runner()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                runner.run(handle_signals=False)
            except BaseException as exc:  # noqa: BLE001  # reported by the assert below
                errors.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        try:
            before = [f"a{i}" for i in range(20)]
            client.publish_batch("t", [{"value": v, "key": v} for v in before])
            eventually(lambda: len(handled) == 20 and len(effects()) == 20)
            pg_ctl(pgdata, "stop", "-m", "fast")
            pg_ctl(pgdata, "start", "-l", str(pgdata / "log"), "-o", f'-h "" -k {pgdata}')
            after = [f"b{i}" for i in range(20)]
            publish_retrying(client, after)
            eventually(lambda: handled == set(before + after))
            eventually(lambda: len(effects()) == 40)
            eventually(lambda: all(g.lag == 0 for g in client.list_groups()))
            assert sorted(effects()) == sorted(before + after)  # exactly once by effects
        finally:
            runner.stop()
            thread.join(60)
        assert not thread.is_alive()
        assert not errors, errors
    # The fixture stops the server it started, not the one pg_ctl started again.
    pg_ctl(pgdata, "stop", "-m", "fast")
