"""Test signals: wait on events that the code under test sends, never on sleeps.

River's tests wait on signals its services send (``testsignal``); here the signals are
PostgreSQL notifications, since the workers under test may run in other processes.

- ``Signals(dsn, channel)`` listens on ``channel`` from the moment it is opened; ``wait(n)``
  returns the next ``n`` payloads or fails after a deadline. Open it *before* the action whose
  signals it waits for, so none is missed.
- ``wait_for(predicate)`` polls state of the test's own process (a counter, a flag a unit under
  test sets) until it is truthy, within a deadline: for what no notification announces.
- ``wait_for_listener(dsn, channel, then)`` returns once the code under test listens on
  ``channel`` and has done its last check since (the only way to see another session's
  LISTEN is ``pg_stat_activity``, hence a bounded poll of it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import psycopg


class Signals:
    """Notifications on ``channel``, received on a connection of the test's own."""

    def __init__(self, dsn: str, channel: str) -> None:
        self.channel = channel
        self._conn = psycopg.connect(dsn, autocommit=True)
        self._conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))

    def wait(self, count: int = 1, timeout: float = 30.0, what: str = "") -> list[str]:
        """The next ``count`` payloads, in the order they were committed."""
        payloads: list[str] = []
        deadline = time.monotonic() + timeout
        while len(payloads) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {count} signal(s) on "
                    f"{self.channel!r}{f' ({what})' if what else ''}; got {payloads}"
                )
            for notify in self._conn.notifies(timeout=remaining, stop_after=count - len(payloads)):
                payloads.append(notify.payload)
        return payloads

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Signals:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def notify(conn: psycopg.Connection[Any], channel: str, payload: str) -> None:
    """Send a signal (delivered when ``conn``'s transaction commits)."""
    conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def wait_for_listener(dsn: str, channel: str, then: str = ".", timeout: float = 30.0) -> None:
    """Return once a session of the test's database sits idle after ``LISTEN channel`` and,
    after that LISTEN, another session ran a statement matching the regex ``then`` and is idle
    again: the code under test listened, did its check (a fetch, a claim), and can now only
    be woken by a notification (or its fallback timer)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                """
                SELECT EXISTS (
                    SELECT FROM pg_stat_activity AS l
                    JOIN pg_stat_activity AS o ON o.datname = l.datname AND o.pid <> l.pid
                    WHERE l.datname = current_database() AND l.state = 'idle'
                      AND l.query ~* %(listen)s
                      AND o.pid <> pg_backend_pid() AND o.state = 'idle'
                      AND o.query_start > l.query_start AND o.query ~* %(then)s)
                """,
                {"listen": rf'LISTEN\s+"?{channel}"?\s*;?\s*$', "then": then},
            ).fetchone()
            if row is not None and row[0]:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"no session waits on {channel!r} after {timeout} s")
            time.sleep(0.005)


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 30.0,
    what: str = "condition",
    interval: float = 0.01,
) -> Any:
    """Poll ``predicate`` until it returns something truthy (a bounded wait, not a sleep);
    returns that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
