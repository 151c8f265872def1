"""The client's pool hands out live connections: one the server closed while it sat idle in the
pool is found (its socket turned readable) and replaced, without a round trip for the others."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import postroom


def _terminate_others(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "  # waits for each
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        ).fetchone()
        assert row is not None
        return int(row[0])


def test_connections_the_server_closed_while_idle_are_replaced(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish("t", "before")
    assert _terminate_others(any_client.conninfo) >= 1
    for i in range(5):  # every pooled connection was closed: each is replaced, none fails
        any_client.publish("t", f"after {i}")
    with any_client.consumer(None, "t") as consumer:
        assert [m.text() for m in consumer.poll(timeout=5)] == ["before"] + [
            f"after {i}" for i in range(5)
        ]


def test_a_task_cancelled_while_it_returns_its_connection_still_returns_it(dsn: str) -> None:
    """psycopg_pool's return of a connection may wait (its lock, the hand-over to a client
    waiting for one, a reset): a task cancelled there lost the connection, and the client it
    was handed to waited out the pool's timeout. A relay stopped as its poll gave a connection
    back to the commit waiting for it took the pool's 30 s to stop (under load, in
    tests/relay). Here the return waits for ``gate``, the task is cancelled meanwhile."""
    import asyncio

    from postroom._db_async import AsyncDatabase, AsyncReconnectingPool

    class SlowReturn(AsyncReconnectingPool):
        gate: asyncio.Event
        returning: asyncio.Event

        async def _return_connection(self, conn: Any, from_getconn: bool) -> None:
            self.returning.set()
            await self.gate.wait()
            await super()._return_connection(conn, from_getconn)

    async def main() -> None:
        pool = SlowReturn(dsn, min_size=1, max_size=1, open=False, timeout=3)
        pool.gate, pool.returning = asyncio.Event(), asyncio.Event()
        await pool.open(wait=True)
        db = AsyncDatabase(pool, dsn, "postroom")

        async def use() -> int:
            async with db.connection() as conn:
                cur = await conn.execute("SELECT 1")
                row = await cur.fetchone()
                assert row is not None
                return int(row[0])

        try:
            first = asyncio.create_task(use())
            await pool.returning.wait()  # first is giving its connection back
            waiting = asyncio.create_task(use())  # and this one waits for it
            first.cancel()
            pool.gate.set()
            with pytest.raises(asyncio.CancelledError):
                await first  # the cancellation is raised, once the connection is back
            assert await waiting == 1  # before: PoolTimeout after the pool's 3 s
            assert pool.get_stats()["pool_available"] == 1
        finally:
            await pool.close()

    asyncio.run(main())
