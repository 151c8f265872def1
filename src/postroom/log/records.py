"""Records and their encoding, with the input checks: sans-IO, unit-tested without a database."""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple, cast

from ..errors import InvalidArgument, InvalidName, InvalidType, MessageTooLarge

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
MAX_PARTITIONS = 1000
MAX_KEY_BYTES = 4096
MAX_VALUE_BYTES = 1024 * 1024  # Kafka's default message.max.bytes is about 1 MB too.
MAX_HEADERS = 64
MAX_HEADER_BYTES = 64 * 1024  # names and values together

Value = (
    bytes | bytearray | memoryview | str | int | float | bool | list[Any] | dict[str, Any] | None
)
HeaderValue = str | bytes


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class TopicMeta(NamedTuple):
    """A topic's id and partition count by name, as the metadata cache keeps them."""

    id: int
    name: str
    partitions: int


UNSET: Any = object()
"""``alter_topic``'s default: leave the setting as it is (one object for both clients)."""
OffsetReset = Literal["earliest", "latest"]
"""Where a new group's cursors start: the earliest retained message or the latest."""
DEFAULT_SESSION_TIMEOUT = 10.0
"""Seconds a group member may stay silent before its partitions move (Kafka's default is 45)."""


class Published(NamedTuple):
    """Where a published message landed. ``offset`` is None for a message published in the
    caller's transaction (``conn=``): offsets are assigned when that transaction commits."""

    partition: int
    offset: int | None


@dataclass(frozen=True, slots=True)
class Message:
    """A message read from the log: ``value`` is the stored bytes; ``json()``, ``text()`` decode."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, HeaderValue]
    timestamp: datetime

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def id(self) -> str:
        """``topic/partition/offset``: unique within one postroom schema, for deduplication."""
        return f"{self.topic}/{self.partition}/{self.offset}"

    @property
    def original_id(self) -> str:
        """The id to deduplicate on: for a replayed dead letter, the id of the message first
        dead-lettered (header ``postroom-replay-of``); else ``id``."""
        original = self.headers.get("postroom-replay-of")
        if original is None:
            return self.id
        return original if isinstance(original, str) else original.decode("utf-8", "replace")

    def text(self) -> str:
        return self.value.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.value)


@dataclass(slots=True, init=False)
class MessageBuilder:
    """A mutable twin of :class:`Message` with the same slots, to build messages fast.

    The frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: 2.5 us a
    message, the largest cost of consuming. The consumer makes this twin empty
    (``MessageBuilder()``, in C: its ``__init__`` is ``object.__init__``, ~70 ns less than
    ``object.__new__(MessageBuilder)``), sets one plain slot per field inline in its loop (no
    call frame per message) and moves it into the ``Message`` class, which assignment to
    ``__class__`` allows between classes of the same slot layout; from then on it is an
    ordinary, frozen ``Message``.
    """

    __init__ = object.__init__

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, HeaderValue]
    timestamp: datetime


assert MessageBuilder.__slots__ == Message.__slots__


def build_message(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes,
    headers: dict[str, HeaderValue],
    timestamp: datetime,
) -> Message:
    """``Message(...)``, three times faster."""
    message: Any = MessageBuilder()
    message.topic = topic
    message.partition = partition
    message.offset = offset
    message.key = key
    message.value = value
    message.headers = headers
    message.timestamp = timestamp
    message.__class__ = Message
    return cast(Message, message)


def check_name(kind: str, name: object) -> str:
    """Return ``name`` if it is a valid topic/group/queue name, else raise :class:`InvalidName`."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        shown = repr(name)
        if isinstance(name, str) and len(name) > 200:  # a megabyte name is not repeated whole
            shown = f"{name[:40]!r}... ({len(name)} characters)"
        raise InvalidName(
            f"invalid {kind} name {shown}: use 1-200 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return name


def check_partition_count(partitions: object) -> int:
    if (
        not isinstance(partitions, int)
        or isinstance(partitions, bool)
        or not 1 <= partitions <= MAX_PARTITIONS
    ):
        raise InvalidArgument(
            f"invalid partition count {partitions!r}: must be an integer from 1 to {MAX_PARTITIONS}"
        )
    return partitions


def check_offset(offset: object) -> int:
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidArgument(f"invalid offset {offset!r}: must be an integer >= 0")
    return offset


_MEMBER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")


def check_member_id(member_id: object) -> str:
    """``member_id`` if valid; None picks one unique to this process and consumer."""
    if member_id is None:
        host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:120] or "host"
        return f"{host.lstrip('.-_') or 'host'}-{os.getpid()}-{secrets.token_hex(4)}"
    if not isinstance(member_id, str) or not _MEMBER_ID.fullmatch(member_id):
        raise InvalidName(
            f"invalid member_id {member_id!r}: use 1-200 characters from A-Z a-z 0-9 . _ : -, "
            "starting with a letter or digit"
        )
    return member_id


def check_max_poll_interval(seconds: object) -> float:
    if (
        not isinstance(seconds, int | float)
        or isinstance(seconds, bool)
        or not 0.05 <= seconds <= 86400
    ):
        raise InvalidArgument(
            f"invalid max_poll_interval {seconds!r}: must be between 0.05 and 86400 seconds"
        )
    return float(seconds)


def check_session_timeout(seconds: object) -> float:
    if (
        not isinstance(seconds, int | float)
        or isinstance(seconds, bool)
        or not 0.05 <= seconds <= 3600
    ):
        raise InvalidArgument(
            f"invalid session_timeout {seconds!r}: must be between 0.05 and 3600 seconds"
        )
    return float(seconds)


def encode_value(value: Value) -> bytes:
    """Bytes pass through, str is UTF-8, anything else is serialized as JSON."""
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, (bytearray, memoryview)):
        data = bytes(value)
    elif isinstance(value, str):
        data = _utf8(value, "value")
    else:
        try:
            data = json.dumps(value, separators=(",", ":"), allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise InvalidType(
                f"cannot encode value of type {type(value).__name__}: pass bytes, str, or a "
                f"JSON-serializable object ({exc})"
            ) from None
    if len(data) > MAX_VALUE_BYTES:
        raise MessageTooLarge(
            f"value is {len(data)} bytes: the limit is {MAX_VALUE_BYTES} bytes per message"
        )
    return data


def encode_key(key: bytes | str | None) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, str):
        data = _utf8(key, "key")
    elif isinstance(key, (bytes, bytearray, memoryview)):
        data = bytes(key)
    else:
        raise InvalidType(f"invalid key of type {type(key).__name__}: pass bytes, str or None")
    if len(data) > MAX_KEY_BYTES:
        raise MessageTooLarge(f"key is {len(data)} bytes: the limit is {MAX_KEY_BYTES} bytes")
    return data


def encode_headers(headers: Mapping[str, HeaderValue] | None) -> dict[str, Any] | None:
    """Headers as a JSON object: str values stay strings, bytes become ``{"b64": ...}``."""
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise InvalidType(
            f"invalid headers of type {type(headers).__name__}: pass a dict[str, str | bytes]"
        )
    if len(headers) > MAX_HEADERS:
        raise MessageTooLarge(f"{len(headers)} headers: the limit is {MAX_HEADERS} per message")
    encoded: dict[str, Any] = {}
    size = 0
    for name, value in headers.items():
        if not isinstance(name, str) or not name:
            raise InvalidType(f"invalid header name {name!r}: header names are non-empty str")
        if "\x00" in name:
            raise InvalidArgument(f"invalid header name {name!r}: NUL characters are not allowed")
        _utf8(name, f"header name {name!r}")
        if isinstance(value, str):
            if "\x00" in value:
                raise InvalidArgument(
                    f"invalid value for header {name!r}: NUL characters are not allowed in str "
                    "headers (JSON text cannot hold them); pass bytes for binary data"
                )
            encoded[name] = value
            size += len(name) + len(_utf8(value, f"value of header {name!r}"))
        elif isinstance(value, (bytes, bytearray)):
            encoded[name] = {"b64": base64.b64encode(value).decode("ascii")}
            size += len(name) + len(value)
        else:
            raise InvalidType(
                f"invalid value for header {name!r} of type {type(value).__name__}: "
                "pass str or bytes"
            )
    if size > MAX_HEADER_BYTES:
        raise MessageTooLarge(f"headers are {size} bytes: the limit is {MAX_HEADER_BYTES} bytes")
    return encoded


def _utf8(text: str, what: str) -> bytes:
    """``text`` in UTF-8; a lone surrogate (from a bad decode upstream) is refused by name."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"invalid {what}: {text[exc.start : exc.end]!r} at index {exc.start} is a lone "
            "surrogate, which UTF-8 cannot encode"
        ) from None


INVALID_HEADERS = "postroom.invalid-headers"
"""The one header of a message whose stored headers are not a JSON object (only rows written
through SQL before migration 0003 can be): its value is the stored JSON text, so the message is
still delivered and its handler can tell."""


def decode_headers(stored: Any) -> dict[str, HeaderValue]:
    if not stored:
        return {} if stored is None or isinstance(stored, dict) else _invalid_headers(stored)
    if not isinstance(stored, dict):
        return _invalid_headers(stored)
    return {name: _decode_header(value) for name, value in stored.items()}


def _invalid_headers(stored: Any) -> dict[str, HeaderValue]:
    return {INVALID_HEADERS: json.dumps(stored, separators=(",", ":"))}


def _decode_header(value: Any) -> HeaderValue:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except binascii.Error:
            pass  # not base64 after all: shown as its JSON text below
    # Written through SQL in some other JSON form: keep it readable rather than fail the read.
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    low_water: int
    """The first retained offset (the high-water mark when the partition is empty)."""
    high_water: int
    """The next offset to be written: the number of messages ever written to the partition."""
    messages: int
    bytes: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int
    retention_seconds: float | None
    created_at: datetime
    high_water: int
    """Sum of the partitions' high-water marks: messages ever written to the topic."""
    partition_info: tuple[PartitionInfo, ...] = ()
    max_lag: int | None = None
    """Admission control: writes are refused while a group lags this much (None: off)."""
    group_ttl_seconds: float | None = None
    """How long a group without members or commits stays active (None: the 7-day default)."""


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int
    high_water: int
    lag: int
    lag_seconds: float
    updated_at: datetime
    member: str | None = None
    """The live group member holding the partition (None: nobody, or a manual consumer)."""
    epoch: int | None = None
    """The fencing epoch of that member's ownership."""
    lost: int = 0
    """Messages retention deleted before the group read them (its cursor is below the
    low-water mark; not lag: ``lag`` counts from the low-water mark). The next member to take
    the partition moves the cursor up to the low-water mark, like Kafka's auto.offset.reset."""


@dataclass(frozen=True, slots=True)
class GroupInfo:
    name: str
    topics: tuple[str, ...]
    lag: int
    updated_at: datetime
    partitions: tuple[PartitionLag, ...] = ()
    members: int = 0
    """Live members (consumers that joined the group and heartbeat)."""
    state: str = ""
    """``active`` (live members), ``idle`` (none) or ``expired`` (none, and no activity within
    the topic's ``group_ttl``, 7 days by default: it holds back neither retention nor
    admission; docs/log.md, "Group hygiene"); set by ``list_groups``."""


class Record(NamedTuple):
    """A message to write, already encoded and checked.

    A NamedTuple rather than a frozen dataclass: one is built per ``send()``, and a frozen
    dataclass's ``__init__`` (one ``object.__setattr__`` per field) cost 4x as much.
    """

    topic: str
    value: bytes
    key: bytes | None = None
    headers: dict[str, Any] | None = None
    partition: int | None = None


_CHECKED_TOPICS: set[str] = set()
"""Topic names that passed ``check_name``: a producer sends to the same few names all day."""
_MAX_CHECKED_TOPICS = 10_000


def make_record(
    topic: str,
    value: Value,
    key: bytes | str | None = None,
    headers: Mapping[str, HeaderValue] | None = None,
    partition: int | None = None,
) -> Record:
    """Check and encode one message to write; raises before anything is stored."""
    # This runs once per message sent: the common case (a known topic name, a bytes value of
    # allowed size, no key, headers or partition) skips the general checks.
    if type(topic) is not str or topic not in _CHECKED_TOPICS:
        check_name("topic", topic)
        if len(_CHECKED_TOPICS) < _MAX_CHECKED_TOPICS:
            _CHECKED_TOPICS.add(topic)
    if partition is not None and (
        not isinstance(partition, int) or isinstance(partition, bool) or partition < 0
    ):
        raise InvalidArgument(f"invalid partition {partition!r}: must be an integer >= 0")
    if type(value) is bytes and len(value) <= MAX_VALUE_BYTES:
        data = value
    else:
        data = encode_value(value)
    return Record(
        topic,
        data,
        None if key is None else encode_key(key),
        None if headers is None else encode_headers(headers),
        partition,
    )


def batch_record(topic: str, item: Any, trace: Mapping[str, str] | None = None) -> Record:
    """One item of ``publish_batch``: a value, or a mapping with ``value`` and optional ``key``,
    ``headers``, ``partition``. ``trace``: trace context headers to add (_tracing.py)."""
    if type(item) is bytes:  # skips isinstance(item, Mapping), an ABC check: slow per item
        return make_record(topic, item, headers=trace)
    if isinstance(item, Mapping) and "value" in item:
        extra = set(item) - {"value", "key", "headers", "partition"}
        if extra:
            raise InvalidArgument(
                f"unknown message fields {sorted(extra)}: use value, key, headers, partition"
            )
        headers = item.get("headers")
        if trace:
            headers = {**(headers or {}), **trace}
        return make_record(topic, item["value"], item.get("key"), headers, item.get("partition"))
    return make_record(topic, item, headers=trace)


def traced_records(records: list[Record], trace: Mapping[str, str]) -> list[Record]:
    """``records`` with the trace context headers ``trace`` added (str values: the encoded
    form is the same)."""
    if not trace:
        return records
    return [r._replace(headers={**(r.headers or {}), **trace}) for r in records]
