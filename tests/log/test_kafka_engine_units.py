"""The Kafka engine's sans-IO parts (URL settings, error translation, records) and its place
behind the log engine seam; no broker needed."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import UTC, datetime
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException

from postroom.errors import (
    BackendUnavailable,
    BrokerUnavailable,
    Fenced,
    InstanceFenced,
    InvalidArgument,
    NotSupported,
    TopicExists,
    TopicNotFound,
)
from postroom.log.kafka.engine_async import AsyncKafkaLog
from postroom.log.kafka.failures import translate
from postroom.log.kafka.messages import EPOCH, PARTITION_EOF, kafka_headers, to_messages
from postroom.log.kafka.settings import parse_kafka_url
from postroom.log.records import Message, make_record
from postroom.log.seam import LogEngine


def _implements(engine: AsyncKafkaLog) -> LogEngine:
    # mypy --strict checks this structurally: the Kafka engine fits the seam.
    return engine


def test_urls() -> None:
    settings = parse_kafka_url(
        "kafka://u%40x:p%2Fw@a:9092,b:9093?security.protocol=SASL_SSL&sasl.mechanism=PLAIN"
        "&timeout=2.5"
    )
    assert settings.config == {
        "bootstrap.servers": "a:9092,b:9093",
        "sasl.username": "u@x",
        "sasl.password": "p/w",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
    }
    assert settings.timeout == 2.5
    assert settings.description == "kafka at a:9092,b:9093"
    for bad, match in [
        ("kafka://", "brokers"),
        ("kafka://host", "brokers"),
        ("kafka://h:1?Bad=1", "librdkafka properties"),
        ("kafka://h:1?group.id=x", "set by postroom"),
        ("kafka://h:1?timeout=0", "timeout"),
        ("postgresql://h/db", "kafka://"),
    ]:
        with pytest.raises(InvalidArgument, match=match):
            parse_kafka_url(bad)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (KafkaError._TRANSPORT, BrokerUnavailable),
        (KafkaError._ALL_BROKERS_DOWN, BrokerUnavailable),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, TopicNotFound),
        (KafkaError.TOPIC_ALREADY_EXISTS, TopicExists),
        (KafkaError.ILLEGAL_GENERATION, Fenced),
        (KafkaError.REBALANCE_IN_PROGRESS, Fenced),
        (KafkaError.FENCED_INSTANCE_ID, InstanceFenced),
        (KafkaError._UNSUPPORTED_FEATURE, NotSupported),
        (KafkaError.INVALID_PARTITIONS, InvalidArgument),
    ],
)
def test_errors_are_postrooms(code: int, error: type[Exception]) -> None:
    translated = translate(KafkaException(KafkaError(code)), "doing it", "kafka at h:1")
    assert isinstance(translated, error)
    assert "kafka at h:1" in str(translated)


def test_broker_unavailable_is_retried_like_a_database_outage() -> None:
    assert issubclass(BrokerUnavailable, BackendUnavailable)


def test_headers_go_as_bytes() -> None:
    record = make_record("t", b"v", headers={"s": "text", "b": b"\xff\x00"})
    assert kafka_headers(record.headers) == [("s", b"text"), ("b", b"\xff\x00")]
    assert kafka_headers(None) is None


def _record(partition: int, offset: int, millis: int, **fields: Any) -> Any:
    return confluent_kafka.Message(
        topic="t",
        partition=partition,
        offset=offset,
        key=fields.get("key"),
        value=fields.get("value", b"v"),
        headers=fields.get("headers"),
        timestamp=fields.get("timestamp", (confluent_kafka.TIMESTAMP_CREATE_TIME, millis)),
        error=fields.get("error"),
    )


def test_records_become_ordinary_messages() -> None:
    """The inline builder (to_messages) gives the Message a helper per record gave: frozen,
    equal field by field, a timestamp per record's millisecond, str/bytes headers; with each
    partition's last offset and the bytes of the keys and values."""
    records = [
        _record(0, 7, 1_796_206_306_425, key=b"k", headers=[("s", b"text"), ("b", b"\xff")]),
        _record(0, 8, 1_796_206_306_425, value=None),
        _record(1, 3, 1_796_206_306_426),
        _record(1, 4, 0, timestamp=(confluent_kafka.TIMESTAMP_NOT_AVAILABLE, -1)),
    ]
    messages, error, ends, size = to_messages(records, {("t", 0), ("t", 1)})
    assert error is None
    assert ends == {("t", 0): 8, ("t", 1): 4}
    assert size == len(b"k") + 3 * len(b"v")
    first = datetime.fromtimestamp(1_796_206_306.425, UTC)
    assert messages[0] == Message("t", 0, 7, b"k", b"v", {"s": "text", "b": b"\xff"}, first)
    assert messages[1] == Message("t", 0, 8, None, b"", {}, first)
    assert messages[2].timestamp == datetime.fromtimestamp(1_796_206_306.426, UTC)
    assert messages[3].timestamp == EPOCH
    assert all(isinstance(m, Message) for m in messages)
    with pytest.raises(FrozenInstanceError):
        messages[0].offset = 1  # type: ignore[misc]
    messages[1].headers["x"] = "y"  # each message has its own headers dict
    assert messages[2].headers == {}


def test_records_of_partitions_not_held_are_dropped_and_an_error_stops() -> None:
    eof = KafkaError(KafkaError._PARTITION_EOF)
    assert eof.code() == PARTITION_EOF
    records = [
        _record(0, 1, 5),
        _record(2, 1, 5),  # revoked while librdkafka fetched
        _record(0, 2, 5, error=eof),  # end of partition: not an error
        _record(0, 2, 5),
        _record(0, 3, 5, error=KafkaError(KafkaError._TRANSPORT)),
        _record(0, 3, 5),
    ]
    messages, error, ends, _ = to_messages(records, {("t", 0), ("t", 1)})
    assert [(m.partition, m.offset) for m in messages] == [(0, 1), (0, 2)]
    assert error.code() == KafkaError._TRANSPORT
    assert ends == {("t", 0): 2}
