"""Routing (sans-IO) and the outbox write: the postroom profile, templates, and the debezium
profile against the output of Debezium's outbox event router with its default settings."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import psycopg
import pytest

import postroom
from postroom.errors import InvalidArgument, MessageRejected
from postroom.log.records import Message, build_message
from postroom.relay import Route
from postroom.relay.routing import event_record

# The example of Debezium's documentation (outbox-event-router.adoc): the outbox row and the
# Kafka record the router makes of it with its defaults.
DOC_EVENT_ID = "406c07f3-26f0-4eea-a50c-109940064b8f"
DOC_PAYLOAD = {
    "id": 1,
    "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2}],
    "customerId": 123,
}


def doc_message() -> Message:
    return build_message(
        "outbox",
        2,
        17,
        b"1",
        json.dumps(DOC_PAYLOAD).encode(),
        {"id": DOC_EVENT_ID, "aggregatetype": "Order", "aggregateid": "1", "type": "OrderCreated"},
        datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_debezium_profile_matches_the_event_routers_defaults() -> None:
    out = Route("debezium")(doc_message())
    assert out.destination == "outbox.event.Order"  # route.topic.replacement, as is
    assert out.key == b"1"  # table.field.event.key = aggregateid
    assert out.headers == {"id": DOC_EVENT_ID}  # the only header by default
    assert out.id == DOC_EVENT_ID
    # The payload as written: a JSON document, not a JSON string holding one.
    assert out.value is not None
    assert json.loads(out.value) == DOC_PAYLOAD
    assert not isinstance(json.loads(out.value), str)


def test_debezium_profile_options() -> None:
    out = Route("debezium", "events.{aggregate_type}.{event_type}", "eventType")(doc_message())
    assert out.destination == "events.Order.OrderCreated"
    assert out.headers == {"id": DOC_EVENT_ID, "eventType": "OrderCreated"}


def test_debezium_profile_rejects_a_message_without_aggregate_type() -> None:
    plain = build_message("t", 0, 5, None, b"{}", {}, datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(MessageRejected, match="no 'aggregatetype' header"):
        Route("debezium")(plain)


def test_postroom_profile_keeps_the_message_and_adds_its_id() -> None:
    message = build_message(
        "orders", 3, 41, b"k", b"v", {"trace": "x"}, datetime(2026, 1, 1, tzinfo=UTC)
    )
    out = Route()(message)
    assert (out.id, out.destination, out.key, out.value) == ("orders/3/41", "orders", b"k", b"v")
    assert out.headers == {"trace": "x", "postroom-id": "orders/3/41"}
    assert Route(template="x.{topic}.{partition}.{key}")(message).destination == "x.orders.3.k"


@pytest.mark.parametrize(
    "template", ["{colour}", "{topic.__class__}", "{topic!r}", "{topic:>10}", "{", ""]
)
def test_bad_templates_are_refused(template: str) -> None:
    with pytest.raises(InvalidArgument, match="route template"):
        Route(template=template)


def test_bad_profile_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="invalid route profile 'kafka'"):
        Route("kafka")  # type: ignore[arg-type]


def test_event_record_writes_debeziums_columns_as_headers() -> None:
    record = event_record("outbox", "Order", 1, "OrderCreated", DOC_PAYLOAD, {"trace": "t"})
    assert record.key == b"1"
    assert json.loads(record.value) == DOC_PAYLOAD
    headers = dict(record.headers or {})
    assert headers["aggregatetype"] == "Order"
    assert headers["aggregateid"] == "1"
    assert headers["type"] == "OrderCreated"
    assert headers["trace"] == "t"
    assert len(str(headers["id"])) == 36


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("", 1, "E"), "aggregate_type"),
        (("A", True, "E"), "aggregate_id"),
        (("A", "", "E"), "aggregate_id"),
        (("A", 1, ""), "event_type"),
    ],
)
def test_event_record_checks_its_arguments(args: tuple[str, object, str], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        event_record("outbox", args[0], args[1], args[2], {})  # type: ignore[arg-type]


def test_event_headers_cannot_be_overridden() -> None:
    with pytest.raises(InvalidArgument, match=r"\['id'\] are set by publish_event"):
        event_record("outbox", "A", 1, "E", {}, {"id": "mine"})


def test_publish_event_commits_with_the_callers_transaction(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("outbox", partitions=2)
    with psycopg.connect(dsn) as conn:
        client.publish_event(conn, "Order", 7, "OrderCreated", {"n": 1})
        conn.rollback()
        client.publish_event(conn, "Order", 7, "OrderPaid", {"n": 2})
        conn.commit()
    with client.consumer("check", "outbox") as consumer:
        [message] = consumer.poll(timeout=5)
    assert message.json() == {"n": 2}
    assert message.key == b"7"
    assert message.headers["type"] == "OrderPaid"
    out = Route("debezium")(message)
    assert (out.destination, out.key) == ("outbox.event.Order", b"7")
    assert out.headers == {"id": message.headers["id"]}


def test_publish_event_async(dsn: str) -> None:
    async def main() -> Message:
        async with await postroom.connect_async(dsn) as client:
            await client.create_topic("events")
            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                await client.publish_event(
                    conn, "Customer", "c-1", "CustomerCreated", {"x": 1}, topic="events"
                )
                await conn.commit()
            async with client.consumer("check", "events") as consumer:
                [message] = await consumer.poll(timeout=5)
                return message

    message = asyncio.run(main())
    assert message.headers["aggregatetype"] == "Customer"
    assert message.key == b"c-1"


def test_publish_event_to_a_missing_topic_says_so(client: postroom.Client) -> None:
    with pytest.raises(postroom.errors.TopicNotFound, match="outbox"):
        client.publish_event(None, "Order", 1, "OrderCreated", {})
