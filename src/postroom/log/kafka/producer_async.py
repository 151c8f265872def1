"""The Kafka engine's producer: ``send``/``flush``/``close`` as the PostgreSQL producer's,
over one idempotent confluent-kafka producer (``acks=all``; every send names its partition,
the one postroom's own partitioner picks for a key: kafka/inflight.py).

``send`` never blocks the event loop: librdkafka queues the message and returns; a thread of
the producer serves the delivery reports, which resolve each send's future with its
``Published(partition, offset)`` (or a ``postroom.errors`` error). The producer has one
delivery callback, not one a send: a report finds its send by its place in its partition
(kafka/inflight.py), so a message in flight costs no Python object. When librdkafka's queue is
full (``buffer_messages``), ``send`` waits for room (in a thread), up to ``buffer_timeout``
seconds, then raises :class:`BufferFull`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from time import monotonic
from typing import Any

from ..._acompat import ato_thread
from ...errors import BufferFull, InvalidArgument, ProducerClosed
from ..records import (
    MAX_VALUE_BYTES,
    HeaderValue,
    Published,
    Value,
    make_record,
)
from .admin_async import AsyncKafkaAdmin
from .bridge import future_async, new_sends_async
from .failures import kafka_module, translate
from .inflight import InFlight
from .messages import produce_arguments

DEFAULT_BUFFER_MESSAGES = 100_000
DEFAULT_BUFFER_TIMEOUT = 60.0
PUBLISHED = Published._make
"""A stored ``(partition, offset)`` as the ``Published`` its reader gets (``Sends``'s make)."""
SENDS_PER_GROUP = 10_000
"""Sends whose outcomes one ``Sends`` holds: a ``concurrent.futures.Future`` per send (a
condition and a lock each) was 40% of a send's cost; a ``SendFuture`` builds its condition only
when waited on (postroom/_futures.py)."""
REPORT_WAIT = 0.05
"""Seconds the reporter thread waits in one ``poll`` for a report, or, with nothing in flight,
for a send."""
SERVE_EVERY_MASK = 255
"""A send whose index in its group has all these bits set serves the reports ready (every
256th send, never a lone first one), as a raw confluent-kafka loop serves them in its own
thread."""
INLINE_GRACE = 0.01
"""Seconds after a send served the reports that the reporter thread leaves them to sends."""


class AsyncKafkaProducer:
    """A batching producer to Kafka; see the module docstring. Safe to share between tasks
    (the sync twin: threads). ``close()`` (or leaving ``async with``) flushes.

        async with engine.producer() as producer:
            future = await producer.send("orders", {"id": 1}, key="customer-7")
            published = await future  # Published(partition, offset)
    """

    def __init__(
        self,
        admin: AsyncKafkaAdmin,
        *,
        linger_ms: float = 5,
        buffer_messages: int = DEFAULT_BUFFER_MESSAGES,
        buffer_timeout: float | None = DEFAULT_BUFFER_TIMEOUT,
    ) -> None:
        kafka = kafka_module()
        if not isinstance(linger_ms, int | float) or isinstance(linger_ms, bool) or linger_ms < 0:
            raise InvalidArgument(f"invalid linger_ms {linger_ms!r}: milliseconds >= 0")
        self._admin = admin
        self._buffer_timeout = buffer_timeout
        config = {
            **admin.settings.client_config(),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": buffer_messages,
            "message.timeout.ms": int(max(admin.settings.timeout, 1) * 3000),
        }
        self._inflight = InFlight()
        config["on_delivery"] = self._inflight.report  # one callback for every message
        self._producer = kafka.Producer(config)
        self._kafka = kafka
        self._sends: Any = None  # made by the first send (on the event loop)
        self._lanes: dict[str, list[Any]] = {}  # each topic's unkeyed lane (InFlight.lane)
        # ``_order`` makes a send's place in its partition's FIFO its place in librdkafka's
        # queue (taken around both); ``_serving`` lets one thread at a time serve reports, so
        # a partition's reports are matched in the order librdkafka gives them.
        self._order = threading.Lock()
        self._serving = threading.Lock()
        self._failures = self._inflight.failures
        self._served_at = 0.0  # when a send last served the reports (_serve_inline)
        self._closed = False
        self._stop = threading.Event()
        # With nothing in flight the reporter waits on ``_wake`` (set by the first send, and
        # by close()), not in librdkafka's poll, which close() would otherwise wait out.
        self._wake = threading.Event()
        self._idle = False  # the reporter waits (or is about to) on _wake
        self._reporter = threading.Thread(
            target=self._serve_reports, name="postroom-kafka-reports", daemon=True
        )
        self._reporter.start()

    def _serve_reports(self) -> None:
        # Delivery callbacks run in the thread that polls: this one while no send serves them
        # (``_serve_inline``), a sender's, flush's, or a send's waiting for room, each holding
        # ``_serving``. While sends serve them, this thread stays out of ``poll``: a report
        # served here takes the GIL from the sending thread (one hand-over a report, each a
        # wait of the sender: the producer ran at 0.2-0.4 of raw, bench/RESULTS.md).
        while not self._stop.is_set():
            wait = self._served_at + INLINE_GRACE - monotonic()
            if wait > 0:
                self._stop.wait(wait)
                continue
            if not len(self._producer):
                # Nothing queued, in flight or to report. A send checks ``_idle`` after its
                # produce, this thread ``len`` after setting it: one of them sees the other.
                self._idle = True
                if not len(self._producer):
                    self._wake.wait(REPORT_WAIT)
                self._idle = False
                self._wake.clear()
            self._serve(REPORT_WAIT)
            self._apply_failures()

    def _serve_inline(self) -> None:
        """Serve the reports ready now in the sending thread (never waits: a send on the event
        loop may call it), unless another thread serves them."""
        self._served_at = monotonic()  # the reporter thread backs off after its poll
        if self._serving.acquire(blocking=False):
            try:
                self._producer.poll(0)
            finally:
                self._serving.release()
            if self._failures:
                self._apply_failures()

    def _serve(self, timeout: float) -> None:
        with self._serving:
            # Nothing in flight (a flush just served the last report): no wait in poll.
            self._producer.poll(timeout if len(self._producer) else 0)

    def _flush_served(self, timeout: float) -> int:
        with self._serving:
            left: int = self._producer.flush(timeout)
        return left

    def _apply_failures(self) -> None:
        failures = self._failures
        while failures:
            try:
                sends, index, err = failures.popleft()
            except IndexError:
                break
            exc = self._kafka.KafkaException(err)
            sends.set_exception(index, translate(exc, "producing", self._admin.where))

    async def send(
        self,
        topic: str,
        value: Value,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        partition: int | None = None,
    ) -> Any:
        """Queue one message; returns a future of its ``Published`` position. Bad input, a
        topic that does not exist and a partition it lacks raise here."""
        if type(value) is bytes and key is None and headers is None and partition is None:
            # The common case, inline: a topic sent to before, whose unkeyed sends' partition
            # (``lane``) holds, a value needing no encoding; no Record, no call a send beyond
            # the future's and librdkafka's (each was ~0.1-0.3 us against raw's ~3).
            lane = self._lanes.get(topic)
            if (
                lane is not None and monotonic() < lane[0] and len(value) <= MAX_VALUE_BYTES
            ):  # (no lane once closed: ``close()`` clears them)
                sends = self._sends
                done = sends.new()
                index = done._index
                if index + 1 >= SENDS_PER_GROUP:
                    self._sends = new_sends_async(PUBLISHED)
                entries = lane[2]
                with self._order:
                    entries.extend((sends, index, value, None))
                    try:
                        self._producer.produce(topic, value, partition=lane[1])
                        queued = True
                    except BaseException as exc:
                        for _ in range(4):  # its own entry: the last (``_order`` held)
                            entries.pop()
                        if isinstance(exc, self._kafka.KafkaException):
                            raise self._translated(exc, topic) from exc
                        if not isinstance(exc, BufferError):
                            raise
                        queued = False
                if queued:
                    if self._idle:
                        self._wake.set()
                    if index & SERVE_EVERY_MASK == SERVE_EVERY_MASK:
                        self._serve_inline()
                    return done
                # librdkafka's queue is full: wait for room
                entry = (sends, index, value, None)
                if not self._enqueue(topic, lane[1], value, None, entry):
                    await self._enqueue_when_room(topic, lane[1], value, None, entry)
                return done
        return await self._send(topic, value, key, headers, partition)

    async def _send(
        self,
        topic: str,
        value: Value,
        key: bytes | str | None,
        headers: Mapping[str, HeaderValue] | None,
        partition: int | None,
    ) -> Any:
        if self._closed:
            raise ProducerClosed("send() on a closed producer")
        record = make_record(topic, value, key, headers, partition)
        name, data, extra = record.topic, record.value, produce_arguments(record)
        count = self._admin.cached_partitions(name)
        if count is None:
            count = await self._admin.partitions(name)
        if "partition" in extra:
            place = extra["partition"]
            if place >= count:
                raise InvalidArgument(
                    f"invalid partition {place}: topic {topic!r} has {count} partitions"
                )
        elif record.key is None:
            lane = self._lanes[name] = self._inflight.lane(name, count)
            place = lane[1]
        else:
            place = self._inflight.place(name, count, record.key)
        # ``Sends.new`` is thread-safe, and two threads that both start a new group at its end
        # each use their own.
        sends = self._sends
        if sends is None:
            sends = self._sends = new_sends_async(PUBLISHED)
        done = sends.new()
        index = done._index
        if index + 1 >= SENDS_PER_GROUP:
            self._sends = new_sends_async(PUBLISHED)
        # The future is not kept (a caller that drops it frees it at once), and the message in
        # flight is four items in its partition's FIFO: no object a send (kafka/inflight.py).
        entry = (sends, index, data, record.key)
        if not self._enqueue(name, place, data, extra, entry):
            await self._enqueue_when_room(name, place, data, extra, entry)
        elif index & SERVE_EVERY_MASK == SERVE_EVERY_MASK:
            self._serve_inline()
        return future_async(done)

    def _enqueue(
        self,
        name: str,
        place: int,
        data: bytes,
        extra: dict[str, Any] | None,
        entry: tuple[Any, ...],
    ) -> bool:
        """``produce`` now: False when librdkafka's queue is full (nothing queued then)."""
        with self._order:
            entries = self._inflight.queue(name, place)
            entries.extend(entry)
            try:
                if extra is None:
                    self._producer.produce(name, data, partition=place)
                else:
                    extra["partition"] = place
                    self._producer.produce(name, data, **extra)
            except BaseException as exc:
                for _ in entry:  # the entry just added: the last (``_order`` is held)
                    entries.pop()
                if isinstance(exc, self._kafka.KafkaException):
                    raise self._translated(exc, name) from exc
                if not isinstance(exc, BufferError):
                    raise
                return False
        if self._idle:
            self._wake.set()
        return True

    def _translated(self, exc: Any, topic: str) -> BaseException:
        """The ``postroom.errors`` error for librdkafka's refusal of a ``produce``."""
        return translate(exc, f"producing to {topic!r}", self._admin.where)

    async def _enqueue_when_room(
        self,
        name: str,
        place: int,
        data: bytes,
        extra: dict[str, Any] | None,
        entry: tuple[Any, ...],
    ) -> None:
        """``produce`` once librdkafka's queue has room, waiting up to ``buffer_timeout``."""
        deadline = None if self._buffer_timeout is None else time.monotonic() + self._buffer_timeout
        while True:
            # Serve delivery reports meanwhile, as the reporter thread does: librdkafka counts
            # a message in its queue until its report is served.
            await ato_thread(self._serve, 0.01)
            self._apply_failures()
            if self._enqueue(name, place, data, extra, entry):
                return
            if deadline is not None and time.monotonic() > deadline:
                raise BufferFull(
                    f"producer buffer full for {self._buffer_timeout} s: {self._admin.where} "
                    "takes messages slower than they are sent"
                )

    async def flush(self) -> None:
        """Wait until every message sent so far is acknowledged (or failed)."""
        # Nothing queued and no report unserved: nothing to wait for (a thread that waits
        # for ``_serving`` may wait out the reporter's poll).
        while len(self._producer) and await ato_thread(self._flush_served, 1.0):
            if self._stop.is_set():
                break
        self._apply_failures()  # flush served some reports in this thread

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._lanes.clear()
        try:
            await self.flush()
        finally:
            self._stop.set()
            self._wake.set()
            await ato_thread(self._reporter.join)

    async def __aenter__(self) -> AsyncKafkaProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
