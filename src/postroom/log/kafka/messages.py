"""Kafka records to postroom messages and back (sans-IO).

Kafka header values are bytes: a ``str`` header goes as its UTF-8 bytes and comes back as
``str`` when it decodes as UTF-8, else as ``bytes`` (so a ``bytes`` header that happens to be
valid UTF-8 is read as ``str``: docs/kafka.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..records import HeaderValue, Message, TopicPartition, build_message, decode_headers

EPOCH = datetime.fromtimestamp(0, UTC)
_NO_TIMESTAMP = 0  # confluent_kafka.TIMESTAMP_NOT_AVAILABLE


def kafka_headers(encoded: dict[str, Any] | None) -> list[tuple[str, bytes]] | None:
    """Headers of a checked record (``records.make_record``'s JSON form) as Kafka headers."""
    if not encoded:
        return None
    return [
        (name, value.encode("utf-8") if isinstance(value, str) else value)
        for name, value in decode_headers(encoded).items()
    ]


def _header(value: bytes | None) -> HeaderValue:
    if value is None:
        return b""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


def to_message(record: Any) -> Message:
    """The postroom ``Message`` of a confluent-kafka message (no error set)."""
    kind, millis = record.timestamp()
    timestamp = EPOCH if kind == _NO_TIMESTAMP else datetime.fromtimestamp(millis / 1000, UTC)
    headers = {name: _header(value) for name, value in record.headers() or ()}
    value = record.value()
    return build_message(
        record.topic(),
        record.partition(),
        record.offset(),
        record.key(),
        b"" if value is None else value,
        headers,
        timestamp,
    )


def to_partitions(partitions: Any) -> set[TopicPartition]:
    """confluent-kafka ``TopicPartition`` objects as postroom's."""
    return {TopicPartition(tp.topic, tp.partition) for tp in partitions}


def record_headers(encoded: dict[str, Any] | None) -> dict[str, HeaderValue] | None:
    """A checked record's headers (their JSON form) back as ``str``/``bytes`` values."""
    return None if encoded is None else decode_headers(encoded)
