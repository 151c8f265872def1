"""The Kafka engine's sans-IO parts (URL settings, error translation, records) and its place
behind the log engine seam; no broker needed."""

from __future__ import annotations

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
from postroom.log.kafka.messages import kafka_headers
from postroom.log.kafka.settings import parse_kafka_url
from postroom.log.records import make_record
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
