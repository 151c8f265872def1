"""The relay's data for people and dashboards (sans-IO)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..errors import InvalidArgument
from ..log.records import PartitionLag

MAX_ID_CHARS = 1000
"""The longest message id an inbox records."""
RELAY_GROUP_PREFIX = "relay."
"""Relays run in groups named ``relay.<something>`` (by default ``relay.<sink scheme>``);
``relay_status()`` without names lists the groups with this prefix."""


@dataclass(frozen=True, slots=True)
class RelayStatus:
    """One relay (its consumer group): what is still to go out, and how old it is.

    ``pending`` counts messages committed to the log that the sink has not acknowledged yet;
    ``oldest_pending_seconds`` is the age of the oldest of them (0 when none): the two depths
    to alert on. ``updated_at`` is the relay's last commit."""

    group: str
    topics: tuple[str, ...]
    pending: int
    oldest_pending_seconds: float
    updated_at: datetime
    partitions: tuple[PartitionLag, ...]


def check_message_id(message_id: object) -> str:
    if not isinstance(message_id, str) or not 1 <= len(message_id) <= MAX_ID_CHARS:
        raise InvalidArgument(
            f"invalid message id {message_id!r}: a string of 1-{MAX_ID_CHARS} characters"
        )
    return message_id
