"""Kafka records to postroom messages and back (sans-IO).

Kafka header values are bytes: a ``str`` header goes as its UTF-8 bytes and comes back as
``str`` when it decodes as UTF-8, else as ``bytes`` (so a ``bytes`` header that happens to be
valid UTF-8 is read as ``str``: docs/kafka.md).
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, SupportsIndex

from ..records import (
    HeaderValue,
    Message,
    MessageBuilder,
    Record,
    TopicPartition,
    decode_headers,
)

EPOCH = datetime.fromtimestamp(0, UTC)
NO_TIMESTAMP = 0  # confluent_kafka.TIMESTAMP_NOT_AVAILABLE
PARTITION_EOF = -191  # confluent_kafka.KafkaError._PARTITION_EOF


def kafka_headers(encoded: dict[str, Any] | None) -> list[tuple[str, bytes]] | None:
    """Headers of a checked record (``records.make_record``'s JSON form) as Kafka headers."""
    if not encoded:
        return None
    return [
        (name, value.encode("utf-8") if isinstance(value, str) else value)
        for name, value in decode_headers(encoded).items()
    ]


def produce_arguments(record: Record) -> dict[str, Any]:
    """The keyword arguments of ``produce`` a checked record has, and none that would be None:
    librdkafka parses each keyword given, a None too (~0.3 us a send, bench/RESULTS.md)."""
    extra: dict[str, Any] = {}
    if record.key is not None:
        extra["key"] = record.key
    if record.headers is not None:
        extra["headers"] = kafka_headers(record.headers)
    if record.partition is not None:
        extra["partition"] = record.partition
    return extra


def _header(value: bytes | None) -> HeaderValue:
    if value is None:
        return b""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value


_HEADERS_SLOT: Any = Message.__dict__["headers"]  # the slot under the ``headers`` field


class KafkaMessage(Message):
    """A :class:`Message` read from Kafka whose ``headers`` dict is made when first read.

    Internal: the public type is ``Message`` (``isinstance(m, Message)`` holds, and so do
    equality, ``repr``, pickling, ``copy`` and ``dataclasses.replace``, all through a plain
    ``Message``). Until then the ``headers`` slot holds what confluent-kafka gave (None or a
    list of ``(name, bytes)``); the first read of ``headers`` (or of anything that needs it:
    ``==``, ``repr``, ``original_id``, pickling) decodes them into the slot and turns the
    object into a plain ``Message`` (same slots: ``__class__`` may be assigned), so later
    reads cost what a ``Message``'s do.

    Why: a dict per message, even an empty one, is an allocation the garbage collector counts;
    with the messages, a batch of 500 then crossed the young generation's threshold (700) and
    every poll ran a collection (and every hundred or so a full one): 0.2 us a message, most
    of what postroom's consumer cost above raw confluent-kafka (bench/RESULTS.md). Two threads
    reading a new message's ``headers`` for the first time at once may each get their own
    (equal) dict.
    """

    __slots__ = ()

    @property
    def headers(self) -> dict[str, HeaderValue]:
        stored: Any = _HEADERS_SLOT.__get__(self)
        if type(stored) is not dict:  # else another thread decoded them meanwhile
            stored = {} if stored is None else {name: _header(v) for name, v in stored}
            _HEADERS_SLOT.__set__(self, stored)
            object.__setattr__(self, "__class__", Message)
        headers: dict[str, HeaderValue] = stored
        return headers

    def _plain(self) -> Message:
        """This message as a plain ``Message`` (its headers decoded)."""
        self.headers  # noqa: B018 (the read decodes them)
        return self

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # ``dataclasses.replace`` calls the message's class: it gets a plain Message.
        return Message(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        return self._plain() == other

    def __hash__(self) -> int:
        return hash(self._plain())

    def __repr__(self) -> str:
        return repr(self._plain())

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        return self._plain().__reduce_ex__(protocol)


assert KafkaMessage.__slots__ == () and MessageBuilder.__slots__ == Message.__slots__


class Fetched(NamedTuple):
    """What ``to_messages`` made of a batch of records."""

    messages: list[Message]
    error: Any
    """The first error a record carried (None if none; end-of-partition is no error): the
    messages before it are kept, the records after it dropped."""
    ends: dict[tuple[str, int], int]
    """Each partition's last offset in ``messages``."""
    size: int
    """The bytes of the keys and values of ``messages``."""


def to_messages(records: Sequence[Any], held: Container[tuple[str, int]]) -> Fetched:
    """The postroom ``Message`` of each confluent-kafka record of a partition in ``held``, in
    order, with each partition's last offset and the batch's bytes (what ``poll()`` needs and
    would otherwise read off each message again).

    This loop is most of a consumer's CPU, so it does per record what a raw confluent-kafka
    loop does (read the fields) plus the slot stores: messages are built inline
    (``records.MessageBuilder``, no call frame per record), ``held`` is looked up once per run
    of one partition (librdkafka returns a partition's records together), a timestamp is
    converted once per millisecond (a ``datetime`` is immutable: the messages of that
    millisecond share it) and the headers are decoded when first read (:class:`KafkaMessage`).
    """
    messages: list[Message] = []
    append = messages.append
    builder, message_class = MessageBuilder, KafkaMessage
    ends: dict[tuple[str, int], int] = {}
    name, current, keep, offset, size, error = "", -1, False, -1, 0, None
    last_millis: Any = None
    timestamp = EPOCH
    for record in records:
        error = record.error()
        if error is not None:
            if error.code() == PARTITION_EOF:
                error = None
                continue
            break
        topic, partition = record.topic(), record.partition()
        if partition != current or topic != name:
            if keep:
                ends[name, current] = offset
            name, current = topic, partition
            keep = (topic, partition) in held
        if not keep:
            continue
        offset = record.offset()
        kind, millis = record.timestamp()
        if millis != last_millis:  # "not available" is always (0, -1)
            last_millis = millis
            timestamp = (
                EPOCH if kind == NO_TIMESTAMP else datetime.fromtimestamp(millis / 1000, UTC)
            )
        message: Any = builder()
        message.topic = name
        message.partition = partition
        message.offset = offset
        key = message.key = record.key()
        value = record.value()
        if value is None:
            value = b""
        message.value = value
        size += len(value) if key is None else len(value) + len(key)
        message.headers = record.headers()  # decoded when first read (KafkaMessage)
        message.timestamp = timestamp
        message.__class__ = message_class
        append(message)
    if keep:
        ends[name, current] = offset
    return Fetched(messages, error, ends, size)


def to_partitions(partitions: Any) -> set[TopicPartition]:
    """confluent-kafka ``TopicPartition`` objects as postroom's."""
    return {TopicPartition(tp.topic, tp.partition) for tp in partitions}


def record_headers(encoded: dict[str, Any] | None) -> dict[str, HeaderValue] | None:
    """A checked record's headers (their JSON form) back as ``str``/``bytes`` values."""
    return None if encoded is None else decode_headers(encoded)


def message_bytes(messages: list[Message]) -> int:
    """The bytes of the keys and values of ``messages``."""
    return sum(len(m.value) if m.key is None else len(m.value) + len(m.key) for m in messages)
