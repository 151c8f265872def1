"""The Kafka producer's sends in flight, matched to their delivery reports without a Python
object per send (sans-IO).

Why: confluent-kafka keeps each message's ``on_delivery`` callable until its report, so a
callable per send (a ``partial`` holding the send's future or index) is one live object per
message in flight, and the garbage collector walks every one at each pass: ~1.5 us a send, a
third of raw confluent-kafka's whole cost (bench/RESULTS.md). Here the producer has one
delivery callback for all its messages, and each send's place in its partition's FIFO says
which report is its own:

- Every send names its partition (``place``): a keyed one the partition Kafka's default
  partitioner picks (murmur2, as ``partitioner=murmur2_random`` would; cached per key), an
  unkeyed one a partition kept for ``STICKY_SECONDS`` (librdkafka's sticky partitioner for
  keyless messages), one with a partition that one. librdkafka's idempotent producer keeps
  the order of a partition's messages, and its reports of a partition's *successes* come in
  that order, so a success is the oldest send in flight of its partition.
- A *failure* may be reported out of that order (librdkafka times out a queued message while
  an older one is still in flight), so a failure is matched by its content: the oldest send in
  flight of its partition with the report's value and key. Two sends of the same value and key
  to one partition, both in flight when one of them fails, are interchangeable: either may be
  the one reported failed (the log holds one copy of that content either way).

An entry holds the send's outcome record (``Sends``) and index, its value and its key: no
object of its own (four items in its partition's deque, ``queues``). Callers keep a
partition's FIFO in librdkafka's order (an entry is added just before its ``produce``, and a
producer shared by threads holds a lock around both) and serve the reports in one thread at a
time, which alone takes entries from the left; a send that ``produce`` refused takes its own
entry back from the right.
"""

from __future__ import annotations

import random
import time
from collections import deque
from typing import Any

from ..partitioner import murmur2

STICKY_SECONDS = 0.01
"""How long unkeyed sends stay on one partition (librdkafka's ``sticky.partitioning.linger.ms``
default): bigger batches than one partition a message."""
KEY_CACHE = 65_536
"""Keys whose murmur2 hash is remembered (cleared when full): a hash in Python costs ~2 us."""

_WIDTH = 4  # items an entry takes in its partition's deque: sends, index, value, key


class InFlight:
    """Sends in flight, by topic and partition; see the module docstring."""

    __slots__ = ("_hashes", "_sticky", "failures", "only", "queues")

    def __init__(self) -> None:
        self.queues: dict[str, list[deque[Any]]] = {}
        """Each topic's FIFOs, by partition."""
        self.only: list[deque[Any]] | None = None
        """The FIFOs of the one topic in ``queues`` while there is only one (a report of it
        needs no topic name read)."""
        self.failures: deque[tuple[Any, int, Any]] = deque()
        """Failed sends reported (their ``Sends``, index and librdkafka's error), oldest
        first."""
        self._sticky: dict[str, tuple[int, float]] = {}
        self._hashes: dict[bytes, int] = {}

    def place(self, topic: str, count: int, key: bytes | None) -> int:
        """The partition of a send to ``topic`` (``count`` partitions) without one of its
        own."""
        if key is None:
            now = time.monotonic()
            sticky = self._sticky.get(topic)
            if sticky is not None and now < sticky[1] and sticky[0] < count:
                return sticky[0]
            partition = random.randrange(count)
            self._sticky[topic] = (partition, now + STICKY_SECONDS)
            return partition
        hashed = self._hashes.get(key)
        if hashed is None:
            if len(self._hashes) >= KEY_CACHE:
                self._hashes.clear()
            hashed = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return hashed % count

    def lane(self, topic: str, count: int) -> list[Any]:
        """Where ``topic``'s unkeyed sends go until ``lane[0]`` (a ``time.monotonic()``): its
        sticky partition ``lane[1]`` and that partition's FIFO ``lane[2]``."""
        partition = self.place(topic, count, None)
        return [self._sticky[topic][1], partition, self.queue(topic, partition)]

    def queue(self, topic: str, partition: int) -> deque[Any]:
        """The FIFO of ``topic``'s ``partition`` (made when first used)."""
        queues = self.queues.get(topic)
        if queues is None:
            queues = self.queues[topic] = []
            self.only = queues if len(self.queues) == 1 else None
        while len(queues) <= partition:
            queues.append(deque())
        return queues[partition]

    def report(self, err: Any, msg: Any) -> None:
        """librdkafka's ``on_delivery``, one for every message of the producer. A success is
        the oldest send in flight of its partition, recorded here at once and without a lock
        (its ``Sends`` group's ``_results`` slot, then ``deliver`` if someone waits on the
        group); a report that matches no send (none in flight there) is not this producer's
        and is dropped. A failure is matched by content (``failed``) and queued in
        ``failures`` with librdkafka's error, for the producer to translate and set outside
        librdkafka's callback. Inline, no call a success: this runs once a message."""
        if err is None:
            partition = msg.partition()
            queues = self.only  # one topic sent to: no name to read
            if queues is None:
                queues = self.queues.get(msg.topic())
            if queues is not None and partition < len(queues):
                entries = queues[partition]
                if entries:
                    sends, index = entries.popleft(), entries.popleft()
                    entries.popleft()
                    entries.popleft()
                    sends._results[index] = position = (partition, msg.offset())
                    if sends._waited:  # someone waits on a send of this group
                        sends.deliver(index, position)
            return
        send = self.failed(msg.topic(), msg.partition(), msg.value(), msg.key())
        if send is not None:
            self.failures.append((send[0], send[1], err))

    def failed(
        self, topic: str, partition: int, value: bytes | None, key: bytes | None
    ) -> tuple[Any, int] | None:
        """The send a failure report is for: the oldest in flight of ``topic``'s
        ``partition`` (of any partition of ``topic`` if the report names none) with this value
        and key; None if none matches. Safe while a sender adds entries: it searches a copy
        (made in one C call) and deletes by position from the left, where only the thread
        serving reports takes entries."""
        queues = self.queues.get(topic) or []
        candidates = [queues[partition]] if 0 <= partition < len(queues) else queues
        value = value or b""
        for entries in candidates:
            snapshot = list(entries)
            for at in range(0, len(snapshot) - _WIDTH + 1, _WIDTH):
                if snapshot[at + 2] == value and snapshot[at + 3] == key:
                    for _ in range(_WIDTH):
                        del entries[at]
                    return snapshot[at], snapshot[at + 1]
        return None

    def pending(self) -> int:
        """Sends in flight."""
        return sum(len(q) for queues in self.queues.values() for q in queues) // _WIDTH
