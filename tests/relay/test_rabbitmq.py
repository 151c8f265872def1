"""The RabbitMQ sink against the broker on 127.0.0.1:5672 (a queue per test)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import postroom
from postroom import Backoff
from postroom.relay import Route

from ..signals import wait_for
from .helpers import check_delivery, decode, publish_keyed, running_relay, unique

aio_pika = pytest.importorskip("aio_pika")
URL = "amqp://guest:guest@127.0.0.1:5672/"
FAST = Backoff(base=0.01, factor=2, max_delay=0.2)


async def _queue(action: str, name: str) -> int:
    connection = await aio_pika.connect(URL)
    try:
        channel = await connection.channel()
        if action == "declare":
            queue = await channel.declare_queue(name, durable=False, auto_delete=False)
            return int(queue.declaration_result.message_count or 0)
        await channel.queue_delete(name)
        return 0
    finally:
        await connection.close()


async def _drain(name: str) -> list[tuple[str, dict[str, int], Any]]:
    connection = await aio_pika.connect(URL)
    out: list[tuple[str, dict[str, int], Any]] = []
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(name, durable=False, auto_delete=False)
        while True:
            message = await queue.get(fail=False, no_ack=True)
            if message is None:
                return out
            out.append((message.message_id, decode(message.body), message))
    finally:
        await connection.close()


@pytest.fixture
def queue_name() -> Iterator[str]:
    name = unique("pt-relay")
    asyncio.run(_queue("declare", name))
    yield name
    asyncio.run(_queue("delete", name))


def test_publishes_with_confirms_in_order(
    client: postroom.Client, dsn: str, queue_name: str
) -> None:
    client.create_topic("orders", partitions=3)
    committed = publish_keyed(client, dsn, "orders", 300, keys=6, rollback_every=5)
    with running_relay(client, "orders", URL, route=Route(template=queue_name)):
        wait_for(lambda: asyncio.run(_queue("declare", queue_name)) >= len(committed))
    received = asyncio.run(_drain(queue_name))
    assert check_delivery([(i, e) for i, e, _ in received], committed) == 0
    _, _, first = received[0]
    assert first.headers["postroom-key"].startswith("k")
    assert first.headers["postroom-id"] == first.message_id
    assert first.delivery_mode == aio_pika.DeliveryMode.PERSISTENT


def test_unroutable_messages_are_retried_until_a_queue_exists(client: postroom.Client) -> None:
    client.create_topic("t")
    client.publish("t", {"seq": 0, "key": 0})
    name = unique("pt-relay-late")
    try:
        with running_relay(client, "t", URL, route=Route(template=name), backoff=FAST) as relay:
            wait_for(lambda: relay.counters.sink_failures >= 2)
            assert "unroutable" in str(relay.counters.last_error)
            asyncio.run(_queue("declare", name))
            wait_for(lambda: asyncio.run(_queue("declare", name)) == 1)
        assert [e for _, e, _ in asyncio.run(_drain(name))] == [{"seq": 0, "key": 0}]
    finally:
        asyncio.run(_queue("delete", name))


def test_password_is_not_shown(client: postroom.Client) -> None:
    client.create_topic("t")
    relay = client.relay("t", "amqp://guest:hunter2@127.0.0.1:5672/")
    assert "hunter2" not in repr(vars(relay))


def test_a_routing_key_too_long_is_dead_lettered_and_its_partition_goes_on(
    client: postroom.Client, queue_name: str
) -> None:
    client.create_topic("t")
    client.publish("t", {"seq": 0, "key": 0}, key=queue_name)
    client.publish("t", {"seq": 1, "key": 1}, key="q" * 300)  # AMQP allows 255 bytes
    client.publish("t", {"seq": 2, "key": 0}, key=queue_name)
    route = Route(template="{key}")
    with running_relay(client, "t", URL, route=route, backoff=FAST) as relay:
        wait_for(lambda: relay.counters.delivered == 2 and relay.counters.dead_lettered == 1)
    assert [e["seq"] for _, e, _ in asyncio.run(_drain(queue_name))] == [0, 2]
    [letter] = client.list_dead_letters("t")
    assert letter.headers["postroom-dlq-attempts"] == "1"
    assert "AMQP allows 255" in str(letter.headers["postroom-dlq-error"])
