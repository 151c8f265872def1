"""How the consumer reads rows fast, with no I/O of its own: the garbage collector paused while
a batch of messages is built, and ``timestamptz`` loaded as UTC datetimes without a zone
conversion. Each is a measured fast path (bench/RESULTS.md) kept out of the records' room."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from typing import Any, cast

import psycopg
from psycopg import pq

_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_resume = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a loop that builds thousands of messages.

    Each message is a GC-tracked object that lives until the caller has handled its batch, so
    building a batch of 5,000 ran a dozen young collections and every few batches a full one
    that walked every object of the process: 20-30% of a consumer's CPU (gc.callbacks; see
    bench/RESULTS.md). The loop creates no reference cycles, so nothing is lost by collecting
    once, after it. Left off if it was off already (the caller's choice stands).

    Pauses may overlap (a sync consumer's prefetch thread makes rows while its poll builds
    messages): the collector is turned off by the first and back on by the last to end.
    """
    global _gc_pauses, _gc_resume
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_resume = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_resume:
                gc.enable()


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
