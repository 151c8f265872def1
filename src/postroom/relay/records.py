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
class RelaySinkError:
    """The sink error relay member ``member`` is failing on now: ``error`` (the latest text,
    passwords masked, at most 500 characters) since ``since`` (the first failure of this run of
    failures), last seen at ``seen_at`` (refreshed every few seconds while it lasts). Gone as
    soon as a send succeeds, or the member leaves."""

    member: str
    error: str
    since: datetime
    seen_at: datetime


@dataclass(frozen=True, slots=True)
class RelayStatus:
    """One relay (its consumer group): what is still to go out, and how old it is.

    ``pending`` counts messages committed to the log that the sink has not acknowledged yet;
    ``oldest_pending_seconds`` is the age of the oldest of them (0 when none): the two depths
    to alert on. ``updated_at`` is the relay's last commit. ``sink_errors``: one per live member
    whose sink fails now (a broker outage, a refused message), oldest first; ``sink_error`` is
    the first of them, None while every send succeeds."""

    group: str
    topics: tuple[str, ...]
    pending: int
    oldest_pending_seconds: float
    updated_at: datetime
    partitions: tuple[PartitionLag, ...]
    sink_errors: tuple[RelaySinkError, ...] = ()

    @property
    def sink_error(self) -> RelaySinkError | None:
        return self.sink_errors[0] if self.sink_errors else None


def check_message_id(message_id: object) -> str:
    if not isinstance(message_id, str) or not 1 <= len(message_id) <= MAX_ID_CHARS:
        raise InvalidArgument(
            f"invalid message id {message_id!r}: a string of 1-{MAX_ID_CHARS} characters"
        )
    return message_id
