"""Which partitions a consumer reads and where: a group member's leases applied (hand-over
after ``on_revoke``, lost partitions dropped, new ones started at the committed cursor), or a
manual assignment. The base of :class:`~postroom.log.consumer_async.AsyncConsumer`."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg

from .._acompat import acall_hook
from .._db_async import AsyncDatabase
from ..errors import Fenced, InvalidArgument
from .membership_async import AsyncMembership, Lease
from .metadata_async import AsyncTopicCache, TopicMeta
from .records import (
    Message,
    TopicPartition,
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
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._assigned: dict[TopicPartition, _Assigned] = {}
        self._by_id: dict[tuple[int, int], _Assigned] = {}
        # Guards _assigned/_by_id/_idle_revoked against the heartbeat loop (a thread in the
        # sync twin); never held across I/O.
        self._lock = threading.Lock()
        self._membership: AsyncMembership | None = None
        self._seen_version = -1
        self._idle_revoked: set[TopicPartition] = set()
        self._lost: set[TopicPartition] = set()
        self._in_transaction = False
        self._claim_start = 0
        self._fetch_start = 0
        self._ready = False
        self._closed = False

    # -- assignment -----------------------------------------------------------------------

    async def _ensure_assigned(self) -> None:
        if self._ready:
            await self._apply_assignment()
            return
        if self._closed:
            raise InvalidArgument("the consumer is closed")
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

    async def _start_partitions(self, added: list[_Assigned]) -> None:
        """Create missing cursors of ``added`` and start each at its committed offset."""
        if not added:
            return
        ids = self._id_arrays(added)
        async with self._db.connection() as conn:
            if self.group is None:
                cur = await conn.execute(self._db.q("partition_bounds"), ids)
                low_or_high = 2 if self._auto_offset_reset == "earliest" else 3
                rows = [(r[0], r[1], r[low_or_high]) for r in await cur.fetchall()]
            else:
                rows = await self._read_cursors(conn, ids)
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
        self, conn: psycopg.AsyncConnection[Any], ids: dict[str, list[int]]
    ) -> list[tuple[int, int, int]]:
        """Create the group's missing cursors, then read them."""
        await conn.execute(
            self._db.q("ensure_cursors"),
            {"group": self.group, "reset": self._auto_offset_reset, **ids},
        )
        cur = await conn.execute(self._db.q("read_cursors"), {"group": self.group, **ids})
        return [(t, p, o) for t, p, o in await cur.fetchall()]

    async def _apply_assignment(self) -> None:
        """Bring the partitions in use up to the membership's leases (main flow only): hand
        over revoked partitions after ``on_revoke``, drop lost ones, start new ones."""
        membership = self._membership
        if membership is None or membership.version == self._seen_version:
            return
        self._seen_version = membership.version
        with self._lock:
            leases = membership.leases
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
        ]
        await self._start_partitions(added)
        if added:
            await self._call(self._on_assign, {a.tp for a in added if a.tp in self._assigned})

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
