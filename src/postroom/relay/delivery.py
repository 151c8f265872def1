"""Delivery: one routed batch to the sink, in offset order, until every message is acknowledged
or dead-lettered. The relay loop (``loop.py``) polls, routes, pipelines and commits; this
module owns what happens between "the batch is routed" and "the batch may be committed":
retries of a sink that is down, retries of a message the sink refuses, dead letters, and
the member's sink error in the database (``sink_error_policy.py`` decides when it is written).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import psycopg

from .. import _tracing
from .._checks import safe_str
from ..errors import (
    DestinationUnusable,
    MessageRejected,
    PostroomError,
    SinkUnavailable,
)
from ..log.deadletter_headers import HEADER_PREFIX as DLQ_PREFIX
from ..log.records import Message, TopicPartition
from ..queue.backoff import Backoff
from .routing import Outbound
from .sink_error_policy import SinkErrorPolicy, SinkErrorWrite, error_summary
from .sink_errors_async import record_sink_error
from .sinks import Sink

if TYPE_CHECKING:
    from ..log.engine_async import AsyncLog

log = logging.getLogger("postroom.relay")

MAX_ERROR_CHARS = 2000


@dataclass
class RoutedBatch:
    """A polled batch, routed: each message's :class:`Outbound`, or the routing error that
    sends it to the dead-letter topic at once; and the next offset per partition."""

    messages: list[Message]
    routed: list[Outbound | MessageRejected]
    offsets: dict[TopicPartition, int]


@dataclass
class RelayCounters:
    """What one relay process did since it started."""

    delivered: int = 0
    dead_lettered: int = 0
    batches: int = 0
    sink_failures: int = 0
    last_error: str | None = None


class Delivery:
    """Sends routed batches to ``sink`` for the relay of ``group``: a sink that is down is
    retried with ``backoff`` (the same messages, forever); a message it refuses is retried
    ``max_attempts`` times in all, then dead-lettered; a message whose destination can never
    take it (:class:`DestinationUnusable`) is dead-lettered at once. ``stopping`` cuts the
    waits short and ends a delivery unacknowledged."""

    def __init__(
        self,
        engine: AsyncLog,
        sink: Sink,
        *,
        group: str,
        counters: RelayCounters,
        stopping: asyncio.Event,
        backoff: Backoff,
        max_attempts: int,
        dead_letter_topic: str,
    ) -> None:
        self._log = engine
        self.sink = sink
        self.group = group
        self.counters = counters
        self._stopping = stopping
        self.backoff = backoff
        self.max_attempts = max_attempts
        self.dead_letter_topic = dead_letter_topic
        self._spans: dict[int, Any] = {}  # id(Outbound) -> its span, while a batch is traced
        self._member_id: str | None = None
        self.sink_errors = SinkErrorPolicy()
        try:
            password = urlsplit(sink.url).password
        except ValueError:
            password = None
        self._secrets = (password,) if password else ()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the relay is stopped meanwhile."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            pass

    def note(self, error: str) -> None:
        self.counters.last_error = error
        log.warning("relay %s -> %s: %s", self.group, self.sink.description, error)

    @property
    def member_id(self) -> str | None:
        """The relay's group member whose sink errors are recorded (None until the loop made
        its consumer). A new member (the consumer made again after the database was lost)
        starts a policy of its own: nothing of its row is known yet."""
        return self._member_id

    @member_id.setter
    def member_id(self, member_id: str | None) -> None:
        if member_id != self._member_id:
            self._member_id = member_id
            self.sink_errors = SinkErrorPolicy()

    async def sink_failed(self, exc: BaseException) -> None:
        """The sink refused a send or cannot be reached: record it if the policy says so."""
        text = error_summary(exc, self._secrets)
        await self._record(self.sink_errors.failed(text, time.monotonic()))

    async def sink_succeeded(self) -> None:
        """A send went through: clear the recorded error, if any (no I/O otherwise)."""
        await self._record(self.sink_errors.succeeded(time.monotonic()))

    async def _record(self, write: SinkErrorWrite | None) -> None:
        # Best effort: the record is for people; the relay's work never waits on it failing.
        if write is None or self.member_id is None:
            return  # nothing to write, or not joined yet (decided again at the next send)
        try:
            recorded = await record_sink_error(
                self._log.database, self.group, self.member_id, write.error
            )
        except (psycopg.Error, PostroomError) as exc:
            log.debug("relay %s: sink error not recorded: %s", self.group, safe_str(exc))
            recorded = False
        if recorded:
            self.sink_errors.written(write, time.monotonic())
        else:
            self.sink_errors.not_written(time.monotonic())

    async def deliver(self, batch: RoutedBatch) -> bool:
        """Send the batch in order until all is acknowledged or dead-lettered; False if the
        relay was stopped first."""
        if _tracing.ENABLED and _tracing.recording():
            return await self._deliver_traced(batch)
        return await self._deliver(batch)

    async def _deliver_traced(self, batch: RoutedBatch) -> bool:
        """``_deliver`` with a ``send <destination>`` span per message (ended when the sink
        acknowledges it or it is dead-lettered), whose context the sink's headers carry."""
        spans = self._spans
        for routed in batch.routed:
            if isinstance(routed, Outbound):
                span = _tracing.start_relay(routed, self.group, self.sink.description)
                routed.headers.update(_tracing.trace_context(span))
                spans[id(routed)] = span
        try:
            return await self._deliver(batch)
        except BaseException as exc:
            for span in spans.values():
                _tracing.fail(span, exc)
            raise
        finally:
            for span in spans.values():
                span.end()
            spans.clear()

    async def _deliver(self, batch: RoutedBatch) -> bool:
        pending: list[Outbound] = []
        for message, routed in zip(batch.messages, batch.routed, strict=True):
            if isinstance(routed, MessageRejected):
                # Routing is deterministic: retrying cannot help. Send what came before first,
                # so the dead letter keeps its place in the partition's order.
                if pending and not await self._send_all(pending):
                    return False
                pending = []
                await self.dead_letter(message, str(routed), attempts=1)
            else:
                pending.append(routed)
        return await self._send_all(pending)

    async def _send_all(self, pending: list[Outbound]) -> bool:
        unavailable = 0
        rejected = 0
        while pending:
            if self._stopping.is_set():
                return False
            try:
                await self.sink.send(pending)
            except SinkUnavailable as exc:
                unavailable += 1
                self.counters.sink_failures += 1
                self.note(
                    f"sink unavailable (attempt {unavailable}), retrying batch: {safe_str(exc)}"
                )
                await self.sink_failed(exc)
                await self.sleep(self.backoff.delay(unavailable))
                continue
            except MessageRejected as exc:
                index = min(max(exc.index, 0), len(pending) - 1)
                self.counters.delivered += index
                pending = pending[index:]
                rejected += 1
                await self.sink_failed(exc)
                if rejected < self.max_attempts and not isinstance(exc, DestinationUnusable):
                    self.note(f"{pending[0].id} rejected (attempt {rejected}): {safe_str(exc)}")
                    await self.sleep(self.backoff.delay(rejected))
                    continue
                span = self._spans.get(id(pending[0]))
                if span is not None:
                    _tracing.fail(span, exc)
                await self.dead_letter(pending[0].source, safe_str(exc), attempts=rejected)
                pending = pending[1:]
                rejected = 0
                continue
            self.counters.delivered += len(pending)
            await self.sink_succeeded()
            return True
        await self.sink_succeeded()  # the rest was dead-lettered: the partition goes on
        return True

    async def dead_letter(self, message: Message, error: str, attempts: int) -> None:
        """Publish ``message`` to the dead-letter topic (created if missing) with headers
        naming its source, the attempts and ``error``."""
        topic = self.dead_letter_topic.format(topic=message.topic)
        log.error("relay %s: %s dead-lettered to %s: %s", self.group, message.id, topic, error)
        letter: dict[str, Any] = {
            "group": self.group,
            "error": error[:MAX_ERROR_CHARS],
            "attempts": attempts,
            "topic": topic,
            "headers": {DLQ_PREFIX + "sink": self.sink.description},
        }
        # False: another relay that handled the same message wrote it already.
        if await self._log.dead_letter(message, **letter):  # creates the topic if missing
            self.counters.dead_lettered += 1
