"""Traces of the outbox: ``publish_event`` -> the relay's ``send <destination>`` span (a child
of the event's send, linked to it) -> the sink's message, whose headers carry the relay span's
trace context (docs/observability.md, "Tracing"). Against the Redis and NATS servers of the
machine."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

import postroom
from postroom import Route

from ..relay.helpers import running_relay, unique
from ..signals import wait_for
from .helpers import Spans, check_relayed

redis = pytest.importorskip("redis")
nats = pytest.importorskip("nats")
REDIS = "redis://127.0.0.1:6379/0"
NATS = "nats://127.0.0.1:4222"


@pytest.fixture
def prefix() -> Iterator[str]:
    """A Redis key prefix of this test's own; its streams are deleted after."""
    prefix = unique("pt-trace") + "."
    yield prefix
    r = redis.Redis.from_url(REDIS)
    for key in r.scan_iter(match=prefix + "*"):
        r.delete(key)
    r.close()


def redis_headers(stream: str) -> list[dict[str, str]]:
    r = redis.Redis.from_url(REDIS)
    try:
        return [json.loads(fields[b"headers"]) for _, fields in r.xrange(stream)]
    finally:
        r.close()


@pytest.mark.parametrize("debezium", [False, True])
def test_outbox_relay_redis_is_one_trace(
    client: postroom.Client, spans: Spans, prefix: str, debezium: bool
) -> None:
    client.create_topic("outbox")
    client.publish_event(None, "order", 42, "OrderCreated", {"total": 10})
    (event,) = [s for s in spans.named("send outbox") if "postroom.relay.sink" not in s.attributes]
    destination = "outbox.event.order" if debezium else "outbox"
    options: dict[str, Any] = {"route": Route("debezium")} if debezium else {}
    with running_relay(client, "outbox", f"{REDIS}?prefix={prefix}", **options):
        wait_for(lambda: len(redis_headers(prefix + destination)) == 1)
        wait_for(lambda: len(spans.named(f"send {destination}")) == 1 + (not debezium))
    (headers,) = redis_headers(prefix + destination)
    check_relayed(spans, event, destination, headers)


def test_outbox_relay_nats_is_one_trace(client: postroom.Client, spans: Spans) -> None:
    stream, subject = unique("PTTRACE"), unique("pttrace")
    asyncio.run(_nats("add", stream, [f"{subject}.>"]))
    try:
        client.create_topic("outbox")
        client.publish_event(None, "order", 42, "OrderCreated", {"total": 10})
        (event,) = spans.named("send outbox")
        destination = f"{subject}.order"
        route = Route(template=f"{subject}.{{aggregate_type}}")
        with running_relay(client, "outbox", NATS, route=route):
            wait_for(lambda: len(asyncio.run(_nats_headers(stream))) == 1)
            wait_for(lambda: len(spans.named(f"send {destination}")) == 1)
        (headers,) = asyncio.run(_nats_headers(stream))
        check_relayed(spans, event, destination, headers)
    finally:
        asyncio.run(_nats("delete", stream))


async def _nats(action: str, stream: str, subjects: list[str] | None = None) -> None:
    nc = await nats.connect(NATS)
    try:
        js = nc.jetstream()
        if action == "add":
            await js.add_stream(name=stream, subjects=subjects)
        else:
            await js.delete_stream(stream)
    finally:
        await nc.close()


async def _nats_headers(stream: str) -> list[dict[str, str]]:
    nc = await nats.connect(NATS)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        if info.state.messages == 0:
            return []
        return [
            dict((await js.get_msg(stream, seq)).headers or {})
            for seq in range(info.state.first_seq, info.state.last_seq + 1)
        ]
    finally:
        await nc.close()
