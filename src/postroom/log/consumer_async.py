"""The read path: a consumer group member with poll/commit and transactional consumption."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from .._acompat import ABackground, AEvent, aoutcome
from .._checks import check_int
from .._db_async import AsyncDatabase
from .._wakeups import LOG, Subscription
from ..errors import Fenced, InvalidArgument, OffsetOutOfRange, TransactionAborted
from .assigned_async import (
    DEFAULT_SESSION_TIMEOUT,
    AsyncAssignedPartitions,
    OffsetReset,
    _Assigned,
)
from .membership_async import DEFAULT_MAX_POLL_INTERVAL
from .metadata_async import AsyncTopicCache
from .reading import gc_paused, utc_timestamps
from .records import (
    Message,
    MessageBuilder,
    TopicPartition,
    check_offset,
    decode_headers,
)

MAX_INT4 = 2**31 - 1
MAX_INT8 = 2**63 - 1
POLL_INTERVAL = 0.5
"""Seconds between polls when no notification arrives: wake-ups are hints, polling is the truth."""
DEFAULT_MAX_BYTES = 50 * 1024 * 1024
"""Keys and values one ``poll()`` fetches at most (Kafka's fetch.max.bytes); one message
always comes, however large."""


@dataclass
class _Prefetch:
    """A fetch sent ahead by ``poll()`` while the application handles the batch it returned
    (after a full batch only: a backlog). Its rows become messages in the next ``poll()``, and
    only for partitions still held at the same assignment and position (lost, handed over,
    seeked or claimed meanwhile: dropped, never delivered)."""

    fetched: dict[tuple[int, int], _Assigned]
    starts: dict[tuple[int, int], int]
    """The position each partition was fetched from."""
    limit: int
    max_bytes: int
    rows: list[tuple[Any, ...]] | None = None
    """The rows fetched (None: the fetch failed)."""
    worker: Any = None
    sending: AEvent = field(default_factory=AEvent)
    """Set as the query is about to be sent (see ``_prefetch_after``)."""


def _ends(rows: list[tuple[Any, ...]]) -> dict[tuple[int, int], int]:
    """The offset after the last row of each partition in ``rows`` (rows of a partition are
    contiguous: a binary search per partition finds its last, not a step per row)."""
    ends: dict[tuple[int, int], int] = {}
    start, count = 0, len(rows)
    while start < count:
        key = (rows[start][0], rows[start][1])
        low, high = start, count - 1
        while low < high:
            middle = (low + high + 1) // 2
            if (rows[middle][0], rows[middle][1]) == key:
                low = middle
            else:
                high = middle - 1
        ends[key] = rows[low][2] + 1
        start = low + 1
    return ends


@dataclass
class AsyncBatch:
    """Messages claimed by ``consumer.transaction()``, and the connection of that transaction.

    Write your own rows with ``batch.connection``: they commit together with the cursor advance
    when the ``with`` block ends, or roll back with it (then the messages are delivered again).
    """

    messages: list[Message]
    connection: psycopg.AsyncConnection[Any]
    topic_partition: TopicPartition | None = None

    def __iter__(self) -> Any:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)


class AsyncConsumer(AsyncAssignedPartitions):
    """A consumer of ``topics`` for group ``group`` (None: a peek that reads without a group,
    from the earliest or latest offsets, and cannot commit).

    Without ``partitions`` it is a member of the group: the group's partitions are spread over
    its live members (sticky, even, cooperative: docs/log.md "Consumer groups"), members
    heartbeat every ``session_timeout / 3`` seconds, and a member silent for ``session_timeout``
    loses its partitions. Every owned partition carries a fencing epoch: a commit (or a
    transactional claim) after the partition moved raises :class:`~postroom.errors.Fenced` and
    leaves the cursor alone. ``member_id`` makes the membership static: a restart within the
    session timeout keeps the partitions, and an older instance with that id that comes back
    is refused for good (:class:`~postroom.errors.InstanceFenced`). ``on_assign`` /
    ``on_revoke`` are called with the partitions gained or lost, from ``poll()``/
    ``transaction()`` (commit in ``on_revoke`` to hand over cleanly). With ``partitions`` the
    assignment is manual, like Kafka's ``assign()``.

    Kafka-style use: ``poll()`` returns messages from the in-memory position, ``commit()``
    stores the next offsets to read. ``transaction()`` instead claims a range under the cursor's
    row lock and commits the caller's writes with the cursor advance.

        with client.consumer("billing", ["orders"]) as consumer:
            for message in consumer.poll(timeout=1.0):
                handle(message)
            consumer.commit()

    (``AsyncConsumer``: ``async with``, ``await consumer.poll(...)``, ``await consumer.commit()``.)

    A new group starts at ``auto_offset_reset``: the earliest retained message or the latest.
    Closing (or leaving the ``with`` block) leaves the group at once. Not safe to share between
    tasks; use one consumer per task.
    """

    def __init__(
        self,
        db: AsyncDatabase,
        topics_cache: AsyncTopicCache,
        group: str | None,
        topics: Iterable[str],
        *,
        partitions: Iterable[TopicPartition] | None = None,
        auto_offset_reset: OffsetReset = "earliest",
        member_id: str | None = None,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        on_assign: Callable[[set[TopicPartition]], Any] | None = None,
        on_revoke: Callable[[set[TopicPartition]], Any] | None = None,
    ) -> None:
        super().__init__(
            db,
            topics_cache,
            group,
            topics,
            partitions=partitions,
            auto_offset_reset=auto_offset_reset,
            member_id=member_id,
            session_timeout=session_timeout,
            max_poll_interval=max_poll_interval,
            on_assign=on_assign,
            on_revoke=on_revoke,
        )
        self._wakeups: Subscription | None = None  # on the client's one listener
        self._woken = AEvent()
        self._prefetch: _Prefetch | None = None
        self._background = ABackground("postroom-prefetch")

    # -- poll / commit --------------------------------------------------------------------

    async def poll(
        self, timeout: float = 1.0, max_messages: int = 500, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> list[Message]:
        """Up to ``max_messages`` messages in all (and about ``max_bytes`` of keys and values,
        at least one message) after the current positions, waiting at most ``timeout`` seconds
        for the first one. Advances the in-memory positions only: call ``commit()`` to store
        them. In a group, also applies assignment changes (``on_revoke``/``on_assign``)."""
        check_int("max_messages", max_messages, 1, MAX_INT4)
        check_int("max_bytes", max_bytes, 1, MAX_INT8)
        await self._ensure_assigned()
        if self._membership is not None:
            self._membership.polled()
        deadline = time.monotonic() + max(timeout, 0)
        while True:
            await self._apply_assignment()
            if not any(a.buffer for a in list(self._assigned.values())):
                # Every notification dropped here is followed by a fetch whose snapshot is
                # later: the prefetch used now was sent before, but a full one sends the next
                # now, and after any other the next poll that needs rows fetches again.
                await self._forget_wakeups()
                if not await self._use_prefetch(max_messages, max_bytes):
                    await self._fetch(max_messages, max_bytes)
            taken = self._take(max_messages) if self._session_live() else []
            if taken:
                return taken
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            await self._wait_for_wakeup(min(remaining, POLL_INTERVAL))

    def _fetch_params(
        self, limit: int, max_bytes: int, ends: dict[tuple[int, int], int] | None = None
    ) -> tuple[list[_Assigned], dict[str, Any]]:
        """The partitions to fetch (in turn, see ``_rotated``) and the query's parameters:
        from each partition's position, or from where ``ends`` says its rows end."""
        with self._lock:
            assigned = self._rotated(list(self._assigned.values()), "_fetch_start")
            positions = [a.position for a in assigned]
        if ends is not None:
            positions = [
                ends.get((a.meta.id, a.partition), position)
                for a, position in zip(assigned, positions, strict=True)
            ]
        params = {
            **self._id_arrays(assigned),
            "positions": positions,
            "limit": limit,
            "max_bytes": max_bytes,
        }
        return assigned, params

    async def _fetch(self, limit: int, max_bytes: int) -> None:
        assigned, params = self._fetch_params(limit, max_bytes)
        if not assigned:
            return
        cur = await self._execute_fetch(params)
        # The cyclic GC paused while the rows are made and turned into messages (no
        # suspension inside: the result is here), and the rows freed before it resumes:
        # reading.gc_paused.
        with gc_paused(self._db.options.pause_gc):
            rows = await cur.fetchall()
        await self._prefetch_after(rows, limit, max_bytes)
        with gc_paused(self._db.options.pause_gc):
            self._buffer(rows, {(a.meta.id, a.partition): a for a in assigned})
            del rows

    async def _execute_fetch(
        self, params: dict[str, Any], sending: AEvent | None = None
    ) -> psycopg.AsyncCursor[Any]:
        """Run ``fetch_messages``; the cursor holds the rows (client memory: the connection
        goes back to the pool before they are turned into messages). ``sending`` is set just
        before the query goes out."""
        async with self._db.connection() as conn:
            # One statement, one snapshot: in autocommit it is one round trip, not three
            # (BEGIN, the query, COMMIT).
            await conn.set_autocommit(True)
            try:
                cur = conn.cursor(binary=True)
                utc_timestamps(cur)
                if sending is not None:
                    sending.set()
                await cur.execute(self._db.q("fetch_messages"), params)
            finally:
                if not conn.closed:  # a broken connection is dropped by the pool as it is
                    await conn.set_autocommit(False)
        return cur

    async def _prefetch_after(
        self, rows: list[tuple[Any, ...]], limit: int, max_bytes: int
    ) -> None:
        """After a full batch of ``rows`` (a backlog), send the next fetch at once, from where
        they end, before they are turned into messages: the server reads it while this
        ``poll()`` builds and returns them and the application handles them (see
        ``_Prefetch``). Its rows are used once every buffer is empty again, so its start is
        then each partition's position, or it is dropped."""
        if len(rows) < limit or self._closed or self._prefetch is not None:
            return
        assigned, params = self._fetch_params(limit, max_bytes, _ends(rows))
        if not assigned:
            return
        keys = [(a.meta.id, a.partition) for a in assigned]
        starts = dict(zip(keys, params["positions"], strict=True))
        prefetch = _Prefetch(dict(zip(keys, assigned, strict=True)), starts, limit, max_bytes)
        prefetch.worker = self._background.submit(self._run_prefetch, prefetch, params)
        self._prefetch = prefetch
        # Let the prefetch send its query before the rows are turned into messages: that
        # loop holds the GIL (the event loop, in the async consumer) for milliseconds, and
        # the query would wait for it to end. Set just before the send, the event wakes this
        # thread once the prefetch blocks on the server (or after 2 ms, if it was not
        # scheduled: a busy machine).
        await prefetch.sending.wait_timeout(0.002)

    async def _run_prefetch(self, prefetch: _Prefetch, params: dict[str, Any]) -> None:
        """The prefetch's query, and its rows made (not yet messages: that is left to the
        next ``poll()``, which the sync consumer runs in another thread, so the two share
        the work while one of them waits: this one for the server, that one for a commit)."""
        try:
            cur = await self._execute_fetch(params, prefetch.sending)
            with gc_paused(
                self._db.options.pause_gc
            ):  # the rows are GC-tracked tuples (see _fetch)
                prefetch.rows = await cur.fetchall()
        except Exception:  # noqa: BLE001 - dropped: the fetch in poll() runs again and reports
            prefetch.rows = None

    async def _use_prefetch(self, limit: int, max_bytes: int) -> bool:
        """Buffer the prefetched rows (waiting for them if needed); whether any message came
        of them. False (fetch now) if there was none, it failed, it was sent for other limits,
        or every partition it read moved meanwhile."""
        prefetch = await self._drop_prefetch()
        if prefetch is None or prefetch.rows is None:
            return False
        rows, prefetch.rows = prefetch.rows, None
        if (prefetch.limit, prefetch.max_bytes) != (limit, max_bytes):
            return False
        await self._prefetch_after(rows, limit, max_bytes)
        with gc_paused(self._db.options.pause_gc):  # as in _fetch
            self._buffer(rows, prefetch.fetched, prefetch.starts)
            del rows
        return any(a.buffer for a in prefetch.fetched.values())

    async def _drop_prefetch(self) -> _Prefetch | None:
        """Wait for the fetch in flight, if any, and take it off the consumer."""
        prefetch, self._prefetch = self._prefetch, None
        if prefetch is not None:
            await aoutcome(prefetch.worker)  # never raises: _run_prefetch keeps no error
        return prefetch

    def _buffer(
        self,
        rows: list[tuple[Any, ...]],
        fetched: dict[tuple[int, int], _Assigned],
        starts: dict[tuple[int, int], int] | None = None,
    ) -> None:
        """Append fetched rows to their partitions' buffers as messages (with ``starts``, the
        rows of a prefetch: only where the position is still the one fetched from)."""
        # The per-row loop is most of a consumer's CPU: rows come ordered by partition, so the
        # buffer is looked up once per partition, and messages are built inline (one slot
        # store per field, no call per row).
        current: tuple[int, int] | None = None
        append: Any = None
        name = ""
        # object.__new__(MessageBuilder) in the loop: a helper's call frame was ~20% of the
        # loop (micro-benchmark: 239 -> 196 ns a message).
        new, builder, message_class = object.__new__, MessageBuilder, Message
        for topic_id, partition, offset, key, value, headers, created_at in rows:
            if current != (topic_id, partition):
                current = (topic_id, partition)
                target = self._by_id.get(current)
                if target is None or target is not fetched.get(current):
                    # Handed over meanwhile (or taken again, at the cursor): these rows were
                    # fetched from the old position, for the old assignment only.
                    append = None
                elif starts is not None and (
                    target.position != starts.get(current) or target.buffer
                ):
                    append = None  # seeked or claimed since the prefetch was sent
                else:
                    append, name = target.buffer.append, target.meta.name
            if append is not None:
                message: Any = new(builder)
                message.topic = name
                message.partition = partition
                message.offset = offset
                message.key = key
                message.value = value
                message.headers = {} if headers is None else decode_headers(headers)
                message.timestamp = created_at
                message.__class__ = message_class
                append(message)

    def _take(self, max_messages: int) -> list[Message]:
        taken: list[Message] = []
        with self._lock:  # the heartbeat loop hands over only partitions with nothing taken
            for assigned in self._assigned.values():
                buffer, position = assigned.buffer, assigned.position
                # Offsets ascend in a buffer: drop those superseded by a seek or a
                # transactional claim, then move the rest over whole (no step per message).
                while buffer and buffer[0].offset < position:
                    buffer.popleft()
                room = max_messages - len(taken)
                if not buffer or room <= 0:
                    continue
                if len(buffer) <= room:
                    taken.extend(buffer)
                    buffer.clear()
                else:
                    taken.extend([buffer.popleft() for _ in range(room)])
                assigned.position = taken[-1].offset + 1
        return taken

    async def _wait_for_wakeup(self, timeout: float) -> None:
        """Sleep until a publish to an assigned topic is notified, at most ``timeout`` s.

        Notifications are hints: a lost one costs at most one poll interval. They come from
        the client's one listener (``_listener_async``), which reconnects by itself.
        """
        wanted = [str(a.meta.id) for a in self._assigned.values()]
        if self._wakeups is None:
            self._wakeups = await self._db.wakeups.subscribe(LOG, self._woken_by, wanted)
        else:
            self._wakeups.want(wanted)
        await self._woken.wait_timeout(timeout)

    async def _woken_by(self, what: str | None) -> None:
        self._woken.set()  # None: listening (again): anything may have been published

    async def _forget_wakeups(self) -> None:
        """Drop the wake-ups already received: the fetch that follows sees every message they
        announced (each was sent after its commit). Left set, each would wake the next wait at
        once for an empty fetch: at a commit per millisecond the consumer then spent its time
        on empty fetches and fell behind (bench/RESULTS.md)."""
        self._woken.clear()

    async def _close_listener(self) -> None:
        if self._wakeups is not None:
            subscription, self._wakeups = self._wakeups, None
            subscription.close()

    async def commit(self, offsets: Mapping[TopicPartition, int] | Message | None = None) -> None:
        """Store the next offsets to read: the current positions (as Kafka: what ``poll()``
        returned, handled or not), ``offsets`` (each at most the partition's high-water mark,
        else :class:`OffsetOutOfRange`), or, given a message, the offset after it on its
        partition (it and everything before it there is done). A handler that stops in the
        middle of a batch calls ``rewind()`` first (docs/log.md, "Poll/commit").

        Cursors only move forward: committing an offset below the stored one changes nothing
        (use ``Client.reset_group`` to go back). A member that lost a partition (session
        expired, handed over) gets :class:`Fenced` and nothing of the call is stored; the
        partitions refused then deliver nothing more until the group hands them back. An
        instance replaced by a newer one with its ``member_id`` gets :class:`InstanceFenced`."""
        self._need_group("commit")
        if isinstance(offsets, Message):
            offsets = {offsets.topic_partition: offsets.offset + 1}
        self._check_can_commit()  # fenced for good, or left for not polling in time
        if not self._ready:
            await self._ensure_assigned()
        # Assignment changes are applied by poll() only, never here: a partition being handed
        # over keeps its epoch until the batch polled under it is committed, and offsets are
        # always committed under the epoch they were read at (or refused as Fenced).
        with self._lock:
            if offsets is None:
                # Only partitions read past their cursor: one with nothing new (position ==
                # committed) may be handed over by the heartbeat loop at any moment, and
                # committing it under its old epoch would refuse the whole call as Fenced.
                chosen = [a for a in self._assigned.values() if a.position > a.committed]
                values = [a.position for a in chosen]
            else:
                chosen = [self._get(tp) for tp in offsets]
                values = [check_offset(v) for v in offsets.values()]
                for assigned, value in zip(chosen, values, strict=True):
                    self._check_read(assigned, value)
        if not chosen:
            return
        async with self._db.connection() as conn:
            with self._refusals(chosen):
                await conn.execute(
                    self._db.q("commit_offsets"),
                    {
                        "group": self.group,
                        **self._member_params(),
                        **self._id_arrays(chosen),
                        "epochs": [a.epoch for a in chosen],
                        "offsets": values,
                    },
                )
        with self._lock:
            for assigned, value in zip(chosen, values, strict=True):
                assigned.committed = max(assigned.committed, value)

    def _need_group(self, what: str) -> None:
        if self.group is None:
            raise InvalidArgument(
                f"a consumer without a group only reads: {what}() needs a group "
                "(client.consumer('name', topics))"
            )

    async def committed(self, tp: TopicPartition) -> int | None:
        """The stored next offset of the group for ``tp`` (None without a group)."""
        if self.group is None:
            return None
        await self._ensure_assigned()
        assigned = self._get(tp)
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("read_cursors"), {"group": self.group, **self._id_arrays([assigned])}
            )
            row = await cur.fetchone()
        return None if row is None else int(row[2])

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next message ``poll()`` returns for ``tp``."""
        await self._ensure_assigned()
        return self._get(tp).position

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make the next ``poll()`` start at ``offset`` in ``tp`` (0 .. high-water mark)."""
        check_offset(offset)
        await self._ensure_assigned()
        assigned = self._get(tp)
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("high_water"),
                {"topic_id": assigned.meta.id, "partition": assigned.partition},
            )
            row = await cur.fetchone()
        high_water = 0 if row is None else int(row[0])
        if offset > high_water:
            raise OffsetOutOfRange(
                f"offset {offset} is beyond the high-water mark of {tp.topic}/{tp.partition}: "
                f"allowed 0..{high_water}"
            )
        await self._drop_prefetch()
        assigned.position = offset
        assigned.buffer.clear()

    async def rewind(self, unhandled: Iterable[Message]) -> None:
        """Make the next ``poll()`` return ``unhandled`` again: each partition's position goes
        back to the first of them, so ``commit()`` then stores only what was handled before.

            messages = consumer.poll()
            for i, message in enumerate(messages):
                try:
                    handle(message)
                except Exception:
                    consumer.rewind(messages[i:])  # awaited in AsyncConsumer
                    break
            consumer.commit()
        """
        first: dict[TopicPartition, int] = {}
        for message in unhandled:
            tp = message.topic_partition
            first[tp] = min(first.get(tp, message.offset), message.offset)
        if not first:
            return
        await self._drop_prefetch()
        with self._lock:
            for tp, offset in first.items():
                assigned = self._get(tp)
                if offset < assigned.position:
                    assigned.position = offset
                    assigned.buffer.clear()

    # -- transactional consumption --------------------------------------------------------

    @asynccontextmanager
    async def transaction(
        self, max_messages: int = 100, timeout: float = 0.0
    ) -> AsyncIterator[AsyncBatch]:
        """Claim up to ``max_messages`` messages of one partition, under its cursor row lock.

        The block gets the messages and the connection; when it ends without error, the
        caller's writes and the cursor advance commit together; on error both roll back and
        the messages will be delivered again. Other members of the group claim other
        partitions meanwhile (SKIP LOCKED). Waits up to ``timeout`` seconds for messages; the
        batch may be empty.

            with consumer.transaction() as batch:  # async with, for AsyncConsumer
                for message in batch:
                    batch.connection.execute("INSERT INTO invoices ...", ...)  # awaited
        """
        check_int("max_messages", max_messages, 1, MAX_INT4)  # an integer in SQL
        self._need_group("transaction")
        await self._ensure_assigned()
        deadline = time.monotonic() + max(timeout, 0)
        self._in_transaction = True
        if self._membership is not None:
            self._membership.polled()
        try:
            with self._session_guard():
                async with self._db.connection() as conn:
                    while True:
                        messages = await self._claim(conn, max_messages)
                        if messages or time.monotonic() >= deadline:
                            break
                        await conn.rollback()
                        await self._wait_for_wakeup(min(deadline - time.monotonic(), POLL_INTERVAL))
                        await self._apply_assignment()
                    tp = messages[0].topic_partition if messages else None
                    yield AsyncBatch(messages, conn, tp)
                    if conn.info.transaction_status == TransactionStatus.INERROR:
                        raise TransactionAborted(
                            "a database error aborted the transaction of this batch (caught in the "
                            "block?): nothing was committed and the batch will be delivered again"
                        )
        finally:
            self._in_transaction = False
            if self._membership is not None:
                self._membership.polled()
        if messages:
            # Committed: later polls continue after the claimed range.
            with self._lock:
                assigned = self._assigned.get(messages[0].topic_partition)
                if assigned is not None:
                    assigned.position = max(assigned.position, messages[-1].offset + 1)
                    assigned.committed = max(assigned.committed, assigned.position)

    @contextmanager
    def _session_guard(self) -> Iterator[None]:
        """A batch transaction ended by the server for idling past the session timeout (the
        member was paused: its partitions may have moved) is reported as :class:`Fenced`."""
        try:
            yield
        except pg_errors.LockNotAvailable as exc:
            # A rebalance held the group's rows past this member's lock_timeout (a storm of
            # joins and leaves): the partitions may be moving; nothing was committed.
            raise Fenced(
                f"member {self.member_id!r} of group {self.group!r} waited past its lock "
                "timeout for a rebalance in progress: nothing was committed, call again"
            ) from exc
        except pg_errors.IdleInTransactionSessionTimeout as exc:
            raise Fenced(
                f"member {self.member_id!r} of group {self.group!r} idled inside its batch "
                f"past the session timeout ({self.session_timeout:g} s): the server ended "
                "the transaction, nothing was committed"
            ) from exc

    async def _claim(self, conn: psycopg.AsyncConnection[Any], limit: int) -> list[Message]:
        with self._lock:
            order = self._rotated(list(self._assigned.values()), "_claim_start")
        if not order:
            return []
        cur = conn.cursor(binary=True)
        utc_timestamps(cur)  # as poll()'s
        with self._refusals(order, drop=False):
            await cur.execute(
                self._db.q("claim_batch"),
                {
                    "group": self.group,
                    **self._member_params(),
                    **self._id_arrays(order),
                    "epochs": [a.epoch for a in order],
                    "limit": limit,
                },
            )
        names = {assigned.meta.id: assigned.meta.name for assigned in order}
        messages: list[Message] = []
        append, new, builder = messages.append, object.__new__, MessageBuilder
        message_class = Message
        with gc_paused(self._db.options.pause_gc):  # as in _fetch
            rows = await cur.fetchall()
            for topic_id, partition, offset, key, value, headers, created_at in rows:
                message: Any = new(builder)
                message.topic = names.get(topic_id, order[0].meta.name)
                message.partition = partition
                message.offset = offset
                message.key = key
                message.value = value
                message.headers = decode_headers(headers)
                message.timestamp = created_at
                message.__class__ = message_class
                append(message)
            del rows
        return messages

    # -- life cycle -----------------------------------------------------------------------

    async def close(self) -> None:
        """Leave the group at once (after ``on_revoke`` for the partitions held), so they move
        without waiting out the session timeout, and release the connections. Does not
        commit: commit first, or in ``on_revoke``."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._drop_prefetch()
            self._background.close()
            if self._membership is not None:
                with self._lock:
                    held = set(self._assigned)
                try:
                    await self._call(self._on_revoke, held)
                finally:
                    await self._membership.leave()
        finally:
            with self._lock:
                self._assigned.clear()
                self._by_id.clear()
            await self._close_listener()

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while not self._closed:
            for message in await self.poll(timeout=POLL_INTERVAL):
                yield message
