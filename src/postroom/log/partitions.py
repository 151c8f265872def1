"""A consumer's partition state, with no I/O: the partitions it reads, their positions, buffers
and lease epochs, and what it lost. One object per consumer (aiokafka's ``SubscriptionState``):
the consumer's main flow and its group membership's heartbeat (another task, or a thread in the
sync twin) change it only through these methods, each under the state's lock, never held
across I/O.

A member delivers nothing from a partition it cannot be sure it holds: a partition lost
(moved, refused at a commit) leaves the state at once and is remembered as lost, so a commit
naming it raises :class:`~postroom.errors.Fenced` rather than "not assigned"; offsets read
under an epoch lost since cannot be committed under the next one (``check_read``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import Fenced, InvalidArgument
from .records import Message, MessageBuilder, TopicMeta, TopicPartition, decode_headers


@dataclass(frozen=True)
class Lease:
    """A partition this member holds (``owned``), is handing over (``revoking``) or is waiting
    for (``pending``), with the fencing epoch of its ownership."""

    topic_id: int
    partition: int
    epoch: int
    state: str

    @property
    def key(self) -> tuple[int, int]:
        return (self.topic_id, self.partition)


@dataclass
class Assigned:
    """One partition in use: where the next poll reads, what it buffered, and at what epoch."""

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

    @property
    def key(self) -> tuple[int, int]:
        return (self.meta.id, self.partition)


def id_arrays(chosen: Sequence[Assigned]) -> dict[str, list[int]]:
    """The (topic id, partition) arrays the named queries take for ``chosen``."""
    return {"topic_ids": [a.meta.id for a in chosen], "partitions": [a.partition for a in chosen]}


def row_ends(rows: list[tuple[Any, ...]]) -> dict[tuple[int, int], int]:
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


class PartitionState:
    """The partitions one consumer reads, for ``group`` as ``member_id`` (for error messages).

    ``busy`` is true while a transactional batch is open: the membership then neither hands a
    partition over nor counts the time against ``max_poll_interval``.
    """

    def __init__(self, group: str | None, member_id: str) -> None:
        self.group = group
        self.member_id = member_id
        # Guards every field against the heartbeat (a thread in the sync twin).
        self.lock = threading.Lock()
        self._assigned: dict[TopicPartition, Assigned] = {}
        self._by_id: dict[tuple[int, int], Assigned] = {}
        self._lost: set[TopicPartition] = set()
        # Partitions lost with a batch in flight: the position that batch reached. A commit of
        # offsets up to it, beyond what the current assignment read, carries the old epoch's
        # batch and is refused (see ``check_read``).
        self._stale: dict[TopicPartition, int] = {}
        # Leases a commit was refused on: key -> (epoch, membership beats then). Not taken
        # again at that epoch until a later lease list from the server says they are ours.
        self._refused: dict[tuple[int, int], tuple[int, int]] = {}
        self._revoked: set[TopicPartition] = set()  # left the state; on_revoke not yet called
        self.busy = False

    # -- reading ----------------------------------------------------------------------------

    def partitions(self) -> set[TopicPartition]:
        with self.lock:
            return set(self._assigned)

    def in_use(self) -> list[Assigned]:
        """The partitions in use, a snapshot."""
        with self.lock:
            return list(self._assigned.values())

    def find(self, tp: TopicPartition) -> Assigned | None:
        return self._assigned.get(tp)

    def has(self, key: tuple[int, int]) -> bool:
        return key in self._by_id

    def owns(self, assigned: Assigned) -> bool:
        """Whether ``assigned`` is still the state's entry for its partition."""
        return self._by_id.get(assigned.key) is assigned

    def get(self, tp: TopicPartition) -> Assigned:
        """The partition ``tp``; :class:`Fenced` if this member lost it, else
        :class:`InvalidArgument` if it was never assigned."""
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

    def has_buffered(self) -> bool:
        return any(a.buffer for a in list(self._assigned.values()))

    def refused_at(self, key: tuple[int, int]) -> int | None:
        """The epoch a commit was refused at on ``key`` (None: not refused)."""
        return self._refused.get(key, (None, 0))[0]

    def has_refusals(self) -> bool:
        return bool(self._refused)

    # -- assignment changes -----------------------------------------------------------------

    def add(self, assigned: Assigned, start: int) -> None:
        """Start reading ``assigned`` at ``start`` (its committed offset)."""
        with self.lock:
            assigned.position = assigned.committed = start
            self._assigned[assigned.tp] = assigned
            self._by_id[assigned.key] = assigned
            self._lost.discard(assigned.tp)

    def remove(self, assigned: Iterable[Assigned], *, revoked: bool = False) -> None:
        """Stop reading ``assigned``; with ``revoked``, ``on_revoke`` is owed for them
        (``take_revoked``)."""
        with self.lock:
            for one in assigned:
                self._remove(one)
                if revoked:
                    self._revoked.add(one.tp)

    def _remove(self, assigned: Assigned) -> None:
        self._assigned.pop(assigned.tp, None)
        self._by_id.pop(assigned.key, None)
        self._lost.add(assigned.tp)
        if assigned.position > assigned.committed:
            self._stale[assigned.tp] = max(self._stale.get(assigned.tp, 0), assigned.position)

    def take_revoked(self) -> set[TopicPartition]:
        """The partitions that left since the last call and whose ``on_revoke`` is owed."""
        with self.lock:
            revoked, self._revoked = self._revoked, set()
        return revoked

    def apply_leases(
        self, leases: Mapping[tuple[int, int], Lease], beats: int
    ) -> tuple[list[Assigned], set[TopicPartition]]:
        """Bring the state to ``leases`` (the membership's latest list, read at heartbeat
        ``beats``): partitions lost (no lease, another epoch, pending again) leave at once;
        those being handed over stay for ``on_revoke``. Returns (being handed over, revoked:
        the lost ones and those released idle since the last call)."""
        with self.lock:
            self._refused = {
                key: value for key, value in self._refused.items() if value[1] == beats
            }
            lost, revoking = [], []
            for assigned in self._assigned.values():
                lease = leases.get(assigned.key)
                if lease is None or lease.epoch != assigned.epoch or lease.state == "pending":
                    lost.append(assigned)
                elif lease.state == "revoking":
                    revoking.append(assigned)
            for assigned in lost:
                self._remove(assigned)
            revoked = {a.tp for a in lost} | self._revoked
            self._revoked = set()
        return revoking, revoked

    def release_idle(self, leases: list[Lease]) -> list[Lease]:
        """The heartbeat's call, with the leases being handed over: those with no batch in
        flight leave the state now (``on_revoke`` follows in the next ``poll()``); returns the
        leases that may be released at once."""
        idle = []
        with self.lock:
            for lease in leases:
                assigned = self._by_id.get(lease.key)
                if assigned is None:
                    idle.append(lease)
                elif (
                    assigned.epoch == lease.epoch
                    and not self.busy
                    and assigned.position == assigned.committed
                ):
                    self._remove(assigned)
                    self._revoked.add(assigned.tp)
                    idle.append(lease)
        return idle

    def refuse(self, sent: Sequence[Assigned], named: set[tuple[int, int]], beats: int) -> None:
        """A commit was refused on the partitions ``named`` (of those ``sent``): they stop
        delivering at once and are not taken again at that epoch until a lease list read
        after heartbeat ``beats`` hands them back."""
        with self.lock:
            for assigned in sent:
                if assigned.key in named and self._by_id.get(assigned.key) is assigned:
                    self._remove(assigned)
                    self._revoked.add(assigned.tp)
                    self._refused[assigned.key] = (assigned.epoch or 0, beats)

    def clear(self) -> set[TopicPartition]:
        """Drop every partition (the consumer closes); returns those that were held."""
        with self.lock:
            held = set(self._assigned)
            self._assigned.clear()
            self._by_id.clear()
        return held

    # -- positions --------------------------------------------------------------------------

    def check_read(self, assigned: Assigned, offset: int) -> None:
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

    def to_commit(
        self, offsets: Mapping[TopicPartition, int] | None, check: Any
    ) -> tuple[list[Assigned], list[int]]:
        """What a commit stores: the partitions read past their cursor at their positions, or
        ``offsets`` (each checked by ``check``, then by ``check_read``)."""
        with self.lock:
            if offsets is None:
                # Only partitions read past their cursor: one with nothing new (position ==
                # committed) may be handed over by the heartbeat at any moment, and committing
                # it under its old epoch would refuse the whole call as Fenced.
                chosen = [a for a in self._assigned.values() if a.position > a.committed]
                return chosen, [a.position for a in chosen]
            chosen = [self.get(tp) for tp in offsets]
            values = [check(v) for v in offsets.values()]
            for assigned, value in zip(chosen, values, strict=True):
                self.check_read(assigned, value)
        return chosen, values

    def committed(self, chosen: Sequence[Assigned], values: Sequence[int]) -> None:
        """``values`` were stored for ``chosen``."""
        with self.lock:
            for assigned, value in zip(chosen, values, strict=True):
                assigned.committed = max(assigned.committed, value)

    def claimed(self, messages: list[Message]) -> None:
        """A transactional batch of ``messages`` (one partition) committed: later polls go on
        after it."""
        with self.lock:
            assigned = self._assigned.get(messages[0].topic_partition)
            if assigned is not None:
                assigned.position = max(assigned.position, messages[-1].offset + 1)
                assigned.committed = max(assigned.committed, assigned.position)

    def seek(self, assigned: Assigned, offset: int) -> None:
        with self.lock:
            assigned.position = offset
            assigned.buffer.clear()

    def rewind(self, first: Mapping[TopicPartition, int]) -> None:
        """Each partition of ``first`` reads again from that offset, if it is behind."""
        with self.lock:
            for tp, offset in first.items():
                assigned = self.get(tp)
                if offset < assigned.position:
                    assigned.position = offset
                    assigned.buffer.clear()

    # -- messages ---------------------------------------------------------------------------

    def buffer(
        self,
        rows: list[tuple[Any, ...]],
        fetched: Mapping[tuple[int, int], Assigned],
        starts: Mapping[tuple[int, int], int] | None = None,
    ) -> None:
        """Append fetched rows to their partitions' buffers as messages (with ``starts``, the
        rows of a prefetch: only where the position is still the one fetched from)."""
        # The per-row loop is most of a consumer's CPU: rows come ordered by partition, so the
        # buffer is looked up once per partition, and messages are built inline (one slot
        # store per field, no call per row).
        current: tuple[int, int] | None = None
        append: Any = None
        name = ""
        # MessageBuilder() in the loop: a helper's call frame was ~20% of the loop
        # (micro-benchmark: 239 -> 196 ns a message).
        builder, message_class = MessageBuilder, Message
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
                message: Any = builder()
                message.topic = name
                message.partition = partition
                message.offset = offset
                message.key = key
                message.value = value
                message.headers = {} if headers is None else decode_headers(headers)
                message.timestamp = created_at
                message.__class__ = message_class
                append(message)

    def take(self, max_messages: int) -> list[Message]:
        """Up to ``max_messages`` buffered messages from the positions on; the positions move
        past them."""
        taken: list[Message] = []
        with self.lock:  # the heartbeat hands over only partitions with nothing taken
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
