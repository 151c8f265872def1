# Generated from src/postroom/log/consumer_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The read path: a consumer with poll/commit and transactional consumption, around one
partition state (``partitions.py``) that its assignment (``assigners_async.py``: the group's
or a manual one) keeps, and filled by its fetcher (``fetch_async.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from .. import _tracing
from .._acompat import Event
from .._checks import check_int
from .._db import Database
from .._wakeups import LOG, Subscription
from ..errors import ConsumerClosed, Fenced, InvalidArgument, OffsetOutOfRange, TransactionAborted
from .assigners import GroupAssignment, ManualAssignment
from .claim_policy import ClaimPolicy
from .fetch import Fetcher
from .membership import DEFAULT_MAX_POLL_INTERVAL
from .metadata import TopicCache
from .partitions import PartitionState, id_arrays
from .reading import gc_paused, utc_timestamps
from .records import (
    DEFAULT_SESSION_TIMEOUT,
    Message,
    MessageBuilder,
    OffsetReset,
    TopicPartition,
    check_max_poll_interval,
    check_member_id,
    check_name,
    check_offset,
    check_session_timeout,
    decode_headers,
)

MAX_INT4 = 2**31 - 1
MAX_INT8 = 2**63 - 1
DEFAULT_MAX_BYTES = 50 * 1024 * 1024
"""Keys and values one ``poll()`` fetches at most (Kafka's fetch.max.bytes); one message
always comes, however large."""


@dataclass
class Batch:
    """Messages claimed by ``consumer.transaction()``, and the connection of that transaction.

    Write your own rows with ``batch.connection``: they commit together with the cursor advance
    when the ``with`` block ends, or roll back with it (then the messages are delivered again).
    """

    messages: list[Message]
    connection: psycopg.Connection[Any]
    topic_partition: TopicPartition | None = None

    def __iter__(self) -> Any:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)


class Consumer:
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
        db: Database,
        topics_cache: TopicCache,
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
        # No group: a peek, reading without cursors (nothing to commit, nothing created).
        self.group = None if group is None else check_name("group", group)
        topic_names = [topics] if isinstance(topics, str) else list(topics)
        if not topic_names:
            raise InvalidArgument("a consumer needs at least one topic")
        for name in topic_names:
            check_name("topic", name)
        if auto_offset_reset not in ("earliest", "latest"):
            raise InvalidArgument(
                f"invalid auto_offset_reset {auto_offset_reset!r}: use 'earliest' or 'latest'"
            )
        requested = None if partitions is None else [TopicPartition(*p) for p in partitions]
        self.member_id = check_member_id(member_id)
        self.session_timeout = check_session_timeout(session_timeout)
        self.max_poll_interval = check_max_poll_interval(max_poll_interval)
        self._db = db
        self._state = PartitionState(self.group, self.member_id)
        self._assignment: GroupAssignment | ManualAssignment
        if requested is None and self.group is not None:
            self._assignment = GroupAssignment(
                db,
                topics_cache,
                self._state,
                self.group,
                self.member_id,
                topic_names,
                auto_offset_reset,
                self.session_timeout,
                self.max_poll_interval,
                on_assign,
                on_revoke,
            )
        else:
            self._assignment = ManualAssignment(
                db, topics_cache, self._state, self.group, topic_names, requested, auto_offset_reset
            )
        self._policy = ClaimPolicy()  # what to fetch or claim, and when: claim_policy.py
        self._fetcher = Fetcher(db, self._state, self._policy)
        self._wakeups: Subscription | None = None  # on the client's one listener
        self._woken = Event()
        self._ready = False
        self._closed = False

    def _ensure_assigned(self) -> None:
        """Start the assignment on first use (join the group, or start the partitions asked
        for), else bring it up to date."""
        if self._ready:
            self._assignment.refresh()
            return
        if self._closed:
            raise ConsumerClosed("the consumer is closed: create a new one with client.consumer()")
        self._assignment.start()
        self._ready = True
        self._assignment.apply()

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now (joins the group first if needed)."""
        self._ensure_assigned()
        return self._state.partitions()

    # -- poll / commit --------------------------------------------------------------------

    def poll(
        self, timeout: float = 1.0, max_messages: int = 500, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> list[Message]:
        """Up to ``max_messages`` messages in all (and about ``max_bytes`` of keys and values,
        at least one message) after the current positions, waiting at most ``timeout`` seconds
        for the first one. Advances the in-memory positions only: call ``commit()`` to store
        them. In a group, also applies assignment changes (``on_revoke``/``on_assign``)."""
        check_int("max_messages", max_messages, 1, MAX_INT4)
        check_int("max_bytes", max_bytes, 1, MAX_INT8)
        self._ensure_assigned()
        self._assignment.polled()
        deadline = self._policy.deadline(timeout)
        while True:
            self._assignment.apply()
            if self._policy.fetch_now(self._state.has_buffered()):
                # Every notification dropped here is followed by a fetch whose snapshot is
                # later: the prefetch used now was sent before, but a full one sends the next
                # now, and after any other the next poll that needs rows fetches again.
                self._forget_wakeups()
                self._fetcher.fill(max_messages, max_bytes)
            taken = self._state.take(max_messages) if self._assignment.session_live() else []
            if taken:
                if _tracing.ENABLED and _tracing.recording():
                    _tracing.received(taken, self.group)
                return taken
            wait = self._policy.wait(deadline)
            if wait is None:
                return []
            self._wait_for_wakeup(wait)

    def _wait_for_wakeup(self, timeout: float) -> None:
        """Sleep until a publish to an assigned topic is notified, at most ``timeout`` s.

        Notifications are hints: a lost one costs at most one poll interval. They come from
        the client's one listener (``_listener_async``), which reconnects by itself.
        """
        wanted = [str(a.meta.id) for a in self._state.in_use()]
        if self._wakeups is None:
            self._wakeups = self._db.wakeups.subscribe(LOG, self._woken_by, wanted)
        else:
            self._wakeups.want(wanted)
        self._woken.wait_timeout(timeout)

    def _woken_by(self, what: str | None) -> None:
        self._woken.set()  # None: listening (again): anything may have been published

    def _forget_wakeups(self) -> None:
        """Drop the wake-ups already received: the fetch that follows sees every message they
        announced (each was sent after its commit). Left set, each would wake the next wait at
        once for an empty fetch: at a commit per millisecond the consumer then spent its time
        on empty fetches and fell behind (bench/RESULTS.md)."""
        self._woken.clear()

    def _close_listener(self) -> None:
        if self._wakeups is not None:
            subscription, self._wakeups = self._wakeups, None
            subscription.close()

    def commit(self, offsets: Mapping[TopicPartition, int] | Message | None = None) -> None:
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
        self._assignment.check_can_commit()  # fenced for good, or left for not polling in time
        if not self._ready:
            self._ensure_assigned()
        # Assignment changes are applied by poll() only, never here: a partition being handed
        # over keeps its epoch until the batch polled under it is committed, and offsets are
        # always committed under the epoch they were read at (or refused as Fenced).
        chosen, values = self._state.to_commit(offsets, check_offset)
        if not chosen:
            return
        with self._db.connection() as conn:
            with self._assignment.refusals(chosen):
                conn.execute(
                    self._db.q("commit_offsets"),
                    {
                        "group": self.group,
                        **self._assignment.member_params(),
                        **id_arrays(chosen),
                        "epochs": [a.epoch for a in chosen],
                        "offsets": values,
                    },
                )
        self._state.committed(chosen, values)

    def _need_group(self, what: str) -> None:
        if self.group is None:
            raise InvalidArgument(
                f"a consumer without a group only reads: {what}() needs a group "
                "(client.consumer('name', topics))"
            )

    def committed(self, tp: TopicPartition) -> int | None:
        """The stored next offset of the group for ``tp`` (None without a group)."""
        if self.group is None:
            return None
        self._ensure_assigned()
        assigned = self._state.get(tp)
        with self._db.connection() as conn:
            cur = conn.execute(
                self._db.q("read_cursors"), {"group": self.group, **id_arrays([assigned])}
            )
            row = cur.fetchone()
        return None if row is None else int(row[2])

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next message ``poll()`` returns for ``tp``."""
        self._ensure_assigned()
        return self._state.get(tp).position

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make the next ``poll()`` start at ``offset`` in ``tp`` (0 .. high-water mark)."""
        check_offset(offset)
        self._ensure_assigned()
        assigned = self._state.get(tp)
        with self._db.connection() as conn:
            cur = conn.execute(
                self._db.q("high_water"),
                {"topic_id": assigned.meta.id, "partition": assigned.partition},
            )
            row = cur.fetchone()
        high_water = 0 if row is None else int(row[0])
        if offset > high_water:
            raise OffsetOutOfRange(
                f"offset {offset} is beyond the high-water mark of {tp.topic}/{tp.partition}: "
                f"allowed 0..{high_water}"
            )
        self._fetcher.drop()
        self._state.seek(assigned, offset)

    def rewind(self, unhandled: Iterable[Message]) -> None:
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
        self._fetcher.drop()
        self._state.rewind(first)

    # -- transactional consumption --------------------------------------------------------

    @contextmanager
    def transaction(self, max_messages: int = 100, timeout: float = 0.0) -> Iterator[Batch]:
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
        self._ensure_assigned()
        deadline = self._policy.deadline(timeout)
        self._state.busy = True
        self._assignment.polled()
        try:
            with self._session_guard():
                with self._db.connection() as conn:
                    while True:
                        messages = self._claim(conn, max_messages)
                        wait = None if messages else self._policy.wait(deadline)
                        if wait is None:
                            break
                        conn.rollback()
                        self._wait_for_wakeup(wait)
                        self._assignment.apply()
                    tp = messages[0].topic_partition if messages else None
                    yield Batch(messages, conn, tp)
                    if conn.info.transaction_status == TransactionStatus.INERROR:
                        raise TransactionAborted(
                            "a database error aborted the transaction of this batch (caught in the "
                            "block?): nothing was committed and the batch will be delivered again"
                        )
        finally:
            self._state.busy = False
            self._assignment.polled()
        if messages:
            self._state.claimed(messages)  # committed: later polls go on after the range

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

    def _claim(self, conn: psycopg.Connection[Any], limit: int) -> list[Message]:
        order = self._policy.order(self._state.in_use(), "claim")
        if not order:
            return []
        cur = conn.cursor(binary=True)
        utc_timestamps(cur)  # as poll()'s
        with self._assignment.refusals(order, drop=False):
            cur.execute(
                self._db.q("claim_batch"),
                {
                    "group": self.group,
                    **self._assignment.member_params(),
                    **id_arrays(order),
                    "epochs": [a.epoch for a in order],
                    "limit": limit,
                },
            )
        names = {assigned.meta.id: assigned.meta.name for assigned in order}
        messages: list[Message] = []
        append, builder = messages.append, MessageBuilder
        message_class = Message
        with gc_paused(self._db.options.pause_gc):  # as in the fetcher's
            rows = cur.fetchall()
            for topic_id, partition, offset, key, value, headers, created_at in rows:
                message: Any = builder()
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

    def close(self) -> None:
        """Leave the group at once (after ``on_revoke`` for the partitions held), so they move
        without waiting out the session timeout, and release the connections. Does not
        commit: commit first, or in ``on_revoke``."""
        if self._closed:
            return
        self._closed = True
        try:
            self._fetcher.close()
            self._assignment.leave()  # on_revoke, then leave the group at once
        finally:
            self._state.clear()
            self._close_listener()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Message]:
        return self._iterate()

    def _iterate(self) -> Iterator[Message]:
        while not self._closed:
            yield from self.poll(timeout=self._policy.poll_interval)
