"""Topic metadata (id and partition count by name), cached briefly like a Kafka client's."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from .._db_async import AsyncDatabase
from ..errors import TopicNotFound
from .records import TopicMeta, check_name

METADATA_MAX_AGE = 5.0
"""Seconds a cached partition count is trusted (Kafka's metadata.max.age.ms is 5 minutes)."""


class AsyncTopicCache:
    def __init__(self, db: AsyncDatabase) -> None:
        self._db = db
        self._cache: dict[str, tuple[TopicMeta, float]] = {}

    async def get(self, name: str, conn: psycopg.AsyncConnection[Any] | None = None) -> TopicMeta:
        """The topic's metadata; raises :class:`TopicNotFound`. Reads on ``conn`` if given, so a
        topic created earlier in the caller's transaction is found."""
        cached = self._cache.get(name)
        if cached is not None and time.monotonic() - cached[1] < METADATA_MAX_AGE:
            return cached[0]
        check_name("topic", name)
        if conn is None:
            async with self._db.connection() as pooled:
                row = await self._fetch(pooled, name)
        else:
            row = await self._fetch(conn, name)
        if row is None:
            self._cache.pop(name, None)
            raise TopicNotFound(
                f"unknown topic {name!r}: create it with create_topic()",
                cli=f"unknown topic {name!r}: create it with `postroom topic create {name}`",
            )
        meta = TopicMeta(row[0], name, row[1])
        self._cache[name] = (meta, time.monotonic())
        self._db.topic_names[meta.id] = name
        return meta

    async def _fetch(self, conn: psycopg.AsyncConnection[Any], name: str) -> tuple[int, int] | None:
        cur = await conn.execute(self._db.q("topic_by_name"), {"name": name})
        row = await cur.fetchone()
        return None if row is None else (row[0], row[1])

    def peek(self, name: str) -> TopicMeta | None:
        """The cached metadata of the topic, whatever its age; None if not cached (no query)."""
        cached = self._cache.get(name)
        return None if cached is None else cached[0]

    def forget(self, name: str) -> None:
        self._cache.pop(name, None)
