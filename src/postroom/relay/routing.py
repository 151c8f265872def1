"""Routing: what a log message becomes at the sink (sans-IO, unit-tested without a database).

A :class:`Route` turns each :class:`~postroom.Message` into an :class:`Outbound`: destination
(a Kafka topic, a Redis stream, a NATS subject, a RabbitMQ routing key, a webhook path),
key, value, headers and the stable id receivers deduplicate on.

Two profiles:

- ``"postroom"`` (default): destination from ``template`` (default ``"{topic}"``), the message's
  own key, value and headers, plus the header ``postroom-id`` = ``topic/partition/offset``.
- ``"debezium"``: the output of Debezium's outbox event router with its default settings, so a
  team can swap the relay for Debezium (or back) without touching consumers: destination
  ``outbox.event.<aggregatetype>``, key = ``aggregateid``, one header ``id`` (the event id),
  value = the payload bytes as written (not re-encoded as a JSON string).
"""

from __future__ import annotations

import string
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .._tracing import TRACE_HEADERS
from ..errors import InvalidArgument, MessageRejected
from ..log.records import HeaderValue, Message, Record, Value, make_record
from .payloads import (
    KEY_FORMATS,
    PAYLOAD_FORMATS,
    KeyFormat,
    PayloadFormat,
    check_format,
    is_empty_payload,
    render_key,
    render_payload,
)

ID_HEADER = "postroom-id"
"""The header carrying ``topic/partition/offset`` in the ``postroom`` profile."""

# The headers publish_event() writes: Debezium's outbox table columns, by their default names.
EVENT_ID = "id"
AGGREGATE_TYPE = "aggregatetype"
AGGREGATE_ID = "aggregateid"
EVENT_TYPE = "type"

DEBEZIUM_TEMPLATE = "outbox.event.{aggregate_type}"
"""Debezium's default ``route.topic.replacement`` (``outbox.event.${routedByValue}``)."""

TEMPLATE_FIELDS = frozenset(
    {"topic", "partition", "key", "aggregate_type", "aggregate_id", "event_type"}
)
Profile = Literal["postroom", "debezium"]
PROFILES: tuple[Profile, ...] = ("postroom", "debezium")


@dataclass(slots=True)
class Outbound:
    """One message as the sink sends it. ``id`` is stable across redeliveries: receivers drop
    a message whose id they have seen (``client.inbox(conn).seen(id)``).

    Read-only by contract (a sink must not change it: the relay sends the same objects again
    on a retry), not frozen: one is built per message, and a frozen dataclass's ``__init__``
    cost six times as much, a fifth of the relay's time to Kafka (py-spy)."""

    id: str
    destination: str
    key: bytes | None
    value: bytes | None
    """None: a Kafka null (a tombstone); the other sinks send it as empty bytes."""
    headers: dict[str, HeaderValue]
    source: Message = field(repr=False)

    @property
    def event_type(self) -> str | None:
        value = self.source.headers.get(EVENT_TYPE)
        return value.decode() if isinstance(value, bytes) else value


def check_template(template: str) -> str:
    """Return ``template`` if it only uses the known fields, else raise InvalidArgument."""
    if not isinstance(template, str) or not template:
        raise InvalidArgument(f"invalid route template {template!r}: a non-empty string")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InvalidArgument(f"invalid route template {template!r}: {exc}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in TEMPLATE_FIELDS or spec or conversion:
            raise InvalidArgument(
                f"invalid route template {template!r}: unknown field {{{name}}}; "
                f"use {', '.join('{' + f + '}' for f in sorted(TEMPLATE_FIELDS))}"
            )
    return template


def _text(value: HeaderValue | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Route:
    """How messages map to the sink. ``template`` names the destination with the fields
    ``{topic}``, ``{partition}``, ``{key}``, ``{aggregate_type}``, ``{aggregate_id}`` and
    ``{event_type}`` (the last three from the headers ``publish_event`` writes).

        Route()                                          # same name as the postroom topic
        Route("debezium")                                # outbox.event.<aggregatetype>
        Route(template="events.{aggregate_type}.{event_type}")
    """

    profile: Profile = "postroom"
    template: str | None = None
    event_type_header: str | None = None
    """Debezium profile only: also send the event type in this header (Debezium's
    ``table.fields.additional.placement=type:header:<name>``); off by default, as there."""
    payload: PayloadFormat = "as-written"
    """The value bytes: ``as-written`` (as stored), ``jsonb`` (as PostgreSQL renders jsonb),
    ``jsonb-string`` (that text as a JSON string) or ``compact`` (Debezium's expanded JSON);
    see docs/outbox.md, "Debezium compatibility"."""
    key_format: KeyFormat = "string"
    """The key bytes: ``string`` (the text, Debezium's StringConverter) or ``json`` (a JSON
    string, its JsonConverter with ``schemas.enable=false``)."""
    tombstone_on_empty: bool = False
    """Send an empty or blank payload as a Kafka null (``route.tombstone.on.empty.payload``);
    in the postroom profile also a ``null`` one (the debezium profile always sends a null
    payload as a Kafka null, as Debezium does for a NULL payload column)."""
    _plain: bool = field(init=False, repr=False, compare=False, default=True)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise InvalidArgument(f"invalid route profile {self.profile!r}: use one of {PROFILES}")
        if self.template is not None:
            check_template(self.template)
        check_format("payload format", self.payload, PAYLOAD_FORMATS)
        check_format("key format", self.key_format, KEY_FORMATS)
        if self.event_type_header is not None and (
            not isinstance(self.event_type_header, str) or not self.event_type_header
        ):
            raise InvalidArgument(
                f"invalid event_type_header {self.event_type_header!r}: a header name"
            )

        # Bytes as stored, no rendering: the common case, checked once (this runs per message).
        plain = self.payload == "as-written" and self.key_format == "string"
        object.__setattr__(self, "_plain", plain and not self.tombstone_on_empty)

    def __call__(self, message: Message) -> Outbound:
        if self.profile == "debezium":
            return self._debezium(message)
        message_id = message.id
        headers = dict(message.headers)
        headers[ID_HEADER] = message_id
        key = message.key
        value: bytes | None = message.value
        if not self._plain:
            value = self._value(message.value, null_is_tombstone=self.tombstone_on_empty)
            if key is not None and self.key_format != "string":
                key = render_key(key.decode("utf-8", "replace"), self.key_format)
        return Outbound(
            message_id,
            # No template: the topic's own name (the common case, without formatting).
            message.topic if self.template is None else self._destination(self.template, message),
            key,
            value,
            headers,
            message,
        )

    def _value(self, value: bytes, *, null_is_tombstone: bool) -> bytes | None:
        if null_is_tombstone and value.strip() == b"null":
            return None
        if self.tombstone_on_empty and is_empty_payload(value):
            return None
        return render_payload(value, self.payload)

    def _destination(self, template: str, message: Message) -> str:
        fields: Mapping[str, str] = {
            "topic": message.topic,
            "partition": str(message.partition),
            "key": "" if message.key is None else message.key.decode("utf-8", "replace"),
            "aggregate_type": _text(message.headers.get(AGGREGATE_TYPE)) or "",
            "aggregate_id": _text(message.headers.get(AGGREGATE_ID)) or "",
            "event_type": _text(message.headers.get(EVENT_TYPE)) or "",
        }
        return template.format_map(fields)

    def _debezium(self, message: Message) -> Outbound:
        # The event id travels as the `id` header, as Debezium's table.field.event.id; a
        # message not written by publish_event has none, and its log id stands in (stable too).
        event_id = _text(message.headers.get(EVENT_ID)) or message.id
        if not _text(message.headers.get(AGGREGATE_TYPE)) and "{aggregate_type}" in (
            self.template or DEBEZIUM_TEMPLATE
        ):
            raise MessageRejected(
                f"message {message.id} has no {AGGREGATE_TYPE!r} header: the debezium profile "
                "routes by it (write events with client.publish_event)"
            )
        aggregate_id = _text(message.headers.get(AGGREGATE_ID))
        if aggregate_id is None and message.key is not None:
            aggregate_id = message.key.decode("utf-8", "replace")
        key = None if aggregate_id is None else render_key(aggregate_id, self.key_format)
        headers: dict[str, HeaderValue] = {"id": event_id}
        for name in TRACE_HEADERS:  # the trace goes on (docs/observability.md, "Tracing")
            if name in message.headers:
                headers[name] = message.headers[name]
        if self.event_type_header:
            event_type = _text(message.headers.get(EVENT_TYPE))
            if event_type is not None:
                headers[self.event_type_header] = event_type
        return Outbound(
            event_id,
            self._destination(self.template or DEBEZIUM_TEMPLATE, message),
            key,
            # A None payload (SQL NULL in Debezium's outbox table) is a Kafka null there.
            self._value(message.value, null_is_tombstone=True),
            headers,
            message,
        )


def event_record(
    topic: str,
    aggregate_type: str,
    aggregate_id: str | int,
    event_type: str,
    payload: Value,
    headers: Mapping[str, HeaderValue] | None = None,
) -> Record:
    """The log record ``publish_event`` writes: key = aggregate id, value = payload, and the
    headers ``id`` (a fresh UUID), ``aggregatetype``, ``aggregateid``, ``type`` (the columns of
    Debezium's outbox table), plus the caller's ``headers``."""
    for name, value in (("aggregate_type", aggregate_type), ("event_type", event_type)):
        if not isinstance(value, str) or not value:
            raise InvalidArgument(f"invalid {name} {value!r}: a non-empty string")
    if isinstance(aggregate_id, bool) or not isinstance(aggregate_id, str | int):
        raise InvalidArgument(f"invalid aggregate_id {aggregate_id!r}: a string or an int")
    aggregate = str(aggregate_id)
    if not aggregate:
        raise InvalidArgument("invalid aggregate_id '': a non-empty string")
    merged: dict[str, HeaderValue] = dict(headers or {})
    reserved = {EVENT_ID, AGGREGATE_TYPE, AGGREGATE_ID, EVENT_TYPE} & set(merged)
    if reserved:
        raise InvalidArgument(
            f"headers {sorted(reserved)} are set by publish_event: pass them as arguments"
        )
    merged.update(
        {
            EVENT_ID: str(uuid.uuid4()),
            AGGREGATE_TYPE: aggregate_type,
            AGGREGATE_ID: aggregate,
            EVENT_TYPE: event_type,
        }
    )
    return make_record(topic, payload, aggregate, merged)
