"""The relay loop: poll a batch as a consumer group member, send it to the sink, wait for the
sink's acknowledgement, then commit. At least once, in offset order per partition.

The relay is asyncio only (every sink client has an asyncio flavour, or runs its blocking
calls in a thread); :class:`Relay`, what the sync ``Client.relay()`` returns, runs the same
loop on an event loop of its own. There is no generated sync twin: one loop, one behaviour.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import psycopg

from ..errors import (
    DatabaseUnavailable,
    InvalidArgument,
    MessageRejected,
    PostroomError,
    SinkUnavailable,
    TopicExists,
    TopicNotFound,
)
from ..log.records import Message, TopicPartition, check_name
from ..queue.backoff import Backoff
from .routing import Outbound, Route
from .sinks import Sink, open_sink

if TYPE_CHECKING:
    from ..client import Client
    from ..client_async import AsyncClient

log = logging.getLogger("postroom.relay")

DEFAULT_BACKOFF = Backoff(base=0.2, factor=2.0, max_delay=30.0, jitter=0.2)
DLQ_PREFIX = "postroom-dlq-"
MAX_ERROR_CHARS = 2000
RELAY_OPTIONS = (
    "group",
    "route",
    "batch_size",
    "max_attempts",
    "backoff",
    "dead_letter_topic",
    "poll_timeout",
)


@dataclass
class RelayCounters:
    """What one relay process did since it started."""

    delivered: int = 0
    dead_lettered: int = 0
    batches: int = 0
    sink_failures: int = 0
    last_error: str | None = None


class AsyncRelay:
    """Carries ``topics`` to ``sink`` as a member of consumer group ``group``.

    Each turn polls up to ``batch_size`` messages, routes them (``route``), sends them to the
    sink and commits the group's cursors only after the sink acknowledged the whole batch.
    While the sink is down the same batch is retried with ``backoff`` (forever: nothing is
    skipped). A message the sink rejects for good is retried ``max_attempts`` times in all,
    then published to ``dead_letter_topic`` (``{topic}`` is the source topic) with headers
    naming its source and the sink's error, and the partition goes on.

        relay = client.relay(["orders"], "redis://127.0.0.1:6379")
        await relay.run()          # until relay.stop() (or SIGTERM with the CLI)

    Several relay processes with the same ``group`` split the partitions like any consumer
    group members; each partition then has one relay, so per-key order holds.
    """

    def __init__(
        self,
        client: AsyncClient,
        topics: str | Iterable[str],
        sink: Sink | str,
        *,
        group: str | None = None,
        route: Route | None = None,
        batch_size: int = 500,
        max_attempts: int = 5,
        backoff: Backoff = DEFAULT_BACKOFF,
        dead_letter_topic: str = "{topic}.dlq",
        poll_timeout: float = 1.0,
        **sink_options: Any,
    ) -> None:
        self._client = client
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics:
            raise InvalidArgument("a relay needs at least one topic")
        for name in self.topics:
            check_name("topic", name)
        self.sink = sink if isinstance(sink, Sink) else open_sink(sink, **sink_options)
        if isinstance(sink, Sink) and sink_options:
            raise InvalidArgument(f"sink options {sorted(sink_options)} need a sink URL")
        self.group = check_name("group", group or f"relay.{self.sink.scheme}")
        self.route = route or Route()
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidArgument(f"invalid batch_size {batch_size!r}: must be >= 1")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidArgument(f"invalid max_attempts {max_attempts!r}: must be >= 1")
        try:
            check_name("dead-letter topic", dead_letter_topic.format(topic="t"))
        except (KeyError, IndexError, ValueError, AttributeError):
            raise InvalidArgument(
                f"invalid dead_letter_topic {dead_letter_topic!r}: a topic name, where "
                "{topic} stands for the source topic"
            ) from None
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.dead_letter_topic = dead_letter_topic
        self.poll_timeout = poll_timeout
        self.counters = RelayCounters()
        self._stopping = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- life cycle ---------------------------------------------------------------------

    def stop(self) -> None:
        """Ask ``run()`` to return after the batch in flight (safe from any thread or a
        signal handler). A batch not yet acknowledged is not committed: it is sent again
        by whoever owns its partition next."""
        loop = self._loop
        if loop is not None and loop.is_running():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:
                loop.call_soon_threadsafe(self._stopping.set)
                return
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self) -> None:
        """Relay until ``stop()``. Sink and database outages are retried with backoff and
        logged; only bad configuration (an unknown topic, say) raises."""
        self._loop = asyncio.get_running_loop()
        await self._check_topics()
        try:
            await self._open_sink()
            failures = 0
            while not self.stopping:
                try:
                    async with self._client.consumer(self.group, self.topics) as consumer:
                        while not self.stopping:
                            await self.relay_batch(consumer)
                            failures = 0
                except (psycopg.OperationalError, DatabaseUnavailable) as exc:
                    failures += 1
                    self._note(f"database unavailable, retrying: {exc}")
                    await self._sleep(self.backoff.delay(failures))
        finally:
            await self.sink.close()

    async def _check_topics(self) -> None:
        known = {t.name for t in await self._client.list_topics()}
        missing = [t for t in self.topics if t not in known]
        if missing:
            raise TopicNotFound(
                f"cannot relay unknown topic {missing[0]!r}: create it first "
                "(client.create_topic or `postroom topic create`)"
            )

    async def _open_sink(self) -> None:
        """Connect to the sink, retrying with backoff while it is unreachable (logged each
        time, never a crash loop)."""
        attempt = 0
        while not self.stopping:
            try:
                await self.sink.open()
                if attempt:
                    log.warning(
                        "relay %s: sink %s reachable again", self.group, self.sink.description
                    )
                return
            except SinkUnavailable as exc:
                attempt += 1
                self._note(f"sink unreachable (attempt {attempt}), retrying: {exc}")
                await self._sleep(self.backoff.delay(attempt))

    async def _sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if ``stop()`` is called meanwhile."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            pass

    def _note(self, error: str) -> None:
        self.counters.last_error = error
        log.warning("relay %s -> %s: %s", self.group, self.sink.description, error)

    # -- one batch ----------------------------------------------------------------------

    async def relay_batch(self, consumer: Any) -> int:
        """Poll, deliver and commit one batch; returns how many messages it carried."""
        messages = await self._poll(consumer)
        if not messages:
            return 0
        if not await self._deliver(messages):
            return 0  # stopping: not acknowledged, so not committed
        next_offsets: dict[TopicPartition, int] = {}
        for message in messages:
            next_offsets[message.topic_partition] = message.offset + 1
        try:
            await consumer.commit(next_offsets)
        except PostroomError as exc:
            # Consumer groups (issue 7) refuse the commit of a member that lost a partition
            # meanwhile (errors.Fenced): the batch was delivered, the new owner sends it again
            # from the committed cursor. Duplicates, never a loss; this relay goes on.
            if type(exc).__name__ != "Fenced":
                raise
            self._note(f"partitions moved before the commit, the new owner resends: {exc}")
            return len(messages)
        self.counters.batches += 1
        return len(messages)

    async def _poll(self, consumer: Any) -> list[Message]:
        """``consumer.poll()``, given up (nothing read is lost: nothing is committed) as soon
        as ``stop()`` is called, so SIGTERM does not wait out the poll timeout."""
        poll = asyncio.ensure_future(
            consumer.poll(timeout=self.poll_timeout, max_messages=self.batch_size)
        )
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({poll, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not poll.done():
            poll.cancel()
            await asyncio.gather(poll, return_exceptions=True)
            return []
        messages: list[Message] = poll.result()
        return messages

    async def _deliver(self, messages: Sequence[Message]) -> bool:
        """Send ``messages`` in order until all are acknowledged or dead-lettered; False if
        the relay was stopped first."""
        pending: list[Outbound] = []
        for message in messages:
            try:
                pending.append(self.route(message))
            except MessageRejected as exc:
                # Routing is deterministic: retrying cannot help. Send what came before first,
                # so the dead letter keeps its place in the partition's order.
                if pending and not await self._send_all(pending):
                    return False
                pending = []
                await self._dead_letter(message, str(exc), attempts=1)
        return await self._send_all(pending)

    async def _send_all(self, pending: list[Outbound]) -> bool:
        unavailable = 0
        rejected = 0
        while pending:
            if self.stopping:
                return False
            try:
                await self.sink.send(pending)
            except SinkUnavailable as exc:
                unavailable += 1
                self.counters.sink_failures += 1
                self._note(f"sink unavailable (attempt {unavailable}), retrying batch: {exc}")
                await self._sleep(self.backoff.delay(unavailable))
                continue
            except MessageRejected as exc:
                index = min(max(exc.index, 0), len(pending) - 1)
                self.counters.delivered += index
                pending = pending[index:]
                rejected += 1
                if rejected < self.max_attempts:
                    self._note(f"{pending[0].id} rejected (attempt {rejected}): {exc}")
                    await self._sleep(self.backoff.delay(rejected))
                    continue
                await self._dead_letter(pending[0].source, str(exc), attempts=rejected)
                pending = pending[1:]
                rejected = 0
                continue
            self.counters.delivered += len(pending)
            return True
        return True

    async def _dead_letter(self, message: Message, error: str, attempts: int) -> None:
        topic = self.dead_letter_topic.format(topic=message.topic)
        headers = dict(message.headers)
        headers.update(
            {
                DLQ_PREFIX + "topic": message.topic,
                DLQ_PREFIX + "partition": str(message.partition),
                DLQ_PREFIX + "offset": str(message.offset),
                DLQ_PREFIX + "id": message.id,
                DLQ_PREFIX + "attempts": str(attempts),
                DLQ_PREFIX + "error": error[:MAX_ERROR_CHARS],
                DLQ_PREFIX + "sink": self.sink.description,
            }
        )
        log.error("relay %s: %s dead-lettered to %s: %s", self.group, message.id, topic, error)
        try:
            await self._client.publish(topic, message.value, key=message.key, headers=headers)
        except TopicNotFound:
            try:
                await self._client.create_topic(topic)
            except TopicExists:
                pass  # another relay created it meanwhile
            await self._client.publish(topic, message.value, key=message.key, headers=headers)
        self.counters.dead_lettered += 1


class Relay:
    """The sync face of :class:`AsyncRelay`: ``run()`` blocks, running the relay loop on an
    event loop of its own with its own async connection pool (same URL and schema as the
    client). ``stop()`` may be called from another thread; SIGTERM and SIGINT stop it too when
    ``run()`` is called in the main thread.

        relay = client.relay(["orders"], "kafka://127.0.0.1:9092")
        relay.run()
    """

    def __init__(
        self, client: Client, topics: str | Iterable[str], sink: Sink | str, **options: Any
    ) -> None:
        self._client = client
        self._topics = topics
        self._sink = sink
        self._options = options
        self._relay: AsyncRelay | None = None
        self._stop_requested = threading.Event()
        if isinstance(sink, str):
            relay_options = {k: options.pop(k) for k in RELAY_OPTIONS if k in options}
            self._sink = open_sink(sink, **options)
            self._options = relay_options
        # Fail now, in the caller's thread, on a bad option, URL or missing extra: the relay
        # that runs is built again in run(), on its own event loop and client.
        AsyncRelay(cast(Any, None), topics, self._sink, **self._options)

    @property
    def counters(self) -> RelayCounters:
        return self._relay.counters if self._relay is not None else RelayCounters()

    @property
    def sink_description(self) -> str:
        """The sink's URL without its password."""
        sink = self._sink
        return sink.description if isinstance(sink, Sink) else "<sink>"

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from ..client_async import connect_async

        async with await connect_async(
            self._client.conninfo, schema=self._client.schema, max_size=3
        ) as aclient:
            relay = AsyncRelay(aclient, self._topics, self._sink, **self._options)
            self._relay = relay
            relay._loop = asyncio.get_running_loop()
            if self._stop_requested.is_set():
                relay.stop()
            restore = _on_signals(relay.stop)
            try:
                await relay.run()
            finally:
                restore()

    def stop(self) -> None:
        self._stop_requested.set()
        if self._relay is not None:
            self._relay.stop()


def _on_signals(callback: Any) -> Any:
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, callback)

    def restore() -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)

    return restore
