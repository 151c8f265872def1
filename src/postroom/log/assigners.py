# Generated from src/postroom/log/assigners_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""How a consumer's partitions are chosen: by its group (a membership's leases) or by hand
(``partitions=``, or a peek without a group). Both keep the consumer's
:class:`~postroom.log.partitions.PartitionState` through its methods and offer the consumer
one small interface, so the consumer never asks which it has (aiokafka splits its
``SubscriptionState`` from the group coordinator the same way):

- ``start()``: first use (join the group, or check and start the partitions asked for);
  ``refresh()``: at the start of each later call; ``apply()``: inside a poll's wait loop;
- ``polled()``, ``session_live()``, ``member_params()``, ``check_can_commit()``;
- ``refusals(sent)``: around a commit or claim, turning the server's refusals into state;
- ``leave()``: on close.

A group member delivers nothing from a partition it cannot be sure it holds: not past the
moment its session may have run out (no heartbeat renewed it within the session timeout: every
partition is treated as revoked until a heartbeat renews it), not after a commit refused the
partition (until the next lease list from the server hands it back), and nothing at all once a
newer instance with the same member id took its place (``InstanceFenced``, for good).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from .._acompat import call_hook
from .._db import Database
from ..errors import Fenced, InstanceFenced, InvalidArgument, TopicNotFound
from .membership import Membership
from .metadata import TopicCache
from .partitions import Assigned, Lease, PartitionState, id_arrays
from .records import OffsetReset, TopicMeta, TopicPartition

PartitionsHook = Callable[[set[TopicPartition]], Any]


def start_partitions(
    db: Database,
    state: PartitionState,
    group: str | None,
    added: list[Assigned],
    reset: OffsetReset,
    still_ours: Callable[[Assigned], bool] = lambda assigned: True,
) -> None:
    """Create the group's missing cursors of ``added`` (at ``reset``) and start each at its
    committed offset (without a group: at the earliest or latest offset); a partition for
    which ``still_ours`` says no once its cursor is read (it moved on meanwhile) is left out."""
    if not added:
        return
    ids = id_arrays(added)
    with db.connection() as conn:
        if group is None:
            cur = conn.execute(db.q("partition_bounds"), ids)
            low_or_high = 2 if reset == "earliest" else 3
            rows = [(r[0], r[1], r[low_or_high]) for r in cur.fetchall()]
        else:
            conn.execute(db.q("ensure_cursors"), {"group": group, "reset": reset, **ids})
            cur = conn.execute(db.q("read_cursors"), {"group": group, **ids})
            rows = [(t, p, o) for t, p, o in cur.fetchall()]
    start = {(topic_id, partition): offset for topic_id, partition, offset in rows}
    for assigned in added:
        if still_ours(assigned):
            state.add(assigned, start.get(assigned.key, 0))


def call_partitions_hook(hook: PartitionsHook | None, tps: set[TopicPartition]) -> None:
    if hook is not None and tps:
        call_hook(hook, tps)


class ManualAssignment:
    """The partitions asked for (``partitions=``; every partition of the topics without), read
    with the group's cursors, or, without a group, from the earliest or latest offsets."""

    def __init__(
        self,
        db: Database,
        topics_cache: TopicCache,
        state: PartitionState,
        group: str | None,
        topic_names: list[str],
        requested: list[TopicPartition] | None,
        auto_offset_reset: OffsetReset,
    ) -> None:
        self._db = db
        self._topics_cache = topics_cache
        self._state = state
        self._group = group
        self._topic_names = topic_names
        self._requested = requested
        self._reset = auto_offset_reset

    def start(self) -> None:
        metas = {name: self._topics_cache.get(name) for name in self._topic_names}
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
            added.append(Assigned(meta, tp.partition))
        start_partitions(self._db, self._state, self._group, added, self._reset)

    def refresh(self) -> None:
        """Check the topics against the metadata cache (re-read every few seconds): a topic
        deleted raises :class:`TopicNotFound`; a topic deleted and created again is read
        afresh, from the earliest offset of the same partitions (issue 10, item 9)."""
        current: dict[str, TopicMeta] = {a.meta.name: a.meta for a in self._state.in_use()}
        for name, old in current.items():
            try:
                meta = self._topics_cache.get(name)
            except TopicNotFound:
                raise TopicNotFound(
                    f"topic {name!r} was deleted while this consumer read it: create it again "
                    "to go on, or close the consumer"
                ) from None
            if meta.id == old.id:
                continue
            mine = [a for a in self._state.in_use() if a.meta.name == name]
            self._state.remove(mine)
            for assigned in mine:
                if assigned.partition >= meta.partitions:
                    raise InvalidArgument(
                        f"topic {name!r} was created again with {meta.partitions} partition(s): "
                        f"partition {assigned.partition} no longer exists"
                    )
            start_partitions(
                self._db,
                self._state,
                self._group,
                [Assigned(meta, a.partition) for a in mine],
                "earliest",
            )

    def apply(self) -> None:
        """Nothing changes a manual assignment between calls."""

    def polled(self) -> None:
        pass

    def session_live(self) -> bool:
        return True

    def member_params(self) -> dict[str, str | None]:
        return {"member": None, "instance": None}

    def check_can_commit(self) -> None:
        pass

    @contextmanager
    def refusals(self, sent: Sequence[Assigned], drop: bool = True) -> Iterator[None]:
        yield  # no epochs: the server refuses nothing of a manual assignment

    def leave(self) -> None:
        pass


class GroupAssignment:
    """The partitions the group's membership leases to this member: hand-over after
    ``on_revoke``, lost partitions dropped, new ones started at the committed cursor, and
    ``on_assign`` for those. The membership's heartbeat reaches the state only through
    :meth:`PartitionState.release_idle` and ``busy``."""

    def __init__(
        self,
        db: Database,
        topics_cache: TopicCache,
        state: PartitionState,
        group: str,
        member_id: str,
        topic_names: list[str],
        auto_offset_reset: OffsetReset,
        session_timeout: float,
        max_poll_interval: float,
        on_assign: PartitionsHook | None,
        on_revoke: PartitionsHook | None,
    ) -> None:
        self._db = db
        self._topics_cache = topics_cache
        self._state = state
        self._group = group
        self._member_id = member_id
        self._topic_names = topic_names
        self._reset = auto_offset_reset
        self._session_timeout = session_timeout
        self._max_poll_interval = max_poll_interval
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._membership: Membership | None = None
        self._seen: tuple[int, bool, int] = (-1, False, -1)

    @property
    def membership(self) -> Membership:
        assert self._membership is not None, "start() first"
        return self._membership

    def start(self) -> None:
        if self._membership is not None and self._membership.fenced is not None:
            raise self._membership.fenced  # a first join refused for good: no second try
        for name in self._topic_names:
            self._topics_cache.get(name)  # TopicNotFound before joining
        self._membership = Membership(
            self._db,
            self._topics_cache,
            self._group,
            self._member_id,
            self._topic_names,
            self._session_timeout,
            self._state,
            self._max_poll_interval,
        )
        self._membership.join()

    def refresh(self) -> None:
        membership = self.membership
        if membership.fenced is not None:
            self.apply()  # drops every partition (on_revoke)
            raise membership.fenced
        if membership.poll_expired:
            # Left for not polling in time (max_poll_interval): drop what it held
            # (on_revoke), then join again and start from the committed cursors.
            self.apply()
            membership.join()
        self.apply()

    def apply(self) -> None:
        """Bring the state up to the membership's leases (main flow only): hand over revoked
        partitions after ``on_revoke``, drop lost ones, start new ones. A session not renewed
        in time holds nothing until a heartbeat renews it (see the module docstring)."""
        membership = self.membership
        state = self._state
        lapsed = not self.session_live()
        seen = (membership.version, lapsed, membership.beats if state.has_refusals() else -1)
        if seen == self._seen:
            return
        self._seen = seen
        leases = {} if lapsed else membership.leases
        revoking, revoked = state.apply_leases(leases, membership.beats)
        if revoking:
            call_partitions_hook(self._on_revoke, {a.tp for a in revoking})  # may commit them
            state.remove(revoking)
            membership.release(
                Lease(a.meta.id, a.partition, a.epoch or 0, "revoking") for a in revoking
            )
        if revoked:
            call_partitions_hook(self._on_revoke, revoked)
        added = [
            Assigned(membership.metas[lease.topic_id], lease.partition, epoch=lease.epoch)
            for lease in leases.values()
            if lease.state == "owned"
            and lease.topic_id in membership.metas
            and not state.has(lease.key)
            and state.refused_at(lease.key) != lease.epoch
        ]
        start_partitions(self._db, state, self._group, added, self._reset, self._still_ours)
        if added:
            call_partitions_hook(self._on_assign, {a.tp for a in added if state.owns(a)})

    def _still_ours(self, assigned: Assigned) -> bool:
        lease = self.membership.leases.get(assigned.key)
        return lease is not None and lease.state == "owned" and lease.epoch == assigned.epoch

    def polled(self) -> None:
        if self._membership is not None:
            self._membership.polled()

    def session_live(self) -> bool:
        """Whether the member's session is surely live now."""
        return self.membership.renewed_until > time.monotonic()

    def member_params(self) -> dict[str, str | None]:
        """The member and instance a commit or claim is made as."""
        return {"member": self._member_id, "instance": self.membership.instance}

    def check_can_commit(self) -> None:
        membership = self._membership
        if membership is None:
            return
        if membership.fenced is not None:
            raise membership.fenced
        if membership.poll_expired:
            raise Fenced(
                f"member {self._member_id!r} left group {self._group!r}: it did not poll within "
                f"max_poll_interval ({self._max_poll_interval:g} s), so its partitions moved; "
                "nothing was committed, and the next poll() joins the group again"
            )

    @contextmanager
    def refusals(self, sent: Sequence[Assigned], drop: bool = True) -> Iterator[None]:
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
                named = {a.key for a in sent}  # not said: all of them
            self._state.refuse(sent, named, membership.beats)
            self._seen = (-1, False, -1)  # apply (on_revoke) at the next poll
            raise

    def leave(self) -> None:
        """``on_revoke`` for the partitions held, then leave the group at once."""
        membership = self._membership
        if membership is None:
            return
        try:
            call_partitions_hook(self._on_revoke, self._state.partitions())
        finally:
            membership.leave()
