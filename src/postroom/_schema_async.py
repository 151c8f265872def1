"""The schema: migrations (install, upgrade, what is pending) and least-privilege grants."""

from __future__ import annotations

from collections.abc import Iterable

from psycopg import errors as pg_errors

from . import _sql
from ._db_async import AsyncDatabase
from .errors import InvalidArgument, InvalidName, RoleNotFound
from .log.records import check_name

GRANTS: dict[str, tuple[str, ...]] = {
    "producer": ("grant_producer",),
    # grant_inbox: _sql/relay.sql; grant_consumer_0021: _sql/deadletters.sql
    "consumer": ("grant_consumer", "grant_inbox", "grant_consumer_0021"),
    "admin": ("grant_admin",),
    "enqueuer": ("grant_enqueuer",),
    "worker": ("grant_worker",),
}
"""The named grant statements (``_sql/grants.sql``) each capability needs."""


class AsyncSchema:
    """Migrations and grants of one postroom schema."""

    def __init__(self, db: AsyncDatabase) -> None:
        self._db = db

    async def pending_migrations(self) -> list[str]:
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("schema_exists"), {"schema": self._db.schema})
            row = await cur.fetchone()
            applied: set[int] = set()
            if row is not None and row[0]:
                cur = await conn.execute(self._db.q("applied_migrations"))
                applied = {r[0] for r in await cur.fetchall()}
        return [f"{m.version:04d}_{m.name}" for m in _sql.migrations() if m.version not in applied]

    async def migrate(self) -> list[str]:
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
        self, role: str, capabilities: tuple[str, ...], groups: Iterable[str] | None = None
    ) -> None:
        if not isinstance(role, str) or not role or len(role) > 63 or "\x00" in role:
            raise InvalidName(f"invalid role name {role!r}: 1-63 characters, no NUL")
        unknown = set(capabilities) - set(GRANTS)
        if unknown or not capabilities:
            raise InvalidArgument(
                f"invalid capabilities {sorted(unknown) or list(capabilities)}: "
                f"use one or more of {sorted(GRANTS)}"
            )
        shared: list[str] = []
        if groups is not None:
            if isinstance(groups, str):
                raise InvalidArgument(f"invalid groups {groups!r}: a list of group names")
            shared = [check_name("group", group) for group in groups]
            if "consumer" not in capabilities:
                raise InvalidArgument(
                    f"groups={shared!r} goes with the 'consumer' capability: "
                    "grant(role, 'consumer', groups=[...])"
                )
        try:
            async with self._db.connection() as conn:
                for capability in capabilities:
                    for statement in GRANTS[capability]:
                        await conn.execute(self._db.q_for_role(statement, role))
                if shared:
                    await conn.execute(self._db.q("share_groups"), {"role": role, "groups": shared})
        except pg_errors.UndefinedObject as exc:
            # "role ... does not exist" is the only undefined object a grant names by input.
            raise RoleNotFound(
                f"role {role!r} does not exist: create it first (CREATE ROLE ... LOGIN), then "
                "grant it capabilities"
            ) from exc
