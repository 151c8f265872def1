"""The schema: migrations (install, upgrade, what is pending) and least-privilege grants."""

from __future__ import annotations

from collections.abc import Iterable

from . import _sql
from ._db_async import AsyncDatabase
from ._grants import (
    EVERY_QUEUE,
    RoleGrant,
    applicable,
    check_role,
    check_scope,
    queue_scope,
    role_errors,
)
from .errors import InvalidArgument

GRANTS: dict[str, tuple[str, ...]] = {
    "producer": ("grant_producer",),
    # grant_inbox, grant_consumer_0037: _sql/relay.sql; grant_consumer_0021: _sql/deadletters.sql
    "consumer": ("grant_consumer", "grant_inbox", "grant_consumer_0021", "grant_consumer_0037"),
    "admin": ("grant_admin",),
    "enqueuer": ("grant_enqueuer",),
    "worker": ("grant_worker", "grant_worker_0038", "grant_worker_0039"),
}
"""The named grant statements (``_sql/grants.sql``) each capability needs. One named
``..._NNNN`` grants what migration NNNN created: ``grant()`` skips it until NNNN is applied."""


class AsyncSchema:
    """Migrations and grants of one postroom schema."""

    def __init__(self, db: AsyncDatabase) -> None:
        self._db = db

    async def pending_migrations(self) -> list[str]:
        """Names (``NNNN_name``) of the migrations not yet applied to this schema."""
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("schema_exists"), {"schema": self._db.schema})
            row = await cur.fetchone()
            applied: set[int] = set()
            if row is not None and row[0]:
                cur = await conn.execute(self._db.q("applied_migrations"))
                applied = {r[0] for r in await cur.fetchall()}
        return [f"{m.version:04d}_{m.name}" for m in _sql.migrations() if m.version not in applied]

    async def migrate(self) -> list[str]:
        """Install or upgrade the schema; returns the migrations applied. Idempotent, and safe
        to call from many processes at once (they serialize on an advisory lock)."""
        done = []
        async with self._db.connection() as conn:
            await conn.execute(self._db.q("lock_migrations"), {"schema": self._db.schema})
            await conn.execute(self._db.q("create_schema"))
            cur = await conn.execute(self._db.q("applied_migrations"))
            applied = {r[0] for r in await cur.fetchall()}
            for migration in _sql.migrations():
                if migration.version in applied:
                    continue
                await conn.execute(_sql.render(migration.statement, self._db.schema))
                await conn.execute(
                    self._db.q("record_migration"),
                    {"version": migration.version, "name": migration.name},
                )
                done.append(f"{migration.version:04d}_{migration.name}")
        return done

    async def grant(
        self,
        role: str,
        *capabilities: str,
        groups: Iterable[str] | None = None,
        topics: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> None:
        """Grant an existing database role what one or more capabilities need, and nothing
        more: ``"producer"`` (publish), ``"consumer"`` (consume; keep the cursors of its
        groups), ``"enqueuer"`` (enqueue jobs and wait for their results), ``"worker"`` (run
        jobs), ``"admin"`` (everything in the schema). Run it as an admin (the schema owner)
        after ``migrate()``. Raises :class:`~postroom.errors.RoleNotFound` if the role does
        not exist.

        Groups and topics are granted one by one (least privilege): a consumer role uses
        only the consumer groups in ``groups`` (with ``"consumer"``), a producer role
        publishes only to the topics in ``topics`` (with ``"producer"``); anything else gets
        :class:`~postroom.errors.PermissionDenied`. ``"*"`` grants every topic, or every
        group nobody holds yet (the role takes such a group on first use; its other roles
        then need a grant). Grants add up; :meth:`revoke` takes them back.

            client.grant("orders_service", "producer", topics=["orders"])
            client.grant("billing", "consumer", groups=["billing"])
            client.grant("billing_audit", "consumer", groups=["billing"])  # share it
            client.grant("mailer", "enqueuer", "worker", queues=["email"])

        An enqueuer or worker uses every queue unless ``queues`` names some: then it is limited
        to those (and any queue granted it by name before), everywhere a queue is involved:
        enqueue, claim, job outcomes, purges, limits and schedules (docs/roles.md).
        """
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
        scoped = queue_scope(capabilities, queues)
        with role_errors(role):
            async with self._db.connection() as conn:
                cur = await conn.execute(self._db.q("applied_migrations"))
                applied = {r[0] for r in await cur.fetchall()}
                for capability in capabilities:
                    for statement in applicable(GRANTS[capability], applied):
                        await conn.execute(self._db.q_for_role(statement, role))
                if shared:
                    await conn.execute(self._db.q("grant_groups"), {"role": role, "groups": shared})
                if published:
                    await conn.execute(
                        self._db.q("grant_topics"), {"role": role, "topics": published}
                    )
                if scoped is not None:
                    if scoped != [EVERY_QUEUE]:
                        await conn.execute(self._db.q("scope_queues"), {"role": role})
                    await conn.execute(self._db.q("grant_queues"), {"role": role, "queues": scoped})

    async def revoke(
        self,
        role: str,
        *,
        groups: Iterable[str] | None = None,
        topics: Iterable[str] | None = None,
        queues: Iterable[str] | None = None,
    ) -> int:
        """Take back ``role``'s grants on consumer ``groups``, ``topics`` and ``queues``
        (names or ``"*"``, as granted); returns how many grants it removed. A group nobody
        holds any more goes to the next role granted ``"*"`` that uses it; an enqueuer or
        worker left with no queue grant may use no queue. Admins only.

            client.revoke("billing_audit", groups=["billing"])
            client.revoke("mailer", queues=["*"])  # after granting it queues=["email"]
        """
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
        with role_errors(role):
            async with self._db.connection() as conn:
                for query, argument, names in scopes:
                    if names:
                        cur = await conn.execute(self._db.q(query), {"role": role, argument: names})
                        row = await cur.fetchone()
                        removed += row[0] if row and row[0] else 0
        return removed

    async def grants(self, role: str | None = None) -> list[RoleGrant]:
        """The scoped grants of ``role`` (every role's if None), sorted by role, resource
        (``"group"``, ``"topic"``) and name: :class:`postroom.RoleGrant` tuples. Admins
        only."""
        if role is not None:
            check_role(role)
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("role_grants"), {"role": role})
            return [RoleGrant(*row) for row in await cur.fetchall()]
