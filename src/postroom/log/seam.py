"""The log engine's public surface, as protocols: what a client, the runner and the relay may
rely on of an engine, whatever stores the log. :class:`~postroom.log.engine_async.AsyncLog`
(PostgreSQL) implements it; a Kafka engine (``postroom.log.kafka``) implements the same one.

Kept to the public log API in Kafka's words (aiokafka's ``AIOKafkaProducer`` and
``AIOKafkaConsumer``): a producer sends and flushes; a consumer polls, commits, seeks and
reports its assignment, and calls ``on_assign``/``on_revoke`` from ``poll()``; the engine
publishes, makes producers and consumers, manages topics and describes, measures and resets
groups. PostgreSQL-only features (publishing in the caller's transaction, transactional
consumption, dead letters, the runner) are the PostgreSQL engine's own, outside the seam.

These are the asyncio faces; the sync ``Log`` mirrors them method for method without
``await``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol, Self

from .records import GroupInfo, HeaderValue, Message, Published, TopicInfo, TopicPartition, Value

PartitionsCallback = Callable[[set[TopicPartition]], Any]
"""``on_assign``/``on_revoke``: called (and awaited if it returns an awaitable) with the
partitions gained or lost, from ``poll()``."""


class LogProducer(Protocol):
    """A batching producer: ``send`` queues one message and returns an awaitable of its
    :class:`Published` position, resolved once its batch is stored; ``flush`` waits until
    every message sent so far is stored (or failed). The caller must ``close()`` it (or use
    ``async with``): closing flushes."""

    async def send(
        self,
        topic: str,
        value: Value,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        partition: int | None = None,
    ) -> Awaitable[Published]: ...

    async def flush(self) -> None: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...


class LogConsumer(Protocol):
    """A consumer of a group's topics (or of ``partitions`` assigned by hand). ``poll`` returns
    messages after the in-memory positions and applies assignment changes (calling
    ``on_revoke``/``on_assign``); ``commit`` stores the next offsets to read (the current
    positions, or ``offsets``); ``seek`` moves a position. The caller must ``close()`` it (or
    use ``async with``): closing leaves the group."""

    async def poll(self, timeout: float = 1.0, max_messages: int = 500) -> list[Message]: ...

    async def commit(
        self, offsets: Mapping[TopicPartition, int] | Message | None = None
    ) -> None: ...

    async def committed(self, tp: TopicPartition) -> int | None: ...

    async def position(self, tp: TopicPartition) -> int: ...

    async def seek(self, tp: TopicPartition, offset: int) -> None: ...

    async def assignment(self) -> set[TopicPartition]: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc: object) -> None: ...


class LogEngine(Protocol):
    """A log: topics, publishing, producers, consumers and groups (see the module docstring).

    ``consumer(group, topics)`` joins ``group`` (None: a peek without a group, which cannot
    commit); with ``partitions`` the assignment is manual. ``reset_group`` returns the new next
    offset per partition; ``lag`` is the messages the group has not committed, over all its
    partitions."""

    @property
    def schema(self) -> str: ...

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        retention: timedelta | None = None,
        *,
        max_lag: int | None = None,
        group_ttl: timedelta | None = None,
        if_not_exists: bool = False,
    ) -> bool: ...

    async def list_topics(self) -> list[TopicInfo]: ...

    async def describe_topic(self, name: str) -> TopicInfo: ...

    async def delete_topic(self, name: str) -> None: ...

    async def publish(
        self,
        topic: str,
        value: Value,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        partition: int | None = None,
    ) -> Published: ...

    async def publish_batch(self, topic: str, messages: Iterable[Any]) -> list[Published]: ...

    def producer(self, *, linger_ms: float = 5) -> LogProducer: ...

    def consumer(
        self,
        group: str | None,
        topics: str | Iterable[str],
        *,
        partitions: Iterable[TopicPartition] | None = None,
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> LogConsumer: ...

    async def list_groups(self) -> list[GroupInfo]: ...

    async def describe_group(self, group: str) -> GroupInfo: ...

    async def lag(self, group: str) -> int: ...

    async def reset_group(
        self,
        group: str,
        topic: str,
        *,
        to: str | int | datetime,
        partition: int | None = None,
    ) -> dict[int, int]: ...
