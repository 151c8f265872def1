"""The listener: LISTENs for job notifications and wakes the fetcher (new jobs) or the
heartbeat (a cancellation). Notifications are wake-up hints; polling stays the source of truth,
so a lost connection only costs latency until it reconnects."""

from __future__ import annotations

import logging

import psycopg

from .._acompat import AEvent
from .._db_async import AsyncDatabase
from .._reconnect import reconnect_delay
from .fetcher_async import AsyncFetcher
from .heartbeat_async import AsyncHeartbeat
from .records import notify_payload

log = logging.getLogger("postroom.worker")


class AsyncListener:
    def __init__(
        self,
        db: AsyncDatabase,
        *,
        queues: list[str],
        poll_interval: float,
        fetcher: AsyncFetcher,
        heartbeat: AsyncHeartbeat,
        stopping: AEvent,
    ) -> None:
        self._db = db
        self._payloads = {notify_payload(db.schema, q) for q in queues}
        self._payloads.add(notify_payload(db.schema, "*"))
        self._cancel_payload = notify_payload(db.schema, "cancel")
        self._poll_interval = poll_interval
        self._fetcher = fetcher
        self._heartbeat = heartbeat
        self._stopping = stopping

    async def run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                conn = await psycopg.AsyncConnection.connect(self._db.conninfo, autocommit=True)
            except psycopg.Error as exc:
                failures += 1
                if failures == 1:
                    log.warning("LISTEN connection failed, polling meanwhile: %s", exc)
                await self._stopping.wait_timeout(reconnect_delay(failures))
                continue
            failures = 0
            try:
                await conn.execute(self._db.q("listen_jobs"))
                await self._fetcher.wake()  # jobs may have arrived while not listening
                while not self._stopping.is_set():
                    async for notify in conn.notifies(timeout=0.1):
                        if notify.payload == self._cancel_payload:
                            self._heartbeat.beat_now()
                        elif notify.payload in self._payloads:
                            await self._fetcher.wake()
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost, reconnecting: %s", exc)
            finally:
                await conn.close()
