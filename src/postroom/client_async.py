"""The entry point: ``connect()`` (``connect_async()`` for asyncio) returns a client for one
postroom schema."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, Unpack, cast

from ._acompat import IS_ASYNC
from ._db_async import AsyncDatabase, open_database
from ._schema_async import AsyncSchema
from .errors import InvalidName
from .log.admin_async import AsyncLogAdmin
from .log.assigned_async import DEFAULT_SESSION_TIMEOUT, OffsetReset
from .log.consumer_async import AsyncConsumer
from .log.deadletters_async import AsyncDeadLetters
from .log.metadata_async import AsyncTopicCache
from .log.producer_async import AsyncAppender, AsyncProducer
from .log.records import (
    GroupInfo,
    HeaderValue,
    Message,
    Published,
    TopicInfo,
    TopicPartition,
    Value,
    batch_record,
    make_record,
)
from .log.runner_async import AsyncRunner
from .log.subscription import Subscriptions
from .queue.backoff import Backoff
from .queue.cron import parse_cron
from .queue.jobs_async import AsyncJob, AsyncJobFunction, AsyncJobs
from .queue.options import EnqueueOptions
from .queue.records import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, JobInfo, JobStats
from .queue.serializer import Serializer, check_serializer
from .queue.worker_async import AsyncWorker
from .relay.inbox_async import AsyncInbox, prune_inbox
from .relay.loop import AsyncRelay
from .relay.records import RelayStatus
from .relay.routing import event_record
from .relay.sinks import Sink
from .relay.status_async import relay_status as _relay_status

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


async def connect_async(
    url: str | None = None,
    *,
    schema: str = "postroom",
    min_size: int = 1,
    max_size: int = 10,
    serializer: Serializer | None = None,
) -> AsyncClient:
    """Open a client on ``url``, else ``POSTROOM_URL``, else ``DATABASE_URL``, else the embedded
    PostgreSQL (started on first use). Call ``migrate()`` once to install the schema, and
    ``close()`` (or use ``with``) when done. ``serializer`` encodes job arguments and results
    (default: JSON with datetime, date, UUID and Decimal; see ``postroom.Serializer``).

        with postroom.connect() as client:  # async with await postroom.connect_async()
            client.migrate()  # await client.migrate()

    Raises :class:`~postroom.errors.DatabaseUnavailable` at once if the server cannot be
    reached or the URL does not parse; its message never contains the password.
    """
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidName(
            f"invalid schema name {schema!r}: use 1-63 characters from A-Z a-z 0-9 _, "
            "not starting with a digit"
        )
    return AsyncClient(
        await open_database(url, schema, min_size, max_size),
        serializer=check_serializer(serializer),
    )


class AsyncClient:
    """Topics, publishing, consumers and group administration on one postroom schema.

    Every write takes an optional ``conn``: the caller's own psycopg connection (or a
    SQLAlchemy/Django connection wrapping one). The write then joins the caller's transaction
    and commits or rolls back with the caller's own rows; without it the write commits at once.
    """

    def __init__(self, db: AsyncDatabase, *, serializer: Serializer | None = None) -> None:
        self._db = db
        self._serializer = serializer
        self._topics = AsyncTopicCache(db)
        self._appender = AsyncAppender(db, self._topics)
        self._admin = AsyncLogAdmin(db, self._topics)
        self._schema = AsyncSchema(db)
        self._subscriptions = Subscriptions()
        self._dead_letters = AsyncDeadLetters(self)

    @property
    def schema(self) -> str:
        return self._db.schema

    @property
    def conninfo(self) -> str:
        return self._db.conninfo

    async def close(self) -> None:
        await self._db.pool.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- schema -----------------------------------------------------------------------------

    async def pending_migrations(self) -> list[str]:
        """Names (``NNNN_name``) of the migrations not yet applied to this schema."""
        return await self._schema.pending_migrations()

    async def migrate(self) -> list[str]:
        """Install or upgrade the schema; returns the migrations applied. Idempotent, and safe
        to call from many processes at once (they serialize on an advisory lock)."""
        return await self._schema.migrate()

    async def grant(self, role: str, *capabilities: str) -> None:
        """Grant an existing database role what one or more capabilities need, and nothing
        more: ``"producer"`` (publish), ``"consumer"`` (consume, keep group cursors),
        ``"enqueuer"`` (enqueue jobs and wait for their results, through functions only),
        ``"worker"`` (run jobs), ``"admin"`` (everything in the schema). Run it as the schema
        owner after ``migrate()``. Raises :class:`~postroom.errors.RoleNotFound` if the role
        does not exist.

            client.grant("orders_service", "producer")
        """
        await self._schema.grant(role, capabilities)

    # -- topics -----------------------------------------------------------------------------

    async def create_topic(
        self, name: str, partitions: int = 1, retention: timedelta | None = None
    ) -> None:
        """Create a topic; raises :class:`TopicExists` if the name is taken."""
        await self._admin.create_topic(name, partitions, retention)

    async def list_topics(self) -> list[TopicInfo]:
        return await self._admin.list_topics()

    async def describe_topic(self, name: str) -> TopicInfo:
        """The topic with each partition's low/high-water marks, message count and bytes."""
        return await self._admin.describe_topic(name)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its messages and every group's cursors on it."""
        await self._admin.delete_topic(name)

    async def add_partitions(self, name: str, total: int) -> None:
        """Grow the topic to ``total`` partitions (never fewer). Keys then map anew, as in Kafka."""
        await self._admin.add_partitions(name, total)

    async def apply_retention(
        self, *, group_expiry: timedelta = timedelta(days=7), batch_size: int = 10000
    ) -> int:
        """Delete messages older than their topic's retention that every active group has read.

        A group is active while it committed within ``group_expiry``; an expired group no longer
        pins the log, and its lag then counts messages it will never see. Deletes at most
        ``batch_size`` messages per partition per call, so each transaction stays short; returns
        how many it deleted (call again while it returns a full batch). Run it periodically,
        from a cron job or ``postroom topic retention``: nothing in postroom runs it for you.
        """
        return await self._admin.apply_retention(group_expiry, batch_size)

    # -- producing --------------------------------------------------------------------------

    async def publish(
        self,
        topic: str,
        value: Value,
        *,
        key: bytes | str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        partition: int | None = None,
        conn: object = None,
    ) -> Published:
        """Write one message; with ``conn`` it commits or rolls back with the caller's work."""
        record = make_record(topic, value, key, headers, partition)
        return (await self._appender.append([record], conn))[0]

    async def publish_batch(
        self, topic: str, messages: Iterable[Any], *, conn: object = None
    ) -> list[Published]:
        """Write many messages in one transaction (the caller's, with ``conn``).

        Each item is a value, or a mapping with ``value`` and optional ``key``, ``headers``,
        ``partition``. Unkeyed messages share one partition per call."""
        records = [batch_record(topic, item) for item in messages]
        return await self._appender.append(records, conn)

    def producer(self, *, linger_ms: float = 5, batch_size: int = 10000) -> AsyncProducer:
        """A batching, non-transactional producer; see ``Producer``/``AsyncProducer``."""
        return AsyncProducer(self._appender, linger_ms=linger_ms, batch_size=batch_size)

    # -- consuming --------------------------------------------------------------------------

    def consumer(
        self,
        group: str | None,
        topics: str | Iterable[str],
        *,
        partitions: Iterable[TopicPartition] | None = None,
        auto_offset_reset: OffsetReset = "earliest",
        member_id: str | None = None,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        on_assign: Callable[[set[TopicPartition]], Any] | None = None,
        on_revoke: Callable[[set[TopicPartition]], Any] | None = None,
    ) -> AsyncConsumer:
        """A member of ``group`` (manual ``partitions``: no membership); see ``AsyncConsumer``."""
        return AsyncConsumer(
            self._db,
            self._topics,
            group,
            [topics] if isinstance(topics, str) else topics,
            partitions=partitions,
            auto_offset_reset=auto_offset_reset,
            member_id=member_id,
            session_timeout=session_timeout,
            on_assign=on_assign,
            on_revoke=on_revoke,
        )

    def subscribe(
        self, topics: str | Iterable[str], *, group: str, **options: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a handler that ``runner()`` (or ``postroom run MODULE``) runs as members of
        ``group``; returns it unchanged. Options: see ``postroom.log.subscription.Subscription``.

            @client.subscribe("orders", group="billing", transactional=True)
            async def bill(message, conn): ...
        """
        return self._subscriptions.decorator(topics, group, options)

    def runner(self) -> AsyncRunner:
        """A runner for the handlers registered with ``subscribe``; ``await runner.run()``."""
        return AsyncRunner(self, self._subscriptions.items)

    async def list_dead_letters(self, topic: str, *, limit: int = 100) -> list[Message]:
        """Dead letters of ``topic`` (``<topic>.dlq``), oldest first; see docs/log.md."""
        return await self._dead_letters.list(topic, limit)

    async def replay_dead_letters(self, topic: str, *, group: str = "postroom-replay") -> int:
        """Publish ``topic``'s dead letters to their source again, each once; returns how many."""
        return await self._dead_letters.replay(topic, group)

    # -- outbox relay -----------------------------------------------------------------------
    # The relay loop, sinks and routing live in postroom.relay; see docs/outbox.md.

    async def publish_event(
        self,
        conn: object,
        aggregate_type: str,
        aggregate_id: str | int,
        event_type: str,
        payload: Value,
        headers: Mapping[str, HeaderValue] | None = None,
        *,
        topic: str = "outbox",
    ) -> Published:
        """Write an outbox event in the caller's transaction (``conn``; None commits at once).

        Key = ``aggregate_id`` (so one aggregate's events keep their order), value =
        ``payload`` (JSON for dicts and lists), headers ``id`` (a new UUID), ``aggregatetype``,
        ``aggregateid``, ``type``: the columns Debezium's outbox event router reads, so
        ``Route("debezium")`` relays it exactly as Debezium would.

            async with conn.transaction():
                await conn.execute("INSERT INTO orders ...")
                await client.publish_event(conn, "order", 42, "OrderCreated", {"total": 10})
        """
        record = event_record(topic, aggregate_type, aggregate_id, event_type, payload, headers)
        return (await self._appender.append([record], conn))[0]

    def relay(self, topics: str | Iterable[str], sink: Sink | str, **options: Any) -> AsyncRelay:
        """A relay carrying ``topics`` to ``sink`` (a URL like ``redis://127.0.0.1:6379`` or a
        :class:`postroom.relay.Sink`); see :class:`AsyncRelay` for the options (``group``,
        ``route``, ``batch_size``, ``max_attempts``, ...). ``relay.run()`` runs it."""
        return AsyncRelay(self, topics, sink, **options)

    def inbox(self, conn: object, name: str = "default") -> AsyncInbox:
        """The inbox ``name`` in the transaction of ``conn``: ``seen(message_id)`` records a
        processed message's id and says whether it was recorded before; see ``Inbox``."""
        return AsyncInbox(self._db, conn, name)

    async def prune_inbox(
        self, older_than: timedelta, *, name: str | None = None, batch_size: int = 10000
    ) -> int:
        """Forget inbox ids recorded more than ``older_than`` ago (of inbox ``name``, or all);
        returns how many. Deletes in batches of ``batch_size``, each its own transaction."""
        return await prune_inbox(self._db, older_than, name, batch_size)

    async def relay_status(self, groups: Iterable[str] | None = None) -> list[RelayStatus]:
        """Per relay (its group; default: every group named ``relay.*``): messages pending and
        the age of the oldest pending one, as :class:`RelayStatus`."""
        return await _relay_status(self, groups)

    # -- groups -----------------------------------------------------------------------------

    async def list_groups(self) -> list[GroupInfo]:
        return await self._admin.list_groups()

    async def describe_group(self, group: str) -> GroupInfo:
        """Per partition: committed offset, high-water mark, lag in messages and in seconds."""
        return await self._admin.describe_group(group)

    async def reset_group(
        self,
        group: str,
        topic: str,
        *,
        to: str | int | datetime,
        partition: int | None = None,
    ) -> dict[int, int]:
        """Move a group's cursors on ``topic`` to ``"earliest"``, ``"latest"``, an offset, or the
        first message at or after a datetime. Creates the cursors if the group is new. Returns
        the new next offset per partition. Run it while the group's consumers are stopped."""
        return await self._admin.reset_group(group, topic, to, partition)

    async def delete_group(self, group: str) -> None:
        """Forget a group's cursors; a consumer of that group then starts anew."""
        await self._admin.delete_group(group)

    # -- queue ------------------------------------------------------------------------------
    # Jobs: register with @client.job, enqueue in your transaction, run with client.worker().
    # The implementation lives in postroom.queue; see docs/queue.md.

    @property
    def _queue(self) -> AsyncJobs:
        jobs: AsyncJobs | None = getattr(self, "_jobs", None)
        if jobs is None:
            jobs = self._jobs = AsyncJobs(self._db, self._serializer)
        return jobs

    def job(
        self,
        kind: str | Callable[..., Any] | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: float | timedelta | None = None,
        backoff: Backoff | None = None,
        max_concurrency: int | None = None,
        rate_limit: float | None = None,
        retry_on: type[BaseException] | Iterable[type[BaseException]] | None = None,
        no_retry_on: type[BaseException] | Iterable[type[BaseException]] | None = None,
    ) -> Callable[[Callable[..., Any]], AsyncJobFunction]:
        """Register a job kind (default: the function's name) and its defaults.

            @client.job("send_receipt", queue="email", max_attempts=8, timeout=30)
            def send_receipt(order_id: int) -> None: ...  # or async def, with AsyncClient

            send_receipt.enqueue(order_id=42, conn=conn)  # await it with AsyncClient

        ``timeout`` (seconds) interrupts a run that takes longer; it counts as a failed
        attempt. ``backoff`` spaces the retries. ``max_concurrency`` and ``rate_limit`` (jobs
        started per second) hold across all workers. Coroutine functions run on the worker's
        event loop, plain functions in the worker's threads. ``retry_on`` retries only those
        exceptions (others fail the job at once); ``no_retry_on`` never retries those. A
        keyword-only parameter ``job: JobContext`` gets the job's context.
        """
        return cast(
            Callable[[Callable[..., Any]], AsyncJobFunction],
            self._queue.job_decorator(
                kind,
                allow_coroutines=IS_ASYNC,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                timeout=timeout,
                backoff=backoff,
                max_concurrency=max_concurrency,
                rate_limit=rate_limit,
                retry_on=retry_on,
                no_retry_on=no_retry_on,
            ),
        )

    def around_job(self, middleware: Callable[..., Any]) -> Callable[..., Any]:
        """Register execution middleware ``middleware(job: JobContext, call_next)``, called
        around every job this client's workers run (plain middleware around plain-function
        jobs, ``async def`` middleware around ``async def`` jobs); see ``postroom.queue.hooks``.
        Register before starting workers. Returns ``middleware`` (usable as a decorator)."""
        self._queue.hooks.add_execution(middleware)
        return middleware

    def around_enqueue(self, middleware: Callable[..., Any]) -> Callable[..., Any]:
        """Register enqueue middleware ``middleware(requests, call_next)``, called around
        every enqueue of this client (an ``async def`` on AsyncClient); ``call_next()``
        inserts the jobs and returns their handles. Returns ``middleware``."""
        self._queue.hooks.add_enqueue(middleware)
        return middleware

    def periodic(
        self,
        cron: str,
        *,
        name: str | None = None,
        args: Mapping[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> Callable[[Any], AsyncJobFunction]:
        """Enqueue a job at every tick of ``cron`` (UTC; 5 fields, or 6 with leading seconds),
        once per tick however many workers run. Put it above ``@client.job`` or use it alone.

            @client.periodic("*/5 * * * *")
            @client.job("refresh_rates")
            def refresh_rates() -> None: ...
        """
        parse_cron(cron)  # fail at import time, not in the worker

        def decorate(target: Any) -> AsyncJobFunction:
            registered = target if isinstance(target, AsyncJobFunction) else self.job()(target)
            self._queue.add_schedule(
                cron, registered, name=name, args=args, queue=queue, priority=priority
            )
            return registered

        return decorate

    async def enqueue(
        self,
        kind: str,
        args: Mapping[str, Any] | None = None,
        *,
        conn: object = None,
        **options: Unpack[EnqueueOptions],
    ) -> AsyncJob:
        """Enqueue a job by kind name (registered here or not: a worker elsewhere may run it);
        the options are :class:`postroom.EnqueueOptions`, as for ``JobFunction.enqueue``."""
        request = self._queue.request(kind, args, options)
        return (await self._queue.enqueue([request], conn))[0]

    async def enqueue_batch(self, jobs: Iterable[Any], *, conn: object = None) -> list[AsyncJob]:
        """Enqueue many jobs in one transaction (the caller's with ``conn``), thousands per
        statement. Items are ``func.prepare(**args, **options)`` (from this client or its sync
        or async twin) or dicts with ``kind``, ``args`` and enqueue options. Every item is
        checked before anything is written."""
        requests = [self._queue.request_from(item) for item in jobs]
        return await self._queue.enqueue(requests, conn)

    async def enqueue_group(
        self, jobs: Iterable[Any], *, then: Any = None, conn: object = None
    ) -> tuple[list[AsyncJob], AsyncJob | None]:
        """Enqueue a group of jobs and, with ``then``, a callback job that runs once every
        member succeeded (Celery's chord), in one transaction. Items are as in
        ``enqueue_batch``; returns the members and the callback.

            members, merge = client.enqueue_group(  # awaited with AsyncClient
                [fetch.prepare(url=u) for u in urls], then=merge_pages.prepare(), conn=conn
            )
        """
        requests = [self._queue.request_from(item) for item in jobs]
        callback = None if then is None else self._queue.request_from(then)
        return await self._queue.enqueue_group(requests, callback, conn)

    async def pause_queue(self, queue: str) -> bool:
        """Stop every worker claiming from ``queue`` (within a claim interval; jobs already
        running finish). Returns False if it was paused already. Paused queues survive
        restarts and show in ``job_stats()``; ``resume_queue`` undoes it."""
        return await self._queue.pause(queue)

    async def resume_queue(self, queue: str) -> bool:
        """Let workers claim from ``queue`` again (they are woken at once); False if it was
        not paused."""
        return await self._queue.resume(queue)

    def worker(
        self,
        queues: Iterable[str] | None = None,
        *,
        concurrency: int = 10,
        **options: Any,
    ) -> AsyncWorker:
        """A worker for ``queues`` (default: the queues of the registered jobs); see
        ``Worker``/``AsyncWorker`` for the options. ``worker.run()`` (awaited with
        ``AsyncClient``) runs it."""
        return AsyncWorker(
            self._queue,
            None if queues is None else list(queues),
            concurrency=concurrency,
            **options,
        )

    async def get_job(self, job_id: int) -> JobInfo:
        """One job, live or finished; raises :class:`JobNotFound`."""
        return await self._queue.get(job_id)

    def job_handle(self, job_id: int) -> AsyncJob:
        """A handle on job ``job_id`` (to wait for its result, inspect or cancel it)."""
        return AsyncJob(self._queue, job_id)

    async def list_jobs(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[JobInfo]:
        """Jobs, newest first; ``state="failed"`` lists the dead letters."""
        return await self._queue.list_jobs(state, kind, queue, limit)

    async def retry_job(self, job_id: int) -> None:
        """Redrive one failed job: ready now, with a fresh set of attempts."""
        await self._queue.retry(job_id)

    async def retry_failed_jobs(self, *, kind: str | None = None, queue: str | None = None) -> int:
        """Redrive every failed job (of a kind/queue); returns how many."""
        return await self._queue.retry_failed(kind, queue)

    async def cancel_job(self, job_id: int) -> str:
        """Cancel a job; returns the state it had. A ready or failed job is cancelled at once;
        a running one is interrupted by its worker (its handler sees ``JobInterrupted``)."""
        return await self._queue.cancel(job_id)

    async def purge_jobs(
        self, state: str, older_than: float | timedelta, *, kind: str | None = None
    ) -> int:
        """Delete done, cancelled or failed jobs older than ``older_than`` (seconds or
        timedelta), in batches; returns how many."""
        return await self._queue.purge(state, older_than, kind)

    async def job_stats(self) -> JobStats:
        """Jobs per queue and state, the oldest due ready job's age, jobs done per second."""
        return await self._queue.stats()

    async def set_job_limit(
        self,
        kind: str,
        *,
        max_concurrency: int | None = None,
        rate_limit: float | None = None,
        burst: float | None = None,
    ) -> None:
        """Limit a job kind across all workers: at most ``max_concurrency`` running, at most
        ``rate_limit`` started per second (bursts up to ``burst``, default one second's worth).
        Both None removes the limit."""
        await self._queue.set_limit("kind", kind, max_concurrency, rate_limit, burst)

    async def set_queue_limit(
        self,
        queue: str,
        *,
        max_concurrency: int | None = None,
        rate_limit: float | None = None,
        burst: float | None = None,
    ) -> None:
        """Limit a queue across all workers, as ``set_job_limit`` does a kind."""
        await self._queue.set_limit("queue", queue, max_concurrency, rate_limit, burst)


__all__ = ["AsyncClient", "connect_async"]  # sync: __all__ = ["Client", "connect"]
