# Generated from src/postroom/queue/rescuer_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The rescuer: returns jobs whose lease expired (their worker died) and purges old finished
jobs. Any worker runs it; FOR UPDATE SKIP LOCKED lets several run at once without waiting."""

from __future__ import annotations

import logging
import random
import time
from datetime import timedelta

import psycopg

from .._acompat import Event
from .._db import Database
from .admin import JobAdmin
from .fetcher import Fetcher
from .registry import JobRegistry

log = logging.getLogger("postroom.worker")

RESCUE_BATCH = 1000
PURGE_INTERVAL = 60.0
CHECK_INTERVAL = 60.0


class Rescuer:
    """Every ``interval`` seconds (jittered) returns expired leases in batches of
    ``RESCUE_BATCH``; every ``PURGE_INTERVAL`` seconds deletes done and cancelled jobs older
    than ``keep_finished`` (when > 0; 0 deletes them at completion)."""

    def __init__(
        self,
        db: Database,
        admin: JobAdmin,
        registry: JobRegistry,
        *,
        interval: float,
        keep_finished: float,
        fetcher: Fetcher,
        stopping: Event,
        warn_after: float | None = None,
    ) -> None:
        self._db = db
        self._admin = admin
        self._registry = registry
        self._interval = interval
        self._keep_finished = keep_finished
        self._fetcher = fetcher
        self._stopping = stopping
        self._warn_after = warn_after
        self._warned: set[tuple[str, str]] = set()

    def run(self) -> None:
        next_purge = time.monotonic() + PURGE_INTERVAL * random.random()
        check_interval = min(CHECK_INTERVAL, self._warn_after or CHECK_INTERVAL)
        next_check = time.monotonic() + check_interval / 2
        while not self._stopping.is_set():
            self._stopping.wait_timeout(self._interval * (0.8 + 0.4 * random.random()))
            if self._stopping.is_set():
                return
            try:
                self.rescue()
                if self._keep_finished > 0 and time.monotonic() >= next_purge:
                    next_purge = time.monotonic() + PURGE_INTERVAL
                    self._admin.purge("done", self._keep_finished)
                    self._admin.purge("cancelled", self._keep_finished)
                if self._warn_after is not None and time.monotonic() >= next_check:
                    next_check = time.monotonic() + check_interval
                    self.warn_unregistered()
            except psycopg.Error as exc:
                log.warning("queue maintenance failed: %s", exc)

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
            self._fetcher.wake()
        return total

    def warn_unregistered(self) -> None:
        """Warn (once per kind) about jobs due for longer than ``warn_after`` seconds whose
        kind this worker does not register: no worker may be running for them."""
        assert self._warn_after is not None
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
