# Generated from src/postroom/relay/sink_errors_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""A relay member's sink error in the database (migration 0037): written by the relay loop
when its policy says so (``sink_error_policy.py``), read by ``relay_status()``."""

from __future__ import annotations

from collections.abc import Iterable

from .._db import Database
from .records import RelaySinkError


def record_sink_error(db: Database, group: str, member: str, error: str | None) -> bool:
    """Record ``error`` as ``member``'s sink error in ``group`` (None: clear it); False if the
    member is not registered (nothing written)."""
    with db.connection() as conn:
        cur = conn.execute(
            db.q("record_sink_error"), {"group": group, "member": member, "error": error}
        )
        row = cur.fetchone()
    return bool(row and row[0])


def read_sink_errors(db: Database, groups: Iterable[str]) -> dict[str, tuple[RelaySinkError, ...]]:
    """The sink errors of the live members of ``groups``, per group, oldest run first."""
    found: dict[str, list[RelaySinkError]] = {}
    with db.connection() as conn:
        cur = conn.execute(db.q("relay_sink_errors"), {"groups": list(groups)})
        for group, *fields in cur.fetchall():
            found.setdefault(group, []).append(RelaySinkError(*fields))
    return {group: tuple(errors) for group, errors in found.items()}
