"""Scoped grants (sans-IO): what ``grant()``/``revoke()`` take and what ``grants()`` returns.

A role uses only the consumer groups and publishes only to the topics granted to it (migration
0024); ``"*"`` grants every group nobody holds yet (taken on first use) or every topic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import NamedTuple

from psycopg import errors as pg_errors

from .errors import InvalidArgument, InvalidName, RoleNotFound
from .log.records import check_name
from .queue.records import check_queue

_MIGRATION_SUFFIX = re.compile(r"_(\d{4})$")

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


EVERY_QUEUE = "*"
"""The queue_roles entry of a role that may use every queue."""


def queue_scope(capabilities: tuple[str, ...], queues: Iterable[str] | None) -> list[str] | None:
    """The queue_roles entries a grant records: every queue (``queues=None``) or the named ones
    for an enqueuer or worker; None (nothing to record) for the other capabilities."""
    queue_capability = bool({"enqueuer", "worker"} & set(capabilities))
    if queues is None:
        return [EVERY_QUEUE] if queue_capability else None
    if isinstance(queues, str):
        raise InvalidArgument(f"invalid queues {queues!r}: a list of queue names")
    names = [check_queue(queue) for queue in queues]
    if not queue_capability:
        raise InvalidArgument(
            f"queues={names!r} goes with the 'enqueuer' or 'worker' capability: "
            "grant(role, 'worker', queues=[...])"
        )
    if not names:
        raise InvalidArgument("queues=[] names no queue: name at least one, or pass None for all")
    return names


@contextmanager
def role_errors(role: str) -> Iterator[None]:
    try:
        yield
    except pg_errors.UndefinedObject as exc:
        # "role ... does not exist" is the only undefined object a grant names by input.
        raise RoleNotFound(
            f"role {role!r} does not exist: create it first (CREATE ROLE ... LOGIN), then "
            "grant it capabilities"
        ) from exc


def applicable(statements: Iterable[str], applied: set[int]) -> list[str]:
    """The grant statements to run on a schema whose applied migrations are ``applied``: a
    statement named ``..._NNNN`` grants what migration NNNN created, so it is skipped until that
    migration is applied (an older schema: ``migrate()``, then grant again)."""
    kept = []
    for name in statements:
        version = _MIGRATION_SUFFIX.search(name)
        if version is None or int(version.group(1)) in applied:
            kept.append(name)
    return kept
