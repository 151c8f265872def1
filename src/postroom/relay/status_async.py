"""Relay status as data: per relay, pending messages, the age of the oldest pending one, and
the sink errors its members are failing on."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import GroupNotFound
from .records import RELAY_GROUP_PREFIX, RelayStatus
from .sink_errors_async import read_sink_errors

if TYPE_CHECKING:
    from ..log.engine_async import AsyncLog


async def relay_status(engine: AsyncLog, groups: Iterable[str] | None = None) -> list[RelayStatus]:
    """The status of the relays ``groups`` (default: every group named ``relay.*``).

    Raises :class:`GroupNotFound` for a named group that has never committed."""
    if groups is None:
        names = sorted(
            g.name for g in await engine.list_groups() if g.name.startswith(RELAY_GROUP_PREFIX)
        )
    else:
        names = list(groups)
    statuses = []
    errors = await read_sink_errors(engine.database, names) if names else {}
    for name in names:
        try:
            info = await engine.describe_group(name)
        except GroupNotFound:
            raise GroupNotFound(
                f"unknown relay {name!r}: no relay of that group has started yet"
            ) from None
        statuses.append(
            RelayStatus(
                name,
                info.topics,
                info.lag,
                max((p.lag_seconds for p in info.partitions if p.lag), default=0.0),
                info.updated_at,
                info.partitions,
                errors.get(name, ()),
            )
        )
    return statuses
