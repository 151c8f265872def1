"""Kafka: an idempotent producer with ``acks=all`` (confluent-kafka), keys on the partitions
Kafka's Java client would pick.

librdkafka's default partitioner is ``consistent_random`` (CRC32), not the Java client's
murmur2; so the sink sets each keyed message's partition itself, with postroom's murmur2 and
the sink topic's partition count (``postroom.log.partitioner``). A topic mirrored to Kafka with
the same partition count keeps every key on the same partition number. Unkeyed messages use
librdkafka's ``murmur2_random`` partitioner. The key travels as the Kafka key, the id as the
``postroom-id`` header (and every message header as a Kafka header).

    kafka://127.0.0.1:9092,127.0.0.1:9093?timeout=30&linger_ms=5

The destination topic must exist in Kafka (or the broker must auto-create topics): until it
does, the batch is retried. Any other librdkafka setting: pass ``config={...}``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult

from ...errors import InvalidArgument, MessageRejected, SinkUnavailable
from ...log.partitioner import partition_for_key
from ..routing import Outbound
from . import Sink, no_more, number, require

OPTIONS = ("timeout", "linger_ms", "config")


def from_url(url: str, parts: SplitResult, options: dict[str, Any]) -> KafkaSink:
    require("confluent_kafka", "kafka", "confluent-kafka")
    timeout = number(options, "timeout", 30.0, 0.1)
    linger_ms = number(options, "linger_ms", 5.0)
    config = options.pop("config", None) or {}
    if not isinstance(config, Mapping):
        raise InvalidArgument(f"invalid kafka sink option config={config!r}: a dict")
    no_more("kafka", options, OPTIONS)
    return KafkaSink(url, parts.netloc, timeout=timeout, linger_ms=linger_ms, config=config)


def kafka_partition(key: bytes | None, partitions: int) -> int:
    """The partition for ``key`` as Kafka's Java client picks it; -1 (librdkafka chooses) for
    a message without a key."""
    return -1 if key is None else _cached_partition(bytes(key), partitions)


@functools.lru_cache(maxsize=1 << 16)
def _cached_partition(key: bytes, partitions: int) -> int:
    # murmur2 in Python was a tenth of a relay's time to Kafka (py-spy); outbox keys (aggregate
    # ids) repeat, and a cache hit costs a dict lookup.
    return partition_for_key(key, partitions)


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
    ) -> None:
        super().__init__(url)
        self.timeout = timeout
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "partitioner": "murmur2_random",
            "message.timeout.ms": int(timeout * 1000),
            **(config or {}),
        }
        self._producer: Any = None
        self._partitions: dict[str, int] = {}

    async def open(self) -> None:
        kafka = require("confluent_kafka", "kafka", "confluent-kafka")
        if self._producer is None:
            self._producer = kafka.Producer(self.config)
        try:
            await asyncio.to_thread(self._producer.list_topics, None, min(self.timeout, 10))
        except kafka.KafkaException as exc:
            raise SinkUnavailable(f"kafka at {self.description}: {exc}") from exc

    async def _partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is not None:
            return count
        kafka = require("confluent_kafka", "kafka", "confluent-kafka")
        try:
            metadata = await asyncio.to_thread(
                self._producer.list_topics, topic, min(self.timeout, 10)
            )
        except kafka.KafkaException as exc:
            raise SinkUnavailable(f"kafka at {self.description}: {exc}") from exc
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            reason = "no such topic" if found is None or found.error is None else found.error
            raise SinkUnavailable(
                f"kafka topic {topic!r} at {self.description} is not usable ({reason}): create it"
            )
        self._partitions[topic] = len(found.partitions)
        return len(found.partitions)

    async def send(self, batch: Sequence[Outbound]) -> None:
        if self._producer is None:
            await self.open()
        reports: list[Any] = [None] * len(batch)

        def report(index: int) -> Any:
            def on_delivery(err: Any, msg: Any) -> None:
                reports[index] = err or True

            return on_delivery

        counts: dict[str, int] = {}
        produce = self._producer.produce
        for index, out in enumerate(batch):
            partitions = counts.get(out.destination)
            if partitions is None:
                partitions = counts[out.destination] = await self._partition_count(out.destination)
            try:
                produce(
                    out.destination,
                    value=out.value,
                    key=out.key,
                    headers=out.headers,  # a dict: str values go as UTF-8, bytes as they are
                    partition=kafka_partition(out.key, partitions),
                    on_delivery=report(index),
                )
            except BufferError:
                await asyncio.to_thread(self._producer.flush, self.timeout)
                raise SinkUnavailable(f"kafka at {self.description}: local queue full") from None
        left = await asyncio.to_thread(self._producer.flush, self.timeout)
        if left:
            raise SinkUnavailable(f"kafka at {self.description}: {left} messages not acked in time")
        self._check(batch, reports)

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
            if err is not None and err.code() in refused:
                raise MessageRejected(f"kafka refused {batch[index].id}: {err.str()}", index)
            if err is not None and err.fatal():
                self._producer = None  # a fatal error ends the idempotent session
            self._partitions.clear()
            raise SinkUnavailable(f"kafka at {self.description}: {err or 'no delivery report'}")

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await asyncio.to_thread(producer.flush, min(self.timeout, 5))
