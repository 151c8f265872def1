# Generated from src/postroom/log/kafka/consumer_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The Kafka engine's consumer: ``poll``/``commit``/``seek``/``position``/``committed``/
``rewind``/``assignment`` and ``on_assign``/``on_revoke`` as the PostgreSQL consumer's, over a
confluent-kafka consumer in a Kafka consumer group (``cooperative-sticky`` by default).

Every librdkafka call that may wait runs in a thread, so the event loop never blocks on it.
librdkafka runs the rebalance callbacks inside ``consume``; the hooks run on the loop while it
waits, so the partitions are still held in ``on_revoke`` and a commit there lands.

Fencing as on PostgreSQL: each assignment of a partition gets a new local epoch, and the
positions ``poll()`` returned are committed under the epoch they were read at. A commit for a
partition this member no longer holds, or of offsets read under an earlier assignment of it,
raises :class:`Fenced` and stores nothing; so does the broker's refusal of a commit from an
older generation. Offsets are committed synchronously, the group's position being Kafka's.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter
from typing import Any

from ..._acompat import to_thread
from ..._fastpaths import gc_paused
from ...errors import ConsumerClosed, Fenced, InvalidArgument, NotSupported
from ..membership import DEFAULT_MAX_POLL_INTERVAL
from ..records import (
    DEFAULT_SESSION_TIMEOUT,
    Message,
    OffsetReset,
    TopicPartition,
    check_max_poll_interval,
    check_member_id,
    check_name,
    check_offset,
    check_session_timeout,
)
from .admin import KafkaAdmin
from .bridge import Hooks
from .failures import kafka_module, translate
from .messages import Fetched, message_bytes, to_messages, to_partitions

JOIN_WAIT = 60.0
"""Seconds ``assignment()`` waits for the first rebalance of a new member."""
_TOPIC_PARTITION = attrgetter("topic", "partition")
_OFFSET = attrgetter("offset")


class KafkaConsumer:
    """A member of a Kafka consumer group (or, with ``partitions``, a reader of exactly those
    partitions, Kafka's ``assign()``). See the module docstring and docs/kafka.md.

        async with engine.consumer("billing", "orders") as consumer:
            for message in await consumer.poll(timeout=1.0):
                ...
            await consumer.commit()
    """

    def __init__(
        self,
        admin: KafkaAdmin,
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
        kafka = kafka_module()
        self._kafka = kafka
        self._admin = admin
        self._group = None if group is None else check_name("group", group)
        self._topics = [check_name("topic", t) for t in topics]
        if auto_offset_reset not in ("earliest", "latest"):
            raise InvalidArgument(
                f"invalid auto_offset_reset {auto_offset_reset!r}: 'earliest' or 'latest'"
            )
        session = check_session_timeout(session_timeout)
        max_poll = max(check_max_poll_interval(max_poll_interval), session)
        self._manual = None if partitions is None else sorted(set(partitions))
        config = {
            **admin.settings.client_config(),
            # Without a group a consumer still needs an id: one of its own, never committed to.
            "group.id": self._group or f"postroom-anonymous-{secrets.token_hex(6)}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": auto_offset_reset,
            "session.timeout.ms": int(session * 1000),
            "heartbeat.interval.ms": max(int(session * 1000 / 3), 1),
            "max.poll.interval.ms": int(max_poll * 1000),
        }
        config.setdefault("partition.assignment.strategy", "cooperative-sticky")
        self._cooperative = config["partition.assignment.strategy"] == "cooperative-sticky"
        if member_id is not None:
            config["group.instance.id"] = check_member_id(member_id)
        self._consumer = kafka.Consumer(config)
        self._reset = auto_offset_reset
        self._pause_gc = admin.settings.pause_gc
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._hooks = Hooks()
        self._assigned: dict[TopicPartition, int] = {}  # partition -> its assignment's epoch
        self._epochs = 0
        self._joined = False
        self._positions: dict[TopicPartition, int] = {}  # next offset after what poll returned
        self._read_at: dict[TopicPartition, int] = {}  # the epoch those positions were read at
        self._uncommitted: set[TopicPartition] = set()  # positions moved since their commit
        self._lost: set[TopicPartition] = set()  # moved away with uncommitted positions
        self._ever_held: set[TopicPartition] = set()
        self._buffer: list[Message] = []
        self._fetched: Fetched | None = None  # the fetch the buffer holds, while it is all of it
        self._started = False
        self._closed = False

    @property
    def group(self) -> str | None:
        """The consumer group (None: a consumer without one)."""
        return self._group

    # -- membership ---------------------------------------------------------------------------

    def _assign(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._ever_held.add(tp)
            self._epochs += 1
            self._assigned[tp] = self._epochs
            self._positions.pop(tp, None)
            self._read_at.pop(tp, None)

    def _unassign(self, partitions: Iterable[TopicPartition]) -> None:
        gone = set(partitions)
        self._lost |= gone & self._uncommitted
        self._uncommitted -= gone
        for tp in gone:
            self._assigned.pop(tp, None)
            self._positions.pop(tp, None)
            self._read_at.pop(tp, None)
        self._buffer = [m for m in self._buffer if m.topic_partition not in gone]

    def _rebalance_assign(self, consumer: Any, partitions: Any) -> None:
        # In librdkafka's thread of ``consume``: the hook runs on the loop meanwhile.
        given = to_partitions(partitions)
        if not self._cooperative:  # an eager assignment names every partition held
            self._unassign(set(self._assigned) - given)
        self._assign(given - set(self._assigned))
        self._joined = True
        if self._on_assign is not None and given:
            self._hooks.call(self._on_assign, given)

    def _rebalance_revoke(self, consumer: Any, partitions: Any) -> None:
        taken = to_partitions(partitions)
        if self._on_revoke is not None and taken:
            self._hooks.call(self._on_revoke, taken)  # it may commit: still held here
        self._unassign(taken)

    def _rebalance_lost(self, consumer: Any, partitions: Any) -> None:
        taken = to_partitions(partitions)
        self._unassign(taken)  # lost, not revoked: a commit could not land any more
        if self._on_revoke is not None and taken:
            self._hooks.call(self._on_revoke, taken)

    def _start(self) -> None:
        self._hooks.bind()
        if self._started:
            return
        if self._closed:
            raise ConsumerClosed("this consumer is closed: create a new one with client.consumer()")
        self._started = True
        for topic in self._topics:
            self._admin.partitions(topic)  # TopicNotFound now, not silence later
        if self._manual is not None:
            tps = [self._kafka.TopicPartition(t, p) for t, p in self._manual]
            for tp in self._manual:
                count = self._admin.partitions(tp.topic)
                if not 0 <= tp.partition < count:
                    raise InvalidArgument(
                        f"invalid partition {tp.partition}: topic {tp.topic!r} has {count}"
                    )
            self._call(self._consumer.assign, tps)
            self._assign(self._manual)
            self._joined = True
        else:
            self._call(
                self._consumer.subscribe,
                self._topics,
                self._rebalance_assign,
                self._rebalance_revoke,
                self._rebalance_lost,
            )

    def _call(self, func: Callable[..., Any], *args: Any) -> Any:
        try:
            return to_thread(func, *args)
        except self._kafka.KafkaException as exc:
            raise translate(exc, "consuming", self._admin.where) from exc

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member holds; joins the group first (waits for its first
        rebalance, up to a minute; messages fetched meanwhile wait for the next ``poll``)."""
        self._start()
        deadline = time.monotonic() + JOIN_WAIT
        while not self._joined and time.monotonic() < deadline:
            self._fetch(0.1, 500)
        return set(self._assigned)

    # -- reading ------------------------------------------------------------------------------

    def _fetch(self, timeout: float, limit: int) -> None:
        """Move what librdkafka has (waiting up to ``timeout`` for the first) to the buffer."""
        records = self._call(self._take, timeout, limit)  # one thread hop a batch
        # After the hop: the rebalance callbacks librdkafka ran meanwhile have updated
        # _assigned (keyed by TopicPartition, a tuple: (topic, p) finds it). The collector
        # counts each GC object made (records and messages alike) and runs a young collection
        # past 700: building a batch with it running cost twice as much, and with it paused a
        # batch of 500 messages, their records and their headers dicts still ran one per poll
        # at its end (docs/kafka.md). So the records are freed inside the pause and a
        # message's headers dict waits until it is read: a batch of 500 leaves the count
        # under the threshold, and a poll runs no collection.
        with gc_paused(self._pause_gc):
            fetched = to_messages(records, self._assigned)
            del records
        if self._buffer:
            self._buffer += fetched.messages
            self._fetched = None
        else:
            self._buffer = fetched.messages
            self._fetched = fetched  # poll() takes its ends and size while it is the buffer
        if fetched.error is not None:
            raise translate(
                self._kafka.KafkaException(fetched.error), "consuming", self._admin.where
            )

    def _take(self, timeout: float, limit: int) -> list[Any]:
        # Blocking, in a worker thread (the sync twin: the caller's): up to ``limit`` records,
        # what librdkafka has now, else the first to come within ``timeout`` and what follows.
        records: list[Any] = self._consumer.consume(limit, 0)
        if not records and timeout > 0:
            first = self._consumer.poll(timeout)
            if first is None:
                return []
            records = [first]
            if limit > 1:
                records += self._consumer.consume(limit - 1, 0)
        return records

    def poll(
        self, timeout: float = 1.0, max_messages: int = 500, max_bytes: int = 50 * 1024 * 1024
    ) -> list[Message]:
        """Up to ``max_messages`` messages (about ``max_bytes`` of keys and values; one always
        comes) after this member's positions, waiting up to ``timeout`` seconds for the first.
        Moves the positions only; ``commit()`` stores them."""
        if not isinstance(max_messages, int) or isinstance(max_messages, bool) or max_messages < 1:
            raise InvalidArgument(f"invalid max_messages {max_messages!r}: an integer >= 1")
        if not isinstance(timeout, int | float) or timeout < 0:
            raise InvalidArgument(f"invalid timeout {timeout!r}: seconds >= 0")
        self._start()
        if not self._buffer:
            self._fetch(float(timeout), max_messages)
        buffer, fetched, self._fetched = self._buffer, self._fetched, None
        if (
            fetched is not None
            and fetched.messages is buffer
            and len(buffer) <= max_messages
            and fetched.size <= max_bytes
        ):  # the common case: all of one fetch, whose ends and size to_messages counted
            taken, ends = buffer, fetched.ends
        else:
            taken = buffer if len(buffer) <= max_messages else buffer[:max_messages]
            if message_bytes(taken) > max_bytes:  # count up to the budget (one always comes)
                count, size = 0, 0
                for message in taken:
                    size += len(message.value) + len(message.key or b"")
                    if count and size > max_bytes:
                        break
                    count += 1
                taken = taken[:count]
            # A partition's messages are in offset order: its last one in the batch gives
            # its end.
            ends = dict(zip(map(_TOPIC_PARTITION, taken), map(_OFFSET, taken), strict=True))
        self._buffer = [] if taken is buffer else buffer[len(taken) :]
        for (topic, partition), last in ends.items():
            tp = TopicPartition(topic, partition)
            self._positions[tp] = last + 1
            self._read_at[tp] = self._assigned[tp]
            self._uncommitted.add(tp)
        return taken

    # -- positions ----------------------------------------------------------------------------

    def _need_group(self, what: str) -> None:
        if self._group is None:
            raise InvalidArgument(f"{what} needs a consumer group: this consumer has none")

    def commit(self, offsets: Mapping[TopicPartition, int] | Message | None = None) -> None:
        """Store the positions ``poll()`` returned (or ``offsets``: the next offset to read
        per partition, or the offset after one ``Message``) for the group, synchronously.
        :class:`Fenced` if this member no longer holds one of them, or read it under an
        earlier assignment; nothing is stored then."""
        self._need_group("commit()")
        self._start()
        lost: list[TopicPartition] = []
        if offsets is None:
            wanted = {tp: o for tp, o in self._positions.items() if tp in self._uncommitted}
            epochs = dict(self._read_at)
            lost, self._lost = sorted(self._lost), set()
        elif isinstance(offsets, Message):
            wanted = {offsets.topic_partition: offsets.offset + 1}
            epochs = {}
        else:
            wanted = {TopicPartition(*tp): check_offset(o) for tp, o in offsets.items()}
            epochs = {}
        strangers = sorted(set(wanted) - self._ever_held)
        if strangers:
            raise InvalidArgument(
                f"partition {strangers[0]} is not assigned to this consumer (never was)"
            )
        refused = sorted(
            tp
            for tp in wanted
            if tp not in self._assigned
            or (tp in epochs and epochs[tp] != self._assigned[tp])
            or (tp in self._read_at and self._read_at[tp] != self._assigned[tp])
        )
        if refused:
            raise self._fenced(refused)
        if wanted:
            tps = [
                self._kafka.TopicPartition(tp.topic, tp.partition, o) for tp, o in wanted.items()
            ]
            try:
                to_thread(self._commit, tps)
            except self._kafka.KafkaException as exc:
                what = f"committing for group {self._group!r}"
                raise translate(exc, what, self._admin.where) from exc
            self._uncommitted -= {tp for tp, o in wanted.items() if o >= self._positions.get(tp, 0)}
        if lost:  # polled, then handed over before this commit: their next owner reads them
            raise self._fenced(lost)

    def _fenced(self, refused: list[TopicPartition]) -> Fenced:
        names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in refused)
        return Fenced(
            f"commit refused: this member of group {self._group!r} no longer holds "
            f"{names} (the group rebalanced); their new owner goes on from the committed "
            "offsets"
        )

    def _commit(self, tps: list[Any]) -> None:
        done = self._consumer.commit(offsets=tps, asynchronous=False)
        for tp in done or ():
            if tp.error is not None:
                raise self._kafka.KafkaException(tp.error)

    def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp`` (None if it has none)."""
        self._need_group("committed()")
        found = self._call(
            self._consumer.committed,
            [self._kafka.TopicPartition(tp.topic, tp.partition)],
            self._admin.settings.timeout,
        )
        offset: int = found[0].offset
        return offset if offset >= 0 else None

    def position(self, tp: TopicPartition) -> int:
        """The next offset ``poll()`` returns for ``tp``."""
        self._start()
        if tp in self._positions:
            return self._positions[tp]
        offset = None if self._group is None else self.committed(tp)
        if offset is None:
            low, high = (self._admin.watermarks(tp.topic, tp.partition + 1))[tp.partition]
            offset = low if self._reset == "earliest" else high
        return offset

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Move ``tp``'s position to ``offset`` (the next ``poll()`` starts there); ``tp`` must
        be assigned to this consumer."""
        check_offset(offset)
        self.assignment()
        if tp not in self._assigned:
            raise InvalidArgument(
                f"cannot seek {tp.topic}[{tp.partition}]: not assigned to this consumer"
            )
        self._seek(tp, offset)

    def _seek(self, tp: TopicPartition, offset: int) -> None:
        target = self._kafka.TopicPartition(tp.topic, tp.partition, offset)
        deadline = time.monotonic() + self._admin.settings.timeout
        while True:
            try:
                to_thread(self._consumer.seek, target)
                break
            except self._kafka.KafkaException as exc:
                # _STATE: the partition's fetcher has not started yet, right after assign.
                if time.monotonic() > deadline or self._kafka.KafkaError._STATE != (
                    exc.args[0].code()
                ):
                    raise translate(exc, "seeking", self._admin.where) from exc
                to_thread(time.sleep, 0.02)
        self._buffer = [m for m in self._buffer if m.topic_partition != tp]
        self._positions[tp] = offset
        self._read_at[tp] = self._assigned[tp]
        self._uncommitted.add(tp)

    def rewind(self, unhandled: Iterable[Message]) -> None:
        """Move each partition's position back to the first of ``unhandled``: the next
        ``poll()`` returns them again."""
        first: dict[TopicPartition, int] = {}
        for message in unhandled:
            tp = message.topic_partition
            first[tp] = min(first.get(tp, message.offset), message.offset)
        for tp, offset in first.items():
            if tp in self._assigned:
                self._seek(tp, offset)

    def transaction(self, *args: Any, **kwargs: Any) -> Any:
        """Refused on Kafka: see :class:`NotSupported`'s message."""
        raise NotSupported(
            "transactional consumption (database writes committed with the cursor) needs "
            "PostgreSQL: on kafka:// use poll()/commit() and make the effects idempotent "
            "(deduplicate on message.id, e.g. with client.inbox on PostgreSQL)"
        )

    # -- life ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Leave the group at once (``on_revoke`` runs first), so partitions move now."""
        if self._closed:
            return
        self._closed = True
        self._hooks.bind()
        self._call(self._consumer.close)

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Message]:
        return self._iterate()

    def _iterate(self) -> Iterator[Message]:
        while True:
            yield from self.poll(timeout=1.0)
