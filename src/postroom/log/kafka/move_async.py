"""Move a topic from PostgreSQL to Kafka: copy its retained messages partition by partition in
offset order, keep mirroring new ones, and translate each consumer group's committed offset to
the Kafka offset of the same message, committed for that group on Kafka.

The Kafka topic itself is the move's state: each copied message carries the header
``postroom-id`` (``topic/partition/offset`` on PostgreSQL), and Kafka offsets of a partition
are contiguous, so the Kafka offset of PostgreSQL offset ``o`` is ``k0 + (o - o0)`` where
``(k0, o0)`` is the partition's first copied message. A mirror that starts (again) reads the
tail of each Kafka partition and goes on after the last message copied there: a crash between
Kafka's acknowledgement and anything else copies nothing twice. The destination must be empty
when the first mirror starts (or hold only this move's copies), with the source's partition
count; each message goes to the same partition number, with its key, value and headers.
"""

from __future__ import annotations

import time
from typing import Any

from ..._acompat import asleep
from ...errors import InvalidArgument, TopicNotFound
from ..records import Message, TopicPartition, check_name
from .engine_async import AsyncKafkaLog, open_kafka_log
from .mirror import COPY_BATCH, ID_HEADER, Anchor, MirrorLag, source_offset
from .producer_async import AsyncKafkaProducer


class AsyncTopicMove:
    """A move of ``topic`` from the PostgreSQL engine ``source`` to the Kafka engine
    ``target``; see the module docstring. ``await prepare()`` first (it creates the Kafka topic
    with the same partition count if missing, and refuses a mismatch), then ``copy()`` until it
    returns 0 (or ``run()`` until ``stop()``), ``status()`` for the mirror lag, and
    ``translate_groups()`` once a group's consumers are stopped on PostgreSQL."""

    def __init__(self, source: Any, target: AsyncKafkaLog, topic: str) -> None:
        self.source = source
        self.target = target
        self.topic = check_name("topic", topic)
        self.partitions = 0
        self._next: dict[int, int] = {}
        self._stopping = False
        self._producer: AsyncKafkaProducer | None = None

    async def close(self) -> None:
        """Flush what was sent and close the Kafka engine (the move owns it)."""
        if self._producer is not None:
            await self._producer.close()
            self._producer = None
        await self.target.close()

    async def __aenter__(self) -> AsyncTopicMove:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def prepare(self) -> int:
        """Check both topics; returns the partition count. :class:`TopicNotFound` if the
        source is missing; :class:`InvalidArgument` on a partition-count mismatch."""
        info = await self.source.describe_topic(self.topic)
        self.partitions = info.partitions
        try:
            count = await self.target.admin.partitions(self.topic)
        except TopicNotFound:
            await self.target.create_topic(self.topic, info.partitions, if_not_exists=True)
            count = await self.target.admin.partitions(self.topic)
        if count != info.partitions:
            raise InvalidArgument(
                f"partition-count mismatch: topic {self.topic!r} has {info.partitions} "
                f"partitions on PostgreSQL and {count} at {self.target.description}; a move "
                "needs the same count so every key keeps its partition number (create the "
                f"Kafka topic with {info.partitions} partitions)"
            )
        lows = {p.partition: p.low_water for p in info.partition_info}
        for partition in range(count):
            anchor = await self._anchor(partition)
            self._next[partition] = lows[partition] if anchor is None else anchor.source_next
        return count

    async def _read(self, partition: int, start: int, end: int) -> list[Message]:
        """Kafka messages of ``partition`` from ``start`` up to the end (``end`` is a hint:
        reading goes on while messages come, so a high-water mark reported low is no harm)."""
        tp = TopicPartition(self.topic, partition)
        found: list[Message] = []
        async with self.target.consumer(None, self.topic, partitions=[tp]) as reader:
            await reader.seek(tp, start)
            quiet_until = time.monotonic() + 2.0
            while time.monotonic() < quiet_until:
                batch = await reader.poll(timeout=0.2, max_messages=COPY_BATCH)
                found.extend(batch)
                if batch:
                    quiet_until = time.monotonic() + (0.3 if found[-1].offset + 1 >= end else 2.0)
        return found

    async def _anchor(self, partition: int) -> Anchor | None:
        low, high = (await self.target.admin.watermarks(self.topic, self.partitions))[partition]
        if high <= low:
            return None
        first = await self._read(partition, low, low + 1)
        if not first:
            return None
        tail = await self._read(partition, max(high - 1, low), high)
        last = tail[-1] if tail else first[-1]
        return Anchor(first[0].offset, source_offset(first[0]), source_offset(last) + 1)

    async def copy(self, max_messages: int = COPY_BATCH) -> int:
        """Copy up to ``max_messages`` messages not yet mirrored, each partition in offset
        order, and wait for Kafka's acknowledgements; returns how many."""
        if not self.partitions:
            await self.prepare()
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        copied = 0
        async with self.source.consumer(None, self.topic, partitions=tps) as reader:
            for tp in tps:
                await reader.seek(tp, self._next[tp.partition])
            messages = await reader.poll(timeout=0, max_messages=max_messages)
        if not messages:
            return copied
        if self._producer is None:
            self._producer = self.target.producer(linger_ms=5)
        sent = []
        for message in messages:
            headers = dict(message.headers)
            headers[ID_HEADER] = message.id
            sent.append(
                await self._producer.send(
                    self.topic,
                    message.value,
                    key=message.key,
                    headers=headers,
                    partition=message.partition,
                )
            )
        for future in sent:  # every copy acknowledged before the mirror moves on
            await future  # sync: future.result()
        for message in messages:
            self._next[message.partition] = message.offset + 1
            copied += 1
        return copied

    async def status(self) -> list[MirrorLag]:
        """Per partition: the source's high-water mark, the next offset to copy, the lag."""
        if not self.partitions:
            await self.prepare()
        info = await self.source.describe_topic(self.topic)
        return [
            MirrorLag(
                p.partition,
                p.high_water,
                self._next[p.partition],
                max(p.high_water - self._next[p.partition], 0),
            )
            for p in info.partition_info
        ]

    def stop(self) -> None:
        self._stopping = True

    async def run(self, *, idle_wait: float = 0.2) -> None:
        """Mirror until ``stop()``: copy, and wait ``idle_wait`` seconds when nothing is new."""
        self._stopping = False
        while not self._stopping:
            if not await self.copy():
                await asleep(idle_wait)

    async def translate_groups(self, groups: list[str] | None = None) -> dict[str, dict[int, int]]:
        """Commit for each group (every group with a committed offset on the topic, or
        ``groups``) on Kafka the offset of the message it would read next on PostgreSQL;
        returns group -> partition -> Kafka offset. Stop the group's PostgreSQL consumers
        first; :class:`InvalidArgument` if a group is past the mirror (wait for lag 0)."""
        if not self.partitions:
            await self.prepare()
        if groups is None:
            groups = [g.name for g in await self.source.list_groups() if self.topic in g.topics]
        anchors = {p: await self._anchor(p) for p in range(self.partitions)}
        translated: dict[str, dict[int, int]] = {}
        for group in groups:
            info = await self.source.describe_group(group)
            offsets: dict[int, int] = {}
            for lag in info.partitions:
                if lag.topic != self.topic:
                    continue
                offsets[lag.partition] = self._kafka_offset(
                    group, lag.partition, lag.committed, anchors[lag.partition]
                )
            for partition, offset in offsets.items():
                await self.target.reset_group(group, self.topic, to=offset, partition=partition)
            translated[group] = offsets
        return translated

    def _kafka_offset(self, group: str, partition: int, committed: int, anchor: Any) -> int:
        mirrored = self._next[partition]
        if committed > mirrored:
            raise InvalidArgument(
                f"group {group!r} is past the mirror on {self.topic}[{partition}] (committed "
                f"{committed}, copied up to {mirrored}): wait for mirror lag 0 (--status)"
            )
        if anchor is None:  # nothing copied: the group reads from the start
            return 0
        return int(anchor.kafka_first + max(committed - anchor.source_first, 0))


async def open_move(source: Any, topic: str, url: str) -> AsyncTopicMove:
    """The move of ``topic`` from ``source`` to the Kafka cluster at ``url``, prepared (the
    Kafka topic created with the same partition count if missing; a mismatch is
    :class:`InvalidArgument`).

        async with await client.move_topic("orders", to="kafka://k1:9092") as move:
            while await move.copy():
                pass
            await move.translate_groups()
    """
    move = AsyncTopicMove(source, await open_kafka_log(url), topic)
    try:
        await move.prepare()
    except BaseException:
        await move.close()
        raise
    return move
