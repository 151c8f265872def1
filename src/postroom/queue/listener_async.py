"""The worker's listener: subscribes to the client's job wake-ups (``_listener_async``, one
LISTEN connection per client) and wakes the fetcher (new jobs in its queues) or the heartbeat
(a cancellation). Wake-ups are hints; polling stays the source of truth, so a lost connection
only costs latency until the client's listener reconnects."""

from __future__ import annotations

from .._acompat import AEvent
from .._db_async import AsyncDatabase
from .._wakeups import CANCEL, EVERY_QUEUE, JOBS
from .fetcher_async import AsyncFetcher
from .heartbeat_async import AsyncHeartbeat


class AsyncListener:
    name = "listener"

    def __init__(
        self,
        db: AsyncDatabase,
        *,
        queues: list[str],
        fetcher: AsyncFetcher,
        heartbeat: AsyncHeartbeat,
        stopping: AEvent,
    ) -> None:
        self._db = db
        self._wanted = {*queues, EVERY_QUEUE, CANCEL}
        self._fetcher = fetcher
        self._heartbeat = heartbeat
        self._stopping = stopping

    async def run(self) -> None:
        subscription = await self._db.wakeups.subscribe(JOBS, self._wake, self._wanted)
        try:
            await self._stopping.wait()
        finally:
            subscription.close()

    async def _wake(self, what: str | None) -> None:
        if what == CANCEL:
            self._heartbeat.beat_now()
        else:  # a queue of this worker, every queue, or None: listening (again) now
            await self._fetcher.wake()
