"""Golden tests: the same outbox event, relayed with each row of docs/outbox.md's table of
Debezium settings, gives the topic, key bytes, headers and value bytes that Debezium's outbox
EventRouter gives for the same row with those settings.

The expected bytes are written out by hand from Debezium's documentation
(transformations/outbox-event-router.adoc: the example outbox message, "Expanding escaped JSON
String as JSON", the option table) and from how its converters write: StringConverter passes
the text, JsonConverter (``schemas.enable=false``, Jackson) writes a JSON string, compactly, and
PostgreSQL hands Debezium a ``jsonb`` column as ``jsonb_out`` renders it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from postroom.log.records import Message, build_message
from postroom.relay import Route
from postroom.relay.payloads import java_double, jsonb_text
from postroom.relay.routing import event_record

EVENT_ID = "4d47e190-0402-4048-bc2c-89dd54343cdc"
# The document of Debezium's example, as the application builds it (its own key order).
PAYLOAD = {
    "customerId": 123,
    "orderDate": "2019-01-31T12:13:01",
    "id": 1,
    "lineItems": [
        {
            "item": "Debezium in Action",
            "quantity": 2,
            "totalPrice": 39.98,
            "status": "ENTERED",
            "id": 1,
        },
        {
            "status": "ENTERED",
            "id": 2,
            "item": "Debezium for Dummies",
            "totalPrice": 29.99,
            "quantity": 1,
        },
    ],
}
# What PostgreSQL hands Debezium for that document in a jsonb column: the text in the
# documentation's example message (keys by length, then bytewise; ", " and ": ").
JSONB = (
    b'{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", '
    b'"quantity": 2, "totalPrice": 39.98}, {"id": 2, "item": "Debezium for Dummies", '
    b'"status": "ENTERED", "quantity": 1, "totalPrice": 29.99}], '
    b'"orderDate": "2019-01-31T12:13:01", "customerId": 123}'
)
# JsonConverter on the payload string (table.expand.json.payload=false): the example message.
JSONB_STRING = (
    b'"{\\"id\\": 1, \\"lineItems\\": [{\\"id\\": 1, \\"item\\": \\"Debezium in Action\\", '
    b'\\"status\\": \\"ENTERED\\", \\"quantity\\": 2, \\"totalPrice\\": 39.98}, {\\"id\\": 2, '
    b'\\"item\\": \\"Debezium for Dummies\\", \\"status\\": \\"ENTERED\\", \\"quantity\\": 1, '
    b'\\"totalPrice\\": 29.99}], \\"orderDate\\": \\"2019-01-31T12:13:01\\", '
    b'\\"customerId\\": 123}"'
)
# table.expand.json.payload=true + JsonConverter: the expanded document, written compactly.
COMPACT = (
    b'{"id":1,"lineItems":[{"id":1,"item":"Debezium in Action","status":"ENTERED",'
    b'"quantity":2,"totalPrice":39.98},{"id":2,"item":"Debezium for Dummies",'
    b'"status":"ENTERED","quantity":1,"totalPrice":29.99}],'
    b'"orderDate":"2019-01-31T12:13:01","customerId":123}'
)


def outbox_message(payload: Any = PAYLOAD, aggregate_type: str = "order") -> Message:
    """The log message ``publish_event(conn, aggregate_type, 1, "OrderCreated", payload)``
    writes, with the event id of Debezium's example."""
    record = event_record("outbox", aggregate_type, 1, "OrderCreated", payload)
    headers = dict(record.headers or {})
    headers["id"] = EVENT_ID
    return build_message(
        "outbox", 0, 5, record.key, record.value, headers, datetime(2026, 1, 1, tzinfo=UTC)
    )


# (Debezium settings, the Route that equals them, key bytes, headers, value bytes)
TABLE: list[tuple[str, Route, bytes, list[tuple[str, str]], bytes | None]] = [
    (
        "key+value StringConverter, jsonb payload",
        Route("debezium", payload="jsonb"),
        b"1",
        [("id", EVENT_ID)],
        JSONB,
    ),
    (
        "key+value JsonConverter schemas.enable=false, jsonb payload",
        Route("debezium", payload="jsonb-string", key_format="json"),
        b'"1"',
        [("id", EVENT_ID)],
        JSONB_STRING,
    ),
    (
        "value JsonConverter schemas.enable=false, table.expand.json.payload=true",
        Route("debezium", payload="compact"),
        b"1",
        [("id", EVENT_ID)],
        COMPACT,
    ),
    (
        "bytea payload, value BinaryDataConverter (or ByteArrayConverter)",
        Route("debezium"),
        b"1",
        [("id", EVENT_ID)],
        json.dumps(PAYLOAD, separators=(",", ":")).encode(),
    ),
    (
        "table.fields.additional.placement=type:header:eventType",
        Route("debezium", payload="jsonb", event_type_header="eventType"),
        b"1",
        [("id", EVENT_ID), ("eventType", "OrderCreated")],
        JSONB,
    ),
]


@pytest.mark.parametrize(
    ("settings", "route", "key", "headers", "value"), TABLE, ids=[row[0] for row in TABLE]
)
def test_each_setting_gives_debeziums_record(
    settings: str, route: Route, key: bytes, headers: list[tuple[str, str]], value: bytes
) -> None:
    out = route(outbox_message())
    assert out.destination == "outbox.event.order"  # route.topic.replacement default
    assert out.key == key
    assert list(out.headers.items()) == headers
    assert out.value == value


def test_a_null_payload_is_a_kafka_null_as_debezium_sends_it() -> None:
    # A NULL payload column: the router's value is the payload, null, whatever the converter.
    for payload in ("as-written", "jsonb", "jsonb-string", "compact"):
        out = Route("debezium", payload=payload)(outbox_message(None))
        assert out.value is None
    # The postroom profile keeps the 4 bytes unless asked for tombstones.
    assert Route()(outbox_message(None)).value == b"null"
    assert Route(tombstone_on_empty=True)(outbox_message(None)).value is None


def test_tombstone_on_empty_payload_also_takes_blank_payloads() -> None:
    # route.tombstone.on.empty.payload=true: an empty or blank payload (a text column) too.
    assert Route("debezium")(outbox_message("  ")).value == b"  "
    assert Route("debezium", tombstone_on_empty=True)(outbox_message("  ")).value is None
    assert Route("debezium", tombstone_on_empty=True)(outbox_message("")).value is None


def test_expansion_leaves_out_what_debezium_infers_no_schema_for() -> None:
    payload = {"price": 120.00, "tags": [], "note": None, "big": 1e7, "small": 1.5e-5}
    out = Route("debezium", payload="compact")(outbox_message(payload))
    assert out.value == b'{"big":1.0E7,"price":120.0,"small":1.5E-5}'
    assert java_double("0.001") == "0.001" and java_double("1234567.5") == "1234567.5"


def test_non_ascii_and_escapes_as_postgresql_and_jackson_write_them() -> None:
    payload = {"name": "Zoë\n\u0001", "q": 'say "hi" \\ /'}
    jsonb = Route("debezium", payload="jsonb")(outbox_message(payload)).value
    assert jsonb == '{"q": "say \\"hi\\" \\\\ /", "name": "Zoë\\n\\u0001"}'.encode()
    string = Route("debezium", payload="jsonb-string")(outbox_message(payload)).value
    expected = (
        '"{\\"q\\": \\"say \\\\\\"hi\\\\\\" \\\\\\\\ /\\", \\"name\\": \\"Zoë\\\\n\\\\u0001\\"}"'
    )
    assert string == expected.encode()
    compact = Route("debezium", payload="compact")(outbox_message(payload)).value
    assert compact == '{"q":"say \\"hi\\" \\\\ /","name":"Zoë\\n\\u0001"}'.encode()


def test_a_value_that_is_not_json_goes_as_written() -> None:
    message = outbox_message(b"\x00\x01 binary")
    for payload in ("jsonb", "jsonb-string", "compact"):
        assert Route("debezium", payload=payload)(message).value == b"\x00\x01 binary"


TRICKY = [
    {"b": 1, "a": 2, "aa": 3, "é": 4, "z": {"y": [1, 2.50, -0.0, 1e3, 1e-2, 3.14159]}},
    [1, "two", None, True, False, {}, [], 12345678901234567890],
    {"esc": 'tab\there\r\n\u0007\u001f\u007f\u2028 "q" \\ / ü 𝄞'},
    "a string",
    3.0,
    None,
]


@pytest.mark.parametrize("document", TRICKY)
def test_jsonb_rendering_is_postgresqls(dsn: str, document: Any) -> None:
    value = json.dumps(document).encode()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT %s::jsonb::text", [value.decode()]).fetchone()
    assert row is not None
    assert jsonb_text(value) == row[0]


def test_duplicate_keys_keep_the_last_as_postgresql_does(dsn: str) -> None:
    value = b'{"a": 1, "b": 2, "a": 3}'
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT %s::jsonb::text", [value.decode()]).fetchone()
    assert row is not None
    assert jsonb_text(value) == row[0] == '{"a": 3, "b": 2}'
