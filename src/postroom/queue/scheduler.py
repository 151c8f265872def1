# Generated from src/postroom/queue/scheduler_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The scheduler: stores the registered periodic schedules and enqueues their due ticks."""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from .._acompat import Event
from .._db import Database
from .._listener import send_wakeups
from .._periodic import Periodic
from .._wakeups import JOBS
from .registry import JobRegistry

log = logging.getLogger("postroom.worker")


class Scheduler(Periodic):
    """Enqueues each due tick once, however many workers run it: the schedule row is locked
    (SKIP LOCKED, so other workers pass over it) and moved to its next tick in the same
    transaction as the job insert. Ticks missed while no worker ran are enqueued once, not
    once per tick."""

    name = "scheduler"
    what = "enqueueing periodic jobs"

    def __init__(self, db: Database, registry: JobRegistry, *, stopping: Event) -> None:
        # Awake at least every second, and at the next tick (no jitter: ticks are on time).
        super().__init__(db, interval=1.0, stopping=stopping, log=log, jitter=0, immediately=True)
        self._registry = registry
        self._names = sorted(registry.schedules)

    def register(self) -> None:
        """Store the registered schedules (new ones start at their next tick)."""
        with self._db.connection() as conn, conn.transaction():
            cur = conn.execute(self._db.q("db_clock"))
            row = cur.fetchone()
            assert row is not None
            now = row[0]
            for schedule in self._registry.schedules.values():
                conn.execute(
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

    def tick(self) -> float:
        wait = 1.0
        with self._db.connection() as conn:
            with conn.transaction():
                self._enqueue_due_ticks(conn)
            cur = conn.execute(self._db.q("next_schedule_at"), {"names": self._names})
            row = cur.fetchone()
        if row is not None and row[0] is not None:
            wait = min(wait, max(row[0].total_seconds(), 0.0))
        return wait + 0.002

    def _enqueue_due_ticks(self, conn: psycopg.Connection[Any]) -> None:
        cur = conn.execute(self._db.q("due_schedules"), {"names": self._names})
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
        ) in cur.fetchall():
            schedule = self._registry.schedules[name]
            conn.execute(
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
            conn.execute(
                self._db.q("advance_schedule"),
                {"name": name, "next_run_at": schedule.cron.next_after(now), "last_run_at": tick},
            )
            send_wakeups(conn, self._db, JOBS, [queue])
