"""The consumer runner: runs ``@client.subscribe`` handlers as consumer group members.

Each subscription runs ``concurrency`` members (tasks here, threads in the sync twin), so its
partitions are processed in parallel while each partition stays in order (a partition has one
owner). A member loops: poll (or claim a transactional batch), hand each message to the handler,
commit. A handler that raises is retried in place with backoff; after ``max_attempts`` the
message is published to the dead-letter topic with headers naming where it came from and why,
and the partition goes on past it. A dropped connection or a database restart is logged and
retried with backoff; the member goes on from the committed cursor. A member whose
``member_id`` a newer instance took over (``InstanceFenced``) ends, and ``run()`` raises that
error once the others end. ``stop()`` (SIGTERM, SIGINT) stops fetching, lets each member
finish and commit its batch, and leaves the group.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import psycopg

from .. import _tracing
from .._acompat import AEvent, acall_hook, ajoin_all, aspawn, install_stop_handler
from .._reconnect import reconnect_delay
from ..errors import (
    BackendUnavailable,
    Fenced,
    InstanceFenced,
    PostroomError,
    SchemaNotReady,
    TopicExists,
)
from .consumer_async import AsyncBatch, AsyncConsumer
from .deadletter_headers import replay_for_another_group
from .records import Message, TopicPartition
from .subscription import StoppedInBackoff, Subscription, describe_failure

if TYPE_CHECKING:
    from .engine_async import AsyncLog

log = logging.getLogger("postroom.runner")

POLL_WAIT = 0.5
"""Seconds a member waits for messages before it checks for a stop request."""


class AsyncRunner:
    """Runs subscriptions until ``stop()``; see the module docstring and docs/log.md.

    runner = client.runner()
    await runner.run()  # until SIGTERM/SIGINT, or runner.stop()
    """

    def __init__(self, engine: AsyncLog, subscriptions: Iterable[Subscription]) -> None:
        self._log = engine
        self.subscriptions = list(subscriptions)
        self._stop = AEvent()
        self._errors: list[BaseException] = []
        self.processed = 0
        """Messages handled (or dead-lettered) and committed."""
        self.dead_lettered = 0

    def stop(self) -> None:
        """Ask ``run()`` to finish the batches in flight, commit, leave and return. Safe from a
        signal handler or another thread."""
        self._stop.set()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Run every subscription until ``stop()``, SIGTERM or SIGINT."""
        if not self.subscriptions:
            raise PostroomError("nothing to run: no function is decorated with @client.subscribe")
        restore = install_stop_handler(self.stop) if handle_signals else None
        try:
            await self._create_dead_letter_topics()
            members = [
                aspawn(self._member_loop, sub, index, name=f"postroom-run-{sub.group}-{index}")
                for sub in self.subscriptions
                for index in range(sub.concurrency)
            ]
            await ajoin_all(members)
        finally:
            if restore is not None:
                restore()
        if self._errors:
            raise self._errors[0]

    async def _create_dead_letter_topics(self) -> None:
        for sub in self.subscriptions:
            for topic in sub.topics:
                try:
                    await self._log.create_topic(sub.dead_letter_for(topic))
                except TopicExists:
                    pass
                except SchemaNotReady:
                    raise  # nothing can run: one clear error, before any member starts
                except (psycopg.Error, PostroomError) as exc:  # e.g. a consumer-only role
                    log.warning("cannot create dead-letter topic for %s: %s", topic, exc)

    # -- one member -------------------------------------------------------------------------

    async def _member_loop(self, sub: Subscription, index: int) -> None:
        failures = 0
        consumer: AsyncConsumer | None = None
        try:
            while not self._stop.is_set():
                try:
                    if consumer is None:
                        consumer = self._log.consumer(
                            sub.group,
                            list(sub.topics),
                            session_timeout=sub.session_timeout,
                            max_poll_interval=sub.max_poll_interval,
                            member_id=None if sub.member_id is None else f"{sub.member_id}-{index}",
                        )
                    if sub.transactional:
                        await self._transactional_batch(sub, consumer)
                    else:
                        await self._poll_batch(sub, consumer)
                    failures = 0
                except InstanceFenced as exc:
                    log.error("%s: %s; this member ends", sub.name, exc)
                    self._errors.append(exc)
                    return
                except StoppedInBackoff:
                    log.info("%s: stopped during a retry backoff; the message is left", sub.name)
                    break
                except Fenced as exc:
                    log.warning("%s: %s; going on with the partitions still held", sub.name, exc)
                except (psycopg.OperationalError, BackendUnavailable) as exc:
                    failures += 1
                    wait = reconnect_delay(failures)
                    log.log(
                        logging.WARNING if failures == 1 else logging.DEBUG,
                        "%s: database unavailable (%s); retrying in %.1f s",
                        sub.name,
                        str(exc).strip().splitlines()[0] if str(exc).strip() else exc,
                        wait,
                    )
                    await self._stop.wait_timeout(wait)
        except Exception as exc:  # noqa: BLE001 - kept, and raised by run()
            # One member cannot go on: stop them all; run() raises the first error, so it is
            # reported once, by the caller, not also as a thread's or task's traceback.
            self._errors.append(exc)
            self._stop.set()
        except BaseException as exc:
            self._errors.append(exc)
            self._stop.set()
            raise
        finally:
            if consumer is not None:
                await consumer.close()  # leaves the group at once

    async def _poll_batch(self, sub: Subscription, consumer: AsyncConsumer) -> None:
        messages = await consumer.poll(timeout=POLL_WAIT, max_messages=sub.max_messages)
        if not messages:
            return
        by_partition: dict[TopicPartition, list[Message]] = {}
        for message in messages:
            if not replay_for_another_group(message, sub.group):
                by_partition.setdefault(message.topic_partition, []).append(message)
        handled: dict[TopicPartition, int] = {}
        try:
            for tp, batch in by_partition.items():
                if sub.batch:
                    await self._deliver_batch(sub, batch, None)
                    handled[tp] = batch[-1].offset + 1
                else:
                    for message in batch:
                        await self._deliver(sub, message, None)
                        handled[tp] = message.offset + 1
        except StoppedInBackoff:
            if handled:  # what was handled before the stop, not the message that waited
                await consumer.commit(handled)
                self.processed += sum(
                    1 for m in messages if m.offset < handled.get(m.topic_partition, 0)
                )
            raise
        await consumer.commit()
        self.processed += len(messages)

    async def _transactional_batch(self, sub: Subscription, consumer: AsyncConsumer) -> None:
        async with consumer.transaction(max_messages=sub.max_messages, timeout=POLL_WAIT) as batch:
            if not batch.messages:
                return
            # A dead letter's replay for another group is passed over (committed unhandled).
            mine = [m for m in batch.messages if not replay_for_another_group(m, sub.group)]
            if sub.batch and mine:
                view = (
                    batch
                    if len(mine) == len(batch.messages)
                    else AsyncBatch(mine, batch.connection)
                )
                await self._deliver_batch(sub, mine, view)
            elif not sub.batch:
                for message in mine:
                    await self._deliver(sub, message, batch.connection)
        self.processed += len(batch.messages)

    # -- handlers, retries and dead letters ---------------------------------------------------

    async def _deliver(
        self, sub: Subscription, message: Message, conn: psycopg.AsyncConnection[Any] | None
    ) -> None:
        args: tuple[Any, ...] = (message,) if conn is None else (message, conn)
        if _tracing.ENABLED and _tracing.recording():
            with _tracing.processing(
                message.topic, message.headers, **_tracing.message_attributes(message, sub.group)
            ) as span:
                error = await self._attempts(sub, args, conn, f"{message.id}")
                if error is not None:
                    _tracing.fail(span, error[1])
                    await self._dead_letter(sub, message, error, conn)
            return
        error = await self._attempts(sub, args, conn, f"{message.id}")
        if error is not None:
            await self._dead_letter(sub, message, error, conn)

    async def _deliver_batch(
        self, sub: Subscription, messages: list[Message], batch: AsyncBatch | None
    ) -> None:
        conn = None if batch is None else batch.connection
        if _tracing.ENABLED and _tracing.recording():
            with _tracing.processing_batch(
                messages[0].topic,
                (m.headers for m in messages),
                messaging__consumer__group__name=sub.group,
            ) as span:
                failure = await self._attempts(
                    sub, (batch or messages,), conn, f"batch at {messages[0].id}"
                )
                if failure is not None:
                    _tracing.fail(span, failure[1])
        else:
            failure = await self._attempts(
                sub, (batch or messages,), conn, f"batch at {messages[0].id}"
            )
        if failure:
            # Find the poison: each message alone, with its own attempts.
            for message in messages:
                single = [message] if batch is None else AsyncBatch([message], batch.connection)
                error = await self._attempts(sub, (single,), conn, message.id)
                if error is not None:
                    await self._dead_letter(sub, message, error, conn)

    async def _attempts(
        self,
        sub: Subscription,
        args: tuple[Any, ...],
        conn: psycopg.AsyncConnection[Any] | None,
        what: str,
    ) -> tuple[int, BaseException] | None:
        """Call the handler up to ``max_attempts`` times; None once it succeeds, else the
        attempts made and the last error. In a transaction each attempt runs in a savepoint,
        so a failed attempt's writes are undone and the next starts clean."""
        for attempt in range(1, sub.max_attempts + 1):
            try:
                if conn is None:
                    await acall_hook(sub.handler, *args)
                else:
                    async with conn.transaction():  # a savepoint
                        await acall_hook(sub.handler, *args)
                return None
            except (Exception, SystemExit) as exc:
                # sys.exit() in a handler is its failure, not the runner's exit: the runner's
                # own shutdown is stop() (an event), never a SystemExit out of a handler.
                if isinstance(exc, psycopg.OperationalError) and (conn is not None and conn.closed):
                    raise  # the batch's connection is gone: the batch comes again
                log.warning(
                    "%s failed on %s (attempt %d of %d): %s",
                    sub.name,
                    what,
                    attempt,
                    sub.max_attempts,
                    describe_failure(exc),
                )
                if attempt == sub.max_attempts:
                    return attempt, exc
                await self._stop.wait_timeout(sub.retry_wait(attempt))
                if self._stop.is_set():
                    raise StoppedInBackoff from None
        return None  # not reached: max_attempts >= 1

    async def _dead_letter(
        self,
        sub: Subscription,
        message: Message,
        failure: tuple[int, BaseException],
        conn: psycopg.AsyncConnection[Any] | None,
    ) -> None:
        attempts, error = failure
        target = sub.dead_letter_for(message.topic)
        written = await self._log.dead_letter(
            message,
            group=sub.group,
            error=describe_failure(error),
            attempts=attempts,
            topic=target,
            conn=conn,
        )
        if not written:
            log.warning(
                "%s: %s was dead-lettered already (by another member that handled it)",
                sub.name,
                message.id,
            )
            return
        self.dead_lettered += 1
        log.error(
            "%s: %s moved to dead-letter topic %s after %d attempts: %s",
            sub.name,
            message.id,
            target,
            attempts,
            describe_failure(error),
        )
