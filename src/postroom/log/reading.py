"""How the consumer reads rows fast, with no I/O of its own: the garbage collector paused while
a batch of messages is built (``gc_paused``, fenced in ``postroom._fastpaths``), and
``timestamptz`` loaded as UTC datetimes without a zone conversion. Each is a measured fast path
(bench/RESULTS.md) kept out of the records' room."""

from __future__ import annotations

from datetime import UTC
from typing import Any, cast

import psycopg
from psycopg import pq

from .._fastpaths import gc_paused as gc_paused

_UTC_ZONES = frozenset(
    {"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"}
)


class _UtcTimestamptzLoader:
    """psycopg's own binary ``timestamptz`` loader, made without a connection: it returns
    datetimes in ``datetime.timezone.utc``, with no conversion to the session's zone."""

    format = pq.Format.BINARY

    def __new__(cls, oid: int, context: Any = None) -> Any:
        base = psycopg.adapters.get_loader(oid, pq.Format.BINARY)
        assert base is not None
        return base(oid, None)


def utc_timestamps(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> None:
    """Make ``cursor`` load ``timestamptz`` as ``datetime.timezone.utc`` datetimes when the
    session's zone is UTC under another name (``Etc/UTC``, a common server default).

    Same instants, offsets and names, but psycopg converts each value to a zone other than
    ``timezone.utc`` through ``astimezone``: 370 ns a row against 120, most of what making a
    fetched row cost (bench/RESULTS.md). In any other zone the session's zone is kept.
    """
    zone = cursor.connection.info.timezone
    if zone is not UTC and getattr(zone, "key", None) in _UTC_ZONES:
        cursor.adapters.register_loader("timestamptz", cast(Any, _UtcTimestamptzLoader))
