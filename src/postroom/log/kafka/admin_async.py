"""Topics and consumer groups on Kafka through confluent-kafka's ``AdminClient``.

Every blocking call (metadata, admin futures, watermarks) runs in a thread (``ato_thread``), so
the event loop of the async API never waits on librdkafka. Kafka does not keep what the
PostgreSQL engine reports about time (a topic's creation, a group's last commit, the age of a
backlog): those fields read as the epoch and 0 (docs/kafka.md).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from ..._acompat import ato_thread
from ...errors import GroupNotFound, InvalidArgument, NotSupported, TopicExists, TopicNotFound
from ..records import (
    GroupInfo,
    PartitionInfo,
    PartitionLag,
    TopicInfo,
    check_name,
    check_offset,
    check_partition_count,
)
from .failures import kafka_module, translate
from .messages import EPOCH
from .settings import KafkaSettings

TOPIC_CACHE_SECONDS = 5.0
"""How long a topic's partition count is trusted (as the PostgreSQL engine re-reads topics)."""


class AsyncKafkaAdmin:
    """Admin operations of the Kafka engine; one ``AdminClient`` per engine."""

    def __init__(self, settings: KafkaSettings) -> None:
        kafka = kafka_module()
        self._admin_module = __import__("confluent_kafka.admin", fromlist=["AdminClient"])
        self._kafka = kafka
        self.settings = settings
        self._admin = self._admin_module.AdminClient(settings.client_config())
        self._counts: dict[str, tuple[float, int]] = {}

    @property
    def where(self) -> str:
        return self.settings.description

    async def _wait(self, future: Any, what: str) -> Any:
        try:
            return await ato_thread(future.result, self.settings.timeout)
        except Exception as exc:
            raise translate(exc, what, self.where) from exc

    async def metadata(self, topic: str | None = None) -> Any:
        try:
            return await ato_thread(self._admin.list_topics, topic, self.settings.timeout)
        except Exception as exc:
            raise translate(exc, "reading metadata", self.where) from exc

    async def check_reachable(self) -> None:
        """Raise :class:`BrokerUnavailable` now if no broker answers (``connect`` calls it)."""
        await self.metadata()

    # -- topics -----------------------------------------------------------------------------

    def cached_partitions(self, topic: str) -> int | None:
        entry = self._counts.get(topic)
        if entry is None or time.monotonic() - entry[0] > TOPIC_CACHE_SECONDS:
            return None
        return entry[1]

    async def partitions(self, topic: str) -> int:
        """``topic``'s partition count (cached a few seconds); :class:`TopicNotFound`."""
        count = self.cached_partitions(topic)
        if count is not None:
            return count
        # Every topic's metadata, not ``topic``'s: a request naming a missing topic makes
        # brokers that auto-create topics (Tansu does) create it.
        metadata = await self.metadata()
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            self._counts.pop(topic, None)
            raise TopicNotFound(f"topic {topic!r} does not exist at {self.where}")
        count = len(found.partitions)
        self._counts[topic] = (time.monotonic(), count)
        return count

    async def create_topic(
        self,
        name: str,
        partitions: int,
        retention: timedelta | None,
        max_lag: int | None,
        group_ttl: timedelta | None,
        if_not_exists: bool,
    ) -> bool:
        check_name("topic", name)
        check_partition_count(partitions)
        if max_lag is not None:
            raise NotSupported(
                "max_lag (admission control) needs PostgreSQL: Kafka has no backlog limit per "
                "group; watch lag (describe_group, postroom lag) and throttle producers yourself"
            )
        if group_ttl is not None:
            raise NotSupported(
                "group_ttl is a broker setting on Kafka (offsets.retention.minutes), not a "
                "topic's: set it on the brokers"
            )
        config = {}
        if retention is not None:
            config["retention.ms"] = str(int(retention.total_seconds() * 1000))
        new = self._admin_module.NewTopic(name, partitions, -1, config=config)
        try:
            await self._wait(self._admin.create_topics([new])[name], f"creating topic {name!r}")
        except TopicExists:
            if if_not_exists:
                return False
            raise
        await self._wait_visible(name)
        return True

    async def _wait_visible(self, name: str) -> None:
        """Until the brokers' metadata lists the new topic (creation is asynchronous)."""
        deadline = time.monotonic() + self.settings.timeout
        while True:
            try:
                await self.partitions(name)
                return
            except TopicNotFound:
                if time.monotonic() > deadline:
                    raise
                await ato_thread(time.sleep, 0.05)

    async def list_topics(self) -> list[TopicInfo]:
        metadata = await self.metadata()
        return [
            TopicInfo(name, len(topic.partitions), None, EPOCH, 0)
            for name, topic in sorted(metadata.topics.items())
            if not name.startswith("__") and topic.error is None
        ]

    async def watermarks(self, topic: str, count: int) -> list[tuple[int, int]]:
        """(low, high) per partition of ``topic``, through ListOffsets."""
        spec = self._admin_module.OffsetSpec
        tps = [self._kafka.TopicPartition(topic, p) for p in range(count)]
        low = self._admin.list_offsets({tp: spec.earliest() for tp in tps})
        high = self._admin.list_offsets({tp: spec.latest() for tp in tps})
        marks = []
        for tp in tps:
            first = await self._wait(low[tp], f"reading offsets of {topic!r}")
            last = await self._wait(high[tp], f"reading offsets of {topic!r}")
            marks.append((max(first.offset, 0), max(last.offset, 0)))
        return marks

    async def offset_for_time(self, topic: str, count: int, when: datetime) -> list[int]:
        spec = self._admin_module.OffsetSpec
        millis = int(when.timestamp() * 1000)
        tps = [self._kafka.TopicPartition(topic, p) for p in range(count)]
        found = self._admin.list_offsets({tp: spec.for_timestamp(millis) for tp in tps})
        return [(await self._wait(found[tp], f"finding offsets of {topic!r}")).offset for tp in tps]

    async def describe_topic(self, name: str) -> TopicInfo:
        check_name("topic", name)
        self._counts.pop(name, None)
        count = await self.partitions(name)
        marks = await self.watermarks(name, count)
        infos = tuple(
            PartitionInfo(p, low, high, high - low, 0) for p, (low, high) in enumerate(marks)
        )
        return TopicInfo(name, count, None, EPOCH, sum(h for _, h in marks), infos)

    async def delete_topic(self, name: str) -> None:
        check_name("topic", name)
        await self._wait(self._admin.delete_topics([name])[name], f"deleting topic {name!r}")
        self._counts.pop(name, None)

    async def add_partitions(self, name: str, total: int) -> None:
        check_name("topic", name)
        check_partition_count(total)
        new = self._admin_module.NewPartitions(name, total)
        await self._wait(self._admin.create_partitions([new])[name], f"growing topic {name!r}")
        self._counts.pop(name, None)

    # -- groups -----------------------------------------------------------------------------

    async def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets; empty if it has none."""
        request = self._kafka.ConsumerGroupTopicPartitions(group)
        future = self._admin.list_consumer_group_offsets([request])[group]
        result = await self._wait(future, f"reading group {group!r}")
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions or ()
            if tp.offset >= 0
        }

    async def _holders(self, group: str) -> dict[tuple[str, int], str]:
        future = self._admin.describe_consumer_groups([group])[group]
        description = await self._wait(future, f"describing group {group!r}")
        holders: dict[tuple[str, int], str] = {}
        for member in description.members or ():
            owned = member.assignment.topic_partitions if member.assignment else ()
            for tp in owned:
                holders[(tp.topic, tp.partition)] = member.group_instance_id or member.member_id
        return holders

    async def describe_group(self, group: str) -> GroupInfo:
        check_name("group", group)
        committed = await self.committed_offsets(group)
        if not committed:
            raise GroupNotFound(f"consumer group {group!r} has no committed offset at {self.where}")
        holders = await self._holders(group)
        marks: dict[str, list[tuple[int, int]]] = {}
        lags = []
        for topic in sorted({topic for topic, _ in committed}):
            marks[topic] = await self.watermarks(topic, await self.partitions(topic))
        # Every partition of the group's topics, as on PostgreSQL: one without a commit
        # yet counts from the earliest offset (the group reads it from there).
        every = [(t, p) for t in sorted(marks) for p in range(len(marks[t]))]
        for topic, partition in every:
            low, high = marks[topic][partition]
            offset = committed.get((topic, partition), low)
            lag = max(high - max(offset, low), 0)
            lost = max(low - offset, 0)
            lags.append(
                PartitionLag(
                    topic,
                    partition,
                    offset,
                    high,
                    lag,
                    0.0,
                    EPOCH,
                    holders.get((topic, partition)),
                    None,
                    lost,
                )
            )
        members = len(set(holders.values()))
        return GroupInfo(
            group, tuple(sorted(marks)), sum(p.lag for p in lags), EPOCH, tuple(lags), members
        )

    async def list_groups(self) -> list[GroupInfo]:
        listing = await self._wait(self._admin.list_consumer_groups(), "listing groups")
        groups = []
        for entry in sorted(listing.valid or (), key=lambda g: g.group_id):
            try:
                info = await self.describe_group(entry.group_id)
            except GroupNotFound:
                continue
            state = "active" if info.members else "idle"
            groups.append(
                GroupInfo(info.name, info.topics, info.lag, EPOCH, (), info.members, state)
            )
        return groups

    async def reset_group(
        self, group: str, topic: str, to: str | int | datetime, partition: int | None
    ) -> dict[int, int]:
        check_name("group", group)
        check_name("topic", topic)
        count = await self.partitions(topic)
        chosen = range(count) if partition is None else [partition]
        if partition is not None and not 0 <= partition < count:
            raise InvalidArgument(
                f"invalid partition {partition!r}: topic {topic!r} has {count} partitions"
            )
        marks = await self.watermarks(topic, count)
        if to == "earliest":
            offsets = {p: marks[p][0] for p in chosen}
        elif to == "latest":
            offsets = {p: marks[p][1] for p in chosen}
        elif isinstance(to, datetime):
            if to.tzinfo is None:
                raise InvalidArgument(f"invalid reset time {to!r}: pass an aware datetime")
            found = await self.offset_for_time(topic, count, to)
            offsets = {p: found[p] if found[p] >= 0 else marks[p][1] for p in chosen}
        elif isinstance(to, int) and not isinstance(to, bool):
            offsets = {p: check_offset(to) for p in chosen}
        else:
            raise InvalidArgument(
                f"invalid reset target {to!r}: 'earliest', 'latest', an offset or a datetime"
            )
        tps = [self._kafka.TopicPartition(topic, p, offsets[p]) for p in chosen]
        request = self._kafka.ConsumerGroupTopicPartitions(group, tps)
        future = self._admin.alter_consumer_group_offsets([request])[group]
        result = await self._wait(future, f"resetting group {group!r}")
        for tp in result.topic_partitions or ():
            if tp.error is not None:
                raise translate(
                    self._kafka.KafkaException(tp.error), f"resetting group {group!r}", self.where
                )
        return offsets

    async def delete_group(self, group: str) -> None:
        check_name("group", group)
        future = self._admin.delete_consumer_groups([group])[group]
        await self._wait(future, f"deleting group {group!r}")
