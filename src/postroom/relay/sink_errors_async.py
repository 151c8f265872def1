"""A relay member's sink error in the database (migration 0037): written by the relay loop
when its policy says so (``sink_error_policy.py``), read by ``relay_status()``."""

from __future__ import annotations

from collections.abc import Iterable

from .._db_async import AsyncDatabase
from .records import RelaySinkError


async def record_sink_error(db: AsyncDatabase, group: str, member: str, error: str | None) -> bool:
    """Record ``error`` as ``member``'s sink error in ``group`` (None: clear it); False if the
    member is not registered (nothing written)."""
    async with db.connection() as conn:
        cur = await conn.execute(
            db.q("record_sink_error"), {"group": group, "member": member, "error": error}
        )
        row = await cur.fetchone()
    return bool(row and row[0])


async def read_sink_errors(
    db: AsyncDatabase, groups: Iterable[str]
) -> dict[str, tuple[RelaySinkError, ...]]:
    """The sink errors of the live members of ``groups``, per group, oldest run first."""
    found: dict[str, list[RelaySinkError]] = {}
    async with db.connection() as conn:
        cur = await conn.execute(db.q("relay_sink_errors"), {"groups": list(groups)})
        for group, *fields in await cur.fetchall():
            found.setdefault(group, []).append(RelaySinkError(*fields))
    return {group: tuple(errors) for group, errors in found.items()}
