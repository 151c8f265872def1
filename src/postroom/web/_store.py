"""The dashboard's reads: the named queries of ``_sql/web.sql`` on a small pool of its own.

The web package is an adapter: actions go through the client's public API. What the public API
does not give (bounded browsing, cheap counts, members, schedules) is read here, on connections
opened from ``client.conninfo`` with ``default_transaction_read_only`` on, so no read can
write even if a query were wrong. The one write without a public call (``delete_job``) opens a
read-write transaction explicitly, and so does recording a sample of the time series (through
``record_web_sample``, a SECURITY DEFINER function that writes only ``web_samples``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from postroom import _sql

_QUERIES = {
    **_sql.load_queries("web.sql"),
    # What holds the oldest vacuum horizon, as the workers' vacuum names it in its warning.
    "vacuum_horizon_holder": _sql.load_queries("queue.sql")["vacuum_horizon_holder"],
}

# Above this many rows (planner estimate) a table's counts come from a bounded sample.
EXACT_COUNT_LIMIT = 200_000
# Rows a filtered browse or finished-job list reads at most before it stops looking (the page
# then offers to go on from there).
SCAN_LIMIT = 5_000


class WebStore:
    """Read-only access to one postroom schema for the dashboard and /metrics."""

    def __init__(
        self, conninfo: str, schema: str, *, max_size: int = 4, settings: str = ""
    ) -> None:
        self.schema = schema
        self._rendered = {name: _sql.render(text, schema) for name, text in _QUERIES.items()}
        self.pool: AsyncConnectionPool[AsyncConnection[TupleRow]] = AsyncConnectionPool(
            conninfo,
            min_size=1,
            max_size=max_size,
            open=False,
            kwargs={
                "autocommit": True,
                "options": "-c default_transaction_read_only=on -c statement_timeout=10000"
                + (f" {settings}" if settings else ""),
            },
            name="postroom-web",
        )
        self.conninfo = conninfo

    async def open(self) -> None:
        await self.pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        await self.pool.close()

    def query(self, name: str) -> Any:
        return self._rendered[name]

    async def rows(self, name: str, params: Mapping[str, Any] | None = None) -> list[TupleRow]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._rendered[name], params or {})
            return await cur.fetchall()

    async def explain(self, name: str, params: Mapping[str, Any]) -> str:
        """The plan of one named query, for docs/dashboard.md (``tools/dashboard_plans.py``)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(b"EXPLAIN " + self._rendered[name].as_bytes(conn), params)
            return "\n".join(str(row[0]) for row in await cur.fetchall())

    # -- counts -----------------------------------------------------------------------------

    async def table_estimates(self) -> dict[str, tuple[int, int]]:
        """Per big table: (planner row estimate, bytes on disk)."""
        rows = await self.rows("web_table_estimates", {"schema": self.schema})
        return {name: (int(tuples), int(size)) for name, tuples, size in rows}

    async def job_counts(self) -> tuple[list[tuple[str, str, int]], bool]:
        """Jobs per (queue, state), live and kept finished ones; True if any are estimates."""
        estimates = await self.table_estimates()
        counts: list[tuple[str, str, int]] = []
        estimated = False
        for table, exact, sampled in (
            ("jobs", "web_job_counts_exact", "web_job_counts_sampled"),
            ("finished_jobs", "web_finished_counts_exact", "web_finished_counts_sampled"),
        ):
            tuples = estimates.get(table, (0, 0))[0]
            if tuples > EXACT_COUNT_LIMIT:
                percent = min(100.0, 100.0 * 20_000 / tuples)
                rows = await self.rows(sampled, {"percent": percent})
                estimated = True
            else:
                rows = await self.rows(exact)
            counts.extend((str(r[0]), str(r[1]), int(r[2])) for r in rows)
        return counts, estimated

    # -- the log ----------------------------------------------------------------------------

    async def partitions(self, topic: str) -> list[TupleRow]:
        return await self.rows("web_partitions", {"topic": topic})

    async def all_partitions(self) -> list[TupleRow]:
        return await self.rows("web_all_partitions")

    async def browse(
        self,
        topic: str,
        partition: int,
        from_offset: int,
        *,
        limit: int = 50,
        key: bytes | None = None,
        headers: str | None = None,
        contains: str | None = None,
    ) -> list[TupleRow]:
        return await self.rows(
            "web_browse",
            {
                "topic": topic,
                "partition": partition,
                "from_offset": from_offset,
                "limit": limit,
                "scan": SCAN_LIMIT,
                "key": key,
                "headers": headers,
                "contains": contains,
            },
        )

    async def offset_at(self, topic: str, partition: int, at: datetime, low: int, high: int) -> int:
        """The first offset at or after ``at`` in [low, high): a binary search, one primary-key
        probe a step (created_at rises with the offset within a partition)."""
        while low < high:
            middle = (low + high) // 2
            found = await self.rows(
                "web_message_time", {"topic": topic, "partition": partition, "offset": middle}
            )
            if not found:
                high = middle
            elif found[0][1] >= at:
                high = middle
            else:
                low = int(found[0][0]) + 1
        return low

    async def members(self) -> list[TupleRow]:
        return await self.rows("web_members")

    # -- the queue --------------------------------------------------------------------------

    async def job_list(
        self, state: str, filters: Mapping[str, Any], before: int | None, limit: int = 50
    ) -> list[TupleRow]:
        params = {**filters, "state": state, "before": before, "limit": limit}
        if state in ("done", "cancelled"):
            return await self.rows("web_finished_list", {**params, "scan": SCAN_LIMIT})
        return await self.rows("web_job_list", params)

    async def job_ids(self, state: str, filters: Mapping[str, Any], limit: int) -> list[int]:
        rows = await self.rows("web_job_ids", {**filters, "state": state, "limit": limit})
        return [int(r[0]) for r in rows]

    async def delete_job(self, job_id: int) -> int:
        """Delete one finished job or one failed job nothing waits on; returns rows deleted."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(b"SET TRANSACTION READ WRITE")
            cur = await conn.execute(self._rendered["web_delete_job"], {"id": job_id})
            return len(await cur.fetchall())

    # -- the time series ---------------------------------------------------------------------

    async def record_sample(
        self, points: Mapping[str, Any], interval: timedelta, slots: int
    ) -> datetime | None:
        """Record one sample in the ring ``web_samples`` of ``slots`` rows (migration 0036):
        its time, or None if another sampler recorded one within ``interval``. The role needs
        EXECUTE on ``record_web_sample`` (docs/dashboard.md); without it psycopg's
        InsufficientPrivilege is raised."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(b"SET TRANSACTION READ WRITE")
            cur = await conn.execute(
                self._rendered["web_record_sample"],
                {"points": Jsonb(dict(points)), "interval": interval, "slots": slots},
            )
            row = await cur.fetchone()
            return None if row is None else row[0]
