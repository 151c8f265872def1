"""Per sink, end to end: keyed events published in transactions (some rolled back), two relay
processes in one group, and the sink's own client reads them back: every committed event once
after dedup by id, none of the rolled-back ones, per-key order kept.

Redis and Kafka carry 10,000 events; the other sinks fewer, to keep the suite's time down.
Duplicates (a hand-over may abandon a batch in flight) are allowed: dedup removes them, and
per-key order survives it; test_processes.py checks how few there are.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any

import pytest

import postroom

from ..signals import wait_for
from .helpers import (
    check_delivery,
    decode,
    group_lag,
    publish_keyed,
    start_relay,
    stop_relays,
    unique,
)

pytestmark = pytest.mark.slow


def drain(client: postroom.Client, dsn: str, topic: str, url: str, total: int, *args: str) -> Any:
    """Publish ``total`` events, relay them with two processes (``postroom relay`` with
    ``args``); returns the committed events."""
    client.create_topic(topic, partitions=6)
    committed = publish_keyed(client, dsn, topic, total, keys=97, per_tx=100, rollback_every=9)
    procs = [start_relay(dsn, topic, "--to", url, "--group", "relay.e2e", *args) for _ in range(2)]
    try:
        wait_for(lambda: group_lag(client, "relay.e2e") == 0, timeout=240, interval=0.2)
    finally:
        for err in stop_relays(procs):
            sys.stderr.write(err)  # the relays' logs, shown with a failure
    return committed


def test_redis(client: postroom.Client, dsn: str) -> None:
    redis = pytest.importorskip("redis")
    prefix = unique("pt-e2e") + "."
    r = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        committed = drain(
            client, dsn, "orders", f"redis://127.0.0.1:6379/0?prefix={prefix}", 10_000
        )
        received = [
            (f[b"id"].decode(), decode(f[b"value"])) for _, f in r.xrange(prefix + "orders")
        ]
    finally:
        r.delete(prefix + "orders")
        r.close()
    check_delivery(received, committed)


def test_kafka(client: postroom.Client, dsn: str, broker: str) -> None:
    from .test_kafka import create_topic, read_all

    topic = unique("orders")
    create_topic(broker, topic, 6)
    committed = drain(client, dsn, topic, f"kafka://{broker}", 10_000)
    received = read_all(broker, topic, len(committed))
    pairs = [(dict(m.headers())["postroom-id"].decode(), decode(m.value())) for m in received]
    check_delivery(pairs, committed)  # per partition, so per key: Kafka's order


def test_nats(client: postroom.Client, dsn: str) -> None:
    nats = pytest.importorskip("nats")
    stream = "PT_E2E_" + uuid.uuid4().hex[:8].upper()
    subject = stream.lower()

    async def admin(add: bool) -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        js = nc.jetstream()
        if add:
            await js.add_stream(name=stream, subjects=[subject + ".>"])
        else:
            await js.delete_stream(stream)
        await nc.close()

    async def read(expected: int) -> list[tuple[str, dict[str, int]]]:
        nc = await nats.connect("nats://127.0.0.1:4222")
        js = nc.jetstream()
        sub = await js.pull_subscribe(subject + ".>", stream=stream)
        out: list[tuple[str, dict[str, int]]] = []
        while len(out) < expected:
            for msg in await sub.fetch(500, timeout=5):
                out.append((msg.headers["Nats-Msg-Id"], decode(msg.data)))
                await msg.ack()
        await nc.close()
        return out

    asyncio.run(admin(True))
    try:
        committed = drain(client, dsn, "orders", f"nats://127.0.0.1:4222?prefix={subject}.", 2000)
        received = asyncio.run(read(len(committed)))
    finally:
        asyncio.run(admin(False))
    # JetStream dropped the duplicates itself (Nats-Msg-Id): none left to dedup.
    assert check_delivery(received, committed) == 0


def test_rabbitmq(client: postroom.Client, dsn: str) -> None:
    pytest.importorskip("aio_pika")
    from .test_rabbitmq import URL, _drain, _queue

    name = unique("pt-e2e")
    asyncio.run(_queue("declare", name))
    try:
        committed = drain(client, dsn, "orders", URL, 2000, "--template", name)
        received = asyncio.run(_drain(name))
    finally:
        asyncio.run(_queue("delete", name))
    check_delivery([(i, e) for i, e, _ in received], committed)


def test_webhook(client: postroom.Client, dsn: str) -> None:
    pytest.importorskip("httpx")
    from .webhook_server import Webhook

    hook = Webhook()
    try:
        committed = drain(client, dsn, "orders", hook.url + "?batch=true", 2000)
        received = [(m["id"], m["payload"]) for m in hook.messages()]
    finally:
        hook.close()
    check_delivery(received, committed)
