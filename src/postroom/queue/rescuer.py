# Generated from src/postroom/queue/rescuer_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The queue's maintenance units: the rescuer returns jobs whose lease expired (their worker
died) and prunes the worker registry of workers gone a while (``roster_async``), the purger
deletes old finished jobs, the kind watch warns about jobs no worker registers. Any worker runs
them; FOR UPDATE SKIP LOCKED lets several run at once without waiting."""

from __future__ import annotations

import logging
from datetime import timedelta

from .._acompat import Event
from .._db import Database
from .._periodic import Periodic
from .admin import JobAdmin
from .fetcher import Fetcher
from .registry import JobRegistry
from .roster import Roster

log = logging.getLogger("postroom.worker")

RESCUE_BATCH = 1000
PURGE_INTERVAL = 60.0
CHECK_INTERVAL = 60.0


class Rescuer(Periodic):
    """Every ``interval`` seconds (jittered) returns expired leases in batches of
    ``RESCUE_BATCH`` and wakes the fetcher for them; then prunes the worker registry of workers
    gone for long (``roster``, at most every ``PRUNE_INTERVAL``)."""

    name = "rescuer"
    what = "rescuing expired jobs"

    def __init__(
        self,
        db: Database,
        *,
        interval: float,
        fetcher: Fetcher,
        stopping: Event,
        roster: Roster | None = None,
    ) -> None:
        super().__init__(db, interval=interval, stopping=stopping, log=log)
        self._fetcher = fetcher
        self._roster = roster

    def tick(self) -> None:
        self.rescue()
        if self._roster is not None:
            self._roster.prune()

    def rescue(self) -> int:
        """Return every expired lease now; how many jobs came back."""
        total = 0
        while True:
            with self._db.connection() as conn:
                cur = conn.execute(self._db.q("rescue_expired_jobs"), {"batch": RESCUE_BATCH})
                row = cur.fetchone()
            count = int(row[0]) if row else 0
            total += count
            if count < RESCUE_BATCH:
                break
        if total:
            log.info("returned %d jobs whose lease expired", total)
            self._fetcher.floors.reset()  # they keep their run_at: below the floors
            self._fetcher.wake()
        return total


class Purger(Periodic):
    """Every ``PURGE_INTERVAL`` seconds (jittered) deletes done and cancelled jobs older than
    ``keep_finished`` (a worker with ``keep_finished=0`` deletes them at completion and runs
    no purger)."""

    name = "purger"
    what = "purging finished jobs"

    def __init__(
        self, db: Database, admin: JobAdmin, *, keep_finished: float, stopping: Event
    ) -> None:
        super().__init__(db, interval=PURGE_INTERVAL, stopping=stopping, log=log)
        self._admin = admin
        self._keep_finished = keep_finished

    def tick(self) -> None:
        self._admin.purge("done", self._keep_finished)
        self._admin.purge("cancelled", self._keep_finished)


class KindWatch(Periodic):
    """Warns (once per kind) about jobs due for longer than ``warn_after`` seconds whose kind
    this worker does not register: no worker may be running for them."""

    name = "kind-watch"
    what = "looking for jobs of unregistered kinds"

    def __init__(
        self,
        db: Database,
        registry: JobRegistry,
        *,
        warn_after: float,
        stopping: Event,
    ) -> None:
        interval = min(CHECK_INTERVAL, warn_after) if warn_after > 0 else CHECK_INTERVAL
        super().__init__(db, interval=interval, stopping=stopping, log=log)
        self._registry = registry
        self._warn_after = warn_after
        self._warned: set[tuple[str, str]] = set()

    def tick(self) -> None:
        self.warn_unregistered()

    def warn_unregistered(self) -> None:
        """Warn (once per kind) about jobs due for longer than ``warn_after`` seconds whose
        kind this worker does not register: no worker may be running for them."""
        with self._db.connection() as conn:
            cur = conn.execute(
                self._db.q("waiting_unregistered_kinds"),
                {
                    "threshold": timedelta(seconds=self._warn_after),
                    "kinds": sorted(self._registry.definitions),
                },
            )
            rows = cur.fetchall()
        for queue, kind, count, waited in rows:
            if (queue, kind) in self._warned:
                continue
            self._warned.add((queue, kind))
            log.warning(
                "job kind %r (queue %r): %d job(s) due for up to %.0f s and this worker does "
                "not register the kind; is a worker that registers it running?",
                kind,
                queue,
                count,
                waited.total_seconds(),
            )
