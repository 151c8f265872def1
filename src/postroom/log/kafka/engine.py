# Generated from src/postroom/log/kafka/engine_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The log engine on Kafka: topics, publishing, producers, consumers, groups, the runner and
dead letters, with the PostgreSQL engine's names, types and errors.

What only PostgreSQL can give is refused with :class:`NotSupported` naming the alternative
(``conn=``: publishing in the caller's transaction; ``transaction()``: transactional
consumption; ``max_lag``; the SQL API and the job queue are not on this object at all). The
table is in docs/kafka.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, cast

from ...errors import InvalidArgument, NotSupported, TopicExists, TopicNotFound
from ..deadletter_headers import HEADER_PREFIX, dead_letter_topic, fit_headers, replay_headers
from ..membership import DEFAULT_MAX_POLL_INTERVAL
from ..records import (
    DEFAULT_SESSION_TIMEOUT,
    GroupInfo,
    HeaderValue,
    Message,
    OffsetReset,
    Published,
    TopicInfo,
    TopicPartition,
    Value,
    batch_record,
    check_name,
)
from ..runner import Runner
from ..subscription import Subscriptions
from .admin import KafkaAdmin
from .consumer import KafkaConsumer
from .failures import IN_TRANSACTION, refuse_conn
from .messages import record_headers
from .producer import DEFAULT_BUFFER_MESSAGES, DEFAULT_BUFFER_TIMEOUT, KafkaProducer
from .settings import KafkaSettings, parse_kafka_url

log = logging.getLogger("postroom.dlq")


def open_kafka_log(url: str, *, pause_gc: bool = True) -> KafkaLog:
    """The Kafka engine for ``url``; :class:`BrokerUnavailable` at once if no broker answers.
    ``pause_gc``: as ``connect()``'s."""
    engine = KafkaLog(replace(parse_kafka_url(url), pause_gc=pause_gc))
    try:
        engine.admin.check_reachable()
    except BaseException:
        engine.close()
        raise
    return engine


class KafkaLog:
    """One Kafka cluster's log. Build it with :func:`open_kafka_log`; ``close()`` when done."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.admin = KafkaAdmin(settings)
        self._producer: KafkaProducer | None = None
        self._subscriptions = Subscriptions()

    @property
    def description(self) -> str:
        return self.settings.description

    @property
    def schema(self) -> str:
        """``"kafka"``: a Kafka cluster has no postroom schema."""
        return "kafka"

    def lag(self, group: str) -> int:
        """The messages ``group`` has not committed, over all its partitions."""
        return (self.describe_group(group)).lag

    def publish_records(self, records: Any, conn: object = None) -> list[Published]:
        raise NotSupported(IN_TRANSACTION)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None

    def __enter__(self) -> KafkaLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        """Create a Kafka topic (``retention`` becomes its ``retention.ms``); as on PostgreSQL,
        :class:`TopicExists` or, with ``if_not_exists``, False."""
        return self.admin.create_topic(
            name, partitions, retention, max_lag, group_ttl, if_not_exists
        )

    def alter_topic(self, name: str, **changes: Any) -> None:
        raise NotSupported(
            f"alter_topic on kafka:// is not supported: change topic {name!r}'s configuration "
            "with Kafka's tools (kafka-configs --alter --add-config retention.ms=...)"
        )

    def list_topics(self) -> list[TopicInfo]:
        return self.admin.list_topics()

    def describe_topic(self, name: str) -> TopicInfo:
        return self.admin.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topic(name)

    def add_partitions(self, name: str, total: int) -> None:
        self.admin.add_partitions(name, total)

    def apply_retention(self, **options: Any) -> int:
        """0: Kafka's brokers apply each topic's ``retention.ms`` themselves."""
        return 0

    # -- producing --------------------------------------------------------------------------

    def _shared_producer(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = KafkaProducer(self.admin, linger_ms=1)
        return self._producer

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
        """Write one message and wait for the brokers' acknowledgement (``acks=all``)."""
        refuse_conn(conn)
        producer = self._shared_producer()
        sent = producer.send(topic, value, key=key, headers=headers, partition=partition)
        published: Published = sent.result()
        return published

    def publish_batch(
        self,
        topic: str,
        messages: Iterable[Any],
        *,
        conn: object = None,
        timeout: float | None = None,
    ) -> list[Published]:
        """Write many messages; each is acknowledged on its own (Kafka has no all-or-nothing
        batch outside its transactions): a failure raises after the others were sent."""
        refuse_conn(conn)
        producer = self._shared_producer()
        futures = []
        for item in messages:
            record = batch_record(topic, item)
            futures.append(
                producer.send(
                    record.topic,
                    record.value,
                    key=record.key,
                    headers=record_headers(record.headers),
                    partition=record.partition,
                )
            )
        results = []
        for sent in futures:
            published: Published = sent.result()
            results.append(published)
        return results

    def producer(
        self,
        *,
        linger_ms: float = 5,
        batch_size: int | None = None,
        backlog_timeout: float | None = None,
        buffer_messages: int = DEFAULT_BUFFER_MESSAGES,
        buffer_bytes: int | None = None,
        buffer_timeout: float | None = DEFAULT_BUFFER_TIMEOUT,
    ) -> KafkaProducer:
        """A batching producer (librdkafka's: ``linger_ms``, ``buffer_messages``); see
        :class:`AsyncKafkaProducer`. ``backlog_timeout`` is admission control: PostgreSQL
        only."""
        if backlog_timeout is not None:
            raise NotSupported(
                "backlog_timeout (max_lag admission) needs PostgreSQL: Kafka has no backlog limit"
            )
        return KafkaProducer(
            self.admin,
            linger_ms=linger_ms,
            buffer_messages=buffer_messages,
            buffer_timeout=buffer_timeout,
        )

    def publish_event(self, *args: Any, **kwargs: Any) -> Published:
        raise NotSupported(IN_TRANSACTION)

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
    ) -> KafkaConsumer:
        """A member of Kafka consumer group ``group``; see :class:`AsyncKafkaConsumer`."""
        return KafkaConsumer(
            self.admin,
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
        """As on PostgreSQL; ``transactional=True`` is refused when the runner starts."""
        if options.get("transactional"):
            raise NotSupported(
                "subscribe(transactional=True) needs PostgreSQL: on kafka:// handlers run "
                "poll/commit (at least once); deduplicate on message.id"
            )
        return self._subscriptions.decorator(topics, group, options)

    def runner(self) -> Runner:
        """The runner of the ``subscribe`` handlers, as on PostgreSQL."""
        return Runner(cast(Any, self), self._subscriptions.items)  # the same surface

    # -- dead letters -----------------------------------------------------------------------

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
        """Publish ``message`` to its dead-letter topic with the ``postroom-dlq-*`` headers.
        Kafka keeps no claim per group and message: two members that handled the same
        message may both write one (at least once); True."""
        refuse_conn(conn)
        check_name("group", group)
        target = dead_letter_topic(message.topic) if topic is None else check_name("topic", topic)
        own: dict[str, HeaderValue] = {
            HEADER_PREFIX + "topic": message.topic,
            HEADER_PREFIX + "partition": str(message.partition),
            HEADER_PREFIX + "offset": str(message.offset),
            HEADER_PREFIX + "id": message.id,
            HEADER_PREFIX + "group": group,
            HEADER_PREFIX + "attempts": str(attempts),
            HEADER_PREFIX + "error": error,
            **(headers or {}),
        }
        try:
            self.create_topic(target)
        except TopicExists:
            pass
        self.publish(
            target, message.value, key=message.key, headers=fit_headers(message.headers, own)
        )
        return True

    def _read_all(self, topic: str, limit: int) -> list[Message]:
        info = self.describe_topic(topic)
        ends = {TopicPartition(topic, p.partition): p.high_water for p in info.partition_info}
        found: list[Message] = []
        wanted = [tp for tp, end in ends.items() if end > 0]
        if not wanted:
            return found
        deadline = time.monotonic() + self.settings.timeout
        with self.consumer(None, topic, partitions=wanted) as peek:
            reached: set[TopicPartition] = set()
            while len(found) < limit and len(reached) < len(wanted):
                if time.monotonic() > deadline:
                    break
                for message in peek.poll(timeout=0.2, max_messages=limit - len(found)):
                    found.append(message)
                    if message.offset + 1 >= ends[message.topic_partition]:
                        reached.add(message.topic_partition)
        return found

    def list_dead_letters(self, topic: str, *, limit: int = 100) -> list[Message]:
        """Dead letters of ``topic`` (``<topic>.dlq``), oldest first."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidArgument(f"invalid limit {limit!r}: an integer >= 1")
        try:
            found = self._read_all(dead_letter_topic(topic), limit)
        except TopicNotFound:
            self.describe_topic(topic.removesuffix(".dlq"))
            return []
        return sorted(found, key=lambda m: (m.timestamp, m.partition, m.offset))

    def replay_dead_letters(self, topic: str, *, group: str = "postroom-replay") -> int:
        """Publish each dead letter not yet replayed by ``group`` to its source, marked for
        the group that failed (as on PostgreSQL); poll/commit, so a crash mid-replay may
        replay a letter twice."""
        dlq = dead_letter_topic(topic)
        try:
            info = self.describe_topic(dlq)
        except TopicNotFound:
            return 0
        replayed = 0
        parts = [TopicPartition(dlq, p) for p in range(info.partitions)]
        with self.consumer(group, dlq, partitions=parts) as consumer:
            while batch := consumer.poll(timeout=1.0, max_messages=500):
                for message in batch:
                    source = message.headers.get(HEADER_PREFIX + "topic")
                    target = source if isinstance(source, str) else topic.removesuffix(".dlq")
                    try:
                        self.publish(
                            target,
                            message.value,
                            key=message.key,
                            headers=replay_headers(message.headers),
                        )
                    except (TopicNotFound, InvalidArgument) as exc:
                        log.warning("dead letter %s not replayed: %s", message.id, exc)
                        continue
                    replayed += 1
                consumer.commit()
        return replayed

    # -- groups -----------------------------------------------------------------------------

    def list_groups(self) -> list[GroupInfo]:
        return self.admin.list_groups()

    def describe_group(self, group: str) -> GroupInfo:
        """Per partition: committed offset, high-water mark, lag (``lag_seconds`` is 0: Kafka
        does not say how old a backlog is)."""
        return self.admin.describe_group(group)

    def reset_group(
        self,
        group: str,
        topic: str,
        *,
        to: str | int | datetime,
        partition: int | None = None,
    ) -> dict[int, int]:
        """As on PostgreSQL; Kafka refuses it while the group has live members."""
        return self.admin.reset_group(group, topic, to, partition)

    def delete_group(self, group: str) -> None:
        self.admin.delete_group(group)
