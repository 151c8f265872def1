# Generated from src/postroom/_periodic_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The periodic unit: one loop, one jitter, one error policy for every background unit that
runs every so often (the queue's rescuer, purger, vacuum, scheduler and heartbeat, the log's
retention runner). A unit subclasses it and writes ``tick()``; see ``_maintenance``.

The policy, once for all:

- wait ``interval`` seconds scaled by ``1 ± jitter`` (``tick`` may return its own next wait);
- a ``psycopg.Error`` is logged once per run of failures (not twice a second while the server
  is down) and the unit tries again sooner, after ``reconnect_delay`` (at most ``interval``);
- ``InsufficientPrivilege``: this role may not do the unit's work; it is logged once and the
  unit stops (other processes, with other roles, do it);
- the unit stops when ``stopping`` is set or its pool is closed; any other error is raised
  from ``run()`` for the host to report.
"""

from __future__ import annotations

import logging

import psycopg

from ._acompat import Event
from ._db import Database
from ._maintenance import DEFAULT_JITTER, jittered
from ._reconnect import reconnect_delay


class Periodic:
    """A periodic unit over ``db``: ``tick()`` every ``interval`` seconds until ``stopping``.

    ``wake``, if given, is an event that ends a wait early (a unit with a ``*_now()`` method;
    it is cleared after each wait); ``immediately`` runs the first tick without waiting.
    ``what`` names the work in logs ("rescuing expired jobs"), ``log`` is the unit's logger.
    """

    name = "periodic"
    what = "periodic work"

    def __init__(
        self,
        db: Database,
        *,
        interval: float,
        stopping: Event,
        log: logging.Logger,
        jitter: float = DEFAULT_JITTER,
        wake: Event | None = None,
        immediately: bool = False,
    ) -> None:
        self._db = db
        self._interval = interval
        self._stopping = stopping
        self._log = log
        self._jitter = jitter
        self._wake = stopping if wake is None else wake
        self._immediately = immediately
        self.failures = 0
        """Failed ticks in a row (0 after a tick that succeeded)."""

    def prepare(self) -> bool:
        """Before the first wait: False skips the unit (e.g. its role may not do the work)."""
        return True

    def tick(self) -> float | None:
        """One round of the unit's work; returns the wait before the next (None: the jittered
        interval)."""
        raise NotImplementedError

    def run(self) -> None:
        if not self.prepare():
            return
        wait = 0.0 if self._immediately else jittered(self._interval, self._jitter)
        while not self._stopping.is_set():
            self._wake.wait_timeout(wait)
            if self._wake is not self._stopping:
                self._wake.clear()
            if self._stopping.is_set() or self._db.pool.closed:
                return
            try:
                after = self.tick()
            except psycopg.errors.InsufficientPrivilege as exc:
                self._log.warning("%s: this role may not (%s); left to others", self.what, exc)
                return
            except psycopg.Error as exc:
                self.failures += 1
                if self.failures == 1:
                    self._log.warning("%s failed: %s", self.what, exc)
                wait = min(self._interval, reconnect_delay(self.failures))
                continue
            self.failures = 0
            wait = jittered(self._interval, self._jitter) if after is None else after
