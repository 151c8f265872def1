"""The write path: one ``reserve_offsets`` statement for every partition a batch writes, then
one binary COPY, in the caller's transaction (staged: ``staged_async.py``) or a pooled one. The
engine's ``publish`` and the batching producer (``producer_async.py``) both write through it."""

from __future__ import annotations

import itertools
import random
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg

from .._acompat import asleep
from .._checks import check_timeout
from .._db_async import AsyncDatabase, return_connection
from ..errors import BacklogFull, InvalidArgument, TopicNotFound
from .copydata import copy_data, copy_values
from .errors import describe_write, log_errors
from .metadata_async import AsyncTopicCache
from .partitioner import partition_for_key
from .records import Published, Record, TopicMeta
from .staged_async import stage
from .staging import record_columns

SentHook = Callable[[], Any]
"""What ``append_values`` calls (and awaits, in the async flavour) once a batch's COPY data is
handed to the server."""


class AsyncAppender:
    """Writes records to the log in the caller's transaction or a pooled one.

    One ``reserve_offsets`` statement locks the counter rows of every partition written, in
    ascending (topic id, partition) order so concurrent writers cannot deadlock, and reserves a
    range on each; one binary COPY then writes the records at those offsets. Unkeyed records
    without a partition share one sticky partition per call.
    """

    def __init__(self, db: AsyncDatabase, topics: AsyncTopicCache) -> None:
        self._db = db
        self._topics = topics
        self._sticky = itertools.count(random.randrange(1 << 16))

    async def append(
        self, records: list[Record], conn: object = None, timeout: float | None = None
    ) -> list[Published]:
        """Write ``records``. A write refused by admission control (:class:`BacklogFull`) is
        tried again, with backoff, for up to ``timeout`` seconds (not in the caller's
        transaction ``conn``, which the refusal aborted)."""
        if not records:
            return []
        results: list[Published] = await self._retrying(False, records, conn, timeout)
        return results

    async def append_values(
        self,
        topic: str,
        values: list[bytes],
        conn: object = None,
        timeout: float | None = None,
        *,
        partition: int | None = None,
        on_sent: SentHook | None = None,
    ) -> tuple[int, int | None]:
        """Write unkeyed, headerless ``values`` (non-empty, already checked) to one partition
        of ``topic``: ``partition``, else a sticky one; the partition and the first offset
        (None in the caller's transaction ``conn``: offsets are assigned at its commit).
        ``on_sent`` is awaited once the COPY data is handed to the server (before the server
        has stored it and before the commit). Retries as ``append``."""
        position: tuple[int, int | None] = await self._retrying(
            True, (topic, values, partition, on_sent), conn, timeout
        )
        return position

    def cached(self, topic: str) -> TopicMeta | None:
        """The topic's metadata if it is in the cache (no query, no check of its age)."""
        return self._topics.peek(topic)

    async def meta(self, topic: str) -> TopicMeta:
        """The topic's metadata (cached); raises :class:`TopicNotFound`."""
        with log_errors():
            return await self._topics.get(topic)

    async def open_connections(self, count: int) -> None:
        """Have ``count`` pooled connections open (at most the pool's ``max_size``): check
        them out at once and give them back, so batches written at once each find one ready
        instead of waiting for the pool to connect. Best effort: errors are ignored (the writes
        meet them again and report them)."""
        pool = self._db.pool
        held: list[Any] = []
        try:
            for _ in range(min(count, pool.max_size)):
                held.append(await pool.getconn(timeout=5))
        except Exception:  # noqa: BLE001 - best effort: see the docstring
            pass
        finally:
            for conn in held:
                await return_connection(pool, conn)

    def next_sticky(self, partitions: int) -> int:
        """The next sticky partition of a topic of ``partitions`` partitions."""
        return next(self._sticky) % partitions

    async def _retrying(self, values: bool, what: Any, conn: object, timeout: float | None) -> Any:
        check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        committing = describe_write(values, what)
        while True:
            try:
                with log_errors():
                    async with self._db.writing(conn, committing=committing) as (db_conn, own):
                        # In the caller's transaction: staged, written at its commit (no
                        # counter lock until then: staged_async.py). Else written now.
                        if values:
                            if own:
                                return await self._append_values(db_conn, what, conn is not None)
                            return await self._stage_values(db_conn, what)
                        if own:
                            return await self._append(db_conn, what, conn is not None)
                        return await self._stage(db_conn, what)
            except BacklogFull:
                remaining = 0.0 if deadline is None else deadline - time.monotonic()
                if conn is not None or remaining <= 0:
                    raise
                await asleep(min(delay, remaining))
                delay = min(delay * 2, 0.5)

    async def _append_values(
        self,
        conn: psycopg.AsyncConnection[Any],
        what: tuple[str, list[bytes], int | None, SentHook | None],
        use_conn: bool,
    ) -> tuple[int, int]:
        topic, values, partition, on_sent = what
        meta = await self._topics.get(topic, conn if use_conn else None)
        if partition is None:
            partition = next(self._sticky) % meta.partitions
        cur = await conn.execute(
            self._db.q("reserve_offsets"),
            {"topic_ids": [meta.id], "partitions": [partition], "counts": [len(values)]},
        )
        row = await cur.fetchone()
        if row is None:  # the counter row is gone: the topic was deleted meanwhile
            self._topics.forget(meta.name)
            raise TopicNotFound(f"topic {meta.name!r} was deleted while publishing")
        async with conn.cursor().copy(self._db.q("copy_messages")) as copy:
            await copy.write(copy_values(meta.id, partition, row[2], values))
            if on_sent is not None:
                await on_sent()
        return partition, row[2]

    async def _stage_values(
        self,
        conn: psycopg.AsyncConnection[Any],
        what: tuple[str, list[bytes], int | None, SentHook | None],
    ) -> tuple[int, None]:
        topic, values, partition, on_sent = what
        meta = await self._topics.get(topic, conn)
        if partition is None:
            partition = next(self._sticky) % meta.partitions
        count = len(values)
        await stage(
            self._db,
            self._topics,
            conn,
            [meta],
            [meta.id] * count,
            [partition] * count,
            None,
            values,
            None,
        )
        if on_sent is not None:
            await on_sent()
        return partition, None

    async def _stage(
        self, conn: psycopg.AsyncConnection[Any], records: list[Record]
    ) -> list[Published]:
        metas: dict[str, TopicMeta] = {}
        for record in records:
            if record.topic not in metas:
                metas[record.topic] = await self._topics.get(record.topic, conn)
        topic_ids, partitions, keys, headers = record_columns(records, self._group(records, metas))
        values = [record.value for record in records]
        await stage(
            self._db,
            self._topics,
            conn,
            list(metas.values()),
            topic_ids,
            partitions,
            keys,
            values,
            headers,
        )
        return [Published(partition, None) for partition in partitions]

    async def _append(
        self, conn: psycopg.AsyncConnection[Any], records: list[Record], use_conn: bool
    ) -> list[Published]:
        metas: dict[str, TopicMeta] = {}
        for record in records:
            if record.topic not in metas:
                metas[record.topic] = await self._topics.get(
                    record.topic, conn if use_conn else None
                )
        groups = self._group(records, metas)
        order = sorted(groups)  # ascending (topic id, partition): the counter row lock order
        cur = await conn.execute(
            self._db.q("reserve_offsets"),
            {
                "topic_ids": [topic_id for topic_id, _ in order],
                "partitions": [partition for _, partition in order],
                "counts": [len(groups[group]) for group in order],
            },
        )
        firsts = {(row[0], row[1]): row[2] for row in await cur.fetchall()}
        missing = [group for group in order if group not in firsts]
        if missing:
            # The counter row is gone: the topic was deleted (maybe recreated) meanwhile.
            for meta in metas.values():
                self._topics.forget(meta.name)
            names = [m.name for m in metas.values() if m.id == missing[0][0]]
            raise TopicNotFound(f"topic {names[0]!r} was deleted while publishing")
        data = copy_data(
            [
                (
                    group[0],
                    group[1],
                    firsts[group],
                    # One group holds every record, in input order: skip the indirection.
                    records if len(order) == 1 else [records[i] for i in groups[group]],
                )
                for group in order
            ]
        )
        async with conn.cursor().copy(self._db.q("copy_messages")) as copy:
            await copy.write(data)
        if len(order) == 1:
            partition, first = order[0][1], firsts[order[0]]
            return [Published(partition, offset) for offset in range(first, first + len(records))]
        results: list[Published] = [None] * len(records)  # type: ignore[list-item]
        for group in order:
            for offset, index in enumerate(groups[group], firsts[group]):
                results[index] = Published(group[1], offset)
        return results

    def _group(
        self, records: list[Record], metas: dict[str, TopicMeta]
    ) -> Mapping[tuple[int, int], Sequence[int]]:
        """Indexes of ``records`` by (topic id, partition), in input order within each group."""
        if len(metas) == 1 and all(r.key is None and r.partition is None for r in records):
            # The bulk case: one topic, unkeyed, so one sticky partition for the whole call.
            (meta,) = metas.values()
            return {(meta.id, next(self._sticky) % meta.partitions): range(len(records))}
        sticky: dict[str, int] = {}
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for index, record in enumerate(records):
            meta = metas[record.topic]
            if record.partition is None and record.key is None:  # the common case, inlined
                partition = sticky.get(meta.name)
                if partition is None:
                    partition = sticky[meta.name] = next(self._sticky) % meta.partitions
            else:
                partition = self._place(record, meta, sticky)
            groups[(meta.id, partition)].append(index)
        return groups

    async def check_partition(self, record: Record) -> None:
        """Raise if ``record`` names a partition its topic does not have (metadata cached)."""
        if record.partition is not None:
            self._place(record, await self._topics.get(record.topic), {})

    async def refusals(self, records: list[Record]) -> dict[int, Exception]:
        """The errors of the ``records`` (by index) that cannot be written: unknown topic,
        partition out of range. Checked on the metadata cache, before any write."""
        metas: dict[str, TopicMeta | TopicNotFound] = {}
        for name in {r.topic for r in records}:
            try:
                metas[name] = await self._topics.get(name)
            except TopicNotFound as exc:
                metas[name] = exc
        if all(isinstance(m, TopicMeta) for m in metas.values()) and all(
            r.partition is None for r in records
        ):
            return {}  # the common case: no per-record work
        refused: dict[int, Exception] = {}
        for index, record in enumerate(records):
            meta = metas[record.topic]
            if isinstance(meta, TopicNotFound):
                refused[index] = meta
            elif record.partition is not None and record.partition >= meta.partitions:
                try:
                    self._place(record, meta, {})
                except InvalidArgument as exc:
                    refused[index] = exc
        return refused

    def _place(self, record: Record, meta: TopicMeta, sticky: dict[str, int]) -> int:
        if record.partition is not None:
            if record.partition >= meta.partitions:
                raise InvalidArgument(
                    f"partition {record.partition} does not exist: topic {meta.name!r} has "
                    f"partitions 0..{meta.partitions - 1}"
                )
            return record.partition
        if record.key is not None:
            return partition_for_key(record.key, meta.partitions)
        if meta.name not in sticky:
            sticky[meta.name] = next(self._sticky) % meta.partitions
        return sticky[meta.name]
