"""The NATS JetStream sink against the server on 127.0.0.1:4222 (a stream per test)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import postroom
from postroom import Backoff
from postroom.errors import SinkUnavailable

from ..signals import wait_for
from .helpers import check_delivery, decode, publish_keyed, running_relay, unique

nats = pytest.importorskip("nats")

from postroom.relay.sinks.nats import NatsSink  # noqa: E402 (needs nats-py)

SERVER = "nats://127.0.0.1:4222"
FAST = Backoff(base=0.01, factor=2, max_delay=0.2)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _admin(action: str, stream: str, subjects: list[str] | None = None) -> None:
    nc = await nats.connect(SERVER)
    try:
        js = nc.jetstream()
        if action == "add":
            await js.add_stream(name=stream, subjects=subjects)
        else:
            await js.delete_stream(stream)
    finally:
        await nc.close()


async def _read(stream: str) -> list[tuple[str, dict[str, int], dict[str, str]]]:
    nc = await nats.connect(SERVER)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        out: list[tuple[str, dict[str, int], dict[str, str]]] = []
        if info.state.messages == 0:
            return out
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            headers = dict(msg.headers or {})
            out.append((headers["Nats-Msg-Id"], decode(msg.data), headers))
        return out
    finally:
        await nc.close()


async def _count(stream: str) -> int:
    nc = await nats.connect(SERVER)
    try:
        info = await nc.jetstream().stream_info(stream)
        return int(info.state.messages)
    finally:
        await nc.close()


@pytest.fixture
def stream() -> Iterator[tuple[str, str]]:
    """A JetStream stream of this test's own (name, subject prefix), deleted after."""
    name = unique("PT_RELAY").replace("-", "_")
    prefix = name.lower() + "."
    _run(_admin("add", name, [prefix + ">"]))
    yield name, prefix
    _run(_admin("delete", name))


def test_publishes_with_ack_and_msg_id(
    client: postroom.Client, dsn: str, stream: tuple[str, str]
) -> None:
    name, prefix = stream
    client.create_topic("orders", partitions=3)
    committed = publish_keyed(client, dsn, "orders", 300, keys=6, rollback_every=5)
    with running_relay(client, "orders", f"{SERVER}?prefix={prefix}"):
        wait_for(lambda: _run(_count(name)) >= len(committed))
    received = _run(_read(name))
    assert check_delivery([(i, e) for i, e, _ in received], committed) == 0
    _, _, headers = received[0]
    assert headers["Postroom-Key"].startswith("k")
    assert headers["postroom-id"] == headers["Nats-Msg-Id"]


def test_server_side_dedup_drops_a_redelivered_batch(
    client: postroom.Client, stream: tuple[str, str]
) -> None:
    name, prefix = stream
    client.create_topic("t")
    client.publish_batch("t", [{"value": {"seq": i, "key": 0}} for i in range(5)])
    url = f"{SERVER}?prefix={prefix}"
    with running_relay(client, "t", url):
        wait_for(lambda: _run(_count(name)) == 5)
    # Move the group back, as a relay that died before its commit would leave it.
    client.reset_group("relay.nats", "t", to="earliest")
    with running_relay(client, "t", url):
        wait_for(lambda: client.describe_group("relay.nats").lag == 0)
    assert [e["seq"] for _, e, _ in _run(_read(name))] == [0, 1, 2, 3, 4]


def test_a_subject_without_stream_is_retried_not_lost(client: postroom.Client) -> None:
    client.create_topic("t")
    client.publish("t", {"seq": 0, "key": 0})
    prefix = unique("nostream") + "."
    with running_relay(client, "t", f"{SERVER}?prefix={prefix}&timeout=0.5", backoff=FAST) as r:
        wait_for(lambda: r.counters.sink_failures >= 2)
        assert "no JetStream stream" in str(r.counters.last_error)
    assert client.describe_group("relay.nats").lag == 1


def test_an_illegal_subject_is_dead_lettered_and_its_partition_goes_on(
    client: postroom.Client, stream: tuple[str, str]
) -> None:
    from postroom.relay import Route

    name, prefix = stream
    client.create_topic("t")
    client.publish("t", {"seq": 0, "key": 0}, key="ok")
    client.publish("t", {"seq": 1, "key": 1}, key="gift card")  # a space: not a subject
    client.publish("t", {"seq": 2, "key": 0}, key="ok")
    sink = f"{SERVER}?prefix={prefix}"
    with running_relay(client, "t", sink, route=Route(template="{key}"), backoff=FAST) as relay:
        wait_for(lambda: relay.counters.delivered == 2 and relay.counters.dead_lettered == 1)
    assert [e["seq"] for _, e, _ in _run(_read(name))] == [0, 2]
    [letter] = client.list_dead_letters("t")
    assert letter.headers["postroom-dlq-attempts"] == "1"
    assert "not a legal NATS subject" in str(letter.headers["postroom-dlq-error"])


def test_an_unreachable_nats_server_is_reported_in_one_line_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = NatsSink("nats://127.0.0.1:1", timeout=0.5)  # nothing listens on port 1
    caplog.set_level("DEBUG")
    with pytest.raises(SinkUnavailable) as raised:
        asyncio.run(asyncio.wait_for(sink.open(), 30))  # it never returned before
    assert "ConnectionRefusedError" in str(raised.value)
    assert "\n" not in str(raised.value)
    assert [r for r in caplog.records if r.exc_info] == []  # nats-py's default logs a traceback
