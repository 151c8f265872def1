"""The relay loop: poll a batch as a consumer group member, send it to the sink, wait for the
sink's acknowledgement, then commit. At least once, in offset order per partition.

The stages overlap as a two-deep pipeline: while batch n is at the sink (sent, acknowledged,
then committed by a task of its own), the loop polls and routes batch n+1; batch n+1 goes to
the sink only after batch n is settled, so one batch at most is in flight and the sink sees
each partition in offset order. A partition being handed over waits for the batch in flight
(``on_revoke`` awaits it, and it commits its offsets); a commit refused as ``Fenced`` drops the
batch polled ahead and moves the positions back to it (docs/outbox.md "Pipeline").

The relay is asyncio only (every sink client has an asyncio flavour, or runs its blocking
calls in a thread); :class:`Relay`, what the sync ``Client.relay()`` returns, runs the same
loop on an event loop of its own. There is no generated sync twin: one loop, one behaviour.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import psycopg

from .._checks import check_schema, safe_str
from .._db_async import open_database
from .._reconnect import reconnect_delay
from ..errors import (
    DatabaseUnavailable,
    Fenced,
    InvalidArgument,
    MessageRejected,
    SinkUnavailable,
    TopicNotFound,
)
from ..log.deadletter_headers import REPLAY_GROUP, replay_for_another_group
from ..log.engine_async import AsyncLog
from ..log.kafka.settings import is_kafka_url
from ..log.records import Message, TopicPartition, check_member_id, check_name
from ..log.subscription import DLQ_SUFFIX
from ..queue.backoff import Backoff
from .delivery import Delivery, RelayCounters, RoutedBatch
from .routing import Outbound, Route
from .sinks import Sink, open_sink

if TYPE_CHECKING:
    from ..log.engine import Log

log = logging.getLogger("postroom.relay")

DEFAULT_BACKOFF = Backoff(base=0.2, factor=2.0, max_delay=30.0, jitter=0.2)
# Long enough not to interrupt a poll's own clean-up (psycopg cancelling a query in the server
# closes the connection if interrupted again), short against a stop (see _cancel).
RECANCEL_SECONDS = 1.0
RELAY_OPTIONS = (
    "group",
    "route",
    "batch_size",
    "max_attempts",
    "backoff",
    "dead_letter_topic",
    "poll_timeout",
    "member_id",
    "session_timeout",
)


class AsyncRelay:
    """Carries ``topics`` to ``sink`` as a member of consumer group ``group``.

    Each turn polls up to ``batch_size`` messages, routes them (``route``), sends them to the
    sink and commits the group's cursors only after the sink acknowledged the whole batch;
    the next batch is polled and routed while one is in flight (one in flight at most).
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
        engine: AsyncLog,
        topics: str | Iterable[str],
        sink: Sink | str,
        *,
        group: str | None = None,
        route: Route | None = None,
        batch_size: int | None = None,
        max_attempts: int = 5,
        backoff: Backoff = DEFAULT_BACKOFF,
        dead_letter_topic: str = "{topic}" + DLQ_SUFFIX,
        poll_timeout: float = 1.0,
        member_id: str | None = None,
        session_timeout: float | None = None,
        **sink_options: Any,
    ) -> None:
        self._log = engine
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
        if batch_size is None:
            batch_size = self.sink.batch_size  # 2,000 for Kafka and Redis, else 500
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
        # Group membership (docs/log.md): a stable member_id keeps a restarted relay's
        # partitions (Kafka's group.instance.id); the consumer checks both values.
        self._membership: dict[str, Any] = {}
        if member_id is not None:
            self._membership["member_id"] = check_member_id(member_id)
        if session_timeout is not None:
            if not isinstance(session_timeout, int | float) or not session_timeout > 0:
                raise InvalidArgument(
                    f"invalid session_timeout {session_timeout!r}: seconds, more than 0"
                )
            self._membership["session_timeout"] = session_timeout
        self.counters = RelayCounters()
        self._inflight: asyncio.Task[bool] | None = None
        self._sink_open: asyncio.Task[None] | None = None  # run()'s first connection
        self._db_failures = 0
        self._stopping = asyncio.Event()
        self._delivery = Delivery(
            engine,
            self.sink,
            group=self.group,
            counters=self.counters,
            stopping=self._stopping,
            backoff=backoff,
            max_attempts=max_attempts,
            dead_letter_topic=dead_letter_topic,
        )
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
        # The sink connects while the group is joined and the first batch polled (librdkafka
        # reaches the broker and reads its metadata in threads of its own meanwhile); the first
        # batch goes out once it is open (``_pipeline``). A batch polled meanwhile is only in
        # memory, as one polled ahead while the sink is down: nothing is sent or committed.
        opening = self._sink_open = asyncio.create_task(self._open_sink())
        opening.add_done_callback(self._opened)
        try:
            self._db_failures = 0
            while not self.stopping:
                try:
                    consumer = self._log.consumer(
                        self.group, self.topics, on_revoke=self._on_revoke, **self._membership
                    )
                    self._delivery.member_id = consumer.member_id  # whose sink errors
                    async with consumer:
                        await self._pipeline(consumer)
                except (psycopg.OperationalError, DatabaseUnavailable) as exc:
                    self._db_failures += 1
                    self._note(f"database unavailable, retrying: {safe_str(exc)}")
                    # Not the sink's backoff: the database is tried again within 0.5 s.
                    await self._sleep(reconnect_delay(self._db_failures))
            if opening.done() and not opening.cancelled():
                opening.result()  # the sink's configuration error (a bad setting), if any
        finally:
            if not opening.done():
                await _cancel(opening)  # stopped (or the database side failed) before it
            await self.sink.close()

    def _opened(self, opening: asyncio.Task[None]) -> None:
        """The sink's first connection ended: on an error other than the sink being
        unreachable (retried meanwhile), stop, so that ``run()`` raises it at once."""
        if not opening.cancelled() and opening.exception() is not None:
            self._stopping.set()

    async def _check_topics(self) -> None:
        known = {t.name for t in await self._log.list_topics()}
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
                self._note(f"sink unreachable (attempt {attempt}), retrying: {safe_str(exc)}")
                await self._delivery.sink_failed(exc)
                await self._sleep(self.backoff.delay(attempt))

    async def _sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if ``stop()`` is called meanwhile."""
        await self._delivery.sleep(seconds)

    def _note(self, error: str) -> None:
        self._delivery.note(error)

    # -- the pipeline -------------------------------------------------------------------

    async def _pipeline(self, consumer: Any) -> None:
        """Poll and route batch n+1 while batch n is in flight (``_carry``: send, then commit),
        until ``stop()``. Batch n+1 goes out once batch n is settled: one batch in flight.

        Every message polled is, at each ``poll()``, either committed or in the batch in
        flight: so ``on_revoke`` (called from ``poll()``) only has to await that batch for the
        partitions it hands over to be committed up to their positions."""
        try:
            while not self.stopping:
                messages = await self._poll(consumer)
                self._db_failures = 0
                batch = self._prepare(messages) if messages else None
                fenced = await self._settle()
                if batch is None:
                    continue
                if fenced:
                    # The commit of the batch before was refused: some partitions moved. What
                    # was polled ahead was read under the lost epochs for those: drop it, and
                    # read again from where it began what this member still holds.
                    await self._rewind(consumer, batch)
                    continue
                if self._sink_open is not None and not self._sink_open.done():
                    await self._sink_open  # raises a configuration error of the sink
                if self.stopping:
                    break  # polled, not sent: not committed, sent again after a restart
                self._inflight = asyncio.create_task(self._carry(consumer, batch))
        finally:
            # Stopping: let the batch in flight finish (its send, then its commit). An error
            # here (the database gone): it fails at its commit or finishes, nothing else.
            try:
                await self._settle()
            except Exception as exc:  # noqa: BLE001 (the error in flight already unwinds)
                log.debug("relay %s: batch in flight ended with %r", self.group, exc)

    async def _settle(self) -> bool:
        """Wait for the batch in flight, if any; whether its commit was refused as Fenced.
        Its other errors are raised here."""
        task, self._inflight = self._inflight, None
        return False if task is None else await task

    async def _on_revoke(self, partitions: set[TopicPartition]) -> None:
        """The consumer hands ``partitions`` over (or lost them) after this returns: let the
        batch in flight reach the sink and commit first, so the next owner starts after it.
        Nothing else is held for them: the batch ``poll()`` is reading now is taken after."""
        task = self._inflight
        if task is not None and not task.done():
            log.info(
                "relay %s: handing over %s once the batch in flight is committed",
                self.group,
                ", ".join(sorted(f"{tp.topic}/{tp.partition}" for tp in partitions)),
            )
            await asyncio.wait({task})  # its outcome is the loop's to read (_settle)

    async def _rewind(self, consumer: Any, batch: RoutedBatch) -> None:
        """Drop ``batch`` (polled, never sent): each partition still held reads again from
        the batch's first offset in it; a lost one is the new owner's."""
        first: dict[TopicPartition, int] = {}
        for message in batch.messages:
            first.setdefault(message.topic_partition, message.offset)
        for tp, offset in first.items():
            try:
                await consumer.seek(tp, offset)
            except (Fenced, InvalidArgument):
                pass  # no longer this member's partition

    async def relay_batch(self, consumer: Any) -> int:
        """Poll, deliver and commit one batch, without overlap; returns how many messages it
        carried (``run()`` overlaps the stages instead)."""
        messages = await self._poll(consumer)
        if not messages:
            return 0
        await self._carry(consumer, self._prepare(messages))
        return len(messages)

    def _prepare(self, messages: list[Message]) -> RoutedBatch:
        """Route ``messages`` (a message the route cannot map keeps its place, as its error)
        and note the next offset per partition."""
        routed: list[Outbound | MessageRejected] = []
        route = self.route
        ends: dict[tuple[str, int], int] = {}  # plain tuples: a TopicPartition per message cost
        kept = messages
        for message in messages:
            ends[message.topic, message.partition] = message.offset + 1
            if REPLAY_GROUP in message.headers and replay_for_another_group(message, self.group):
                # A dead letter's replay for another group: passed over, committed unsent.
                if kept is messages:
                    kept = messages[: len(routed)]
                continue
            if kept is not messages:
                kept.append(message)
            try:
                routed.append(route(message))
            except MessageRejected as exc:
                routed.append(exc)
        offsets = {TopicPartition(t, p): end for (t, p), end in ends.items()}
        return RoutedBatch(kept, routed, offsets)

    async def _carry(self, consumer: Any, batch: RoutedBatch) -> bool:
        """Deliver ``batch`` and commit it once acknowledged; True if the commit was refused
        as Fenced (the batch was delivered: the new owner sends it again, duplicates only)."""
        if not await self._delivery.deliver(batch):
            return False  # stopping: not acknowledged, so not committed
        try:
            await consumer.commit(batch.offsets)
        except Fenced as exc:
            # The group refuses the commit of a member that lost a partition meanwhile (a long
            # pause past its session): the batch was delivered, and the new owner sends it again
            # from the committed cursor. Duplicates, never a loss; this relay goes on.
            self._note(
                f"partitions moved before the commit, the new owner resends: {safe_str(exc)}"
            )
            return True
        self.counters.batches += 1
        return False

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
            await _cancel(poll)
            return []
        messages: list[Message] = poll.result()
        return messages


async def _cancel(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling it again each
    ``RECANCEL_SECONDS`` while it runs on. On Python 3.11, ``asyncio.wait_for`` drops a
    cancellation that arrives as the future it waits for completes (CPython issue 86296, fixed
    in 3.12); psycopg_pool waits for a connection with it, so a stop that came just as a poll
    got its connection was lost, and the relay waited out the whole poll timeout."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_SECONDS)
    if not task.cancelled():
        task.exception()  # retrieved: an error of a poll given up is not the loop's concern


@dataclass(frozen=True)
class RelaySource:
    """What :class:`Relay` needs of a client: its database's URL and schema (the relay opens
    its own pool on them). ``postroom relay`` passes one, and opens no client of its own."""

    conninfo: str
    schema: str

    def __post_init__(self) -> None:
        if is_kafka_url(self.conninfo):
            raise InvalidArgument("the relay reads from PostgreSQL: give it a PostgreSQL URL")
        check_schema(self.schema)


class Relay:
    """The sync face of :class:`AsyncRelay`: ``run()`` blocks, running the relay loop on an
    event loop of its own with its own async connection pool (same URL and schema as the
    client). ``stop()`` may be called from another thread; SIGTERM and SIGINT stop it too when
    ``run()`` is called in the main thread.

        relay = client.relay(["orders"], "kafka://127.0.0.1:9092")
        relay.run()
    """

    def __init__(
        self,
        engine: Log | RelaySource,
        topics: str | Iterable[str],
        sink: Sink | str,
        **options: Any,
    ) -> None:
        self._engine = engine
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
        # Four connections: a poll and the commit of the batch in flight run at once, beside
        # the heartbeat and a dead letter's publish.
        db = await open_database(self._engine.conninfo, self._engine.schema, 1, 4)
        try:
            relay = AsyncRelay(AsyncLog(db), self._topics, self._sink, **self._options)
            self._relay = relay
            relay._loop = asyncio.get_running_loop()
            if self._stop_requested.is_set():
                relay.stop()
            restore = _on_signals(relay.stop)
            try:
                await relay.run()
            finally:
                restore()
        finally:
            await db.pool.close()

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
