"""A poll cancelled while it joins its group leaves no connection open: a relay stopped as it
starts (its first poll given up) leaked the heartbeat connection being set up."""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from typing import Any

import psycopg
import pytest
from psycopg import sql

import postroom
from postroom._db_async import AsyncDatabase


def test_a_join_cancelled_while_its_heartbeat_connection_is_set_up_closes_it(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[psycopg.AsyncConnection[Any]] = []
    real_connect = psycopg.AsyncConnection.connect

    async def recording_connect(cls: Any, *args: Any, **kwargs: Any) -> Any:
        conn = await real_connect(*args, **kwargs)
        opened.append(conn)
        return conn

    real_q = AsyncDatabase.q

    def slow_session(self: AsyncDatabase, name: str) -> Any:
        # The heartbeat connection's session settings, held in the server until cancelled.
        if name == "member_session":
            return sql.SQL("SELECT pg_sleep(30), %(lock_ms)s::text")
        return real_q(self, name)

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", classmethod(recording_connect))
    monkeypatch.setattr(AsyncDatabase, "q", slow_session)

    def sleeping(conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(30)%%'"
            " AND datname = current_database()"
        ).fetchone()
        return bool(row and row[0])

    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            await client.create_topic("t")
            consumer = client.consumer("g", "t")
            poll = asyncio.ensure_future(consumer.poll(timeout=5))
            with psycopg.connect(dsn, autocommit=True) as watcher:
                deadline = time.monotonic() + 30
                while not sleeping(watcher):
                    assert time.monotonic() < deadline, "the join never reached its session"
                    await asyncio.sleep(0.01)
            poll.cancel()
            with suppress(asyncio.CancelledError):
                await poll
            await consumer.close()

    asyncio.run(main())
    assert [conn for conn in opened if not conn.closed] == []
