"""The producer's batch policy, with no I/O: when a writer may take a batch, how long it lingers
for more sends, and how a batch taken is admitted beside the batches in flight. The producer
(``producer_async.py``) holds one per producer and calls it under its condition's lock; the
policy holds the counts it decides on and nothing else, and reads time only from ``clock``, so
tests drive it with a fake clock (tests/log/test_batch_policy.py).

Batches in flight at once (up to ``MAX_IN_FLIGHT``) never write the same partition: a lean batch
(plain sends to one topic) gets a sticky partition no batch in flight writes; any other batch
(keys, partitions, headers: it may write any partition) is admitted only alone, and holds the
producer alone until it is written. So each partition gets its batches in the order they were
taken, even when one of them is refused and written again piece by piece.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

from .records import Record, TopicMeta

MAX_IN_FLIGHT = 2
"""Batches a producer writes at once, each on a pooled connection of its own. The server stores
one batch while the next is taken, its offsets reserved, encoded and sent, so neither the
server nor the client waits for the other (with one batch at a time they took turns: the
server idle while the client reserved and encoded, the client waiting for the server's COPY).
Batches in flight together write to different partitions, so each partition still gets its
batches one after the other, in send order (see ``BatchPolicy.admit``)."""

OVERLAP_MIN_PENDING = 1000
"""Sends that must be waiting before a batch is taken beside one in flight (or ``batch_size``,
if smaller). A batch of a few sends gains nothing from overlapping another: it costs round
trips and a commit, and two commits at once only wait on each other's WAL flush. So at low
rates (say 1,000 sends a second with ``linger_ms=0``) batches go one at a time, as they did
before (``postroom bench log``'s end-to-end latency phase)."""


class Slot:
    """A batch in flight: the partition it writes (a lean batch) or whether it holds the
    producer alone (any other), and whether its COPY data is handed to the server yet."""

    __slots__ = ("exclusive", "partition", "sent", "topic_id")

    def __init__(self) -> None:
        self.topic_id = 0
        self.partition: int | None = None
        self.exclusive = False
        self.sent = False


class BatchPolicy:
    """Decides for one producer of ``batch_size`` and ``linger`` (seconds); see the module
    docstring. The caller serializes the calls (the producer's condition lock)."""

    def __init__(
        self, batch_size: int, linger: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.batch_size = batch_size
        self.linger = linger
        self._clock = clock
        self.in_flight = 0
        """Batches taken and not yet written (or failed)."""
        self.unsent = 0
        """Batches in flight whose COPY data is not yet handed to the server: while one is,
        no other is taken (it would only wait, holding a batch beyond the buffer's limits)."""
        self.busy: dict[int, set[int]] = {}
        """Topic id -> the partitions lean batches in flight write."""
        self.exclusive = False
        """A batch of the general path is in flight, alone."""

    def wake_points(self) -> frozenset[int]:
        """The counts of pending sends at which a send must wake the writer: the first, enough
        for a batch beside one in flight, or a full batch (any other finds it awake, or
        lingering until one of these). A set, looked up per send: a call per send costs."""
        return frozenset({1, self.batch_size, OVERLAP_MIN_PENDING})

    def may_take(self, pending: int, first: Callable[[], TopicMeta | None]) -> bool:
        """Whether a writer may take a batch now, ``pending`` sends waiting (at least one),
        the first of them to the topic ``first()`` (None: its metadata is not cached): when no
        other batch is in flight; or when the others' data is all sent, enough sends are
        pending (``OVERLAP_MIN_PENDING``) and ``first`` has a partition no batch in flight
        writes."""
        if not self.in_flight:
            return True
        if self.unsent or self.exclusive or pending < min(self.batch_size, OVERLAP_MIN_PENDING):
            return False
        meta = first()
        return meta is not None and len(self.busy.get(meta.id, ())) < meta.partitions

    def linger_deadline(self) -> float:
        """When a writer that found sends stops waiting for more: ``linger`` from now."""
        return self._clock() + self.linger

    def linger_left(self, deadline: float, pending: int, hurry: bool) -> float:
        """Seconds the writer may still wait for more sends before it takes a batch (0: take
        it now): none once the first chunk is full or someone is in a ``hurry`` (the producer
        closes, a ``flush()`` or a send waiting for buffer space)."""
        if pending >= self.batch_size or hurry:
            return 0.0
        return max(deadline - self._clock(), 0.0)

    def took(self) -> None:
        """A writer took a batch: in flight, its data not sent."""
        self.in_flight += 1
        self.unsent += 1

    def admit(self, lean: TopicMeta | None, next_sticky: Callable[[int], int]) -> Slot | None:
        """How the batch just taken is written beside the batches in flight, or None: not yet
        (wait for one to end, then ask again). ``lean``: the topic of a lean batch (plain sends
        to one topic), which gets a partition ``next_sticky(partitions)`` proposes that no
        batch in flight writes; None: any other batch, admitted alone."""
        slot = Slot()
        if lean is not None:
            busy = self.busy.setdefault(lean.id, set())
            if self.exclusive or len(busy) >= lean.partitions:
                return None
            partition = next_sticky(lean.partitions)
            while partition in busy:
                partition = next_sticky(lean.partitions)
            busy.add(partition)
            slot.topic_id, slot.partition = lean.id, partition
            return slot
        if self.in_flight == 1:  # this batch alone
            self.exclusive = slot.exclusive = True
            return slot
        return None

    def sent(self, slot: Slot) -> bool:
        """The batch of ``slot`` handed its data to the server; whether that is news (another
        writer may take the next batch now)."""
        if slot.sent:
            return False
        slot.sent = True
        self.unsent -= 1
        return True

    def release(self, slot: Slot) -> None:
        """The batch of ``slot`` is written or failed: give back what it held."""
        if slot.partition is not None:
            busy = self.busy[slot.topic_id]
            busy.discard(slot.partition)
            if not busy:
                del self.busy[slot.topic_id]
        if slot.exclusive:
            self.exclusive = False
        self.sent(slot)
        self.in_flight -= 1


def buffered_size(item: bytes | Record) -> int:
    """The bytes a pending send counts for in the producer's buffer: key and value."""
    if type(item) is bytes:
        return len(item)
    record = cast(Record, item)
    return len(record.value) + (0 if record.key is None else len(record.key))
