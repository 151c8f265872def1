# Generated from src/postroom/relay/status_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""Relay status as data: per relay, pending messages, the age of the oldest pending one, and
the sink errors its members are failing on."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import GroupNotFound
from .records import RELAY_GROUP_PREFIX, RelayStatus
from .sink_errors import read_sink_errors

if TYPE_CHECKING:
    from ..log.engine import Log


def relay_status(engine: Log, groups: Iterable[str] | None = None) -> list[RelayStatus]:
    """The status of the relays ``groups`` (default: every group named ``relay.*``).

    Raises :class:`GroupNotFound` for a named group that has never committed."""
    if groups is None:
        names = sorted(
            g.name for g in engine.list_groups() if g.name.startswith(RELAY_GROUP_PREFIX)
        )
    else:
        names = list(groups)
    statuses = []
    errors = read_sink_errors(engine.database, names) if names else {}
    for name in names:
        try:
            info = engine.describe_group(name)
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
