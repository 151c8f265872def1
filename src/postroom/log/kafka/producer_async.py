"""The Kafka engine's producer: ``send``/``flush``/``close`` as the PostgreSQL producer's,
over one idempotent confluent-kafka producer (``acks=all``, ``partitioner=murmur2_random``:
a keyed message lands on the partition number postroom's own partitioner picks).

``send`` never blocks the event loop: librdkafka queues the message and returns; a thread of
the producer serves the delivery reports, which resolve each send's future with its
``Published(partition, offset)`` (or a ``postroom.errors`` error). When librdkafka's queue is
full (``buffer_messages``), ``send`` waits for room (in a thread), up to ``buffer_timeout``
seconds, then raises :class:`BufferFull`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from functools import partial
from typing import Any

from ..._acompat import ato_thread
from ..._futures import Sends
from ...errors import BufferFull, InvalidArgument, ProducerClosed
from ..records import (
    _CHECKED_TOPICS,
    MAX_VALUE_BYTES,
    HeaderValue,
    Published,
    Value,
    make_record,
)
from .admin_async import AsyncKafkaAdmin
from .bridge import future_async, new_sends_async
from .failures import kafka_module, translate
from .messages import produce_arguments

DEFAULT_BUFFER_MESSAGES = 100_000
DEFAULT_BUFFER_TIMEOUT = 60.0
SENDS_PER_GROUP = 10_000
"""Sends whose outcomes one ``Sends`` holds: a ``concurrent.futures.Future`` per send (a
condition and a lock each) was 40% of a send's cost; a ``SendFuture`` builds its condition only
when waited on (postroom/_futures.py)."""


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
            **admin.settings.config,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": buffer_messages,
            "message.timeout.ms": int(max(admin.settings.timeout, 1) * 3000),
        }
        self._producer = kafka.Producer(config)
        self._kafka = kafka
        self._sends: Sends | None = None  # made by the first send (on the event loop)
        self._reports: deque[tuple[Sends, int, Any, Any]] = deque()
        self._report = self._delivered  # one bound method, not one a send
        self._closed = False
        self._stop = threading.Event()
        self._reporter = threading.Thread(
            target=self._serve_reports, name="postroom-kafka-reports", daemon=True
        )
        self._reporter.start()

    def _serve_reports(self) -> None:
        # Delivery callbacks run in the thread that polls: this one (and flush's).
        while not self._stop.is_set():
            self._producer.poll(0.1)
            self._apply_reports()

    def _delivered(self, sends: Sends, index: int, err: Any, msg: Any) -> None:
        # One deque append per report; the outcomes are set in bulk, one lock per group of
        # sends, by _apply_reports (a lock per report was most of a send's cost).
        self._reports.append((sends, index, err, msg))

    def _apply_reports(self) -> None:
        reports = self._reports
        ok: dict[Sends, tuple[list[int], list[Published]]] = {}
        grouped, make = ok.get, tuple.__new__  # Published(p, o) is a Python-level __new__
        while reports:
            try:
                sends, index, err, msg = reports.popleft()
            except IndexError:
                break
            if err is not None:
                error = translate(self._kafka.KafkaException(err), "producing", self._admin.where)
                sends.set_exception(index, error)
                continue
            entry = grouped(sends)
            if entry is None:
                entry = ok[sends] = ([], [])
            entry[0].append(index)
            entry[1].append(make(Published, (msg.partition(), msg.offset())))
        for sends, (indexes, values) in ok.items():
            sends.set_results(indexes, values)

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
        if self._closed:
            raise ProducerClosed("send() on a closed producer")
        if (
            type(value) is bytes
            and key is None
            and headers is None
            and partition is None
            and type(topic) is str
            and topic in _CHECKED_TOPICS
            and len(value) <= MAX_VALUE_BYTES
        ):  # the common case: nothing to encode or check again (no Record built)
            name, data, extra = topic, value, None
        else:
            record = make_record(topic, value, key, headers, partition)
            name, data, extra = record.topic, record.value, produce_arguments(record)
        count = self._admin.cached_partitions(name)
        if count is None:
            count = await self._admin.partitions(name)
        if extra and extra.get("partition", -1) >= count:
            raise InvalidArgument(
                f"invalid partition {extra['partition']}: topic {topic!r} has {count} partitions"
            )
        # No lock: ``Sends.new`` is thread-safe, and two threads that both start a new group
        # at its end each use their own.
        sends = self._sends
        if sends is None:
            sends = self._sends = new_sends_async()
        done = sends.new()
        index = done._index
        if index + 1 >= SENDS_PER_GROUP:
            self._sends = new_sends_async()
        # The report's only per-send object: the future is not kept, so a caller that drops
        # it frees it at once (postroom/_futures.py). Only the arguments a send has are passed
        # (messages.produce_arguments).
        report = partial(self._report, sends, index)
        try:
            if extra is None:
                self._producer.produce(name, data, on_delivery=report)
            else:
                self._producer.produce(name, data, on_delivery=report, **extra)
        except BufferError:
            await self._produce_when_room(name, data, report, extra or {})
        except self._kafka.KafkaException as exc:
            raise translate(exc, f"producing to {topic!r}", self._admin.where) from exc
        return future_async(done)

    async def _produce_when_room(
        self, name: str, data: bytes, report: Any, extra: dict[str, Any]
    ) -> None:
        """``produce`` once librdkafka's queue has room, waiting up to ``buffer_timeout``."""
        deadline = None if self._buffer_timeout is None else time.monotonic() + self._buffer_timeout
        while True:
            # Serve delivery reports meanwhile, as the reporter thread does: librdkafka counts
            # a message in its queue until its report is served.
            await ato_thread(self._producer.poll, 0.01)
            self._apply_reports()
            try:
                self._producer.produce(name, data, on_delivery=report, **extra)
                return
            except BufferError:
                if deadline is not None and time.monotonic() > deadline:
                    raise BufferFull(
                        f"producer buffer full for {self._buffer_timeout} s: {self._admin.where} "
                        "takes messages slower than they are sent"
                    ) from None
            except self._kafka.KafkaException as exc:
                raise translate(exc, f"producing to {name!r}", self._admin.where) from exc

    async def flush(self) -> None:
        """Wait until every message sent so far is acknowledged (or failed)."""
        while await ato_thread(self._producer.flush, 1.0):
            if self._stop.is_set():
                break
        self._apply_reports()  # flush served some reports in this thread

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self.flush()
        finally:
            self._stop.set()
            await ato_thread(self._reporter.join)

    async def __aenter__(self) -> AsyncKafkaProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
