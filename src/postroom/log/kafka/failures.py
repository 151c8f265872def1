"""librdkafka errors turned into ``postroom.errors`` at the Kafka engine's edge (sans-IO),
as the PostgreSQL engine turns database errors into them (one error boundary)."""

from __future__ import annotations

import importlib
from typing import Any

from ...errors import (
    BrokerUnavailable,
    Fenced,
    GroupNotFound,
    InstanceFenced,
    InvalidArgument,
    MessageTooLarge,
    MissingExtra,
    NotSupported,
    PostroomError,
    TopicExists,
    TopicNotFound,
)

# librdkafka's codes (confluent_kafka.KafkaError): local ones are negative.
_UNAVAILABLE = {
    -195,  # _TRANSPORT
    -187,  # _ALL_BROKERS_DOWN
    -185,  # _TIMED_OUT
    -193,  # _RESOLVE
    -192,  # _MSG_TIMED_OUT
    -189,  # _SSL
    -169,  # _AUTHENTICATION
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    7,  # REQUEST_TIMED_OUT
    14,  # COORDINATOR_LOAD_IN_PROGRESS
    15,  # COORDINATOR_NOT_AVAILABLE
    16,  # NOT_COORDINATOR
    58,  # SASL_AUTHENTICATION_FAILED
}
_MISSING_TOPIC = {3, -188}  # UNKNOWN_TOPIC_OR_PART, _UNKNOWN_TOPIC
_FENCED = {
    22,  # ILLEGAL_GENERATION
    25,  # UNKNOWN_MEMBER_ID
    27,  # REBALANCE_IN_PROGRESS
    -142,  # _ASSIGNMENT_LOST
    -144,  # _STATE (a commit of a partition no longer assigned)
}
_INSTANCE_FENCED = 82  # FENCED_INSTANCE_ID
_TOPIC_EXISTS = 36
_GROUP_MISSING = 69  # GROUP_ID_NOT_FOUND
_GROUP_NOT_EMPTY = 68  # NON_EMPTY_GROUP
_TOO_LARGE = {10, -186}  # MSG_SIZE_TOO_LARGE, _MSG_SIZE_TOO_LARGE
_INVALID = {37, 38, 39, 40, 41, 42, 87}  # INVALID_PARTITIONS .. INVALID_CONFIG, INVALID_RECORD
_UNSUPPORTED = {-165, 35}  # _UNSUPPORTED_FEATURE, UNSUPPORTED_VERSION


def kafka_module() -> Any:
    """``confluent_kafka``, or :class:`MissingExtra` naming the extra to install."""
    try:
        return importlib.import_module("confluent_kafka")
    except ImportError:
        raise MissingExtra(
            "kafka:// needs confluent-kafka: pip install 'postroom[kafka]'"
        ) from None


def error_code(exc: BaseException) -> int | None:
    """The librdkafka error code of a ``KafkaException`` or ``KafkaError``, else None."""
    error = exc.args[0] if exc.args else None
    code = getattr(error, "code", None)
    return code() if callable(code) else None


def translate(exc: BaseException, what: str, where: str) -> PostroomError:
    """The postroom error for librdkafka's ``exc`` raised while doing ``what`` at ``where``
    (``kafka at host:port``)."""
    if isinstance(exc, PostroomError):
        return exc
    code = error_code(exc)
    error = exc.args[0] if exc.args else exc
    detail = error.str() if hasattr(error, "str") else str(error)
    text = f"{what} failed at {where}: {detail}"
    if code in _UNAVAILABLE or isinstance(exc, TimeoutError):
        return BrokerUnavailable(f"{where}: {what}: no answer ({detail})")
    if code in _MISSING_TOPIC:
        return TopicNotFound(text)
    if code in _FENCED:
        return Fenced(f"{text}: the partitions moved to another member (the group rebalanced)")
    if code == _INSTANCE_FENCED:
        return InstanceFenced(f"{text}: a newer instance with this member_id joined the group")
    if code == _TOPIC_EXISTS:
        return TopicExists(text)
    if code == _GROUP_MISSING:
        return GroupNotFound(text)
    if code == _GROUP_NOT_EMPTY:
        return InvalidArgument(f"{text}: stop the group's consumers first")
    if code in _TOO_LARGE:
        return MessageTooLarge(text)
    if code in _INVALID:
        return InvalidArgument(text)
    if code in _UNSUPPORTED:
        return NotSupported(f"{text}: this broker does not support it")
    return PostroomError(text)


IN_TRANSACTION = (
    "publishing in the caller's database transaction (conn=) needs PostgreSQL: on kafka:// "
    "publish without conn, or keep an outbox on PostgreSQL (publish(..., conn=) there) and "
    "relay it to Kafka with client.relay(topics, 'kafka://...')"
)


def refuse_conn(conn: object) -> None:
    if conn is not None:
        raise NotSupported(IN_TRANSACTION)
