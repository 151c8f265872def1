"""Scoped grants (sans-IO): what ``grant()``/``revoke()`` take and what ``grants()`` returns.

A role uses only the consumer groups and publishes only to the topics granted to it (migration
0024); ``"*"`` grants every group nobody holds yet (taken on first use) or every topic.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from .errors import InvalidArgument, InvalidName
from .log.records import check_name
from .queue.records import check_queue

EVERY = "*"
"""The grant that names every group (nobody holds yet) or every topic."""


class RoleGrant(NamedTuple):
    """One scoped grant: ``role`` may use consumer group ``name`` (``resource == "group"``),
    enqueue to or run queue ``name`` (``"queue"``) or publish to topic ``name``
    (``"topic"``); ``name`` is ``"*"`` for every one. ``owner``: the
    role took the group on first use (else an admin granted it)."""

    role: str
    resource: str
    name: str
    owner: bool
    granted_at: datetime


def check_role(role: object) -> str:
    """``role`` if it can name a PostgreSQL role, else :class:`InvalidName`."""
    if not isinstance(role, str) or not role or len(role) > 63 or "\x00" in role:
        raise InvalidName(f"invalid role name {role!r}: 1-63 characters, no NUL")
    return role


def check_scope(kind: str, names: Iterable[str] | None) -> list[str]:
    """The group, topic or queue names of a grant (``kind``: "group", "topic" or "queue"),
    each valid or ``"*"``; an empty list for None."""
    if names is None:
        return []
    if isinstance(names, str):
        raise InvalidArgument(
            f"invalid {kind}s {names!r}: a list of {kind} names (or ['*'] for every {kind})"
        )
    check = check_queue if kind == "queue" else lambda name: check_name(kind, name)
    return [name if name == EVERY else check(name) for name in names]
