"""``postroom bench log --url kafka://...``: the log API on Kafka against raw confluent-kafka
doing the same work in the same run, on the same broker.

1. **raw produce**: a confluent-kafka producer with the settings postroom's Kafka producer uses
   (idempotent, ``acks=all``, ``linger.ms``, ``murmur2_random``) produces ``messages``
   100-byte values, each with a delivery callback that keeps its partition and offset (what
   postroom's ``send()`` future gives), then flushes: the produce reference;
2. **producer**: ``client.producer()``: ``send()`` each value, then ``flush()``.

Each producer first sends one message and waits for its acknowledgement, timed apart as its
start-up; the produce rate counts from there. A new idempotent producer waits for librdkafka's
producer-id timer before its first batch (0.5 or 1.0 s at random on Tansu, the same on both
sides): counted in, it was most of a 100,000-message phase and set the ratio by the draw
(bench/RESULTS.md, 2026-12-04);
3. **raw consume**: a confluent-kafka consumer in a new group reads the raw phase's topic with
   ``consume(poll_max_messages)``, checks each record's ``error()`` and reads what a handler
   reads (``--read``), and commits each batch synchronously: the consume reference;
4. **consumer**: ``client.consumer()`` in a new group, ``poll(max_messages=...)``, reading
   the same of each message, and ``commit()`` per batch, on the same topic.

What each side reads of a message (``--read``) is the same user-visible work on both:
``key-value`` (the default: what a handler reads of nearly every message) or ``all``, the
seven fields a ``Message`` holds (topic, partition, offset, key, value, headers, timestamp;
raw confluent-kafka gives headers as a list or None and the timestamp as a ``(type, ms)``
pair, postroom a dict and a ``datetime``). Neither side reads what the other is not asked
for: the raw consumer's positions are librdkafka's (its ``commit()`` takes them), postroom's
its own (``poll()`` reads each partition's last offset).

Consume rates count from the first message (a group's join is not throughput) to the
consumer's close, on both sides (the close leaves the group: 2-15 ms). The ratio of each
postroom phase to its reference is the API's cost: the issue's bar is >= 0.8.

``--rounds N`` runs the four phases N times on fresh topics, alternating which side of each
pair goes first, each phase after a ``gc.collect()``: both sides meet the same process and
broker conditions. The figures are the medians of the rounds, with each ratio's range (a shared
box moves single runs by +-30%).
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import postroom

from . import _common
from ._common import rate

TARGET_RATIO = 0.8


@dataclass(frozen=True)
class KafkaSettings:
    messages: int = 100_000
    partitions: int = 4
    value_size: int = 100
    linger_ms: float = 5
    poll_max_messages: int = 500
    read: str = "key-value"
    """What each consume loop reads of a message: ``key-value`` or ``all`` (its seven fields)."""


READS = ("key-value", "all")


def _bootstrap(url: str) -> str:
    return url.split("://", 1)[1].split("?", 1)[0].rsplit("@", 1)[-1]


_STARTUPS: dict[str, float] = {}  # each produce phase's start-up: creation to first ack


def _raw_produce(broker: str, topic: str, values: list[bytes], linger_ms: float) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": broker,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 100_000,
        }
    )
    delivered: list[tuple[int, int]] = []

    def report(err: Any, msg: Any) -> None:
        delivered.append((msg.partition(), msg.offset()))

    created = time.perf_counter()
    producer.produce(topic, b"warm-up", on_delivery=report)
    producer.flush(30.0)
    start = time.perf_counter()
    _STARTUPS["raw_produce"] = start - created
    for value in values:
        while True:
            try:
                producer.produce(topic, value, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
    while producer.flush(1.0):
        pass
    return time.perf_counter() - start


def _postroom_produce(client: Any, topic: str, values: list[bytes], linger_ms: float) -> float:
    created = time.perf_counter()
    with client.producer(linger_ms=linger_ms) as producer:
        producer.send(topic, b"warm-up").result()
        start = time.perf_counter()
        _STARTUPS["producer"] = start - created
        for value in values:
            producer.send(topic, value)
        producer.flush()
    return time.perf_counter() - start


def _raw_consume(broker: str, topic: str, count: int, batch: int, read: str) -> float:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": broker,
            "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "max.poll.interval.ms": 10000,
        }
    )
    consumer.subscribe([topic])
    every = read == "all"
    seen, start = 0, None
    deadline = time.monotonic() + 300
    while seen < count and time.monotonic() < deadline:
        records = consumer.consume(batch, 1.0)
        if records:
            start = start or time.perf_counter()
            for record in records:
                if record.error() is None:
                    _ = record.key(), record.value()
                    if every:
                        _ = record.topic(), record.partition(), record.offset()
                        _ = record.headers(), record.timestamp()
                    seen += 1
            consumer.commit(asynchronous=False)
    consumer.close()  # timed, as postroom's consumer's close (leaving its ``with``) is
    return time.perf_counter() - (start or time.perf_counter())


def _postroom_consume(client: Any, topic: str, count: int, batch: int, read: str) -> float:
    group = f"bench-postroom-{uuid.uuid4().hex[:8]}"
    every = read == "all"
    seen, start = 0, None
    deadline = time.monotonic() + 300
    with client.consumer(group, topic, session_timeout=6, max_poll_interval=10) as consumer:
        while seen < count and time.monotonic() < deadline:
            messages = consumer.poll(timeout=1.0, max_messages=batch)
            if messages:
                start = start or time.perf_counter()
                for message in messages:  # what the raw loop reads of each record
                    _ = message.key, message.value
                    if every:
                        _ = message.topic, message.partition, message.offset
                        _ = message.headers, message.timestamp
                seen += len(messages)
                consumer.commit()
    return time.perf_counter() - (start or time.perf_counter())


PHASES = ("raw_produce", "producer", "raw_consume", "consumer")


def _round(
    client: Any, broker: str, settings: KafkaSettings, values: list[bytes], flip: bool
) -> dict[str, float]:
    """One round's four rates. ``flip``: postroom's side of each pair runs first (rounds
    alternate, so neither side always meets a warmer broker or a fuller heap)."""
    suffix = uuid.uuid4().hex[:8]
    raw_topic, api_topic = f"bench-raw-{suffix}", f"bench-postroom-{suffix}"
    client.create_topic(raw_topic, settings.partitions)
    client.create_topic(api_topic, settings.partitions)
    count, batch, linger = settings.messages, settings.poll_max_messages, settings.linger_ms
    read = settings.read
    pairs: list[tuple[tuple[str, Callable[[], float]], tuple[str, Callable[[], float]]]] = [
        (
            ("raw_produce", lambda: _raw_produce(broker, raw_topic, values, linger)),
            ("producer", lambda: _postroom_produce(client, api_topic, values, linger)),
        ),
        (  # both read the raw phase's topic: the same records, each in a new group
            ("raw_consume", lambda: _raw_consume(broker, raw_topic, count, batch, read)),
            ("consumer", lambda: _postroom_consume(client, raw_topic, count, batch, read)),
        ),
    ]
    rates: dict[str, float] = {}
    for pair in pairs:
        for name, phase in reversed(pair) if flip else pair:
            gc.collect()  # each phase starts from the same heap: no garbage of the one before
            rates[name] = rate(count, phase())
            if name in _STARTUPS:
                rates[f"{name}_startup_s"] = _STARTUPS.pop(name)
    for topic in (raw_topic, api_topic):
        client.delete_topic(topic)
    return rates


def run(url: str, settings: KafkaSettings | None = None, rounds: int = 1) -> dict[str, Any]:
    """``rounds`` alternating rounds on ``url``; the figures are the medians, with each
    round's and the range of each ratio."""
    settings = settings or KafkaSettings()
    broker = _bootstrap(url)
    values = [bytes([i % 251]) * settings.value_size for i in range(settings.messages)]
    result: dict[str, Any] = {
        "date": _common.started_at(),
        "load_average": _common.load_average(),
        "messages": settings.messages,
        "partitions": settings.partitions,
        "read": settings.read,
        "rounds": [],
    }
    with postroom.connect(url) as client:
        for index in range(max(1, rounds)):
            figures = _round(client, broker, settings, values, flip=index % 2 == 1)
            figures["produce_ratio"] = figures["producer"] / max(figures["raw_produce"], 1e-9)
            figures["consume_ratio"] = figures["consumer"] / max(figures["raw_consume"], 1e-9)
            result["rounds"].append(figures)
    every = result["rounds"]
    for name in PHASES:
        result[f"{name}_per_s"] = statistics.median(r[name] for r in every)
    for name in ("raw_produce", "producer"):
        result[f"{name}_startup_s"] = statistics.median(r[f"{name}_startup_s"] for r in every)
    for ratio in ("produce_ratio", "consume_ratio"):
        result[ratio] = statistics.median(r[ratio] for r in every)
        result[f"{ratio}_range"] = [min(r[ratio] for r in every), max(r[ratio] for r in every)]
    result["load_average_after"] = _common.load_average()
    return result


def format_report(result: dict[str, Any]) -> str:
    rounds = len(result["rounds"])
    produce_low, produce_high = result["produce_ratio_range"]
    consume_low, consume_high = result["consume_ratio_range"]
    lines = [
        f"postroom bench log on Kafka, {result['date']}, {result['messages']} messages, "
        f"{result['partitions']} partitions, consumers read {result['read']}, {rounds} "
        f"round(s) (medians), load average "
        f"{result['load_average']} -> {result['load_average_after']}",
        f"  raw confluent-kafka produce  {result['raw_produce_per_s']:>12,.0f} msg/s",
        f"  postroom producer            {result['producer_per_s']:>12,.0f} msg/s  "
        f"({result['produce_ratio']:.2f} of raw, {produce_low:.2f}-{produce_high:.2f}; "
        f"target >= {TARGET_RATIO})",
        f"  start-up to the first ack    raw {result['raw_produce_startup_s']:.2f} s, "
        f"postroom {result['producer_startup_s']:.2f} s",
        f"  raw confluent-kafka consume  {result['raw_consume_per_s']:>12,.0f} msg/s",
        f"  postroom consumer            {result['consumer_per_s']:>12,.0f} msg/s  "
        f"({result['consume_ratio']:.2f} of raw, {consume_low:.2f}-{consume_high:.2f}; "
        f"target >= {TARGET_RATIO})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    defaults = KafkaSettings()
    parser = _common.parser(
        "postroom bench log --url kafka://...",
        "Benchmark the log API on Kafka against raw confluent-kafka in the same run.",
    )
    parser.add_argument("--messages", type=int, default=defaults.messages)
    parser.add_argument("--partitions", type=int, default=defaults.partitions)
    parser.add_argument("--linger-ms", type=float, default=defaults.linger_ms)
    parser.add_argument("--poll-max-messages", type=int, default=defaults.poll_max_messages)
    parser.add_argument(
        "--read",
        choices=READS,
        default=defaults.read,
        help="what both consume loops read of each message: its key and value (default) or "
        "all seven fields",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="alternating rounds (figures: their medians)"
    )
    parser.add_argument("--quick", action="store_true", help="a small smoke run (5,000)")
    args = parser.parse_args(argv)
    settings = KafkaSettings(
        messages=5_000 if args.quick else args.messages,
        partitions=args.partitions,
        linger_ms=args.linger_ms,
        poll_max_messages=args.poll_max_messages,
        read=args.read,
    )
    return _common.report(run(args.url, settings, args.rounds), args.json, format_report)


if __name__ == "__main__":
    sys.exit(main())
