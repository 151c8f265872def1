# Generated from src/postroom/client_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The entry point: ``connect()`` returns an :class:`Client` for one postroom schema."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from . import _sql
from ._compat import IS_ASYNC, to_thread
from ._db import Database
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
from .log.assigned import DEFAULT_SESSION_TIMEOUT, OffsetReset
from .log.consumer import Consumer
from .log.metadata import TopicCache
from .log.producer import Appender, Producer
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
from .queue.jobs import Job, JobFunction, Jobs
from .queue.records import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, JobInfo, JobStats
from .queue.worker import Worker

GRANTS: dict[str, tuple[str, ...]] = {
    "producer": ("grant_producer",),
    "consumer": ("grant_consumer",),
    "admin": ("grant_admin",),
    "enqueuer": ("grant_enqueuer",),
    "worker": ("grant_worker",),
}
"""The named grant statements (``_sql/grants.sql``) each capability needs."""

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def connect(
    url: str | None = None,
    *,
    schema: str = "postroom",
    min_size: int = 1,
    max_size: int = 10,
) -> Client:
    """Open a client on ``url``, else ``POSTROOM_URL``, else ``DATABASE_URL``, else the embedded
    PostgreSQL (started on first use). Call ``migrate()`` once to install the schema, and
    ``close()`` (or use ``with``) when done.

        with postroom.connect() as client:
            client.migrate()
    """
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidName(
            f"invalid schema name {schema!r}: use 1-63 characters from A-Z a-z 0-9 _, "
            "not starting with a digit"
        )
    conninfo = to_thread(resolve_url, url)
    try:
        # Fail now with the server's reason, not after the pool's 30 s of retries.
        probe = psycopg.Connection.connect(conninfo, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(
            f"cannot connect to {_redacted(conninfo)}: {str(exc).strip()}"
        ) from exc
    probe.close()
    pool = ConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        open=False,
        name="postroom",
        # A connection cut while idle in the pool (server restart, proxy, failover) is
        # replaced before it is handed out, instead of failing the caller's next statement.
        check=ConnectionPool.check_connection,
    )
    pool.open(wait=True)
    return Client(Database(pool, conninfo, schema))


def _redacted(conninfo: str) -> str:
    """The connection target without its password, for error messages."""
    params = conninfo_to_dict(conninfo)
    return " ".join(
        f"{k}={v}" for k, v in params.items() if k in ("host", "port", "dbname", "user")
    )


class Client:
    """Topics, publishing, consumers and group administration on one postroom schema.

    Every write takes an optional ``conn``: the caller's own psycopg connection (or a
    SQLAlchemy/Django connection wrapping one). The write then joins the caller's transaction
    and commits or rolls back with the caller's own rows; without it the write commits at once.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._topics = TopicCache(db)
        self._appender = Appender(db, self._topics)

    @property
    def schema(self) -> str:
        return self._db.schema

    @property
    def conninfo(self) -> str:
        return self._db.conninfo

    def close(self) -> None:
        self._db.pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -----------------------------------------------------------------------------

    def pending_migrations(self) -> list[str]:
        """Names (``NNNN_name``) of the migrations not yet applied to this schema."""
        with self._db.connection() as conn:
            cur = conn.execute(
                self._db.q("schema_exists"), {"ledger": f"{self._db.schema}.schema_migrations"}
            )
            row = cur.fetchone()
            applied: set[int] = set()
            if row is not None and row[0]:
                cur = conn.execute(self._db.q("applied_migrations"))
                applied = {r[0] for r in cur.fetchall()}
        return [f"{m.version:04d}_{m.name}" for m in _sql.migrations() if m.version not in applied]

    def migrate(self) -> list[str]:
        """Install or upgrade the schema; returns the migrations applied. Idempotent, and safe
        to call from many processes at once (they serialize on an advisory lock)."""
        done = []
        with self._db.connection() as conn:
            conn.execute(self._db.q("lock_migrations"), {"schema": self._db.schema})
            conn.execute(self._db.q("create_schema"))
            cur = conn.execute(self._db.q("applied_migrations"))
            applied = {r[0] for r in cur.fetchall()}
            for migration in _sql.migrations():
                if migration.version in applied:
                    continue
                conn.execute(_sql.render(migration.statement, self._db.schema))
                conn.execute(
                    self._db.q("record_migration"),
                    {"version": migration.version, "name": migration.name},
                )
                done.append(f"{migration.version:04d}_{migration.name}")
        return done

    def grant(self, role: str, *capabilities: str) -> None:
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
        with self._db.connection() as conn:
            for capability in capabilities:
                for statement in GRANTS[capability]:
                    conn.execute(self._db.q_for_role(statement, role))

    # -- topics -----------------------------------------------------------------------------

    def create_topic(
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
            with self._db.connection() as conn:
                conn.execute(
                    self._db.q("create_topic"),
                    {"name": name, "partitions": partitions, "retention": retention},
                )
        except pg_errors.UniqueViolation:
            raise TopicExists(f"topic {name!r} already exists") from None

    def list_topics(self) -> list[TopicInfo]:
        with self._db.connection() as conn:
            cur = conn.execute(self._db.q("list_topics"))
            rows = cur.fetchall()
        return [
            TopicInfo(name, parts, None if ret is None else ret.total_seconds(), created, high)
            for name, parts, ret, created, high in rows
        ]

    def describe_topic(self, name: str) -> TopicInfo:
        """The topic with each partition's low/high-water marks, message count and bytes."""
        meta = self._topics.get(name)
        with self._db.connection() as conn:
            cur = conn.execute(self._db.q("describe_partitions"), {"topic_id": meta.id})
            parts = tuple(PartitionInfo(*row) for row in cur.fetchall())
        for topic in self.list_topics():
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

    def delete_topic(self, name: str) -> None:
        """Delete a topic with its messages and every group's cursors on it."""
        check_name("topic", name)
        with self._db.connection() as conn:
            # Messages have no foreign key (0001_log.sql): wait for in-flight writers first,
            # so the delete's snapshot sees all of the topic's messages.
            conn.execute(self._db.q("lock_topic_partitions"), {"name": name})
            cur = conn.execute(self._db.q("delete_topic"), {"name": name})
            deleted = cur.fetchone()
        self._topics.forget(name)
        if deleted is None:
            raise TopicNotFound(f"unknown topic {name!r}")

    def add_partitions(self, name: str, total: int) -> None:
        """Grow the topic to ``total`` partitions (never fewer). Keys then map anew, as in Kafka."""
        check_name("topic", name)
        check_partition_count(total)
        with self._db.connection() as conn:
            cur = conn.execute(self._db.q("lock_topic"), {"name": name})
            row = cur.fetchone()
            if row is None:
                raise TopicNotFound(f"unknown topic {name!r}")
            topic_id, current = row
            if total <= current:
                raise InvalidArgument(
                    f"topic {name!r} has {current} partitions: the new total must be more "
                    f"(got {total}); partitions are never removed"
                )
            conn.execute(
                self._db.q("add_partitions"),
                {"topic_id": topic_id, "current": current, "total": total},
            )
        self._topics.forget(name)

    def apply_retention(
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
        with self._db.connection() as conn:
            cur = conn.execute(
                self._db.q("apply_retention"),
                {"group_expiry": group_expiry, "batch": batch_size},
            )
            row = cur.fetchone()
        return 0 if row is None else int(row[0])

    # -- producing --------------------------------------------------------------------------

    def publish(
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
        return (self._appender.append([record], conn))[0]

    def publish_batch(
        self, topic: str, messages: Iterable[Any], *, conn: object = None
    ) -> list[Published]:
        """Write many messages in one transaction (the caller's, with ``conn``).

        Each item is a value, or a mapping with ``value`` and optional ``key``, ``headers``,
        ``partition``. Unkeyed messages share one partition per call."""
        records = [self._batch_record(topic, item) for item in messages]
        return self._appender.append(records, conn)

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

    def producer(self, *, linger_ms: float = 5, batch_size: int = 10000) -> Producer:
        """A batching, non-transactional producer; see :class:`Producer`."""
        return Producer(self._appender, linger_ms=linger_ms, batch_size=batch_size)

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
    ) -> Consumer:
        """A member of consumer group ``group`` (or, with ``partitions``, a consumer of those
        partitions only, outside the group's assignment); see :class:`Consumer`."""
        return Consumer(
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

    def list_groups(self) -> list[GroupInfo]:
        with self._db.connection() as conn:
            cur = conn.execute(self._db.q("list_groups"))
            rows = cur.fetchall()
        return [GroupInfo(name, tuple(topics), lag, updated) for name, topics, lag, updated in rows]

    def describe_group(self, group: str) -> GroupInfo:
        """Per partition: committed offset, high-water mark, lag in messages and in seconds."""
        check_name("group", group)
        with self._db.connection() as conn:
            cur = conn.execute(self._db.q("describe_group"), {"group": group})
            parts = tuple(PartitionLag(*row) for row in cur.fetchall())
        if not parts:
            raise GroupNotFound(f"unknown consumer group {group!r}: it has no committed cursor")
        return GroupInfo(
            group,
            tuple(sorted({p.topic for p in parts})),
            sum(p.lag for p in parts),
            max(p.updated_at for p in parts),
            parts,
        )

    def reset_group(
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
        meta = self._topics.get(topic)
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
        with self._db.connection() as conn:
            if params["mode"] == "offset":
                cur = conn.execute(self._db.q("partition_high_waters"), {"topic_id": meta.id})
                for part, high_water in cur.fetchall():
                    if (partition is None or part == partition) and to > high_water:
                        raise OffsetOutOfRange(
                            f"offset {to} is beyond the high-water mark of {topic}/{part}: "
                            f"allowed 0..{high_water}"
                        )
            cur = conn.execute(self._db.q("reset_cursors"), params)
            return {part: offset for part, offset in cur.fetchall()}

    def delete_group(self, group: str) -> None:
        """Forget a group's cursors; a consumer of that group then starts anew."""
        check_name("group", group)
        with self._db.connection() as conn:
            cur = conn.execute(self._db.q("delete_group"), {"group": group})
            if cur.rowcount == 0:
                raise GroupNotFound(f"unknown consumer group {group!r}")

    # -- queue ------------------------------------------------------------------------------
    # Jobs: register with @client.job, enqueue in your transaction, run with client.worker().
    # The implementation lives in postroom.queue; see docs/queue.md.

    @property
    def _queue(self) -> Jobs:
        jobs: Jobs | None = getattr(self, "_jobs", None)
        if jobs is None:
            jobs = self._jobs = Jobs(self._db)
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
    ) -> Callable[[Callable[..., Any]], JobFunction]:
        """Register a job kind (default: the function's name) and its defaults.

            @client.job("send_receipt", queue="email", max_attempts=8, timeout=30)
            def send_receipt(order_id: int) -> None: ...

            send_receipt.enqueue(order_id=42, conn=conn)

        ``timeout`` (seconds) interrupts a run that takes longer; it counts as a failed
        attempt. ``backoff`` spaces the retries. ``max_concurrency`` and ``rate_limit`` (jobs
        started per second) hold across all workers. Coroutine functions run on the worker's
        event loop, plain functions in the worker's threads.
        """
        return cast(
            Callable[[Callable[..., Any]], JobFunction],
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
    ) -> Callable[[Any], JobFunction]:
        """Enqueue a job at every tick of ``cron`` (UTC; 5 fields, or 6 with leading seconds),
        once per tick however many workers run. Put it above ``@client.job`` or use it alone.

            @client.periodic("*/5 * * * *")
            @client.job("refresh_rates")
            def refresh_rates() -> None: ...
        """
        parse_cron(cron)  # fail at import time, not in the worker

        def decorate(target: Any) -> JobFunction:
            registered = target if isinstance(target, JobFunction) else self.job()(target)
            self._queue.add_schedule(
                cron, registered, name=name, args=args, queue=queue, priority=priority
            )
            return registered

        return decorate

    def enqueue(
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
    ) -> Job:
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
        return (self._queue.enqueue([request], conn))[0]

    def enqueue_batch(self, jobs: Iterable[Any], *, conn: object = None) -> list[Job]:
        """Enqueue many jobs in one transaction (the caller's with ``conn``), thousands per
        statement. Items are ``func.prepare(**args, **options)`` or dicts with ``kind``,
        ``args`` and enqueue options. Every item is checked before anything is written."""
        requests = [self._queue.request_from(item) for item in jobs]
        return self._queue.enqueue(requests, conn)

    def worker(
        self,
        queues: Iterable[str] | None = None,
        *,
        concurrency: int = 10,
        **options: Any,
    ) -> Worker:
        """A worker for ``queues`` (default: the queues of the registered jobs); see
        :class:`Worker` for the options. ``worker.run()`` runs it."""
        return Worker(
            self._queue,
            None if queues is None else list(queues),
            concurrency=concurrency,
            **options,
        )

    def get_job(self, job_id: int) -> JobInfo:
        """One job, live or finished; raises :class:`JobNotFound`."""
        return self._queue.get(job_id)

    def job_handle(self, job_id: int) -> Job:
        """A handle on job ``job_id`` (to wait for its result, inspect or cancel it)."""
        return Job(self._queue, job_id)

    def list_jobs(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[JobInfo]:
        """Jobs, newest first; ``state="failed"`` lists the dead letters."""
        return self._queue.list_jobs(state, kind, queue, limit)

    def retry_job(self, job_id: int) -> None:
        """Redrive one failed job: ready now, with a fresh set of attempts."""
        self._queue.retry(job_id)

    def retry_failed_jobs(self, *, kind: str | None = None, queue: str | None = None) -> int:
        """Redrive every failed job (of a kind/queue); returns how many."""
        return self._queue.retry_failed(kind, queue)

    def cancel_job(self, job_id: int) -> str:
        """Cancel a job; returns the state it had. A ready or failed job is cancelled at once;
        a running one is interrupted by its worker (its handler sees ``JobInterrupted``)."""
        return self._queue.cancel(job_id)

    def purge_jobs(
        self, state: str, older_than: float | timedelta, *, kind: str | None = None
    ) -> int:
        """Delete done, cancelled or failed jobs older than ``older_than`` (seconds or
        timedelta), in batches; returns how many."""
        return self._queue.purge(state, older_than, kind)

    def job_stats(self) -> JobStats:
        """Jobs per queue and state, the oldest due ready job's age, jobs done per second."""
        return self._queue.stats()

    def set_job_limit(
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
        self._queue.set_limit("kind", kind, max_concurrency, rate_limit, burst)

    def set_queue_limit(
        self,
        queue: str,
        *,
        max_concurrency: int | None = None,
        rate_limit: float | None = None,
        burst: float | None = None,
    ) -> None:
        """Limit a queue across all workers, as ``set_job_limit`` does a kind."""
        self._queue.set_limit("queue", queue, max_concurrency, rate_limit, burst)


__all__ = ["Client", "connect"]
