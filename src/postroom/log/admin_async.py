"""Log administration: topics, consumer group cursors and retention.

The log engine (``engine_async.py``) hands each topic and group call to the log admin
(``LogAdmin``, ``AsyncLogAdmin``), which checks the arguments, runs the named queries
(``_sql/log.sql``) and turns the rows into records.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from psycopg import errors as pg_errors

from .._checks import check_group_ttl, check_max_lag, check_retention
from .._db_async import AsyncDatabase
from ..errors import GroupNotFound, InvalidArgument, OffsetOutOfRange, TopicExists, TopicNotFound
from .metadata_async import AsyncTopicCache
from .records import (
    UNSET,
    GroupInfo,
    PartitionInfo,
    PartitionLag,
    TopicInfo,
    check_name,
    check_offset,
    check_partition_count,
)

GROUP_EXPIRY = timedelta(days=7)
"""A group with no live member and no commit for this long shows as expired in ``list_groups``
(retention's default ``group_expiry``); a topic's ``group_ttl`` overrides it."""

logger = logging.getLogger("postroom.groups")


class AsyncLogAdmin:
    """Creates, grows, describes and deletes topics; inspects, resets and deletes groups;
    applies retention. Shares the engine's topic cache, which it invalidates on changes."""

    def __init__(self, db: AsyncDatabase, topics: AsyncTopicCache) -> None:
        self._db = db
        self._topics = topics

    # -- topics -----------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int,
        retention: timedelta | None,
        max_lag: int | None = None,
        group_ttl: timedelta | None = None,
        if_not_exists: bool = False,
    ) -> bool:
        check_name("topic", name)
        check_partition_count(partitions)
        check_max_lag(max_lag)
        check_group_ttl(group_ttl)
        check_retention(retention)
        try:
            async with self._db.connection() as conn:
                await conn.execute(
                    self._db.q("create_topic"),
                    {"name": name, "partitions": partitions, "retention": retention},
                )
                if max_lag is not None or group_ttl is not None:
                    await conn.execute(
                        self._db.q("alter_topic"),
                        {
                            "name": name,
                            "max_lag": max_lag,
                            "group_ttl": group_ttl,
                            "retention": retention,
                        },
                    )
        except pg_errors.UniqueViolation:
            if if_not_exists:
                return False
            raise TopicExists(f"topic {name!r} already exists") from None
        return True

    async def alter_topic(
        self,
        name: str,
        max_lag: int | None,
        group_ttl: timedelta | None,
        retention: timedelta | None = UNSET,
    ) -> None:
        """Set ``max_lag``/``group_ttl``/``retention`` (``UNSET`` keeps one as it is; None
        turns it off)."""
        check_name("topic", name)
        if max_lag is not UNSET:
            check_max_lag(max_lag)
        if group_ttl is not UNSET:
            check_group_ttl(group_ttl)
        if retention is not UNSET:
            check_retention(retention)
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("topic_limits"), {"name": name})
            row = await cur.fetchone()
            if row is None:
                raise TopicNotFound(f"unknown topic {name!r}")
            params = {
                "name": name,
                "max_lag": row[0] if max_lag is UNSET else max_lag,
                "group_ttl": row[1] if group_ttl is UNSET else group_ttl,
                "retention": row[2] if retention is UNSET else retention,
            }
            await conn.execute(self._db.q("alter_topic"), params)

    async def list_topics(self) -> list[TopicInfo]:
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("list_topics"))
            rows = await cur.fetchall()
        return [
            TopicInfo(
                name,
                parts,
                None if ret is None else ret.total_seconds(),
                created,
                high,
                max_lag=max_lag,
                group_ttl_seconds=None if ttl is None else ttl.total_seconds(),
            )
            for name, parts, ret, created, high, max_lag, ttl in rows
        ]

    async def describe_topic(self, name: str) -> TopicInfo:
        meta = await self._topics.get(name)
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("describe_partitions"), {"topic_id": meta.id})
            parts = tuple(PartitionInfo(*row) for row in await cur.fetchall())
        for topic in await self.list_topics():
            if topic.name == name:
                return TopicInfo(
                    topic.name,
                    topic.partitions,
                    topic.retention_seconds,
                    topic.created_at,
                    topic.high_water,
                    parts,
                    topic.max_lag,
                    topic.group_ttl_seconds,
                )
        raise TopicNotFound(f"unknown topic {name!r}")

    async def delete_topic(self, name: str) -> None:
        check_name("topic", name)
        async with self._db.connection() as conn:
            # Messages have no foreign key (0001_log.sql): wait for in-flight writers first,
            # so the delete's snapshot sees all of the topic's messages.
            await conn.execute(self._db.q("lock_topic_partitions"), {"name": name})
            cur = await conn.execute(self._db.q("delete_topic"), {"name": name})
            deleted = await cur.fetchone()
        self._topics.forget(name)
        if deleted is None:
            raise TopicNotFound(f"unknown topic {name!r}")

    async def add_partitions(self, name: str, total: int) -> None:
        check_name("topic", name)
        check_partition_count(total)
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("lock_topic"), {"name": name})
            row = await cur.fetchone()
            if row is None:
                raise TopicNotFound(f"unknown topic {name!r}")
            topic_id, current = row
            if total <= current:
                raise InvalidArgument(
                    f"topic {name!r} has {current} partitions: the new total must be more "
                    f"(got {total}); partitions are never removed"
                )
            await conn.execute(
                self._db.q("add_partitions"),
                {"topic_id": topic_id, "current": current, "total": total},
            )
        self._topics.forget(name)

    async def apply_retention(self, group_expiry: timedelta, batch_size: int) -> int:
        if not isinstance(group_expiry, timedelta) or group_expiry <= timedelta(0):
            raise InvalidArgument(f"invalid group_expiry {group_expiry!r}: a positive timedelta")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidArgument(f"invalid batch_size {batch_size!r}: must be an integer >= 1")
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("apply_retention"),
                {"group_expiry": group_expiry, "batch": batch_size},
            )
            row = await cur.fetchone()
            cur = await conn.execute(self._db.q("expired_groups"), {"expiry": group_expiry})
            for group, topic, last_commit in await cur.fetchall():
                logger.warning(
                    "consumer group %r expired on topic %r (no live member and no activity "
                    "within its group ttl; last commit %s): it no longer holds back retention "
                    "or admission",
                    group,
                    topic,
                    last_commit.isoformat(timespec="seconds"),
                )
        return 0 if row is None else int(row[0])

    # -- groups -----------------------------------------------------------------------------

    async def list_groups(self) -> list[GroupInfo]:
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("list_groups"), {"expiry": GROUP_EXPIRY})
            rows = await cur.fetchall()
        return [
            GroupInfo(name, tuple(topics), lag, updated, (), members, state)
            for name, topics, lag, updated, members, state in rows
        ]

    async def describe_group(self, group: str) -> GroupInfo:
        check_name("group", group)
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("describe_group"), {"group": group})
            parts = tuple(PartitionLag(*row) for row in await cur.fetchall())
        if not parts:
            raise GroupNotFound(f"unknown consumer group {group!r}: it has no committed cursor")
        return GroupInfo(
            group,
            tuple(sorted({p.topic for p in parts})),
            sum(p.lag for p in parts),
            max(p.updated_at for p in parts),
            parts,
        )

    async def reset_group(
        self, group: str, topic: str, to: str | int | datetime, partition: int | None
    ) -> dict[int, int]:
        check_name("group", group)
        meta = await self._topics.get(topic)
        params: dict[str, Any] = {
            "group": group,
            "topic_id": meta.id,
            "partition": partition,
            "mode": "earliest",
            "offset": None,
            "timestamp": None,
        }
        if partition is not None and not (
            isinstance(partition, int)
            and not isinstance(partition, bool)
            and 0 <= partition < meta.partitions
        ):
            raise InvalidArgument(
                f"partition {partition!r} does not exist: topic {topic!r} has partitions "
                f"0..{meta.partitions - 1}"
            )
        if isinstance(to, datetime):
            if to.tzinfo is None:
                raise InvalidArgument(f"reset time {to!r} needs a timezone (aware datetime)")
            params.update(mode="timestamp", timestamp=to)
        elif to in ("earliest", "latest"):
            params["mode"] = to
        elif isinstance(to, int) and not isinstance(to, bool):
            params.update(mode="offset", offset=check_offset(to))
        else:
            raise InvalidArgument(
                f"invalid reset target {to!r}: use 'earliest', 'latest', an offset >= 0 or an "
                "aware datetime"
            )
        async with self._db.connection() as conn:
            if params["mode"] == "offset":
                cur = await conn.execute(self._db.q("partition_high_waters"), {"topic_id": meta.id})
                for part, high_water in await cur.fetchall():
                    if (partition is None or part == partition) and params["offset"] > high_water:
                        raise OffsetOutOfRange(
                            f"offset {to} is beyond the high-water mark of {topic}/{part}: "
                            f"allowed 0..{high_water}"
                        )
            cur = await conn.execute(self._db.q("reset_cursors"), params)
            return {part: offset for part, offset in await cur.fetchall()}

    async def delete_group(self, group: str) -> None:
        check_name("group", group)
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("delete_group"), {"group": group})
            if cur.rowcount == 0:
                raise GroupNotFound(f"unknown consumer group {group!r}")
