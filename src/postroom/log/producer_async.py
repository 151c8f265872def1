"""The batching producer: sends buffered in chunks, taken as batches by up to ``MAX_IN_FLIGHT``
writers and written through the appender (``appender_async.py``)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import Any, cast

from .. import _tracing
from .._acompat import (
    ACondition,
    ALock,
    ASendFuture,
    ASends,
    agather,
    ais_current,
    aspawn,
)
from .._checks import check_timeout
from ..errors import BufferFull, InvalidArgument, ProducerClosed
from .appender_async import AsyncAppender
from .batching import MAX_IN_FLIGHT, BatchPolicy, Slot, buffered_size
from .records import (
    _CHECKED_TOPICS,
    MAX_VALUE_BYTES,
    HeaderValue,
    Published,
    Record,
    TopicMeta,
    Value,
    make_record,
)

DEFAULT_BATCH_SIZE = 50_000
"""Messages per producer transaction at most: per-batch costs (a pooled connection, the offset
reservation, the commit's WAL flush) cost 20-40% of the rate at 10,000 (bench/RESULTS.md)."""
DEFAULT_BUFFER_MESSAGES = 100_000
DEFAULT_BUFFER_BYTES = 32 * 1024 * 1024
DEFAULT_BUFFER_TIMEOUT = 60.0


class _Chunk:
    """Sends waiting for a writer, in send order: at most ``batch_size``, taken whole as one
    batch. Parallel lists rather than one of tuples, and the futures' outcomes kept in
    ``sends`` (no future per send is kept: _futures.py): each object made per send and kept
    until its batch commits costs again at every pass of the garbage collector.
    A plain send (bytes, no key, headers or partition) keeps its value bytes as its item; any
    other, its Record."""

    __slots__ = ("items", "records", "sends", "size", "topics")

    def __init__(self) -> None:
        self.topics: list[str] = []
        self.items: list[bytes | Record] = []
        self.sends = ASends()
        self.size = 0  # bytes of keys and values
        self.records = 0  # how many items are Records (not plain sends)


class AsyncProducer:
    """A non-transactional producer that batches concurrent sends into few transactions.

    Safe to share between tasks. ``send`` checks and encodes the message at once (bad input
    raises there), queues it and returns a future of its :class:`Published` position, resolved
    when its batch commits. A batch is written when ``batch_size`` messages are queued or the
    oldest has waited ``linger_ms``. Always ``close()`` (or use ``with``): it flushes.

        with client.producer() as producer:
            future = producer.send("orders", {"id": 1}, key="customer-7")
        print(future.result())  # Published(partition=2, offset=41)

    ``AsyncProducer`` alike: ``async with``, ``await producer.send(...)`` returns a future that
    asyncio takes as one (``await future``, ``asyncio.gather``, ``wait``, ``as_completed``,
    done-callbacks). Neither flavour keeps the futures it returns (see _futures.py).

    The buffer of sends not yet taken by the writer is bounded: at ``buffer_messages``
    messages, or ``buffer_bytes`` of keys and values, ``send`` blocks until the writer takes a
    batch, for up to ``buffer_timeout`` seconds, then raises :class:`BufferFull` (None: waits
    as long as it takes). A message larger than ``buffer_bytes`` alone is taken when the
    buffer is empty. A send from the writer itself (a future's done-callback) never blocks.

    Up to ``MAX_IN_FLIGHT`` (2) batches are written at once, each on a pooled connection of its
    own, never two to the same partition (see ``_admit``), so each partition gets its batches
    in send order; the writers hold up to two batches beyond the buffer.

    A message that cannot be written (its partition no longer exists, the database refuses its
    content) fails its own future only; the rest of its batch is written. A batch that fails as
    a whole (say, the connection drops) fails every future in it; postroom does not retry it,
    because the commit's outcome may be unknown and a retry could duplicate messages.
    """

    def __init__(
        self,
        appender: AsyncAppender,
        *,
        linger_ms: float = 5,
        batch_size: int = DEFAULT_BATCH_SIZE,
        backlog_timeout: float | None = None,
        buffer_messages: int = DEFAULT_BUFFER_MESSAGES,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        buffer_timeout: float | None = DEFAULT_BUFFER_TIMEOUT,
    ) -> None:
        if linger_ms < 0:
            raise InvalidArgument(f"invalid linger_ms {linger_ms!r}: must be >= 0")
        if batch_size < 1:
            raise InvalidArgument(f"invalid batch_size {batch_size!r}: must be >= 1")
        for name, limit in (("buffer_messages", buffer_messages), ("buffer_bytes", buffer_bytes)):
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise InvalidArgument(f"invalid {name} {limit!r}: must be an integer >= 1")
        check_timeout(backlog_timeout)
        check_timeout(buffer_timeout)
        self._appender = appender
        self._backlog_timeout = backlog_timeout
        self._policy = BatchPolicy(batch_size, linger_ms / 1000)
        self._wake_at = self._policy.wake_points()
        self._batch_size = batch_size
        self._buffer_messages = buffer_messages
        self._buffer_bytes = buffer_bytes
        self._buffer_timeout = buffer_timeout
        # Two locks: ``_buffer_lock`` guards the pending lists and ``_closed`` and is the only
        # one a send takes, except the sends that must wake the writer (the first pending
        # message, a full batch), which take ``_cond`` too. A Condition (an RLock and Python
        # methods) on every send cost more than the rest of it, and contending with the writer
        # for it cost a GIL hand-over each time. Lock order: ``_cond``, then ``_buffer_lock``.
        # ``_space`` (on ``_buffer_lock``) is where sends wait while the buffer is full.
        self._cond = ACondition()
        self._buffer_lock = ALock()
        self._space = ACondition(self._buffer_lock)
        self._waiting_for_space = 0
        # Pending sends, in chunks of at most batch_size: a writer takes the first whole.
        self._chunks: deque[_Chunk] = deque()
        self._pending = 0
        self._pending_bytes = 0
        # Held by a writer while it takes a batch and admits it: batches are admitted (their
        # partitions chosen, or the producer held alone) in the order they were taken.
        self._take_lock = ALock()
        self._flushing = 0  # flush() calls waiting: the writer stops lingering for them
        self._closed = False
        self._workers: list[Any] = []

    async def send(
        self,
        topic: str,
        value: Value,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        partition: int | None = None,
    ) -> ASendFuture[Published]:
        span = None
        if _tracing.ENABLED:
            # A span for the send itself (to the buffer): the batch is written later, by the
            # writer, and its outcome is the future's.
            span = _tracing.start_send(topic)
            if span is not None:
                headers = _tracing.carry(span, headers)
        try:
            item: bytes | Record
            if (
                type(value) is bytes
                and key is None
                and headers is None
                and partition is None
                and type(topic) is str
                and topic in _CHECKED_TOPICS
                and len(value) <= MAX_VALUE_BYTES
            ):
                item = value  # the common case: nothing to encode or check again
                size = len(value)
                plain = True
            else:
                plain = False
                item = await self._record(topic, value, key, headers, partition)
                size = buffered_size(item)
            async with self._buffer_lock:
                if self._closed:
                    raise ProducerClosed("send() on a closed producer")
                if self._pending and (
                    self._pending >= self._buffer_messages
                    or self._pending_bytes + size > self._buffer_bytes
                ):
                    await self._wait_for_space(size)
                chunks = self._chunks
                if chunks and len(chunks[-1].items) < self._batch_size:
                    chunk = chunks[-1]
                else:
                    chunk = _Chunk()
                    chunks.append(chunk)
                chunk.topics.append(topic)
                chunk.items.append(item)
                future: ASendFuture[Published] = chunk.sends.new()
                chunk.size += size
                if not plain:
                    chunk.records += 1
                self._pending_bytes += size
                self._pending += 1
                pending = self._pending
            if pending in self._wake_at:
                await self._wake_writers()
            return future
        except BaseException as exc:
            if span is not None:
                _tracing.fail(span, exc)
            raise
        finally:
            if span is not None:
                span.end()

    async def _record(
        self,
        topic: str,
        value: Value,
        key: bytes | str | None,
        headers: Mapping[str, HeaderValue] | None,
        partition: int | None,
    ) -> Record:
        """The checked record of a send that is not plain bytes alone."""
        record = make_record(topic, value, key, headers, partition)
        if partition is not None:
            await self._appender.check_partition(record)
        return record

    async def _wake_writers(self) -> None:
        """Wake the writer (BatchPolicy.wake_points; started at the first send). Waking needs
        ``_cond``, under which the writer checks the lists before it waits, so this
        notification cannot fall between its check and its wait."""
        async with self._cond:
            if not self._workers:
                self._workers = [
                    aspawn(self._run, i, name=f"postroom-producer-{i}")
                    for i in range(MAX_IN_FLIGHT)
                ]
            self._cond.notify_all()

    async def _wait_for_space(self, size: int) -> None:
        """Wait, ``_buffer_lock`` held, until a send of ``size`` bytes fits in the buffer."""
        if any(ais_current(worker) for worker in self._workers):
            return  # a writer itself (a done-callback): waiting would wait for itself
        deadline = None if self._buffer_timeout is None else time.monotonic() + self._buffer_timeout
        self._waiting_for_space += 1
        try:
            while self._pending and (
                self._pending >= self._buffer_messages
                or self._pending_bytes + size > self._buffer_bytes
            ):
                if self._closed:
                    raise ProducerClosed("send() on a closed producer")
                remaining = 1.0 if deadline is None else deadline - time.monotonic()
                if remaining <= 0:
                    raise BufferFull(
                        f"producer buffer full for {self._buffer_timeout:g} s: "
                        f"{self._pending} messages, {self._pending_bytes} bytes pending "
                        f"(buffer_messages={self._buffer_messages}, "
                        f"buffer_bytes={self._buffer_bytes})"
                    )
                await self._space.wait_timeout(min(remaining, 1.0))
        finally:
            self._waiting_for_space -= 1

    async def flush(self) -> None:
        """Write every message sent so far at once, without waiting for ``linger_ms``, and
        wait until each is written (or failed)."""
        async with self._cond:
            self._flushing += 1
            try:
                while self._pending or self._policy.in_flight:
                    self._cond.notify_all()
                    await self._cond.wait_timeout(0.1)
            finally:
                self._flushing -= 1

    async def close(self) -> None:
        """Flush, then stop the background writer. Idempotent."""
        async with self._cond:
            async with self._buffer_lock:
                self._closed = True  # a send either got in before this or raises
                self._space.notify_all()
            self._cond.notify_all()
        workers, self._workers = self._workers, []
        for worker in workers:
            await agather(worker)

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, index: int) -> None:
        if index == MAX_IN_FLIGHT - 1:
            await self._appender.open_connections(MAX_IN_FLIGHT)
        while True:
            async with self._take_lock:
                batch = await self._next_batch()
                if batch is None:
                    return  # closed and drained
                slot = await self._admit(batch)
            try:
                await self._write(batch, slot)
            finally:
                async with self._cond:
                    self._policy.release(slot)
                    self._cond.notify_all()

    async def _next_batch(self) -> _Chunk | None:
        """Wait for sends (and for the policy's ``may_take``), linger for more, and take a
        batch: the first chunk of sends, up to ``batch_size`` of them."""
        policy = self._policy
        async with self._cond:
            while not self._pending or not policy.may_take(self._pending, self._first_topic):
                if not self._pending and self._closed:
                    return None
                await self._cond.wait_timeout(1.0)
            deadline = policy.linger_deadline()
            while True:
                hurry = self._closed or bool(self._flushing) or bool(self._waiting_for_space)
                remaining = policy.linger_left(deadline, self._pending, hurry)
                if remaining <= 0:
                    break
                await self._cond.wait_timeout(remaining)
            async with self._buffer_lock:
                chunk = self._chunks.popleft()
                self._pending -= len(chunk.items)
                self._pending_bytes = self._pending_bytes - chunk.size if self._pending else 0
                if self._waiting_for_space:
                    self._space.notify_all()
            policy.took()
            return chunk

    def _first_topic(self) -> TopicMeta | None:
        """The cached metadata of the first pending send's topic (None: not cached)."""
        return self._appender.cached(self._chunks[0].topics[0])

    async def _admit(self, batch: _Chunk) -> Slot:
        """Wait until the batch may be written beside the batches in flight, and say how
        (``BatchPolicy.admit``: a lean batch, plain sends to one topic, gets a partition of its
        own; any other waits to be alone)."""
        topics = batch.topics
        topic = topics[0]
        meta: TopicMeta | None = None
        if not batch.records and topics.count(topic) == len(topics):
            try:
                meta = await self._appender.meta(topic)
            except Exception:  # noqa: BLE001 - the general path meets it again and reports it
                meta = None
        async with self._cond:
            while True:
                slot = self._policy.admit(meta, self._appender.next_sticky)
                if slot is not None:
                    return slot
                await self._cond.wait_timeout(1.0)

    async def _write(self, batch: _Chunk, slot: Slot) -> None:
        """Append the batch and resolve its futures after the commit. A record that cannot be
        written fails its own future only; the rest of the batch is written."""

        async def sent() -> None:
            # The data is out: another writer may take the next batch meanwhile.
            if not slot.sent:
                async with self._cond:
                    if self._policy.sent(slot):
                        self._cond.notify_all()

        sends = batch.sends
        try:
            topic = batch.topics[0]
            if slot.partition is not None:
                # The common case: plain sends to one topic, written by the lean path.
                try:
                    partition, first = await self._appender.append_values(
                        topic,
                        batch.items,  # type: ignore[arg-type]
                        timeout=self._backlog_timeout,
                        partition=slot.partition,
                        on_sent=sent,
                    )
                except InvalidArgument:
                    pass  # the database refused some content: isolate it below
                else:
                    # No conn: written in a transaction of its own, so the offset is known.
                    sends.resolve_positions(Published, partition, cast(int, first))
                    return
            # A lean batch refused in part is written again to its own partition, which no
            # other batch writes meanwhile.
            records = [
                Record(t, i, None, None, slot.partition) if type(i) is bytes else cast(Record, i)
                for t, i in zip(batch.topics, batch.items, strict=True)
            ]
            indexes = list(range(len(records)))
            refused = await self._appender.refusals(records)
            if refused:
                for index, exc in refused.items():
                    sends.set_exception(index, exc)
                records = [r for i, r in enumerate(records) if i not in refused]
                indexes = [i for i in indexes if i not in refused]
            await self._append_isolating(records, indexes, sends)
        except BaseException as exc:
            sends.fail(exc)
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt, SystemExit, a cancellation: not the batch's to keep

    async def _append_isolating(
        self, records: list[Record], indexes: list[int], sends: ASends
    ) -> None:
        """Append ``records`` (the sends at ``indexes`` of the batch) in one transaction; if
        the database refuses a record's content (a CHECK: nothing was committed, so writing
        again cannot duplicate), split the batch in halves until the refused records stand
        alone and fail only their futures."""
        if not records:
            return
        try:
            results = await self._appender.append(records, timeout=self._backlog_timeout)
        except InvalidArgument as exc:
            if len(records) == 1:
                sends.set_exception(indexes[0], exc)
                return
            middle = len(records) // 2
            await self._append_isolating(records[:middle], indexes[:middle], sends)
            await self._append_isolating(records[middle:], indexes[middle:], sends)
            return
        sends.set_results(indexes, results)
