"""Database errors about a message's content, turned into postroom errors at the log's API edge.

The CHECKs of migration 0003 hold the same limits as :mod:`postroom.log.records`, so through the
Python API these fire only for what Python cannot see (a row written by ``publish()`` in SQL
joined through ``conn``, a limit that differs by an encoding detail); the error still names it.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from ..errors import InvalidArgument, MessageTooLarge, PostroomError
from .records import MAX_HEADER_BYTES, MAX_HEADERS, MAX_KEY_BYTES, MAX_VALUE_BYTES

_CONSTRAINTS: dict[str, tuple[type[PostroomError], str]] = {
    "messages_key_size": (MessageTooLarge, f"a key is larger than {MAX_KEY_BYTES} bytes"),
    "messages_value_size": (
        MessageTooLarge,
        f"a value is larger than {MAX_VALUE_BYTES} bytes (the limit per message)",
    ),
    "messages_headers_shape": (
        InvalidArgument,
        f"headers must be a JSON object of at most {MAX_HEADERS} non-empty names, names and "
        f"values at most {MAX_HEADER_BYTES} bytes together",
    ),
    "messages_offsets_reserved": (
        InvalidArgument,
        "messages may only be written at offsets this transaction reserved (publish() or "
        "reserve_offsets())",
    ),
}


def translate_log_error(exc: BaseException) -> PostroomError | None:
    """The postroom error for a database error about message content, or None."""
    if isinstance(exc, pg_errors.CheckViolation):
        known = _CONSTRAINTS.get(exc.diag.constraint_name or "")
        if known is not None:
            kind, message = known
            return kind(f"{message}: {str(exc).strip().splitlines()[0]}")
        return None
    if isinstance(exc, pg_errors.UntranslatableCharacter) and "\\u0000" in str(exc):
        return InvalidArgument(
            "a header contains a NUL character (\\u0000), which JSON headers cannot hold: "
            "pass bytes for binary header values"
        )
    if isinstance(exc, psycopg.DataError) and "NUL" in str(exc):
        # Raised by psycopg itself: PostgreSQL text cannot hold NUL (0x00) characters.
        return InvalidArgument(f"{exc}: use bytes (bytea) for binary data")
    return None


class log_errors:
    """Re-raise database errors about message content as postroom errors (see above)."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            translated = translate_log_error(exc)
            if translated is not None:
                raise translated from exc


def describe_write(values: bool, what: Any) -> str:
    """What a write commits, named by :class:`CommitUnknown` if its COMMIT is lost: how many
    messages to which topics (``what``: ``(topic, values, ...)`` for plain values, else a list
    of records)."""
    count = len(what[1]) if values else len(what)
    topics = [what[0]] if values else sorted({record.topic for record in what})
    plural = "" if len(topics) == 1 else "s"
    names = ", ".join(repr(t) for t in topics)
    return f"{count} message{'' if count == 1 else 's'} to topic{plural} {names}"
