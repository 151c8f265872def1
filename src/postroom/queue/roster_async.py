"""The worker registry (migration 0038): one row per running worker, so the dashboard lists
every worker, idle ones included, with its host, pid, queues, concurrency, since when it runs
and its last heartbeat.

The roster owns the worker's row: ``join()`` at start, ``beat()`` from the heartbeat unit
(alive for one lease more: past it the worker is gone, as its jobs' leases are), ``leave()``
on a clean stop. ``prune()``, from the rescuer, deletes the rows of workers gone for longer
than ``PRUNE_AFTER`` (a crash, a kill): until then the dashboard shows them as gone.

The registry is for reading only: nothing in the queue depends on it. A role that may not
write it (granted before 0038 and not migrated, or a hand-made role), a schema without it or a
name another role's worker holds only costs the worker its row: it warns once and runs on.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import timedelta

import psycopg

from .._db_async import AsyncDatabase
from ..errors import InvalidArgument, SchemaNotReady

log = logging.getLogger("postroom.worker")

PRUNE_AFTER = 600.0
"""Seconds a gone worker's row stays (shown as gone) before a rescuer deletes it."""
PRUNE_INTERVAL = 60.0
"""A worker prunes the registry at its first rescue, then at most this often."""
MAX_TTL = 86_400.0

# Why a registry call cannot work for this worker (not a passing outage): warn once, go on.
_REFUSED = (psycopg.errors.InsufficientPrivilege, SchemaNotReady, InvalidArgument)


class AsyncRoster:
    """The registry row of worker ``worker``; ``interval`` is its heartbeat, ``ttl`` how long
    a beat keeps it alive (the worker's lease; at least 1 s)."""

    def __init__(
        self,
        db: AsyncDatabase,
        *,
        worker: str,
        queues: list[str],
        concurrency: int,
        ttl: float,
        interval: float,
    ) -> None:
        self._db = db
        self._worker = worker
        self._queues = list(queues)
        self._concurrency = concurrency
        self._ttl = timedelta(seconds=min(max(ttl, 1.0), MAX_TTL))
        self._interval = interval
        self._joined = False
        self._refused = False  # registering cannot work: no more attempts
        self._missing: SchemaNotReady | None = None  # told at the first beat (see join)
        self._prune_refused = False
        self._warned = False
        self._last_beat = float("-inf")
        self._last_prune = float("-inf")

    @property
    def joined(self) -> bool:
        """Whether the worker's row is in the registry (as far as the last call knows)."""
        return self._joined

    async def join(self) -> None:
        """Register the worker (started now). A failure is logged; ``beat()`` tries again."""
        if self._refused:
            return
        try:
            await self._register()
        except SchemaNotReady as exc:
            # An old schema (no 0038), or none at all: then the fetcher stops the worker with
            # its one line to run `postroom init`, and no warning here should come first.
            self._missing = exc
            self._refused = True
        except _REFUSED as exc:
            self._refuse(exc)
        except psycopg.Error as exc:
            log.warning("worker %s: not registered yet (%s); trying again", self._worker, exc)

    async def beat(self) -> None:
        """The registry heartbeat: at most twice per ``interval`` (the heartbeat unit also
        ticks on cancellations); registers again if the row is gone (pruned while the worker
        was stopped). A passing database error is raised for the heartbeat to retry."""
        if self._missing is not None:
            self._warn(self._missing)  # the worker runs: the schema is only older than 0038
            self._missing = None
        now = time.monotonic()
        if self._refused or now - self._last_beat < self._interval / 2:
            return
        try:
            if self._joined:
                async with self._db.connection() as conn:
                    cur = await conn.execute(
                        self._db.q("worker_heartbeat"), {"worker": self._worker, "ttl": self._ttl}
                    )
                    row = await cur.fetchone()
                self._joined = bool(row and row[0])
            if not self._joined:
                await self._register()
        except _REFUSED as exc:
            self._refuse(exc)
            return
        self._last_beat = now

    async def leave(self) -> None:
        """Remove the worker's row (a clean stop). Never raises: a row left behind shows as
        gone once its heartbeat is a lease old, and is pruned."""
        if not self._joined:
            return
        try:
            async with self._db.connection() as conn:
                await conn.execute(self._db.q("unregister_worker"), {"worker": self._worker})
            self._joined = False
        except (psycopg.Error, SchemaNotReady, InvalidArgument) as exc:
            log.warning("worker %s: its registry row stays (%s)", self._worker, exc)

    async def prune(self) -> int:
        """Delete the rows of workers gone for longer than ``PRUNE_AFTER`` (at most every
        ``PRUNE_INTERVAL``); how many."""
        now = time.monotonic()
        if self._prune_refused or now - self._last_prune < PRUNE_INTERVAL:
            return 0
        try:
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    self._db.q("prune_workers"), {"gone_for": timedelta(seconds=PRUNE_AFTER)}
                )
                row = await cur.fetchone()
        except _REFUSED as exc:
            self._prune_refused = True
            self._warn(exc)
            return 0
        self._last_prune = now
        removed = int(row[0]) if row else 0
        if removed:
            log.info("removed %d workers gone from the registry", removed)
        return removed

    async def _register(self) -> None:
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("register_worker"),
                {
                    "worker": self._worker,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "queues": self._queues,
                    "concurrency": self._concurrency,
                    "ttl": self._ttl,
                },
            )
            row = await cur.fetchone()
        self._joined = bool(row and row[0])
        if not self._joined and not self._warned:
            self._warned = True
            log.warning(
                "worker %s: another role's worker is registered under this name; this one "
                "runs unregistered (pick another name=)",
                self._worker,
            )

    def _refuse(self, exc: Exception) -> None:
        self._refused = True
        self._joined = False
        self._warn(exc)

    def _warn(self, exc: Exception) -> None:
        if self._warned:
            return
        self._warned = True
        log.warning(
            "worker %s: the worker registry is not available to it (%s); it runs on "
            "unregistered: the dashboard lists it only while it holds jobs (migrate, then "
            "`postroom grant ROLE worker` again)",
            self._worker,
            exc,
        )
