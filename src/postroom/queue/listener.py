# Generated from src/postroom/queue/listener_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The worker's listener: subscribes to the client's job wake-ups (``_listener_async``, one
LISTEN connection per client) and wakes the fetcher (new jobs in its queues) or the heartbeat
(a cancellation). Wake-ups are hints; polling stays the source of truth, so a lost connection
only costs latency until the client's listener reconnects."""

from __future__ import annotations

from .._acompat import Event
from .._db import Database
from .._wakeups import CANCEL, EVERY_QUEUE, JOBS
from .fetcher import Fetcher
from .heartbeat import Heartbeat


class Listener:
    name = "listener"

    def __init__(
        self,
        db: Database,
        *,
        queues: list[str],
        fetcher: Fetcher,
        heartbeat: Heartbeat,
        stopping: Event,
    ) -> None:
        self._db = db
        self._wanted = {*queues, EVERY_QUEUE, CANCEL}
        self._fetcher = fetcher
        self._heartbeat = heartbeat
        self._stopping = stopping

    def run(self) -> None:
        subscription = self._db.wakeups.subscribe(JOBS, self._wake, self._wanted)
        try:
            self._stopping.wait()
        finally:
            subscription.close()

    def _wake(self, what: str | None) -> None:
        if what == CANCEL:
            self._heartbeat.beat_now()
        else:  # a queue of this worker, every queue, or None: listening (again) now
            self._fetcher.wake()
