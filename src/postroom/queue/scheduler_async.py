"""The scheduler: stores the registered periodic schedules and enqueues their due ticks."""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from .._acompat import AEvent
from .._db_async import AsyncDatabase
from .._listener_async import send_wakeups
from .._periodic_async import AsyncPeriodic
from .._wakeups import JOBS
from .registry import JobRegistry

log = logging.getLogger("postroom.worker")


class AsyncScheduler(AsyncPeriodic):
    """Enqueues each due tick once, however many workers run it: the schedule row is locked
    (SKIP LOCKED, so other workers pass over it) and moved to its next tick in the same
    transaction as the job insert. Ticks missed while no worker ran are enqueued once, not
    once per tick."""

    name = "scheduler"
    what = "enqueueing periodic jobs"

    def __init__(self, db: AsyncDatabase, registry: JobRegistry, *, stopping: AEvent) -> None:
        # Awake at least every second, and at the next tick (no jitter: ticks are on time).
        super().__init__(db, interval=1.0, stopping=stopping, log=log, jitter=0, immediately=True)
        self._registry = registry
        self._names = sorted(registry.schedules)

    async def register(self) -> None:
        """Store the registered schedules (new ones start at their next tick)."""
        async with self._db.connection() as conn, conn.transaction():
            cur = await conn.execute(self._db.q("db_clock"))
            row = await cur.fetchone()
            assert row is not None
            now = row[0]
            for schedule in self._registry.schedules.values():
                await conn.execute(
                    self._db.q("upsert_schedule"),
                    {
                        "name": schedule.name,
                        "cron": schedule.cron.spec,  # with its CRON_TZ= zone, if any
                        "kind": schedule.kind,
                        "queue": schedule.queue,
                        "args": schedule.args_json,
                        "priority": schedule.priority,
                        "max_attempts": schedule.max_attempts,
                        "next_run_at": schedule.cron.next_after(now),
                    },
                )

    async def tick(self) -> float:
        wait = 1.0
        async with self._db.connection() as conn:
            async with conn.transaction():
                await self._enqueue_due_ticks(conn)
            cur = await conn.execute(self._db.q("next_schedule_at"), {"names": self._names})
            row = await cur.fetchone()
        if row is not None and row[0] is not None:
            wait = min(wait, max(row[0].total_seconds(), 0.0))
        return wait + 0.002

    async def _enqueue_due_ticks(self, conn: psycopg.AsyncConnection[Any]) -> None:
        cur = await conn.execute(self._db.q("due_schedules"), {"names": self._names})
        for (
            name,
            _cron,
            kind,
            queue,
            _args,
            priority,
            max_attempts,
            tick,
            now,
        ) in await cur.fetchall():
            schedule = self._registry.schedules[name]
            await conn.execute(
                self._db.q("enqueue_unique_jobs"),
                {
                    "queues": [queue],
                    "kinds": [kind],
                    "args": [schedule.args_json],
                    "priorities": [priority],
                    "run_ats": [tick],
                    "delays": [None],
                    "max_attempts": [max_attempts],
                    "unique_keys": [f"cron:{name}:{tick.isoformat()}"],
                },
            )
            await conn.execute(
                self._db.q("advance_schedule"),
                {"name": name, "next_run_at": schedule.cron.next_after(now), "last_run_at": tick},
            )
            await send_wakeups(conn, self._db, JOBS, [queue])
