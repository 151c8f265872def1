"""The HTTP webhook sink against a real HTTP server started by the test: signatures, batches,
5xx retried in order, 4xx dead-lettered."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from typing import Any

import pytest

import postroom
from postroom import Backoff

from ..signals import wait_for
from .helpers import check_delivery, publish_keyed, running_relay
from .webhook_server import Webhook

pytest.importorskip("httpx")
FAST = Backoff(base=0.01, factor=2, max_delay=0.2)


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    server = Webhook()
    yield server
    server.close()


def delivered(webhook: Webhook) -> list[tuple[str, dict[str, int]]]:
    return [(m["id"], m["payload"]) for m in webhook.messages()]


def test_per_message_posts_are_signed_and_carry_the_id(
    client: postroom.Client, dsn: str, webhook: Webhook
) -> None:
    client.create_topic("orders", partitions=3)
    committed = publish_keyed(client, dsn, "orders", 60, keys=5, rollback_every=4)
    with running_relay(client, "orders", webhook.url, secret="s3cret"):
        wait_for(lambda: len(webhook.messages()) >= len(committed))
    assert check_delivery(delivered(webhook), committed) == 0
    headers, body = webhook.received[0]
    assert headers["Postroom-Id"] == body["id"]
    assert body["destination"] == "orders"
    assert body["key"].startswith("k")
    assert body["headers"]["postroom-id"] == body["id"]
    stamp, mac = headers["Postroom-Signature"].split(",")
    expected = hmac.new(
        b"s3cret", f"{stamp[2:]}.{headers['raw-body']}".encode(), hashlib.sha256
    ).hexdigest()
    assert mac == f"v1={expected}"


def test_batch_mode_posts_arrays(client: postroom.Client, dsn: str, webhook: Webhook) -> None:
    client.create_topic("orders", partitions=2)
    committed = publish_keyed(client, dsn, "orders", 100, keys=3)
    with running_relay(client, "orders", webhook.url + "?batch=true", batch_size=25):
        wait_for(lambda: len(webhook.messages()) >= len(committed))
    assert check_delivery(delivered(webhook), committed) == 0
    assert all(isinstance(body, list) for _, body in webhook.received)
    assert webhook.requests < len(committed)


def test_503_is_retried_in_order_until_the_hook_recovers(
    client: postroom.Client, dsn: str, webhook: Webhook
) -> None:
    client.create_topic("orders", partitions=2)
    committed = publish_keyed(client, dsn, "orders", 200, keys=4)
    down = {"on": True}
    webhook.respond = lambda body: 503 if down["on"] else 200
    with running_relay(client, "orders", webhook.url, backoff=FAST, batch_size=30) as relay:
        wait_for(lambda: relay.counters.sink_failures >= 5)
        assert webhook.messages() == []
        assert client.describe_group("relay.http").lag == len(committed)
        down["on"] = False
        wait_for(lambda: len(webhook.messages()) >= len(committed))
    assert check_delivery(delivered(webhook), committed) == 0
    assert relay.counters.dead_lettered == 0


def test_4xx_is_dead_lettered_after_max_attempts_and_the_partition_goes_on(
    client: postroom.Client, webhook: Webhook
) -> None:
    client.create_topic("orders")
    client.publish_batch("orders", [{"value": {"seq": i, "key": 0}} for i in range(10)])

    def respond(body: Any) -> int:
        return 422 if body["payload"]["seq"] == 4 else 200

    webhook.respond = respond
    with running_relay(client, "orders", webhook.url, backoff=FAST, max_attempts=3) as relay:
        wait_for(lambda: len(webhook.messages()) == 9)
        wait_for(lambda: client.describe_group("relay.http").lag == 0)
    assert [m["payload"]["seq"] for m in webhook.messages()] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert webhook.requests == 9 + 3  # the poison message was tried three times
    assert relay.counters.dead_lettered == 1
    with client.consumer("check", "orders.dlq") as consumer:
        [dead] = consumer.poll(timeout=5)
    assert dead.json() == {"seq": 4, "key": 0}
    assert dead.headers["postroom-dlq-id"] == "orders/0/4"
    assert dead.headers["postroom-dlq-attempts"] == "3"
    assert "HTTP 422" in str(dead.headers["postroom-dlq-error"])


def test_an_unreachable_hook_at_start_is_retried_without_crashing(
    client: postroom.Client,
) -> None:
    client.create_topic("orders")
    client.publish("orders", {"seq": 0, "key": 0})
    hook = Webhook()
    url = hook.url
    hook.close()  # nothing listens on that port now
    with running_relay(client, "orders", url, backoff=FAST) as relay:
        wait_for(lambda: relay.counters.sink_failures >= 3)
        assert "ConnectError" in str(relay.counters.last_error)
    assert client.describe_group("relay.http").lag == 1
