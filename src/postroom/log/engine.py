# Generated from src/postroom/log/engine_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The log engine: topics, publishing, producers, consumers, groups and dead letters over one
postroom schema. The client builds one (``client.log``) and delegates its log methods to it;
the runner, dead letters and the relay take the engine, never the client.

Its public surface is :class:`postroom.log.seam.LogEngine`: another engine (Kafka's) plugs in
behind the same protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from .._db import Database
from .admin import LogAdmin
from .appender import Appender
from .consumer import Consumer
from .deadletters import DeadLetters
from .membership import DEFAULT_MAX_POLL_INTERVAL
from .metadata import TopicCache
from .producer import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BUFFER_BYTES,
    DEFAULT_BUFFER_MESSAGES,
    DEFAULT_BUFFER_TIMEOUT,
    Producer,
)
from .records import (
    DEFAULT_SESSION_TIMEOUT,
    MAX_VALUE_BYTES,
    UNSET,
    GroupInfo,
    HeaderValue,
    Message,
    OffsetReset,
    Published,
    Record,
    TopicInfo,
    TopicPartition,
    Value,
    batch_record,
    check_name,
    make_record,
)
from .runner import Runner
from .subscription import Subscriptions


class Log:
    """The log of one postroom schema, on the database handle ``db`` (its pool).

    Composed of a topic metadata cache, an appender (the write path), an admin (topics,
    groups, retention) and the dead letters; producers and consumers it makes share them.
    The methods are the client's log methods (``AsyncClient`` documents each); the client
    only delegates to them.

        log = client.log
        await log.publish("orders", b"...")
        async with log.consumer("billing", "orders") as consumer: ...
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self.topics = TopicCache(db)
        self.appender = Appender(db, self.topics)
        self.admin = LogAdmin(db, self.topics)
        self.dead_letters = DeadLetters(self, db)
        self.subscriptions = Subscriptions()

    @property
    def schema(self) -> str:
        return self._db.schema

    @property
    def conninfo(self) -> str:
        return self._db.conninfo

    @property
    def database(self) -> Database:
        """The database handle (pool, schema, named queries) the engine runs on."""
        return self._db

    # -- topics -----------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        retention: timedelta | None = None,
        *,
        max_lag: int | None = None,
        group_ttl: timedelta | None = None,
        if_not_exists: bool = False,
    ) -> bool:
        return self.admin.create_topic(
            name, partitions, retention, max_lag, group_ttl, if_not_exists
        )

    def alter_topic(
        self,
        name: str,
        *,
        max_lag: int | None = UNSET,
        group_ttl: timedelta | None = UNSET,
        retention: timedelta | None = UNSET,
    ) -> None:
        self.admin.alter_topic(name, max_lag, group_ttl, retention)

    def list_topics(self) -> list[TopicInfo]:
        return self.admin.list_topics()

    def describe_topic(self, name: str) -> TopicInfo:
        return self.admin.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topic(name)

    def add_partitions(self, name: str, total: int) -> None:
        self.admin.add_partitions(name, total)

    def apply_retention(
        self, *, group_expiry: timedelta = timedelta(days=7), batch_size: int = 10000
    ) -> int:
        return self.admin.apply_retention(group_expiry, batch_size)

    # -- producing --------------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        value: Value,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        partition: int | None = None,
        conn: object = None,
        timeout: float | None = None,
    ) -> Published:
        record = make_record(topic, value, key, headers, partition)
        return (self.appender.append([record], conn, timeout))[0]

    def publish_records(
        self, records: list[Record], conn: object = None, timeout: float | None = None
    ) -> list[Published]:
        """Write records already made (``make_record``) in one transaction (the caller's,
        with ``conn``)."""
        return self.appender.append(records, conn, timeout)

    def publish_batch(
        self,
        topic: str,
        messages: Iterable[Any],
        *,
        conn: object = None,
        timeout: float | None = None,
    ) -> list[Published]:
        items = messages if isinstance(messages, list) else list(messages)
        if (
            items
            and all(type(item) is bytes and len(item) <= MAX_VALUE_BYTES for item in items)
            and check_name("topic", topic)
        ):
            # The common case, plain values: written by the lean path, no record per item.
            partition, first = self.appender.append_values(topic, items, conn, timeout)
            if first is None:  # in the caller's transaction: offsets are assigned at commit
                return [Published(partition, None)] * len(items)
            return [Published(partition, offset) for offset in range(first, first + len(items))]
        records = [batch_record(topic, item) for item in items]
        return self.appender.append(records, conn, timeout)

    def producer(
        self,
        *,
        linger_ms: float = 5,
        batch_size: int = DEFAULT_BATCH_SIZE,
        backlog_timeout: float | None = None,
        buffer_messages: int = DEFAULT_BUFFER_MESSAGES,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        buffer_timeout: float | None = DEFAULT_BUFFER_TIMEOUT,
    ) -> Producer:
        return Producer(
            self.appender,
            linger_ms=linger_ms,
            batch_size=batch_size,
            backlog_timeout=backlog_timeout,
            buffer_messages=buffer_messages,
            buffer_bytes=buffer_bytes,
            buffer_timeout=buffer_timeout,
        )

    # -- consuming --------------------------------------------------------------------------

    def consumer(
        self,
        group: str | None,
        topics: str | Iterable[str],
        *,
        partitions: Iterable[TopicPartition] | None = None,
        auto_offset_reset: OffsetReset = "earliest",
        member_id: str | None = None,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        on_assign: Callable[[set[TopicPartition]], Any] | None = None,
        on_revoke: Callable[[set[TopicPartition]], Any] | None = None,
    ) -> Consumer:
        return Consumer(
            self._db,
            self.topics,
            group,
            [topics] if isinstance(topics, str) else topics,
            partitions=partitions,
            auto_offset_reset=auto_offset_reset,
            member_id=member_id,
            session_timeout=session_timeout,
            max_poll_interval=max_poll_interval,
            on_assign=on_assign,
            on_revoke=on_revoke,
        )

    def subscribe(
        self, topics: str | Iterable[str], *, group: str, **options: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self.subscriptions.decorator(topics, group, options)

    def runner(self) -> Runner:
        return Runner(self, self.subscriptions.items)

    # -- dead letters -----------------------------------------------------------------------

    def list_dead_letters(self, topic: str, *, limit: int = 100) -> list[Message]:
        return self.dead_letters.list(topic, limit)

    def replay_dead_letters(
        self,
        topic: str,
        *,
        group: str = "postroom-replay",
        letters: Collection[tuple[int, int]] | None = None,
    ) -> int:
        return self.dead_letters.replay(topic, group, letters)

    def dead_letter(
        self,
        message: Message,
        *,
        group: str,
        error: str,
        attempts: int = 1,
        topic: str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        conn: object = None,
    ) -> bool:
        return self.dead_letters.write(message, group, error, attempts, topic, headers, conn)

    # -- groups -----------------------------------------------------------------------------

    def list_groups(self) -> list[GroupInfo]:
        return self.admin.list_groups()

    def describe_group(self, group: str) -> GroupInfo:
        return self.admin.describe_group(group)

    def lag(self, group: str) -> int:
        """Messages ``group`` has not committed yet, over all its partitions."""
        return (self.admin.describe_group(group)).lag

    def reset_group(
        self,
        group: str,
        topic: str,
        *,
        to: str | int | datetime,
        partition: int | None = None,
    ) -> dict[int, int]:
        return self.admin.reset_group(group, topic, to, partition)

    def delete_group(self, group: str) -> None:
        self.admin.delete_group(group)
