"""The entry point: ``connect_async()`` returns an :class:`AsyncClient` for one postroom schema."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from . import _sql
from ._acompat import IS_ASYNC, ato_thread
from ._db_async import AsyncDatabase
from .embedded import resolve_url
from .errors import (
    DatabaseUnavailable,
    GroupNotFound,
    InvalidArgument,
    InvalidName,
    OffsetOutOfRange,
    TopicExists,
    TopicNotFound,
)
from .log.assigned_async import DEFAULT_SESSION_TIMEOUT, OffsetReset
from .log.consumer_async import AsyncConsumer
from .log.metadata_async import AsyncTopicCache
from .log.producer_async import AsyncAppender, AsyncProducer
from .log.records import (
    GroupInfo,
    HeaderValue,
    PartitionInfo,
    PartitionLag,
    Published,
    Record,
    TopicInfo,
    TopicPartition,
    Value,
    check_name,
    check_offset,
    check_partition_count,
    make_record,
)
from .queue.backoff import Backoff
from .queue.cron import parse_cron
from .queue.jobs_async import AsyncJob, AsyncJobFunction, AsyncJobs
from .queue.records import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, JobInfo, JobStats
from .queue.worker_async import AsyncWorker

GRANTS: dict[str, tuple[str, ...]] = {
    "producer": ("grant_producer",),
    "consumer": ("grant_consumer",),
    "admin": ("grant_admin",),
    "enqueuer": ("grant_enqueuer",),
    "worker": ("grant_worker",),
}
"""The named grant statements (``_sql/grants.sql``) each capability needs."""

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


async def connect_async(
    url: str | None = None,
    *,
    schema: str = "postroom",
    min_size: int = 1,
    max_size: int = 10,
) -> AsyncClient:
    """Open a client on ``url``, else ``POSTROOM_URL``, else ``DATABASE_URL``, else the embedded
    PostgreSQL (started on first use). Call ``migrate()`` once to install the schema, and
    ``close()`` (or use ``async with``) when done.

        async with await postroom.connect_async() as client:
            await client.migrate()
    """
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidName(
            f"invalid schema name {schema!r}: use 1-63 characters from A-Z a-z 0-9 _, "
            "not starting with a digit"
        )
    conninfo = await ato_thread(resolve_url, url)
    try:
        # Fail now with the server's reason, not after the pool's 30 s of retries.
        probe = await psycopg.AsyncConnection.connect(conninfo, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(
            f"cannot connect to {_redacted(conninfo)}: {str(exc).strip()}"
        ) from exc
    await probe.close()
    pool = AsyncConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        open=False,
        name="postroom",
        # A connection cut while idle in the pool (server restart, proxy, failover) is
        # replaced before it is handed out, instead of failing the caller's next statement.
        check=AsyncConnectionPool.check_connection,
    )
    await pool.open(wait=True)
    return AsyncClient(AsyncDatabase(pool, conninfo, schema))


def _redacted(conninfo: str) -> str:
    """The connection target without its password, for error messages."""
    params = conninfo_to_dict(conninfo)
    return " ".join(
        f"{k}={v}" for k, v in params.items() if k in ("host", "port", "dbname", "user")
    )


class AsyncClient:
    """Topics, publishing, consumers and group administration on one postroom schema.

    Every write takes an optional ``conn``: the caller's own psycopg connection (or a
    SQLAlchemy/Django connection wrapping one). The write then joins the caller's transaction
    and commits or rolls back with the caller's own rows; without it the write commits at once.
    """

    def __init__(self, db: AsyncDatabase) -> None:
        self._db = db
        self._topics = AsyncTopicCache(db)
        self._appender = AsyncAppender(db, self._topics)

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
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("schema_exists"), {"ledger": f"{self._db.schema}.schema_migrations"}
            )
            row = await cur.fetchone()
            applied: set[int] = set()
            if row is not None and row[0]:
                cur = await conn.execute(self._db.q("applied_migrations"))
                applied = {r[0] for r in await cur.fetchall()}
        return [f"{m.version:04d}_{m.name}" for m in _sql.migrations() if m.version not in applied]

    async def migrate(self) -> list[str]:
        """Install or upgrade the schema; returns the migrations applied. Idempotent, and safe
        to call from many processes at once (they serialize on an advisory lock)."""
        done = []
        async with self._db.connection() as conn:
            await conn.execute(self._db.q("lock_migrations"), {"schema": self._db.schema})
            await conn.execute(self._db.q("create_schema"))
            cur = await conn.execute(self._db.q("applied_migrations"))
            applied = {r[0] for r in await cur.fetchall()}
            for migration in _sql.migrations():
                if migration.version in applied:
                    continue
                await conn.execute(_sql.render(migration.statement, self._db.schema))
                await conn.execute(
                    self._db.q("record_migration"),
                    {"version": migration.version, "name": migration.name},
                )
                done.append(f"{migration.version:04d}_{migration.name}")
        return done

    async def grant(self, role: str, *capabilities: str) -> None:
        """Grant an existing database role what one or more capabilities need, and nothing
        more: ``"producer"`` (publish), ``"consumer"`` (consume, keep group cursors),
        ``"enqueuer"`` (enqueue jobs, read them and their results), ``"worker"`` (run jobs),
        ``"admin"`` (everything in the schema). Run it as the schema owner after ``migrate()``.

            client.grant("orders_service", "producer")
        """
        if not isinstance(role, str) or not role or len(role) > 63:
            raise InvalidName(f"invalid role name {role!r}: 1-63 characters")
        unknown = set(capabilities) - set(GRANTS)
        if unknown or not capabilities:
            raise InvalidArgument(
                f"invalid capabilities {sorted(unknown) or list(capabilities)}: "
                f"use one or more of {sorted(GRANTS)}"
            )
        async with self._db.connection() as conn:
            for capability in capabilities:
                for statement in GRANTS[capability]:
                    await conn.execute(self._db.q_for_role(statement, role))

    # -- topics -----------------------------------------------------------------------------

    async def create_topic(
        self, name: str, partitions: int = 1, retention: timedelta | None = None
    ) -> None:
        """Create a topic; raises :class:`TopicExists` if the name is taken."""
        check_name("topic", name)
        check_partition_count(partitions)
        if retention is not None and (
            not isinstance(retention, timedelta) or retention <= timedelta(0)
        ):
            raise InvalidArgument(f"invalid retention {retention!r}: a positive timedelta or None")
        try:
            async with self._db.connection() as conn:
                await conn.execute(
                    self._db.q("create_topic"),
                    {"name": name, "partitions": partitions, "retention": retention},
                )
        except pg_errors.UniqueViolation:
            raise TopicExists(f"topic {name!r} already exists") from None

    async def list_topics(self) -> list[TopicInfo]:
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("list_topics"))
            rows = await cur.fetchall()
        return [
            TopicInfo(name, parts, None if ret is None else ret.total_seconds(), created, high)
            for name, parts, ret, created, high in rows
        ]

    async def describe_topic(self, name: str) -> TopicInfo:
        """The topic with each partition's low/high-water marks, message count and bytes."""
        meta = await self._topics.get(name)
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("describe_partitions"), {"topic_id": meta.id})
            parts = tuple(PartitionInfo(*row) for row in await cur.fetchall())
        for topic in await self.list_topics():
            if topic.name == name:
                return TopicInfo(
                    topic.name,
                    topic.partitions,
                    topic.retention_seconds,
                    topic.created_at,
                    topic.high_water,
                    parts,
                )
        raise TopicNotFound(f"unknown topic {name!r}")

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its messages and every group's cursors on it."""
        check_name("topic", name)
        async with self._db.connection() as conn:
            # Messages have no foreign key (0001_log.sql): wait for in-flight writers first,
            # so the delete's snapshot sees all of the topic's messages.
            await conn.execute(self._db.q("lock_topic_partitions"), {"name": name})
            cur = await conn.execute(self._db.q("delete_topic"), {"name": name})
            deleted = await cur.fetchone()
        self._topics.forget(name)
        if deleted is None:
            raise TopicNotFound(f"unknown topic {name!r}")

    async def add_partitions(self, name: str, total: int) -> None:
        """Grow the topic to ``total`` partitions (never fewer). Keys then map anew, as in Kafka."""
        check_name("topic", name)
        check_partition_count(total)
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("lock_topic"), {"name": name})
            row = await cur.fetchone()
            if row is None:
                raise TopicNotFound(f"unknown topic {name!r}")
            topic_id, current = row
            if total <= current:
                raise InvalidArgument(
                    f"topic {name!r} has {current} partitions: the new total must be more "
                    f"(got {total}); partitions are never removed"
                )
            await conn.execute(
                self._db.q("add_partitions"),
                {"topic_id": topic_id, "current": current, "total": total},
            )
        self._topics.forget(name)

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
        if batch_size < 1:
            raise InvalidArgument(f"invalid batch_size {batch_size!r}: must be >= 1")
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("apply_retention"),
                {"group_expiry": group_expiry, "batch": batch_size},
            )
            row = await cur.fetchone()
        return 0 if row is None else int(row[0])

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
        records = [self._batch_record(topic, item) for item in messages]
        return await self._appender.append(records, conn)

    @staticmethod
    def _batch_record(topic: str, item: Any) -> Record:
        if type(item) is bytes:  # skips isinstance(item, Mapping), an ABC check: slow per item
            return make_record(topic, item)
        if isinstance(item, Mapping) and "value" in item:
            extra = set(item) - {"value", "key", "headers", "partition"}
            if extra:
                raise InvalidArgument(
                    f"unknown message fields {sorted(extra)}: use value, key, headers, partition"
                )
            return make_record(
                topic, item["value"], item.get("key"), item.get("headers"), item.get("partition")
            )
        return make_record(topic, item)

    def producer(self, *, linger_ms: float = 5, batch_size: int = 10000) -> AsyncProducer:
        """A batching, non-transactional producer; see :class:`AsyncProducer`."""
        return AsyncProducer(self._appender, linger_ms=linger_ms, batch_size=batch_size)

    # -- consuming --------------------------------------------------------------------------

    def consumer(
        self,
        group: str,
        topics: str | Iterable[str],
        *,
        partitions: Iterable[TopicPartition] | None = None,
        auto_offset_reset: OffsetReset = "earliest",
        member_id: str | None = None,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        on_assign: Callable[[set[TopicPartition]], Any] | None = None,
        on_revoke: Callable[[set[TopicPartition]], Any] | None = None,
    ) -> AsyncConsumer:
        """A member of consumer group ``group`` (or, with ``partitions``, a consumer of those
        partitions only, outside the group's assignment); see :class:`AsyncConsumer`."""
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

    # -- groups -----------------------------------------------------------------------------

    async def list_groups(self) -> list[GroupInfo]:
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("list_groups"))
            rows = await cur.fetchall()
        return [GroupInfo(name, tuple(topics), lag, updated) for name, topics, lag, updated in rows]

    async def describe_group(self, group: str) -> GroupInfo:
        """Per partition: committed offset, high-water mark, lag in messages and in seconds."""
        check_name("group", group)
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("describe_group"), {"group": group})
            parts = tuple(PartitionLag(*row) for row in await cur.fetchall())
        if not parts:
            raise GroupNotFound(f"unknown consumer group {group!r}: it has no committed cursor")
        return GroupInfo(
            group,
            tuple(sorted({p.topic for p in parts})),
            sum(p.lag for p in parts),
            max(p.updated_at for p in parts),
            parts,
        )

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
        check_name("group", group)
        meta = await self._topics.get(topic)
        params: dict[str, Any] = {
            "group": group,
            "topic_id": meta.id,
            "partition": partition,
            "mode": "earliest",
            "offset": None,
            "timestamp": None,
        }
        if partition is not None and not (
            isinstance(partition, int) and 0 <= partition < meta.partitions
        ):
            raise InvalidArgument(
                f"partition {partition!r} does not exist: topic {topic!r} has partitions "
                f"0..{meta.partitions - 1}"
            )
        if isinstance(to, datetime):
            if to.tzinfo is None:
                raise InvalidArgument(f"reset time {to!r} needs a timezone (aware datetime)")
            params.update(mode="timestamp", timestamp=to)
        elif to in ("earliest", "latest"):
            params["mode"] = to
        elif isinstance(to, int) and not isinstance(to, bool):
            params.update(mode="offset", offset=check_offset(to))
        else:
            raise InvalidArgument(
                f"invalid reset target {to!r}: use 'earliest', 'latest', an offset >= 0 or an "
                "aware datetime"
            )
        async with self._db.connection() as conn:
            if params["mode"] == "offset":
                cur = await conn.execute(self._db.q("partition_high_waters"), {"topic_id": meta.id})
                for part, high_water in await cur.fetchall():
                    if (partition is None or part == partition) and to > high_water:
                        raise OffsetOutOfRange(
                            f"offset {to} is beyond the high-water mark of {topic}/{part}: "
                            f"allowed 0..{high_water}"
                        )
            cur = await conn.execute(self._db.q("reset_cursors"), params)
            return {part: offset for part, offset in await cur.fetchall()}

    async def delete_group(self, group: str) -> None:
        """Forget a group's cursors; a consumer of that group then starts anew."""
        check_name("group", group)
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("delete_group"), {"group": group})
            if cur.rowcount == 0:
                raise GroupNotFound(f"unknown consumer group {group!r}")

    # -- queue ------------------------------------------------------------------------------
    # Jobs: register with @client.job, enqueue in your transaction, run with client.worker().
    # The implementation lives in postroom.queue; see docs/queue.md.

    @property
    def _queue(self) -> AsyncJobs:
        jobs: AsyncJobs | None = getattr(self, "_jobs", None)
        if jobs is None:
            jobs = self._jobs = AsyncJobs(self._db)
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
    ) -> Callable[[Callable[..., Any]], AsyncJobFunction]:
        """Register a job kind (default: the function's name) and its defaults.

            @client.job("send_receipt", queue="email", max_attempts=8, timeout=30)
            async def send_receipt(order_id: int) -> None: ...

            await send_receipt.enqueue(order_id=42, conn=conn)

        ``timeout`` (seconds) interrupts a run that takes longer; it counts as a failed
        attempt. ``backoff`` spaces the retries. ``max_concurrency`` and ``rate_limit`` (jobs
        started per second) hold across all workers. Coroutine functions run on the worker's
        event loop, plain functions in the worker's threads.
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
            ),
        )

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
            async def refresh_rates() -> None: ...
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
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
    ) -> AsyncJob:
        """Enqueue a job by kind name (registered here or not: a worker elsewhere may run it);
        the options are those of ``JobFunction.enqueue``."""
        request = self._queue.request(
            kind,
            args,
            queue=queue,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            unique_key=unique_key,
        )
        return (await self._queue.enqueue([request], conn))[0]

    async def enqueue_batch(self, jobs: Iterable[Any], *, conn: object = None) -> list[AsyncJob]:
        """Enqueue many jobs in one transaction (the caller's with ``conn``), thousands per
        statement. Items are ``func.prepare(**args, **options)`` or dicts with ``kind``,
        ``args`` and enqueue options. Every item is checked before anything is written."""
        requests = [self._queue.request_from(item) for item in jobs]
        return await self._queue.enqueue(requests, conn)

    def worker(
        self,
        queues: Iterable[str] | None = None,
        *,
        concurrency: int = 10,
        **options: Any,
    ) -> AsyncWorker:
        """A worker for ``queues`` (default: the queues of the registered jobs); see
        :class:`AsyncWorker` for the options. ``await worker.run()`` runs it."""
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


__all__ = ["AsyncClient", "connect_async"]
