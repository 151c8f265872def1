"""The write path (one ``reserve_offsets`` statement for every partition a batch writes, then one
binary COPY) and the batching producer on top of it."""

from __future__ import annotations

import itertools
import random
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import psycopg

from .._acompat import (
    ACondition,
    ALock,
    ASendFuture,
    ASends,
    agather,
    ais_current,
    asleep,
    aspawn,
)
from .._db_async import AsyncDatabase
from ..errors import BacklogFull, BufferFull, InvalidArgument, ProducerClosed, TopicNotFound
from .copydata import copy_data, copy_values
from .errors import describe_write, log_errors
from .metadata_async import AsyncTopicCache, TopicMeta
from .partitioner import partition_for_key
from .records import (
    _CHECKED_TOPICS,
    MAX_VALUE_BYTES,
    HeaderValue,
    Published,
    Record,
    Value,
    make_record,
)
from .staged_async import stage
from .staging import record_columns

SentHook = Callable[[], Any]
"""What ``append_values`` calls (and awaits, in the async flavour) once a batch's COPY data is
handed to the server."""


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and (
        not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout >= 0
    ):
        raise InvalidArgument(f"invalid timeout {timeout!r}: seconds >= 0, or None")


class AsyncAppender:
    """Writes records to the log in the caller's transaction or a pooled one.

    One ``reserve_offsets`` statement locks the counter rows of every partition written, in
    ascending (topic id, partition) order so concurrent writers cannot deadlock, and reserves a
    range on each; one binary COPY then writes the records at those offsets. Unkeyed records
    without a partition share one sticky partition per call.
    """

    def __init__(self, db: AsyncDatabase, topics: AsyncTopicCache) -> None:
        self._db = db
        self._topics = topics
        self._sticky = itertools.count(random.randrange(1 << 16))

    async def append(
        self, records: list[Record], conn: object = None, timeout: float | None = None
    ) -> list[Published]:
        """Write ``records``. A write refused by admission control (:class:`BacklogFull`) is
        tried again, with backoff, for up to ``timeout`` seconds (not in the caller's
        transaction ``conn``, which the refusal aborted)."""
        if not records:
            return []
        results: list[Published] = await self._retrying(False, records, conn, timeout)
        return results

    async def append_values(
        self,
        topic: str,
        values: list[bytes],
        conn: object = None,
        timeout: float | None = None,
        *,
        partition: int | None = None,
        on_sent: SentHook | None = None,
    ) -> tuple[int, int | None]:
        """Write unkeyed, headerless ``values`` (non-empty, already checked) to one partition
        of ``topic``: ``partition``, else a sticky one; the partition and the first offset
        (None in the caller's transaction ``conn``: offsets are assigned at its commit).
        ``on_sent`` is awaited once the COPY data is handed to the server (before the server
        has stored it and before the commit). Retries as ``append``."""
        position: tuple[int, int | None] = await self._retrying(
            True, (topic, values, partition, on_sent), conn, timeout
        )
        return position

    def cached(self, topic: str) -> TopicMeta | None:
        """The topic's metadata if it is in the cache (no query, no check of its age)."""
        return self._topics.peek(topic)

    async def meta(self, topic: str) -> TopicMeta:
        """The topic's metadata (cached); raises :class:`TopicNotFound`."""
        with log_errors():
            return await self._topics.get(topic)

    async def open_connections(self, count: int) -> None:
        """Have ``count`` pooled connections open (at most the pool's ``max_size``): check
        them out at once and give them back, so batches written at once each find one ready
        instead of waiting for the pool to connect. Best effort: errors are ignored (the writes
        meet them again and report them)."""
        pool = self._db.pool
        held: list[Any] = []
        try:
            for _ in range(min(count, pool.max_size)):
                held.append(await pool.getconn(timeout=5))
        except Exception:  # noqa: BLE001 - best effort: see the docstring
            pass
        finally:
            for conn in held:
                await pool.putconn(conn)

    def next_sticky(self, partitions: int) -> int:
        """The next sticky partition of a topic of ``partitions`` partitions."""
        return next(self._sticky) % partitions

    async def _retrying(self, values: bool, what: Any, conn: object, timeout: float | None) -> Any:
        check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        committing = describe_write(values, what)
        while True:
            try:
                with log_errors():
                    async with self._db.writing(conn, committing=committing) as (db_conn, own):
                        # In the caller's transaction: staged, written at its commit (no
                        # counter lock until then: staged_async.py). Else written now.
                        if values:
                            if own:
                                return await self._append_values(db_conn, what, conn is not None)
                            return await self._stage_values(db_conn, what)
                        if own:
                            return await self._append(db_conn, what, conn is not None)
                        return await self._stage(db_conn, what)
            except BacklogFull:
                remaining = 0.0 if deadline is None else deadline - time.monotonic()
                if conn is not None or remaining <= 0:
                    raise
                await asleep(min(delay, remaining))
                delay = min(delay * 2, 0.5)

    async def _append_values(
        self,
        conn: psycopg.AsyncConnection[Any],
        what: tuple[str, list[bytes], int | None, SentHook | None],
        use_conn: bool,
    ) -> tuple[int, int]:
        topic, values, partition, on_sent = what
        meta = await self._topics.get(topic, conn if use_conn else None)
        if partition is None:
            partition = next(self._sticky) % meta.partitions
        cur = await conn.execute(
            self._db.q("reserve_offsets"),
            {"topic_ids": [meta.id], "partitions": [partition], "counts": [len(values)]},
        )
        row = await cur.fetchone()
        if row is None:  # the counter row is gone: the topic was deleted meanwhile
            self._topics.forget(meta.name)
            raise TopicNotFound(f"topic {meta.name!r} was deleted while publishing")
        async with conn.cursor().copy(self._db.q("copy_messages")) as copy:
            await copy.write(copy_values(meta.id, partition, row[2], values))
            if on_sent is not None:
                await on_sent()
        return partition, row[2]

    async def _stage_values(
        self,
        conn: psycopg.AsyncConnection[Any],
        what: tuple[str, list[bytes], int | None, SentHook | None],
    ) -> tuple[int, None]:
        topic, values, partition, on_sent = what
        meta = await self._topics.get(topic, conn)
        if partition is None:
            partition = next(self._sticky) % meta.partitions
        count = len(values)
        await stage(
            self._db,
            self._topics,
            conn,
            [meta],
            [meta.id] * count,
            [partition] * count,
            None,
            values,
            None,
        )
        if on_sent is not None:
            await on_sent()
        return partition, None

    async def _stage(
        self, conn: psycopg.AsyncConnection[Any], records: list[Record]
    ) -> list[Published]:
        metas: dict[str, TopicMeta] = {}
        for record in records:
            if record.topic not in metas:
                metas[record.topic] = await self._topics.get(record.topic, conn)
        topic_ids, partitions, keys, headers = record_columns(records, self._group(records, metas))
        values = [record.value for record in records]
        await stage(
            self._db,
            self._topics,
            conn,
            list(metas.values()),
            topic_ids,
            partitions,
            keys,
            values,
            headers,
        )
        return [Published(partition, None) for partition in partitions]

    async def _append(
        self, conn: psycopg.AsyncConnection[Any], records: list[Record], use_conn: bool
    ) -> list[Published]:
        metas: dict[str, TopicMeta] = {}
        for record in records:
            if record.topic not in metas:
                metas[record.topic] = await self._topics.get(
                    record.topic, conn if use_conn else None
                )
        groups = self._group(records, metas)
        order = sorted(groups)  # ascending (topic id, partition): the counter row lock order
        cur = await conn.execute(
            self._db.q("reserve_offsets"),
            {
                "topic_ids": [topic_id for topic_id, _ in order],
                "partitions": [partition for _, partition in order],
                "counts": [len(groups[group]) for group in order],
            },
        )
        firsts = {(row[0], row[1]): row[2] for row in await cur.fetchall()}
        missing = [group for group in order if group not in firsts]
        if missing:
            # The counter row is gone: the topic was deleted (maybe recreated) meanwhile.
            for meta in metas.values():
                self._topics.forget(meta.name)
            names = [m.name for m in metas.values() if m.id == missing[0][0]]
            raise TopicNotFound(f"topic {names[0]!r} was deleted while publishing")
        data = copy_data(
            [
                (
                    group[0],
                    group[1],
                    firsts[group],
                    # One group holds every record, in input order: skip the indirection.
                    records if len(order) == 1 else [records[i] for i in groups[group]],
                )
                for group in order
            ]
        )
        async with conn.cursor().copy(self._db.q("copy_messages")) as copy:
            await copy.write(data)
        if len(order) == 1:
            partition, first = order[0][1], firsts[order[0]]
            return [Published(partition, offset) for offset in range(first, first + len(records))]
        results: list[Published] = [None] * len(records)  # type: ignore[list-item]
        for group in order:
            for offset, index in enumerate(groups[group], firsts[group]):
                results[index] = Published(group[1], offset)
        return results

    def _group(
        self, records: list[Record], metas: dict[str, TopicMeta]
    ) -> Mapping[tuple[int, int], Sequence[int]]:
        """Indexes of ``records`` by (topic id, partition), in input order within each group."""
        if len(metas) == 1 and all(r.key is None and r.partition is None for r in records):
            # The bulk case: one topic, unkeyed, so one sticky partition for the whole call.
            (meta,) = metas.values()
            return {(meta.id, next(self._sticky) % meta.partitions): range(len(records))}
        sticky: dict[str, int] = {}
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for index, record in enumerate(records):
            meta = metas[record.topic]
            if record.partition is None and record.key is None:  # the common case, inlined
                partition = sticky.get(meta.name)
                if partition is None:
                    partition = sticky[meta.name] = next(self._sticky) % meta.partitions
            else:
                partition = self._place(record, meta, sticky)
            groups[(meta.id, partition)].append(index)
        return groups

    async def check_partition(self, record: Record) -> None:
        """Raise if ``record`` names a partition its topic does not have (metadata cached)."""
        if record.partition is not None:
            self._place(record, await self._topics.get(record.topic), {})

    async def refusals(self, records: list[Record]) -> dict[int, Exception]:
        """The errors of the ``records`` (by index) that cannot be written: unknown topic,
        partition out of range. Checked on the metadata cache, before any write."""
        metas: dict[str, TopicMeta | TopicNotFound] = {}
        for name in {r.topic for r in records}:
            try:
                metas[name] = await self._topics.get(name)
            except TopicNotFound as exc:
                metas[name] = exc
        if all(isinstance(m, TopicMeta) for m in metas.values()) and all(
            r.partition is None for r in records
        ):
            return {}  # the common case: no per-record work
        refused: dict[int, Exception] = {}
        for index, record in enumerate(records):
            meta = metas[record.topic]
            if isinstance(meta, TopicNotFound):
                refused[index] = meta
            elif record.partition is not None and record.partition >= meta.partitions:
                try:
                    self._place(record, meta, {})
                except InvalidArgument as exc:
                    refused[index] = exc
        return refused

    def _place(self, record: Record, meta: TopicMeta, sticky: dict[str, int]) -> int:
        if record.partition is not None:
            if record.partition >= meta.partitions:
                raise InvalidArgument(
                    f"partition {record.partition} does not exist: topic {meta.name!r} has "
                    f"partitions 0..{meta.partitions - 1}"
                )
            return record.partition
        if record.key is not None:
            return partition_for_key(record.key, meta.partitions)
        if meta.name not in sticky:
            sticky[meta.name] = next(self._sticky) % meta.partitions
        return sticky[meta.name]


DEFAULT_BATCH_SIZE = 50_000
"""Messages per producer transaction at most: per-batch costs (a pooled connection, the offset
reservation, the commit's WAL flush) cost 20-40% of the rate at 10,000 (bench/RESULTS.md)."""
DEFAULT_BUFFER_MESSAGES = 100_000
DEFAULT_BUFFER_BYTES = 32 * 1024 * 1024
DEFAULT_BUFFER_TIMEOUT = 60.0
MAX_IN_FLIGHT = 2
"""Batches a producer writes at once, each on a pooled connection of its own. The server stores
one batch while the next is taken, its offsets reserved, encoded and sent, so neither the
server nor the client waits for the other (with one batch at a time they took turns: the
server idle while the client reserved and encoded, the client waiting for the server's COPY).
Batches in flight together write to different partitions, so each partition still gets its
batches one after the other, in send order (see ``_admit``)."""

OVERLAP_MIN_PENDING = 1000
"""Sends that must be waiting before a batch is taken beside one in flight (or ``batch_size``,
if smaller). A batch of a few sends gains nothing from overlapping another: it costs round
trips and a commit, and two commits at once only wait on each other's WAL flush. So at low
rates (say 1,000 sends a second with ``linger_ms=0``) batches go one at a time, as they did
before (``postroom bench log``'s end-to-end latency phase)."""


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


class _Slot:
    """A batch in flight: the partition it writes (a lean batch) or whether it holds the
    producer alone (any other), and whether its COPY data is handed to the server yet."""

    __slots__ = ("exclusive", "partition", "sent", "topic_id")

    def __init__(self) -> None:
        self.topic_id = 0
        self.partition: int | None = None
        self.exclusive = False
        self.sent = False


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
        self._linger = linger_ms / 1000
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
        self._in_flight = 0  # batches taken and not yet written (or failed)
        # Batches in flight whose COPY data is not yet handed to the server: while one is, no
        # other is taken (it would only wait, holding a batch beyond the buffer's limits).
        self._unsent = 0
        self._busy: dict[int, set[int]] = {}  # topic id -> partitions lean batches in flight write
        self._exclusive = False  # a batch of the general path is in flight, alone
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
            item = make_record(topic, value, key, headers, partition)
            if partition is not None:
                await self._appender.check_partition(item)
            size = _item_size(item)
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
        if pending == 1 or pending == self._batch_size or pending == OVERLAP_MIN_PENDING:
            # Wake the writer: the first pending message, enough for a batch beside one in
            # flight, or a full batch. Waking needs
            # ``_cond``, under which the writer checks the lists before it waits, so this
            # notification cannot fall between its check and its wait.
            async with self._cond:
                if not self._workers:
                    self._workers = [
                        aspawn(self._run, i, name=f"postroom-producer-{i}")
                        for i in range(MAX_IN_FLIGHT)
                    ]
                self._cond.notify_all()
        return future

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
                while self._pending or self._in_flight:
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
                    self._release(slot)
                    self._in_flight -= 1
                    self._cond.notify_all()

    def _may_take(self) -> bool:
        """Whether a writer may take a batch now (``_cond`` held, sends pending): when no other
        batch is in flight; or when the others' data is all sent, enough sends are pending
        (``OVERLAP_MIN_PENDING``) and the first pending send's topic (if its metadata is
        cached) has a partition no batch in flight writes."""
        if not self._in_flight:
            return True
        if (
            self._unsent
            or self._exclusive
            or self._pending < min(self._batch_size, OVERLAP_MIN_PENDING)
        ):
            return False
        meta = self._appender.cached(self._chunks[0].topics[0])
        return meta is not None and len(self._busy.get(meta.id, ())) < meta.partitions

    async def _next_batch(self) -> _Chunk | None:
        """Wait for sends (and for ``_may_take``), linger for more, and take a batch: the first
        chunk of sends, up to ``batch_size`` of them."""
        async with self._cond:
            while not self._pending or not self._may_take():
                if not self._pending and self._closed:
                    return None
                await self._cond.wait_timeout(1.0)
            deadline = time.monotonic() + self._linger
            while (
                self._pending < self._batch_size  # the first chunk is full from there on
                and not self._closed
                and not self._flushing
                and not self._waiting_for_space
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                await self._cond.wait_timeout(remaining)
            async with self._buffer_lock:
                chunk = self._chunks.popleft()
                self._pending -= len(chunk.items)
                self._pending_bytes = self._pending_bytes - chunk.size if self._pending else 0
                if self._waiting_for_space:
                    self._space.notify_all()
            self._in_flight += 1
            self._unsent += 1
            return chunk

    async def _admit(self, batch: _Chunk) -> _Slot:
        """Wait until the batch may be written beside the batches in flight, and say how.

        A lean batch (plain sends to one topic) gets a sticky partition that no batch in flight
        writes: a partition's batches are then written one after the other, in the order they
        were taken, even when one of them is refused and written again piece by piece. Any
        other batch (keys, partitions, headers: it may write any partition) waits until it is
        the only one in flight, and no other batch is admitted until it is written."""
        slot = _Slot()
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
                if meta is not None:
                    busy = self._busy.setdefault(meta.id, set())
                    if not self._exclusive and len(busy) < meta.partitions:
                        partition = self._appender.next_sticky(meta.partitions)
                        while partition in busy:
                            partition = self._appender.next_sticky(meta.partitions)
                        busy.add(partition)
                        slot.topic_id, slot.partition = meta.id, partition
                        return slot
                elif self._in_flight == 1:  # this batch alone
                    self._exclusive = slot.exclusive = True
                    return slot
                await self._cond.wait_timeout(1.0)

    def _release(self, slot: _Slot) -> None:
        """Give back what ``slot`` held (``_cond`` held)."""
        if slot.partition is not None:
            busy = self._busy[slot.topic_id]
            busy.discard(slot.partition)
            if not busy:
                del self._busy[slot.topic_id]
        if slot.exclusive:
            self._exclusive = False
        if not slot.sent:
            slot.sent = True
            self._unsent -= 1

    async def _write(self, batch: _Chunk, slot: _Slot) -> None:
        """Append the batch and resolve its futures after the commit. A record that cannot be
        written fails its own future only; the rest of the batch is written."""

        async def sent() -> None:
            # The data is out: another writer may take the next batch meanwhile.
            if not slot.sent:
                async with self._cond:
                    slot.sent = True
                    self._unsent -= 1
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


def _item_size(item: bytes | Record) -> int:
    """The bytes a pending send counts for in the producer's buffer: key and value."""
    if type(item) is bytes:
        return len(item)
    record = cast(Record, item)
    return len(record.value) + (0 if record.key is None else len(record.key))
