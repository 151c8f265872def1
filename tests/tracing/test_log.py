"""Traces of the log: ``send <topic>`` around publishes and sends, its context in the message's
headers, ``receive <topic>`` for a poll and ``process <topic>`` around a handler, linked to
(and, for a handler, children of) the send (docs/observability.md, "Tracing")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

import postroom
from postroom import _tracing

from ..signals import wait_for
from .helpers import Spans, child_of, linked_to, traceparent


def poll_all(consumer: Any, count: int) -> list[postroom.Message]:
    messages: list[postroom.Message] = []
    for _ in range(50):
        messages += consumer.poll(timeout=0.5)
        if len(messages) >= count:
            break
    return messages


def check_send(span: Any, topic: str) -> None:
    assert span.kind is SpanKind.PRODUCER
    assert span.attributes["messaging.system"] == "postroom"
    assert span.attributes["messaging.destination.name"] == topic
    assert span.attributes["messaging.operation.type"] == "send"


def test_publish_carries_its_send_span_to_a_group_consumers_receive_span(
    client: postroom.Client, spans: Spans
) -> None:
    client.create_topic("orders", partitions=2)
    published = client.publish("orders", b"one", key="k", headers={"app": "x"})
    send = spans.one("send orders")
    check_send(send, "orders")
    assert send.attributes["messaging.destination.partition.id"] == str(published.partition)
    assert send.attributes["messaging.postroom.offset"] == published.offset
    with client.consumer("billing", "orders") as consumer:
        (message,) = poll_all(consumer, 1)
    assert message.headers["traceparent"] == traceparent(send)
    assert message.headers["app"] == "x"
    receive = spans.one("receive orders")
    assert receive.kind is SpanKind.CONSUMER
    assert linked_to(receive, send)
    assert receive.attributes["messaging.consumer.group.name"] == "billing"
    assert receive.attributes["messaging.operation.type"] == "receive"


def test_a_publish_inside_a_span_is_its_child(client: postroom.Client, spans: Spans) -> None:
    client.create_topic("orders")
    tracer = trace.get_tracer("app", tracer_provider=_tracing.PROVIDER)
    with tracer.start_as_current_span("checkout") as checkout:
        client.publish("orders", b"one")
    assert child_of(spans.one("send orders"), checkout)


def test_publish_batch_and_the_producer_carry_the_context(
    client: postroom.Client, spans: Spans
) -> None:
    client.create_topic("t")
    client.publish_batch("t", [b"a", {"value": b"b", "headers": {"h": "1"}}])
    batch = spans.one("send t")
    assert batch.attributes["messaging.batch.message_count"] == 2
    with client.producer() as producer:
        producer.send("t", b"c").result()
    sends = spans.named("send t")
    assert len(sends) == 2
    sent = next(s for s in sends if s is not batch)
    check_send(sent, "t")
    with client.consumer(None, "t") as consumer:
        messages = poll_all(consumer, 3)
    assert [m.headers["traceparent"] for m in messages] == [
        traceparent(batch),
        traceparent(batch),
        traceparent(sent),
    ]
    assert messages[1].headers["h"] == "1"


def test_a_failed_publish_is_an_error_span(client: postroom.Client, spans: Spans) -> None:
    with pytest.raises(postroom.errors.PostroomError):
        client.publish("no-such-topic", b"x")
    span = spans.one("send no-such-topic")
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]


@contextmanager
def running(client: postroom.Client) -> Iterator[postroom.Runner]:
    runner = client.runner()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            runner.run(handle_signals=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    try:
        yield runner
    finally:
        runner.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert not errors, errors


@pytest.mark.parametrize("transactional", [False, True])
def test_the_runner_processes_each_message_in_a_child_span_linked_to_its_send(
    client: postroom.Client, spans: Spans, transactional: bool
) -> None:
    client.create_topic("orders")
    current: list[Any] = []
    done = threading.Event()

    def handle(message: postroom.Message) -> None:
        current.append(trace.get_current_span())
        done.set()
        if message.value == b"poison":
            raise ValueError("poison")

    subscribe = client.subscribe("orders", group="billing", max_attempts=1, transactional=True)
    if transactional:

        @subscribe
        def handle_in_transaction(message: postroom.Message, conn: Any) -> None:
            handle(message)

    else:
        client.subscribe("orders", group="billing", max_attempts=1)(handle)

    published = client.publish("orders", b"one")
    with running(client) as runner:
        assert done.wait(30)
        done.clear()
        client.publish("orders", b"poison")
        assert done.wait(30)
        wait_for(lambda: runner.dead_lettered >= 1)
    send_one, send_poison = spans.named("send orders")
    first, second = sorted(spans.named("process orders"), key=lambda s: s.start_time)
    assert first.kind is SpanKind.CONSUMER
    assert child_of(first, send_one) and linked_to(first, send_one)
    assert child_of(second, send_poison) and linked_to(second, send_poison)
    assert current[0].get_span_context().span_id == first.get_span_context().span_id
    assert first.attributes["messaging.consumer.group.name"] == "billing"
    assert first.attributes["messaging.destination.partition.id"] == str(published.partition)
    assert first.attributes["messaging.postroom.offset"] == published.offset
    assert first.attributes["messaging.message.id"] == f"orders/0/{published.offset}"
    assert first.attributes["messaging.operation.type"] == "process"
    assert first.status.status_code is StatusCode.UNSET
    assert second.status.status_code is StatusCode.ERROR
    assert "poison" in (second.status.description or "")


def test_an_async_client_and_its_batch_runner(dsn: str, spans: Spans) -> None:
    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            await client.create_topic("t")
            done = asyncio.Event()

            @client.subscribe("t", group="g", batch=True)
            async def handle(messages: list[postroom.Message]) -> None:
                done.set()

            async with client.producer() as producer:
                await (await producer.send("t", b"a"))
            await client.publish("t", b"b")
            runner = client.runner()
            task = asyncio.create_task(runner.run(handle_signals=False))
            await asyncio.wait_for(done.wait(), 30)
            runner.stop()
            await asyncio.wait_for(task, 30)

    asyncio.run(main())
    sends = spans.named("send t")
    assert len(sends) == 2
    processes = spans.named("process t")
    # A batch has no one parent: its span links to each message's send (one batch of two, or
    # two of one, as the polls fall).
    assert all(p.parent is None and p.kind is SpanKind.CONSUMER for p in processes)
    assert all(any(linked_to(p, send) for p in processes) for send in sends)
    assert sum(len(p.links) for p in processes) == 2


def test_without_an_sdk_nothing_is_written(client: postroom.Client) -> None:
    # The API alone (no tracer provider set): no span, so no traceparent header, and the plain
    # send path stays plain.
    client.create_topic("t")
    client.publish("t", b"a")
    with client.producer() as producer:
        producer.send("t", b"b").result()
    with client.consumer(None, "t") as consumer:
        messages = poll_all(consumer, 2)
    assert [m.headers for m in messages] == [{}, {}]
