# Generated from src/postroom/_schema_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The schema: migrations (install, upgrade, what is pending) and least-privilege grants."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from psycopg import errors as pg_errors

from . import _sql
from ._db import Database
from ._grants import RoleGrant, check_role, check_scope
from .errors import InvalidArgument, RoleNotFound
from .queue.records import check_queue

GRANTS: dict[str, tuple[str, ...]] = {
    "producer": ("grant_producer",),
    # grant_inbox: _sql/relay.sql; grant_consumer_0021: _sql/deadletters.sql
    "consumer": ("grant_consumer", "grant_inbox", "grant_consumer_0021"),
    "admin": ("grant_admin",),
    "enqueuer": ("grant_enqueuer",),
    "worker": ("grant_worker",),
}
"""The named grant statements (``_sql/grants.sql``) each capability needs."""

EVERY_QUEUE = "*"
"""The queue_roles entry of a role that may use every queue."""


def _queue_scope(capabilities: tuple[str, ...], queues: Iterable[str] | None) -> list[str] | None:
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


class Schema:
    """Migrations and grants of one postroom schema."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def pending_migrations(self) -> list[str]:
        with self._db.connection() as conn:
            cur = conn.execute(self._db.q("schema_exists"), {"schema": self._db.schema})
            row = cur.fetchone()
            applied: set[int] = set()
            if row is not None and row[0]:
                cur = conn.execute(self._db.q("applied_migrations"))
                applied = {r[0] for r in cur.fetchall()}
        return [f"{m.version:04d}_{m.name}" for m in _sql.migrations() if m.version not in applied]

    def migrate(self) -> list[str]:
        done = []
        with self._db.connection() as conn:
            conn.execute(self._db.q("lock_migrations"), {"schema": self._db.schema})
            conn.execute(self._db.q("create_schema"))
            cur = conn.execute(self._db.q("applied_migrations"))
            applied = {r[0] for r in cur.fetchall()}
            for migration in _sql.migrations():
                if migration.version in applied:
                    continue
                conn.execute(_sql.render(migration.statement, self._db.schema))
                conn.execute(
                    self._db.q("record_migration"),
                    {"version": migration.version, "name": migration.name},
                )
                done.append(f"{migration.version:04d}_{migration.name}")
        return done

    def grant(
        self,
        role: str,
        capabilities: tuple[str, ...],
        groups: Iterable[str] | None = None,
        topics: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> None:
        check_role(role)
        unknown = set(capabilities) - set(GRANTS)
        if unknown or not capabilities:
            raise InvalidArgument(
                f"invalid capabilities {sorted(unknown) or list(capabilities)}: "
                f"use one or more of {sorted(GRANTS)}"
            )
        shared = check_scope("group", groups)
        if groups is not None and "consumer" not in capabilities:
            raise InvalidArgument(
                f"groups={shared!r} goes with the 'consumer' capability: "
                "grant(role, 'consumer', groups=[...])"
            )
        published = check_scope("topic", topics)
        if topics is not None and "producer" not in capabilities:
            raise InvalidArgument(
                f"topics={published!r} goes with the 'producer' capability: "
                "grant(role, 'producer', topics=[...])"
            )
        scoped = _queue_scope(capabilities, queues)
        with _role_errors(role):
            with self._db.connection() as conn:
                for capability in capabilities:
                    for statement in GRANTS[capability]:
                        conn.execute(self._db.q_for_role(statement, role))
                if shared:
                    conn.execute(self._db.q("grant_groups"), {"role": role, "groups": shared})
                if published:
                    conn.execute(self._db.q("grant_topics"), {"role": role, "topics": published})
                if scoped is not None:
                    if scoped != [EVERY_QUEUE]:
                        conn.execute(self._db.q("scope_queues"), {"role": role})
                    conn.execute(self._db.q("grant_queues"), {"role": role, "queues": scoped})

    def revoke(
        self,
        role: str,
        groups: Iterable[str] | None = None,
        topics: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> int:
        check_role(role)
        scopes = [
            ("revoke_groups", "groups", check_scope("group", groups)),
            ("revoke_topics", "topics", check_scope("topic", topics)),
            ("revoke_queues", "queues", check_scope("queue", queues)),
        ]
        if not any(names for _, _, names in scopes):
            raise InvalidArgument(
                "revoke(role, groups=[...], topics=[...], queues=[...]): name what to revoke"
            )
        removed = 0
        with _role_errors(role):
            with self._db.connection() as conn:
                for query, argument, names in scopes:
                    if names:
                        cur = conn.execute(self._db.q(query), {"role": role, argument: names})
                        row = cur.fetchone()
                        removed += row[0] if row and row[0] else 0
        return removed

    def grants(self, role: str | None = None) -> list[RoleGrant]:
        if role is not None:
            check_role(role)
        with self._db.connection() as conn:
            cur = conn.execute(self._db.q("role_grants"), {"role": role})
            return [RoleGrant(*row) for row in cur.fetchall()]


@contextmanager
def _role_errors(role: str) -> Iterator[None]:
    try:
        yield
    except pg_errors.UndefinedObject as exc:
        # "role ... does not exist" is the only undefined object a grant names by input.
        raise RoleNotFound(
            f"role {role!r} does not exist: create it first (CREATE ROLE ... LOGIN), then "
            "grant it capabilities"
        ) from exc
