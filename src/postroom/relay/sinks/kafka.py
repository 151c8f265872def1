"""Kafka: an idempotent producer with ``acks=all`` (confluent-kafka), keys on the partitions
Kafka's Java client would pick.

librdkafka's default partitioner is ``consistent_random`` (CRC32), not the Java client's
murmur2; so the sink sets each keyed message's partition itself, with postroom's murmur2 and
the sink topic's partition count (``postroom.log.partitioner``). A topic mirrored to Kafka with
the same partition count keeps every key on the same partition number. Unkeyed messages use
librdkafka's ``murmur2_random`` partitioner. The key travels as the Kafka key, the id as the
``postroom-id`` header (and every message header as a Kafka header).

    kafka://127.0.0.1:9092,127.0.0.1:9093?timeout=30&linger_ms=5

The destinations of a batch are all resolved before its first message is produced: a topic
that does not exist yet holds the whole batch back (nothing of it is sent, so nothing is sent
twice), and is retried until it exists, or created by the sink with ``create_topics=true``
(``partitions``, ``replication_factor``: the broker's defaults unless given). A destination
that can never take messages (not a legal Kafka topic name, such as
``outbox.event.Gift Card``, or a topic the broker calls invalid) rejects its messages at once
(:class:`DestinationUnusable`): the relay dead-letters them and the partition goes on. Any
other librdkafka setting: pass ``config={...}``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult

from ...errors import DestinationUnusable, InvalidArgument, MessageRejected, SinkUnavailable
from ...log.partitioner import partition_for_key
from ..routing import Outbound
from . import Sink, flag, no_more, number, require

OPTIONS = ("timeout", "linger_ms", "config", "create_topics", "partitions", "replication_factor")
# Kafka's own rule for topic names (org.apache.kafka.common.internals.Topic).
LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
# Metadata and delivery errors that name the topic itself as wrong: never usable.
_INVALID_TOPIC = 17  # INVALID_TOPIC_EXCEPTION ("Broker: Invalid topic")
_MISSING = (3, -188)  # UNKNOWN_TOPIC_OR_PART, librdkafka's _UNKNOWN_TOPIC


def from_url(url: str, parts: SplitResult, options: dict[str, Any]) -> KafkaSink:
    require("confluent_kafka", "kafka", "confluent-kafka")
    timeout = number(options, "timeout", 30.0, 0.1)
    linger_ms = number(options, "linger_ms", 5.0)
    create_topics = flag(options, "create_topics", False)
    partitions = int(number(options, "partitions", -1, -1))
    replication_factor = int(number(options, "replication_factor", -1, -1))
    config = options.pop("config", None) or {}
    if not isinstance(config, Mapping):
        raise InvalidArgument(f"invalid kafka sink option config={config!r}: a dict")
    no_more("kafka", options, OPTIONS)
    return KafkaSink(
        url,
        parts.netloc,
        timeout=timeout,
        linger_ms=linger_ms,
        config=config,
        create_topics=create_topics,
        partitions=partitions,
        replication_factor=replication_factor,
    )


def kafka_partition(key: bytes | None, partitions: int) -> int:
    """The partition for ``key`` as Kafka's Java client picks it; -1 (librdkafka chooses) for
    a message without a key."""
    if key is None:
        return -1
    return _cached_partition(key if type(key) is bytes else bytes(key), partitions)


@functools.lru_cache(maxsize=1 << 16)
def _cached_partition(key: bytes, partitions: int) -> int:
    # murmur2 in Python was a tenth of a relay's time to Kafka (py-spy); outbox keys (aggregate
    # ids) repeat, and a cache hit costs a dict lookup.
    return partition_for_key(key, partitions)


def illegal_topic(name: str) -> str | None:
    """Why ``name`` can never be a Kafka topic, or None if it can."""
    if LEGAL_TOPIC.fullmatch(name) is None or name in (".", ".."):
        return (
            f"{name!r} is not a legal Kafka topic name (1 to 249 of ASCII letters, digits, "
            "'.', '_', '-'; not '.' or '..')"
        )
    return None


class KafkaSink(Sink):
    """Produce with confluent-kafka; each batch is flushed and every delivery report checked
    before ``send`` returns."""

    scheme = "kafka"
    # Each batch waits for its acknowledgements (acks=all): 2,000 messages a flush instead of
    # 500 waited a quarter as often (bench/RESULTS.md).
    batch_size = 2000

    def __init__(
        self,
        url: str,
        bootstrap: str,
        *,
        timeout: float = 30.0,
        linger_ms: float = 5.0,
        config: Mapping[str, Any] | None = None,
        create_topics: bool = False,
        partitions: int = -1,
        replication_factor: int = -1,
    ) -> None:
        super().__init__(url)
        self.timeout = timeout
        self.create_topics = create_topics
        self.new_topic_partitions = partitions
        self.new_topic_replication = replication_factor
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "partitioner": "murmur2_random",
            "message.timeout.ms": int(timeout * 1000),
            # Delivery reports for failed messages only, to one callback: a report per
            # message cost a closure each at produce and a Python call each, under the GIL,
            # from the flushing thread. After a flush with nothing left, every message
            # without a report was acknowledged.
            "delivery.report.only.error": True,
            "on_delivery": self._on_failure,
            # librdkafka's log lines into Python logging, served by the flushes, not printed
            # to stderr from librdkafka's threads.
            "logger": logging.getLogger("postroom.relay.librdkafka"),
            **(config or {}),
        }
        self._failures: list[tuple[Any, Any]] = []
        self._producer: Any = None
        self._partitions: dict[str, int] = {}
        self._unusable: dict[str, str] = {}  # destination -> why it never can be
        # Ids the broker acknowledged in a send that then failed: the relay sends the same
        # messages again, and these are not produced twice.
        self._acked: set[str] = set()

    async def open(self) -> None:
        kafka = require("confluent_kafka", "kafka", "confluent-kafka")
        if self._producer is None:
            self._producer = kafka.Producer(self.config)
        try:
            metadata = await asyncio.to_thread(
                self._producer.list_topics, None, min(self.timeout, 10)
            )
        except kafka.KafkaException as exc:
            raise SinkUnavailable(f"kafka at {self.description}: {exc}") from exc
        # The answer names every topic: the first batch's destinations need no lookup of
        # their own (a round trip each) when they are among them.
        for name, found in metadata.topics.items():
            if found.error is None and found.partitions:
                self._partitions.setdefault(name, len(found.partitions))

    async def _metadata(self, topic: str) -> Any:
        """The broker's metadata of ``topic`` (None if it has no entry)."""
        kafka = require("confluent_kafka", "kafka", "confluent-kafka")
        try:
            metadata = await asyncio.to_thread(
                self._producer.list_topics, topic, min(self.timeout, 10)
            )
        except kafka.KafkaException as exc:
            raise SinkUnavailable(f"kafka at {self.description}: {exc}") from exc
        return metadata.topics.get(topic)

    async def _resolve(self, topic: str) -> int | str:
        """The partition count of ``topic``, or why it can never be used. Raises
        SinkUnavailable while it is missing (after creating it, with ``create_topics``) or
        the broker cannot say."""
        count = self._partitions.get(topic)
        if count is not None:
            return count
        unusable = self._unusable.get(topic)
        if unusable is not None:
            return unusable
        reason = illegal_topic(topic)
        if reason is None:
            found = await self._metadata(topic)
            code = None if found is None or found.error is None else found.error.code()
            if found is not None and code is None and found.partitions:
                self._partitions[topic] = len(found.partitions)
                return len(found.partitions)
            if code == _INVALID_TOPIC:
                reason = f"kafka at {self.description} refuses topic {topic!r}: {found.error}"
            elif (found is None or code in _MISSING) and self.create_topics:
                await self._create(topic)
                raise SinkUnavailable(
                    f"kafka topic {topic!r} created at {self.description}; not usable yet"
                )
            else:
                why = "no such topic" if found is None or code in _MISSING else found.error
                hint = "create it, or set create_topics=true" if code in _MISSING else "retrying"
                raise SinkUnavailable(
                    f"kafka topic {topic!r} at {self.description} is not usable ({why}): {hint}"
                )
        self._unusable[topic] = reason
        return reason

    async def _create(self, topic: str) -> None:
        kafka = require("confluent_kafka", "kafka", "confluent-kafka")
        admin_module = require("confluent_kafka.admin", "kafka", "confluent-kafka")
        admin = admin_module.AdminClient({"bootstrap.servers": self.config["bootstrap.servers"]})
        new = admin_module.NewTopic(topic, self.new_topic_partitions, self.new_topic_replication)
        future = admin.create_topics([new])[topic]
        try:
            await asyncio.to_thread(future.result, self.timeout)
        except kafka.KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, kafka.KafkaError) else None
            if code == kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                return  # another relay created it meanwhile
            if code in (_INVALID_TOPIC, kafka.KafkaError.POLICY_VIOLATION):
                self._unusable[topic] = (
                    f"kafka at {self.description} refuses topic {topic!r}: {exc}"
                )
                return
            raise SinkUnavailable(f"kafka could not create topic {topic!r}: {exc}") from exc
        except TimeoutError as exc:  # concurrent.futures.TimeoutError is TimeoutError (3.11)
            raise SinkUnavailable(f"kafka did not create topic {topic!r} in time") from exc

    async def send(self, batch: Sequence[Outbound]) -> None:
        if self._producer is None:
            await self.open()
        # Every destination first: a batch that cannot go whole does not start (no message
        # of it is produced, so none is produced twice by the retry). Only a destination that
        # never can be stops it at its first message, after those before it are sent.
        counts: dict[str, int] = {}
        end = len(batch)
        refusal: DestinationUnusable | None = None
        for index, out in enumerate(batch):
            if out.destination in counts:
                continue
            resolved = await self._resolve(out.destination)
            if isinstance(resolved, str):
                refusal = DestinationUnusable(f"{out.id} not sent: {resolved}", index)
                end = index
                break
            counts[out.destination] = resolved
        await self._produce(batch, end, counts)
        self._acked.clear()
        if refusal is not None:
            raise refusal

    def _on_failure(self, err: Any, msg: Any) -> None:
        if err is not None:  # (a report of success, if config asked for them all)
            self._failures.append((err, msg))

    async def _produce(self, batch: Sequence[Outbound], end: int, counts: dict[str, int]) -> None:
        """Produce ``batch[:end]`` and wait until all is acknowledged."""
        kafka = require("confluent_kafka", "kafka", "confluent-kafka")
        acked = self._acked
        self._failures = []
        produce = self._producer.produce
        partition_of = _cached_partition  # kafka_partition() inline: a call a message less
        index = 0
        while index < end:
            out = batch[index]
            if acked and out.source.id in acked:
                index += 1
                continue
            key = out.key
            if key is None:
                partition = -1
            else:
                if type(key) is not bytes:
                    key = bytes(key)
                partition = partition_of(key, counts[out.destination])
            try:
                produce(
                    out.destination,
                    value=out.value,
                    key=key,
                    headers=out.headers,  # a dict: str values go as UTF-8, bytes as they are
                    partition=partition,
                )
            except BufferError:
                # librdkafka's queue is full: let it drain, then go on with the same message.
                await asyncio.to_thread(self._producer.poll, 0.1)
                continue
            except kafka.KafkaException as exc:
                # Refused before sending (too large for message.max.bytes, say): send what
                # came before, then reject this one.
                await self._wait(batch, index)
                raise MessageRejected(f"kafka refused {out.id}: {exc}", index) from exc
            index += 1
        await self._wait(batch, end)

    async def _wait(self, batch: Sequence[Outbound], end: int) -> None:
        """Flush, then check the failures reported for ``batch[:end]``."""
        left = await asyncio.to_thread(self._producer.flush, self.timeout)
        if left:
            # Which of them the broker took is not known: the retry sends them all.
            raise SinkUnavailable(f"kafka at {self.description}: {left} messages not acked in time")
        if self._failures:
            self._check(batch, self._reports(batch, end))

    def _reports(self, batch: Sequence[Outbound], end: int) -> list[Any]:
        """Per message of ``batch[:end]``: True (acknowledged) or its error; None for all when
        a failure cannot be placed (its message carries no id of the batch in a header)."""
        positions = {out.id: index for index, out in enumerate(batch[:end])}
        reports: list[Any] = [True] * end
        for err, msg in self._failures:
            place = None
            for _, value in msg.headers() or ():
                if value is not None:
                    place = positions.get(value.decode("utf-8", "replace"))
                    if place is not None:
                        break
            if place is None:
                return [None] * end
            reports[place] = err
        return reports

    def _keep_acked(self, batch: Sequence[Outbound], reports: list[Any]) -> None:
        self._acked.update(batch[i].source.id for i, report in enumerate(reports) if report is True)

    def _check(self, batch: Sequence[Outbound], reports: list[Any]) -> None:
        kafka = require("confluent_kafka", "kafka", "confluent-kafka")
        # Errors about the message itself; anything else (timeouts, leaders moving, brokers
        # down, authorization) is the sink's state, and the batch is retried.
        refused = {
            kafka.KafkaError.MSG_SIZE_TOO_LARGE,
            kafka.KafkaError.INVALID_RECORD,
            kafka.KafkaError.INVALID_MSG,
            kafka.KafkaError.INVALID_MSG_SIZE,
            kafka.KafkaError.RECORD_LIST_TOO_LARGE,
        }
        for index, err in enumerate(reports):
            if err is True:
                continue
            # What the broker took of this batch is not produced again by the retry.
            self._keep_acked(batch, reports)
            code = None if err is None else err.code()
            if code == _INVALID_TOPIC:
                topic = batch[index].destination
                self._unusable[topic] = f"kafka refuses topic {topic!r}: {err.str()}"
                raise DestinationUnusable(f"kafka refused {batch[index].id}: {err.str()}", index)
            if code in refused:
                raise MessageRejected(f"kafka refused {batch[index].id}: {err.str()}", index)
            if err is not None and err.fatal():
                self._producer = None  # a fatal error ends the idempotent session
            self._partitions.clear()
            raise SinkUnavailable(f"kafka at {self.description}: {err or 'no delivery report'}")

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await asyncio.to_thread(producer.flush, min(self.timeout, 5))
