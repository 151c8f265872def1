"""What ``poll()`` reads: one ``fetch_messages`` statement from the positions of the partitions
in use and, after a full batch (a backlog), the next fetch sent ahead while the application
handles the batch (a prefetch). Rows become messages in the partitions' buffers
(:meth:`PartitionState.buffer`); the consumer takes them from there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from .._acompat import ABackground, AEvent, aoutcome
from .._db_async import AsyncDatabase
from .claim_policy import PREFETCH_SEND_WAIT, ClaimPolicy
from .partitions import Assigned, PartitionState, id_arrays, row_ends
from .reading import gc_paused, utc_timestamps


@dataclass
class _Prefetch:
    """A fetch sent ahead by ``poll()`` while the application handles the batch it returned
    (after a full batch only: a backlog). Its rows become messages in the next ``poll()``, and
    only for partitions still held at the same assignment and position (lost, handed over,
    seeked or claimed meanwhile: dropped, never delivered)."""

    fetched: dict[tuple[int, int], Assigned]
    starts: dict[tuple[int, int], int]
    """The position each partition was fetched from."""
    limit: int
    max_bytes: int
    rows: list[tuple[Any, ...]] | None = None
    """The rows fetched (None: the fetch failed)."""
    worker: Any = None
    sending: AEvent = field(default_factory=AEvent)
    """Set as the query is about to be sent (see ``_prefetch_after``)."""


class AsyncFetcher:
    """Fills the buffers of ``state`` from the database, as the consumer's ``policy`` decides
    (the partitions' order, when to prefetch: ``claim_policy.py``); one per consumer.
    ``drop()`` before any change of position (a seek, a rewind), ``close()`` when the consumer
    closes."""

    def __init__(self, db: AsyncDatabase, state: PartitionState, policy: ClaimPolicy) -> None:
        self._db = db
        self._state = state
        self._policy = policy
        self._prefetch: _Prefetch | None = None
        self._background = ABackground("postroom-prefetch")
        self._closed = False

    async def fill(self, limit: int, max_bytes: int) -> None:
        """Buffer the next rows: the prefetch's, if it still fits, else a fetch now."""
        if not await self._use_prefetch(limit, max_bytes):
            await self.fetch(limit, max_bytes)

    def _fetch_params(
        self, limit: int, max_bytes: int, ends: dict[tuple[int, int], int] | None = None
    ) -> tuple[list[Assigned], dict[str, Any]]:
        """The partitions to fetch (in turn: ``ClaimPolicy.order``) and the query's parameters:
        from each partition's position, or from where ``ends`` says its rows end."""
        assigned = self._policy.order(self._state.in_use(), "fetch")
        with self._state.lock:
            positions = [a.position for a in assigned]
        if ends is not None:
            positions = [
                ends.get(a.key, position) for a, position in zip(assigned, positions, strict=True)
            ]
        params = {
            **id_arrays(assigned),
            "positions": positions,
            "limit": limit,
            "max_bytes": max_bytes,
        }
        return assigned, params

    async def fetch(self, limit: int, max_bytes: int) -> None:
        assigned, params = self._fetch_params(limit, max_bytes)
        if not assigned:
            return
        cur = await self.execute(params)
        # The cyclic GC paused while the rows are made and turned into messages (no
        # suspension inside: the result is here), and the rows freed before it resumes:
        # reading.gc_paused.
        with gc_paused(self._db.options.pause_gc):
            rows = await cur.fetchall()
        await self._prefetch_after(rows, limit, max_bytes)
        with gc_paused(self._db.options.pause_gc):
            self._state.buffer(rows, {a.key: a for a in assigned})
            del rows

    async def execute(
        self, params: dict[str, Any], sending: AEvent | None = None
    ) -> psycopg.AsyncCursor[Any]:
        """Run ``fetch_messages``; the cursor holds the rows (client memory: the connection
        goes back to the pool before they are turned into messages). ``sending`` is set just
        before the query goes out."""
        async with self._db.connection() as conn:
            # One statement, one snapshot: in autocommit it is one round trip, not three
            # (BEGIN, the query, COMMIT).
            await conn.set_autocommit(True)
            try:
                cur = conn.cursor(binary=True)
                utc_timestamps(cur)
                if sending is not None:
                    sending.set()
                await cur.execute(self._db.q("fetch_messages"), params)
            finally:
                if not conn.closed:  # a broken connection is dropped by the pool as it is
                    await conn.set_autocommit(False)
        return cur

    async def _prefetch_after(
        self, rows: list[tuple[Any, ...]], limit: int, max_bytes: int
    ) -> None:
        """After a full batch of ``rows`` (a backlog: ``ClaimPolicy.prefetch``), send the next
        fetch at once, from where they end, before they are turned into messages: the server
        reads it while this ``poll()`` builds and returns them and the application handles
        them (see ``_Prefetch``). Its rows are used once every buffer is empty again, so its
        start is then each partition's position, or it is dropped."""
        if not self._policy.prefetch(
            len(rows), limit, in_flight=self._prefetch is not None, closed=self._closed
        ):
            return
        assigned, params = self._fetch_params(limit, max_bytes, row_ends(rows))
        if not assigned:
            return
        keys = [a.key for a in assigned]
        starts = dict(zip(keys, params["positions"], strict=True))
        prefetch = _Prefetch(dict(zip(keys, assigned, strict=True)), starts, limit, max_bytes)
        prefetch.worker = self._background.submit(self._run_prefetch, prefetch, params)
        self._prefetch = prefetch
        # Let the prefetch send its query before the rows are turned into messages (see
        # PREFETCH_SEND_WAIT). Set just before the send, the event wakes this thread once the
        # prefetch blocks on the server (or after the wait, if it was not scheduled).
        await prefetch.sending.wait_timeout(PREFETCH_SEND_WAIT)

    async def _run_prefetch(self, prefetch: _Prefetch, params: dict[str, Any]) -> None:
        """The prefetch's query, and its rows made (not yet messages: that is left to the
        next ``poll()``, which the sync consumer runs in another thread, so the two share
        the work while one of them waits: this one for the server, that one for a commit)."""
        try:
            cur = await self.execute(params, prefetch.sending)
            with gc_paused(self._db.options.pause_gc):  # the rows are GC-tracked tuples (see fetch)
                prefetch.rows = await cur.fetchall()
        except Exception:  # noqa: BLE001 - dropped: the fetch in poll() runs again and reports
            prefetch.rows = None

    async def _use_prefetch(self, limit: int, max_bytes: int) -> bool:
        """Buffer the prefetched rows (waiting for them if needed); whether any message came
        of them. False (fetch now) if there was none, it failed, it was sent for other limits,
        (``ClaimPolicy.prefetch_fits``), or every partition it read moved meanwhile."""
        prefetch = await self.drop()
        if prefetch is None or prefetch.rows is None:
            return False
        rows, prefetch.rows = prefetch.rows, None
        if not self._policy.prefetch_fits((prefetch.limit, prefetch.max_bytes), (limit, max_bytes)):
            return False
        await self._prefetch_after(rows, limit, max_bytes)
        with gc_paused(self._db.options.pause_gc):  # as in fetch
            self._state.buffer(rows, prefetch.fetched, prefetch.starts)
            del rows
        return any(a.buffer for a in prefetch.fetched.values())

    async def drop(self) -> _Prefetch | None:
        """Wait for the fetch in flight, if any, and take it off the consumer."""
        prefetch, self._prefetch = self._prefetch, None
        if prefetch is not None:
            await aoutcome(prefetch.worker)  # never raises: _run_prefetch keeps no error
        return prefetch

    async def close(self) -> None:
        """Wait for the prefetch in flight and end the background worker."""
        self._closed = True
        await self.drop()
        self._background.close()
