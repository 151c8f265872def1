"""Which partitions a consumer reads and where: a group member's leases applied (hand-over
after ``on_revoke``, lost partitions dropped, new ones started at the committed cursor), or a
manual assignment. The base of :class:`~postroom.log.consumer_async.AsyncConsumer`.

A member delivers nothing from a partition it cannot be sure it holds: not past the moment its
session may have run out (no heartbeat renewed it within the session timeout: every partition is
treated as revoked until a heartbeat renews it), not after a commit refused the partition (until
the next lease list from the server hands it back), and nothing at all once a newer instance
with the same member id took its place (``InstanceFenced``, for good)."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg

from .._acompat import acall_hook
from .._db_async import AsyncDatabase
from ..errors import ConsumerClosed, Fenced, InstanceFenced, InvalidArgument, TopicNotFound
from .membership_async import DEFAULT_MAX_POLL_INTERVAL, AsyncMembership, Lease
from .metadata_async import AsyncTopicCache, TopicMeta
from .records import (
    Message,
    TopicPartition,
    check_max_poll_interval,
    check_member_id,
    check_name,
    check_session_timeout,
)

OffsetReset = Literal["earliest", "latest"]
DEFAULT_SESSION_TIMEOUT = 10.0
"""Seconds a group member may stay silent before its partitions move (Kafka's default is 45)."""


@dataclass
class _Assigned:
    meta: TopicMeta
    partition: int
    position: int = 0
    buffer: deque[Message] = field(default_factory=deque)
    epoch: int | None = None
    """The lease epoch this member holds the partition at (None: manual assignment)."""
    committed: int = 0
    """The last offset this consumer committed (or read at assignment): when ``position`` is
    past it, a batch is in flight and the partition is not handed over yet."""

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.meta.name, self.partition)


class AsyncAssignedPartitions:
    """The partitions in use, their positions and epochs; see ``AsyncConsumer``."""

    def __init__(
        self,
        db: AsyncDatabase,
        topics_cache: AsyncTopicCache,
        group: str | None,
        topics: Iterable[str],
        *,
        partitions: Iterable[TopicPartition] | None,
        auto_offset_reset: OffsetReset,
        member_id: str | None,
        session_timeout: float,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        on_assign: Callable[[set[TopicPartition]], Any] | None,
        on_revoke: Callable[[set[TopicPartition]], Any] | None,
    ) -> None:
        self._db = db
        self._topics_cache = topics_cache
        # No group: a peek, reading without cursors (nothing to commit, nothing created).
        self.group = None if group is None else check_name("group", group)
        self._topic_names = [topics] if isinstance(topics, str) else list(topics)
        if not self._topic_names:
            raise InvalidArgument("a consumer needs at least one topic")
        for name in self._topic_names:
            check_name("topic", name)
        if auto_offset_reset not in ("earliest", "latest"):
            raise InvalidArgument(
                f"invalid auto_offset_reset {auto_offset_reset!r}: use 'earliest' or 'latest'"
            )
        self._auto_offset_reset = auto_offset_reset
        self._requested = None if partitions is None else [TopicPartition(*p) for p in partitions]
        self.member_id = check_member_id(member_id)
        self.session_timeout = check_session_timeout(session_timeout)
        self.max_poll_interval = check_max_poll_interval(max_poll_interval)
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._assigned: dict[TopicPartition, _Assigned] = {}
        self._by_id: dict[tuple[int, int], _Assigned] = {}
        # Guards _assigned/_by_id/_idle_revoked against the heartbeat loop (a thread in the
        # sync twin); never held across I/O.
        self._lock = threading.Lock()
        self._membership: AsyncMembership | None = None
        self._seen_state: tuple[int, bool, int] = (-1, False, -1)
        # Leases a commit was refused on: key -> (epoch, membership.beats then). Not taken
        # again at that epoch until a later lease list from the server says they are ours.
        self._refused: dict[tuple[int, int], tuple[int, int]] = {}
        self._idle_revoked: set[TopicPartition] = set()
        self._lost: set[TopicPartition] = set()
        # Partitions lost with a batch in flight: the position that batch reached. A commit of
        # offsets up to it, beyond what the current assignment read, carries the old epoch's
        # batch and is refused (see ``_check_read``).
        self._stale: dict[TopicPartition, int] = {}
        self._in_transaction = False
        self._claim_start = 0
        self._fetch_start = 0
        self._ready = False
        self._closed = False

    # -- assignment -----------------------------------------------------------------------

    async def _ensure_assigned(self) -> None:
        if self._membership is not None and self._membership.fenced is not None:
            await self._apply_assignment()  # drops every partition (on_revoke)
            raise self._membership.fenced
        if self._ready:
            if self._membership is not None and self._membership.poll_expired:
                # Left for not polling in time (max_poll_interval): drop what it held
                # (on_revoke), then join again and start from the committed cursors.
                await self._apply_assignment()
                await self._membership.join()
            elif self._membership is None:
                await self._follow_topics()
            await self._apply_assignment()
            return
        if self._closed:
            raise ConsumerClosed("the consumer is closed: create a new one with client.consumer()")
        metas = {name: await self._topics_cache.get(name) for name in self._topic_names}
        if self._requested is None and self.group is not None:
            self._membership = AsyncMembership(
                self._db,
                self._topics_cache,
                self.group,
                self.member_id,
                self._topic_names,
                self.session_timeout,
                self._release_idle,
                self.max_poll_interval,
                lambda: self._in_transaction,
            )
            await self._membership.join()
            self._ready = True
            await self._apply_assignment()
            return
        added = []
        requested = self._requested or [
            TopicPartition(m.name, p) for m in metas.values() for p in range(m.partitions)
        ]
        for tp in requested:
            meta = metas.get(tp.topic)
            if meta is None:
                raise InvalidArgument(f"partition {tp} is not in the subscribed topics")
            if not 0 <= tp.partition < meta.partitions:
                raise InvalidArgument(
                    f"partition {tp.partition} does not exist: topic {tp.topic!r} has "
                    f"partitions 0..{meta.partitions - 1}"
                )
            added.append(_Assigned(meta, tp.partition))
        await self._start_partitions(added)
        self._ready = True

    async def _follow_topics(self) -> None:
        """A consumer outside the group's assignment (``partitions=``, or one without a group)
        checks its topics against the metadata cache (re-read every few seconds): a topic
        deleted raises :class:`TopicNotFound`; a topic deleted and created again is read afresh,
        from the earliest offset of the same partitions (issue 10, item 9)."""
        with self._lock:
            current = {a.meta.name: a.meta for a in self._assigned.values()}
        for name, old in current.items():
            try:
                meta = await self._topics_cache.get(name)
            except TopicNotFound:
                raise TopicNotFound(
                    f"topic {name!r} was deleted while this consumer read it: create it again "
                    "to go on, or close the consumer"
                ) from None
            if meta.id == old.id:
                continue
            with self._lock:
                mine = [a for a in self._assigned.values() if a.meta.name == name]
                for assigned in mine:
                    self._remove(assigned)
            for assigned in mine:
                if assigned.partition >= meta.partitions:
                    raise InvalidArgument(
                        f"topic {name!r} was created again with {meta.partitions} partition(s): "
                        f"partition {assigned.partition} no longer exists"
                    )
            await self._start_partitions(
                [_Assigned(meta, a.partition) for a in mine], reset="earliest"
            )

    async def _start_partitions(
        self, added: list[_Assigned], reset: OffsetReset | None = None
    ) -> None:
        """Create missing cursors of ``added`` (at ``reset``, default ``auto_offset_reset``)
        and start each at its committed offset."""
        if not added:
            return
        ids = self._id_arrays(added)
        reset = reset or self._auto_offset_reset
        async with self._db.connection() as conn:
            if self.group is None:
                cur = await conn.execute(self._db.q("partition_bounds"), ids)
                low_or_high = 2 if reset == "earliest" else 3
                rows = [(r[0], r[1], r[low_or_high]) for r in await cur.fetchall()]
            else:
                rows = await self._read_cursors(conn, ids, reset)
        start = {(topic_id, partition): offset for topic_id, partition, offset in rows}
        with self._lock:
            for assigned in added:
                key = (assigned.meta.id, assigned.partition)
                if self._membership is not None:
                    lease = self._membership.leases.get(key)
                    if lease is None or lease.state != "owned" or lease.epoch != assigned.epoch:
                        continue  # moved on while the cursor was read
                assigned.position = assigned.committed = start.get(key, 0)
                self._assigned[assigned.tp] = assigned
                self._by_id[key] = assigned
                self._lost.discard(assigned.tp)

    async def _read_cursors(
        self, conn: psycopg.AsyncConnection[Any], ids: dict[str, list[int]], reset: OffsetReset
    ) -> list[tuple[int, int, int]]:
        """Create the group's missing cursors, then read them."""
        await conn.execute(
            self._db.q("ensure_cursors"),
            {"group": self.group, "reset": reset, **ids},
        )
        cur = await conn.execute(self._db.q("read_cursors"), {"group": self.group, **ids})
        return [(t, p, o) for t, p, o in await cur.fetchall()]

    async def _apply_assignment(self) -> None:
        """Bring the partitions in use up to the membership's leases (main flow only): hand
        over revoked partitions after ``on_revoke``, drop lost ones, start new ones. A session
        not renewed in time holds nothing until a heartbeat renews it (see the module doc)."""
        membership = self._membership
        if membership is None:
            return
        lapsed = not self._session_live()
        state = (membership.version, lapsed, membership.beats if self._refused else -1)
        if state == self._seen_state:
            return
        self._seen_state = state
        with self._lock:
            leases = {} if lapsed else membership.leases
            self._refused = {
                key: (epoch, beats)
                for key, (epoch, beats) in self._refused.items()
                if beats == membership.beats
            }
            lost, revoking = [], []
            for assigned in self._assigned.values():
                lease = leases.get((assigned.meta.id, assigned.partition))
                if lease is None or lease.epoch != assigned.epoch or lease.state == "pending":
                    lost.append(assigned)
                elif lease.state == "revoking":
                    revoking.append(assigned)
            for assigned in lost:
                self._remove(assigned)
            revoked = {a.tp for a in lost} | self._idle_revoked
            self._idle_revoked = set()
        if revoking:
            await self._call(self._on_revoke, {a.tp for a in revoking})  # may commit them
            with self._lock:
                for assigned in revoking:
                    self._remove(assigned)
            await membership.release(
                Lease(a.meta.id, a.partition, a.epoch or 0, "revoking") for a in revoking
            )
        if revoked:
            await self._call(self._on_revoke, revoked)
        added = [
            _Assigned(membership.metas[lease.topic_id], lease.partition, epoch=lease.epoch)
            for lease in leases.values()
            if lease.state == "owned"
            and lease.topic_id in membership.metas
            and lease.key not in self._by_id
            and self._refused.get(lease.key, (None, 0))[0] != lease.epoch
        ]
        await self._start_partitions(added)
        if added:
            await self._call(self._on_assign, {a.tp for a in added if a.tp in self._assigned})

    def _session_live(self) -> bool:
        """Whether the member's session is surely live now (always, without a membership)."""
        membership = self._membership
        return membership is None or membership.renewed_until > time.monotonic()

    def _member_params(self) -> dict[str, str | None]:
        """The member and instance a commit or claim is made as (None: no membership)."""
        if self._membership is None:
            return {"member": None, "instance": None}
        return {"member": self.member_id, "instance": self._membership.instance}

    def _check_can_commit(self) -> None:
        membership = self._membership
        if membership is not None and membership.fenced is not None:
            raise membership.fenced
        if membership is not None and membership.poll_expired:
            raise Fenced(
                f"member {self.member_id!r} left group {self.group!r}: it did not poll within "
                f"max_poll_interval ({self.max_poll_interval:g} s), so its partitions moved; "
                "nothing was committed, and the next poll() joins the group again"
            )

    @contextmanager
    def _refusals(self, sent: Sequence[_Assigned], drop: bool = True) -> Iterator[None]:
        """Around a commit or claim of the partitions ``sent`` (raw driver errors): a refusal
        for a newer instance fences the membership for good; a commit refused on partitions
        (``PRF01``, each named in the error's detail) stops their delivery at once: their
        buffered and prefetched messages go, and they leave the assignment until a later
        lease list from the server hands them back (``on_revoke`` in the next poll). With
        ``drop`` false (a claim: it delivered nothing) the heartbeat only looks again."""
        try:
            yield
        except psycopg.Error as exc:
            membership = self._membership
            if membership is None or exc.sqlstate not in ("PRF01", "PRF02"):
                raise
            if exc.sqlstate == "PRF02":
                membership.fence(InstanceFenced(str(exc).strip().splitlines()[0]))
                raise
            membership.poke()  # learn which partitions moved before the next call
            if not drop:
                raise
            try:
                named = {(int(t), int(p)) for t, p in json.loads(exc.diag.message_detail or "")}
            except (ValueError, TypeError):
                named = {(a.meta.id, a.partition) for a in sent}  # not said: all of them
            with self._lock:
                for assigned in sent:
                    key = (assigned.meta.id, assigned.partition)
                    if key in named and self._by_id.get(key) is assigned:
                        self._remove(assigned)
                        self._idle_revoked.add(assigned.tp)
                        self._refused[key] = (assigned.epoch or 0, membership.beats)
            self._seen_state = (-1, False, -1)  # apply (on_revoke) at the next poll
            raise

    def _release_idle(self, leases: list[Lease]) -> list[Lease]:
        """Called by the heartbeat loop with the leases being handed over: those with no batch
        in flight leave the assignment now (``on_revoke`` follows in the next ``poll()``)."""
        idle = []
        with self._lock:
            for lease in leases:
                assigned = self._by_id.get(lease.key)
                if assigned is None:
                    idle.append(lease)
                elif (
                    assigned.epoch == lease.epoch
                    and not self._in_transaction
                    and assigned.position == assigned.committed
                ):
                    self._remove(assigned)
                    self._idle_revoked.add(assigned.tp)
                    idle.append(lease)
        return idle

    def _remove(self, assigned: _Assigned) -> None:
        self._assigned.pop(assigned.tp, None)
        self._by_id.pop((assigned.meta.id, assigned.partition), None)
        self._lost.add(assigned.tp)
        if assigned.position > assigned.committed:
            self._stale[assigned.tp] = max(self._stale.get(assigned.tp, 0), assigned.position)

    def _check_read(self, assigned: _Assigned, offset: int) -> None:
        """Refuse committing ``offset`` if only an earlier, lost assignment of the partition
        read up to it: those messages were polled under an epoch this member no longer holds
        (the new owner meanwhile may have read them again from the cursor)."""
        stale = self._stale.get(assigned.tp)
        if stale is not None and assigned.position < offset <= stale:
            raise Fenced(
                f"offset {offset} of partition {assigned.tp.topic}/{assigned.tp.partition} was "
                f"read under an assignment member {self.member_id!r} of group {self.group!r} "
                f"lost since; the current one has read up to {assigned.position}"
            )

    @staticmethod
    async def _call(
        hook: Callable[[set[TopicPartition]], Any] | None, tps: set[TopicPartition]
    ) -> None:
        if hook is not None and tps:
            await acall_hook(hook, tps)

    def _id_arrays(self, only: Sequence[_Assigned] | None = None) -> dict[str, list[int]]:
        chosen = list(self._assigned.values()) if only is None else only
        return {
            "topic_ids": [a.meta.id for a in chosen],
            "partitions": [a.partition for a in chosen],
        }

    async def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now (joins the group first if needed)."""
        await self._ensure_assigned()
        return set(self._assigned)

    def _get(self, tp: TopicPartition) -> _Assigned:
        tp = TopicPartition(*tp)
        try:
            return self._assigned[tp]
        except KeyError:
            if tp in self._lost:
                raise Fenced(
                    f"partition {tp.topic}/{tp.partition} is no longer assigned to member "
                    f"{self.member_id!r} of group {self.group!r}"
                ) from None
            raise InvalidArgument(f"partition {tp} is not assigned to this consumer") from None

    def _rotated(self, items: list[_Assigned], counter: str) -> list[_Assigned]:
        """``items`` starting one further at each call, so no partition is always served last."""
        if not items:
            return items
        start = getattr(self, counter) % len(items)
        setattr(self, counter, start + 1)
        return items[start:] + items[:start]
