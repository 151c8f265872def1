"""The read path: a consumer group member with poll/commit and transactional consumption."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg

from .._acompat import asleep
from .._db_async import AsyncDatabase
from ..errors import InvalidArgument, OffsetOutOfRange
from .metadata_async import AsyncTopicCache, TopicMeta
from .records import (
    Message,
    TopicPartition,
    build_message,
    check_name,
    check_offset,
    decode_headers,
)

OffsetReset = Literal["earliest", "latest"]
POLL_INTERVAL = 0.5
"""Seconds between polls when no notification arrives: wake-ups are hints, polling is the truth."""


@dataclass
class AsyncBatch:
    """Messages claimed by ``consumer.transaction()``, and the connection of that transaction.

    Write your own rows with ``batch.connection``: they commit together with the cursor advance
    when the ``with`` block ends, or roll back with it (then the messages are delivered again).
    """

    messages: list[Message]
    connection: psycopg.AsyncConnection[Any]
    topic_partition: TopicPartition | None = None

    def __iter__(self) -> Any:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)


@dataclass
class _Assigned:
    meta: TopicMeta
    partition: int
    position: int = 0
    buffer: deque[Message] = field(default_factory=deque)


class AsyncConsumer:
    """A member of consumer group ``group`` reading ``topics``.

    Partitions are assigned explicitly: all partitions of the topics, or ``partitions``.
    Kafka-style use: ``poll()`` returns messages from the in-memory position, ``commit()``
    stores the next offsets to read. ``transaction()`` instead claims a range under the cursor's
    row lock and commits the caller's writes with the cursor advance.

        with client.consumer("billing", ["orders"]) as consumer:
            for message in consumer.poll(timeout=1.0):
                handle(message)
            consumer.commit()

    (``AsyncConsumer``: ``async with``, ``await consumer.poll(...)``, ``await consumer.commit()``.)

    A new group starts at ``auto_offset_reset``: the earliest retained message or the latest.
    Not safe to share between tasks; use one consumer per task.
    """

    def __init__(
        self,
        db: AsyncDatabase,
        topics_cache: AsyncTopicCache,
        group: str,
        topics: Iterable[str],
        *,
        partitions: Iterable[TopicPartition] | None = None,
        auto_offset_reset: OffsetReset = "earliest",
    ) -> None:
        self._db = db
        self._topics_cache = topics_cache
        self.group = check_name("group", group)
        self._topic_names = [topics] if isinstance(topics, str) else list(topics)
        if not self._topic_names:
            raise InvalidArgument("a consumer needs at least one topic")
        for name in self._topic_names:
            check_name("topic", name)
        if auto_offset_reset not in ("earliest", "latest"):
            raise InvalidArgument(
                f"invalid auto_offset_reset {auto_offset_reset!r}: use 'earliest' or 'latest'"
            )
        self._auto_offset_reset = auto_offset_reset
        self._requested = None if partitions is None else [TopicPartition(*p) for p in partitions]
        self._assigned: dict[TopicPartition, _Assigned] = {}
        self._by_id: dict[tuple[int, int], _Assigned] = {}
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._claim_start = 0
        self._ready = False
        self._closed = False

    # -- assignment -----------------------------------------------------------------------

    async def _ensure_assigned(self) -> None:
        if self._ready:
            return
        if self._closed:
            raise InvalidArgument("the consumer is closed")
        metas = {name: await self._topics_cache.get(name) for name in self._topic_names}
        wanted = self._requested or [
            TopicPartition(m.name, p) for m in metas.values() for p in range(m.partitions)
        ]
        for tp in wanted:
            meta = metas.get(tp.topic)
            if meta is None:
                raise InvalidArgument(f"partition {tp} is not in the subscribed topics")
            if not 0 <= tp.partition < meta.partitions:
                raise InvalidArgument(
                    f"partition {tp.partition} does not exist: topic {tp.topic!r} has "
                    f"partitions 0..{meta.partitions - 1}"
                )
            assigned = _Assigned(meta, tp.partition)
            self._assigned[tp] = assigned
            self._by_id[(meta.id, tp.partition)] = assigned
        ids = self._id_arrays()
        async with self._db.connection() as conn:
            await conn.execute(
                self._db.q("ensure_cursors"),
                {"group": self.group, "reset": self._auto_offset_reset, **ids},
            )
            cur = await conn.execute(self._db.q("read_cursors"), {"group": self.group, **ids})
            for topic_id, partition, next_offset in await cur.fetchall():
                self._by_id[(topic_id, partition)].position = next_offset
        self._ready = True

    def _id_arrays(self, only: Sequence[_Assigned] | None = None) -> dict[str, list[int]]:
        chosen = list(self._assigned.values()) if only is None else only
        return {
            "topic_ids": [a.meta.id for a in chosen],
            "partitions": [a.partition for a in chosen],
        }

    async def assignment(self) -> set[TopicPartition]:
        await self._ensure_assigned()
        return set(self._assigned)

    def _get(self, tp: TopicPartition) -> _Assigned:
        try:
            return self._assigned[TopicPartition(*tp)]
        except KeyError:
            raise InvalidArgument(f"partition {tp} is not assigned to this consumer") from None

    # -- poll / commit --------------------------------------------------------------------

    async def poll(self, timeout: float = 1.0, max_messages: int = 500) -> list[Message]:
        """Up to ``max_messages`` messages after the current positions, waiting at most
        ``timeout`` seconds for the first one. Advances the in-memory positions only: call
        ``commit()`` to store them."""
        if max_messages < 1:
            raise InvalidArgument(f"invalid max_messages {max_messages!r}: must be >= 1")
        await self._ensure_assigned()
        deadline = time.monotonic() + max(timeout, 0)
        while True:
            if not any(a.buffer for a in self._assigned.values()):
                await self._forget_wakeups()
                await self._fetch(max_messages)
            taken = self._take(max_messages)
            if taken:
                return taken
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            await self._wait_for_wakeup(min(remaining, POLL_INTERVAL))

    async def _fetch(self, limit: int) -> None:
        assigned = list(self._assigned.values())
        params = {**self._id_arrays(assigned), "positions": [a.position for a in assigned]}
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("fetch_messages"), {**params, "limit": limit}, binary=True
            )
            rows = await cur.fetchall()
        # The per-row loop is most of a consumer's CPU: rows come ordered by partition, so the
        # buffer is looked up once per partition, and messages are built the fast way.
        current: tuple[int, int] | None = None
        append: Any = None
        name = ""
        for topic_id, partition, offset, key, value, headers, created_at in rows:
            if current != (topic_id, partition):
                current = (topic_id, partition)
                target = self._by_id[current]
                append, name = target.buffer.append, target.meta.name
            append(
                build_message(
                    name,
                    partition,
                    offset,
                    key,
                    value,
                    {} if headers is None else decode_headers(headers),
                    created_at,
                )
            )

    def _take(self, max_messages: int) -> list[Message]:
        taken: list[Message] = []
        for assigned in self._assigned.values():
            buffer, position = assigned.buffer, assigned.position
            while buffer and len(taken) < max_messages:
                message = buffer.popleft()
                if message.offset < position:
                    continue  # superseded by a seek or a transactional claim
                taken.append(message)
                position = message.offset + 1
            assigned.position = position
        return taken

    async def _wait_for_wakeup(self, timeout: float) -> None:
        """Sleep until a publish to an assigned topic is notified, at most ``timeout`` s.

        Notifications are hints: a lost one costs at most one poll interval. A broken
        listening connection is reconnected on the next wait, and this wait sleeps instead.
        """
        wanted = {str(a.meta.id) for a in self._assigned.values()}
        try:
            if self._listener is None or self._listener.closed:
                self._listener = await psycopg.AsyncConnection.connect(
                    self._db.conninfo, autocommit=True
                )
                await self._listener.execute("LISTEN postroom")
                return  # anything published before LISTEN is found by the next fetch
            async for notify in self._listener.notifies(timeout=timeout):
                if notify.payload in wanted:
                    return
        except psycopg.OperationalError:
            await self._close_listener()
            await asleep(timeout)

    async def _forget_wakeups(self) -> None:
        """Drop the notifications already received, without waiting: the fetch that follows
        sees every message they announced (each was sent after its commit). Left queued, each
        would wake the next wait at once for an empty fetch: at a commit per millisecond the
        consumer then spent its time on empty fetches and fell behind (bench/RESULTS.md)."""
        if self._listener is None or self._listener.closed:
            return
        try:
            async for _ in self._listener.notifies(timeout=0):
                pass
        except psycopg.OperationalError:
            await self._close_listener()  # the next wait reconnects

    async def _close_listener(self) -> None:
        if self._listener is not None:
            listener, self._listener = self._listener, None
            try:
                await listener.close()
            except psycopg.Error:
                pass  # already broken

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Store the next offsets to read: the current positions, or ``offsets``.

        Cursors only move forward: committing an offset below the stored one changes nothing
        (use ``Client.reset_group`` to go back)."""
        await self._ensure_assigned()
        if offsets is None:
            chosen = list(self._assigned.values())
            values = [a.position for a in chosen]
        else:
            chosen = [self._get(tp) for tp in offsets]
            values = [check_offset(v) for v in offsets.values()]
        if not chosen:
            return
        async with self._db.connection() as conn:
            await conn.execute(
                self._db.q("commit_cursors"),
                {"group": self.group, **self._id_arrays(chosen), "offsets": values},
            )

    async def committed(self, tp: TopicPartition) -> int | None:
        """The stored next offset of the group for ``tp``."""
        await self._ensure_assigned()
        assigned = self._get(tp)
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("read_cursors"), {"group": self.group, **self._id_arrays([assigned])}
            )
            row = await cur.fetchone()
        return None if row is None else int(row[2])

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next message ``poll()`` returns for ``tp``."""
        await self._ensure_assigned()
        return self._get(tp).position

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make the next ``poll()`` start at ``offset`` in ``tp`` (0 .. high-water mark)."""
        check_offset(offset)
        await self._ensure_assigned()
        assigned = self._get(tp)
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("high_water"),
                {"topic_id": assigned.meta.id, "partition": assigned.partition},
            )
            row = await cur.fetchone()
        high_water = 0 if row is None else int(row[0])
        if offset > high_water:
            raise OffsetOutOfRange(
                f"offset {offset} is beyond the high-water mark of {tp.topic}/{tp.partition}: "
                f"allowed 0..{high_water}"
            )
        assigned.position = offset
        assigned.buffer.clear()

    # -- transactional consumption --------------------------------------------------------

    @asynccontextmanager
    async def transaction(
        self, max_messages: int = 100, timeout: float = 0.0
    ) -> AsyncIterator[AsyncBatch]:
        """Claim up to ``max_messages`` messages of one partition, under its cursor row lock.

        The block gets the messages and the connection; when it ends without error, the
        caller's writes and the cursor advance commit together; on error both roll back and
        the messages will be delivered again. Other members of the group claim other
        partitions meanwhile (SKIP LOCKED). Waits up to ``timeout`` seconds for messages; the
        batch may be empty.

            with consumer.transaction() as batch:  # async with, for AsyncConsumer
                for message in batch:
                    batch.connection.execute("INSERT INTO invoices ...", ...)  # awaited
        """
        if max_messages < 1:
            raise InvalidArgument(f"invalid max_messages {max_messages!r}: must be >= 1")
        await self._ensure_assigned()
        deadline = time.monotonic() + max(timeout, 0)
        async with self._db.connection() as conn:
            while True:
                messages = await self._claim(conn, max_messages)
                if messages or time.monotonic() >= deadline:
                    break
                await conn.rollback()
                await self._wait_for_wakeup(min(deadline - time.monotonic(), POLL_INTERVAL))
            tp = messages[0].topic_partition if messages else None
            yield AsyncBatch(messages, conn, tp)
        if messages:
            # Committed: later polls continue after the claimed range.
            assigned = self._assigned[messages[0].topic_partition]
            assigned.position = max(assigned.position, messages[-1].offset + 1)

    async def _claim(self, conn: psycopg.AsyncConnection[Any], limit: int) -> list[Message]:
        order = list(self._assigned.values())
        start = self._claim_start % len(order)
        order = order[start:] + order[:start]
        self._claim_start += 1
        cur = await conn.execute(
            self._db.q("claim_range"),
            {"group": self.group, **self._id_arrays(order), "limit": limit},
            binary=True,
        )
        messages = []
        for topic_id, partition, offset, key, value, headers, created_at in await cur.fetchall():
            name = self._by_id[(topic_id, partition)].meta.name
            messages.append(
                build_message(
                    name, partition, offset, key, value, decode_headers(headers), created_at
                )
            )
        return messages

    # -- life cycle -----------------------------------------------------------------------

    async def close(self) -> None:
        """Release the consumer's connection. Does not commit."""
        self._closed = True
        await self._close_listener()

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while not self._closed:
            for message in await self.poll(timeout=POLL_INTERVAL):
                yield message
