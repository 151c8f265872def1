"""The sans-I/O part of a topic move (``move_async``): the mirror lag record, where a Kafka
partition's copies begin and end, and the source offset a copy carries."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import InvalidArgument
from ..records import Message

ID_HEADER = "postroom-id"
COPY_BATCH = 2000


@dataclass(frozen=True, slots=True)
class MirrorLag:
    """One partition of a move: the source's high-water mark, the next source offset to copy,
    and the messages not yet copied (``lag``)."""

    partition: int
    high_water: int
    mirrored: int
    lag: int


@dataclass(frozen=True, slots=True)
class Anchor:
    """Where a Kafka partition's copies begin (Kafka offset, source offset) and end."""

    kafka_first: int
    source_first: int
    source_next: int  # the source offset after the last message copied


def source_offset(message: Message) -> int:
    """The PostgreSQL offset a copied message carries in ``postroom-id``."""
    value = message.headers.get(ID_HEADER)
    text = value.decode() if isinstance(value, bytes) else value
    if text is None:
        raise InvalidArgument(
            f"kafka message {message.id} was not copied by a topic move (no {ID_HEADER} "
            "header): move into an empty topic"
        )
    return int(text.rsplit("/", 1)[1])
