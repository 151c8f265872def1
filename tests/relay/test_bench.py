"""The relay benchmark runs end to end and counts right (never a timing assertion)."""

from __future__ import annotations

from typing import Any

import pytest

from postroom.benchmarks import relay as relay_bench

pytest.importorskip("redis")


@pytest.mark.slow
def test_tiny_relay_benchmark_reports_every_figure(dsn: str, broker: str) -> None:
    settings = relay_bench.Settings(
        messages=500, kafka=broker, latency_rate=50, latency_seconds=0.5, batch_size=100
    )
    result = relay_bench.run(dsn, settings)
    for phase in ("redis_raw", "redis_relay", "kafka_raw", "kafka_relay"):
        assert result[phase]["messages"] == 500, phase
        assert result[phase]["rate"] > 0, phase
    assert result["redis_relay"]["raw_ratio"] > 0
    latency = result["latency"]
    assert latency["received"] == latency["sent"] == 25
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert result["kafka_relay"]["steady_rate"] > 0
    assert result["kafka_relay"]["raw_ratio"] > 0
    raw = result["kafka_raw"]  # its own process, timed from its start as the relay's is
    assert 0 < raw["startup_seconds"] < raw["seconds"]
    assert raw["steady_rate"] > raw["rate"] > 0
    kafka_latency = result["kafka_latency"]
    for side in ("raw", "relay"):
        assert kafka_latency[side]["received"] == kafka_latency[side]["sent"] == 25, side
        assert 0 < kafka_latency[side]["p50_ms"] <= kafka_latency[side]["p99_ms"]
    assert set(result["targets"]) == {
        "redis_vs_raw",
        "kafka_vs_raw",
        "latency_p99",
        "kafka_latency_p99_vs_raw",
    }


def test_the_raw_producer_process_sends_what_the_relay_sends(broker: str) -> None:
    """The raw reference of the Kafka phase (a process of its own): every record
    acknowledged, each key on the partition the relay's Kafka sink gives it."""
    import confluent_kafka

    import postroom
    from postroom.benchmarks.relay_kafka import CONSUMER, create_kafka_topic, measure_kafka_raw

    from .helpers import unique

    topic = unique("raw")
    create_kafka_topic(broker, topic, 4)
    figures = measure_kafka_raw(broker, topic, 200, 10, 7)
    assert figures["messages"] == 200
    assert 0 < figures["startup_seconds"] < figures["seconds"]
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker, "group.id": unique("check"), **CONSUMER}
    )
    # assign(), not subscribe(): Tansu's group join took 21 of the test's 24 s.
    beginning = confluent_kafka.OFFSET_BEGINNING
    consumer.assign([confluent_kafka.TopicPartition(topic, p, beginning) for p in range(4)])
    received: list[Any] = []
    try:
        for _ in range(300):  # each consume() waits for messages: no sleep
            received += [m for m in consumer.consume(200, timeout=0.2) if m.error() is None]
            if len(received) >= 200:
                break
    finally:
        consumer.close()
    assert len(received) == 200
    for message in received:
        key = message.key()
        assert message.partition() == postroom.partition_for_key(key, 4), key
        assert message.value() == b"x" * 10
        assert dict(message.headers())["postroom-id"].startswith(b"raw/")
