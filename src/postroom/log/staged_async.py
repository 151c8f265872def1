"""Publishing in the caller's transaction: messages are staged, and written to the log with
their offsets when that transaction commits (migration 0017).

A publish that joins the caller's transaction must not lock its partition's counter row: held
until the caller commits, two transactions writing two partitions in opposite order would
deadlock (issue 22). So it only stages its messages (``stage_messages``, one statement, no
locks); at COMMIT a deferred trigger locks every counter row the transaction writes, in
ascending (topic id, partition) order, and writes them in call order. The partition is chosen
here (murmur2 for keys, sticky for unkeyed, as the direct path does), so it is returned; the
offset is not known before the commit and is returned as None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from .._db_async import AsyncDatabase
from ..errors import TopicNotFound
from .metadata_async import AsyncTopicCache
from .records import TopicMeta


async def stage(
    db: AsyncDatabase,
    topics: AsyncTopicCache,
    conn: psycopg.AsyncConnection[Any],
    metas: Sequence[TopicMeta],
    topic_ids: list[int],
    partitions: list[int],
    keys: list[bytes | None] | None,
    values: list[bytes],
    headers: list[Jsonb | None] | None,
) -> None:
    """Stage ``values`` (message i to ``partitions[i]`` of ``topic_ids[i]``) in the transaction
    of ``conn``. Raises :class:`TopicNotFound` if one of ``metas`` was deleted meanwhile, and
    :class:`BacklogFull` (translated by the connection block) if a backlog is full now; either
    aborts the caller's transaction."""
    try:
        await conn.execute(
            db.q("stage_messages"),
            {
                "topic_ids": topic_ids,
                "partitions": partitions,
                "keys": keys,
                "values": values,
                "headers": headers,
            },
        )
    except pg_errors.NoDataFound as exc:
        # The counter row is gone: the topic was deleted (maybe recreated) meanwhile.
        for meta in metas:
            topics.forget(meta.name)
        names = ", ".join(repr(meta.name) for meta in metas)
        raise TopicNotFound(f"topic {names} was deleted while publishing") from exc
