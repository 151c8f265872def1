"""The entry point: ``connect()`` (``connect_async()`` for asyncio) returns a client for one
postroom schema."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ._db_async import AsyncDatabase, open_database
from ._delegate import delegate
from ._maintenance import UNSET as UNSET_OPTION
from ._maintenance import client_options
from ._schema_async import AsyncSchema
from .errors import InvalidName
from .log.consumer_async import AsyncConsumer
from .log.engine_async import AsyncLog
from .log.kafka.engine_async import open_kafka_log
from .log.kafka.move_async import AsyncTopicMove, open_move
from .log.kafka.nodatabase_async import AsyncNoDatabase
from .log.kafka.settings import is_kafka_url
from .log.membership_async import DEFAULT_MAX_POLL_INTERVAL
from .log.producer_async import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BUFFER_BYTES,
    DEFAULT_BUFFER_MESSAGES,
    DEFAULT_BUFFER_TIMEOUT,
    AsyncProducer,
)
from .log.records import (
    DEFAULT_SESSION_TIMEOUT,
    UNSET,
    GroupInfo,
    HeaderValue,
    Message,
    OffsetReset,
    Published,
    TopicInfo,
    TopicPartition,
    Value,
)
from .log.runner_async import AsyncRunner
from .queue.jobs_async import AsyncJobs
from .queue.serializer import Serializer, check_serializer
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
    retention_interval: float | timedelta | None = UNSET_OPTION,
    pause_gc: bool = True,
) -> AsyncClient:
    """Open a client on ``url``, else ``POSTROOM_URL``, else ``DATABASE_URL``, else the embedded
    PostgreSQL (started on first use). Call ``migrate()`` once to install the schema, and
    ``close()`` (or use ``with``) when done. ``serializer`` encodes job arguments and results
    (default: JSON with datetime, date, UUID and Decimal; see ``postroom.Serializer``).
    ``retention_interval``: seconds between the retention rounds of this client's group
    members (None: none; default: ``POSTROOM_RETENTION_INTERVAL``, else 30). ``pause_gc=False``
    keeps the garbage collector running while a poll decodes a batch (docs/log.md).

        with postroom.connect() as client:  # async with await postroom.connect_async()
            client.migrate()  # await client.migrate()

    Raises :class:`~postroom.errors.DatabaseUnavailable` at once if the server cannot be
    reached or the URL does not parse; its message never contains the password.

    ``kafka://host:port[,host:port...]`` gives a client whose log is on Apache Kafka (the same
    log API; the job queue and other PostgreSQL-only parts raise ``NotSupported``), or
    :class:`~postroom.errors.BrokerUnavailable` at once if no broker answers (docs/kafka.md).
    """
    target = url if url is not None else os.environ.get("POSTROOM_URL")
    if is_kafka_url(target):
        engine = await open_kafka_log(str(target))
        return AsyncClient(AsyncNoDatabase(engine), serializer=serializer, log=engine)  # type: ignore[arg-type]
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidName(
            f"invalid schema name {schema!r}: use 1-63 characters from A-Z a-z 0-9 _, "
            "not starting with a digit"
        )
    return AsyncClient(
        await open_database(
            url, schema, min_size, max_size, client_options(retention_interval, pause_gc)
        ),
        serializer=check_serializer(serializer),
    )


class AsyncClient:
    """Topics, publishing, consumers, groups, the relay and the job queue (``client.jobs``,
    whose methods the client delegates) on one postroom schema.

    Every write takes an optional ``conn``: the caller's own psycopg connection (or a
    SQLAlchemy/Django connection wrapping one). The write then joins the caller's transaction
    and commits or rolls back with the caller's own rows; without it the write commits at once.
    """

    def __init__(
        self, db: AsyncDatabase, *, serializer: Serializer | None = None, log: Any = None
    ) -> None:
        self._db = db
        self._serializer = serializer
        self.log: AsyncLog = AsyncLog(db) if log is None else log
        """The log engine (PostgreSQL's, or ``log``: Kafka's): the log methods delegate to it."""
        self._schema = AsyncSchema(db)
        # -- the queue engine (its public methods are delegated below) --
        self.jobs = AsyncJobs(db, serializer)

    @property
    def schema(self) -> str:
        return self._db.schema

    @property
    def conninfo(self) -> str:
        return self._db.conninfo

    async def close(self) -> None:
        await self._db.wakeups.close()
        await self._db.pool.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- schema -----------------------------------------------------------------------------

    pending_migrations = delegate("_schema", AsyncSchema.pending_migrations)
    migrate = delegate("_schema", AsyncSchema.migrate)
    grant = delegate("_schema", AsyncSchema.grant)
    revoke = delegate("_schema", AsyncSchema.revoke)
    grants = delegate("_schema", AsyncSchema.grants)

    # -- topics -----------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        retention: timedelta | None = None,
        *,
        max_lag: int | None = None,
        group_ttl: timedelta | None = None,
        if_not_exists: bool = False,
    ) -> bool:
        """Create a topic; returns True. Raises :class:`TopicExists` if the name is taken, or
        with ``if_not_exists=True`` returns False and changes nothing (the existing topic keeps
        its settings), so a script can run twice.

        ``max_lag`` (messages, off by default) refuses writes with :class:`BacklogFull` while
        the slowest active group of a partition is that far behind; ``group_ttl`` (default 7
        days) is how long a group without members or commits stays active. docs/log.md."""
        return await self.log.create_topic(
            name,
            partitions,
            retention,
            max_lag=max_lag,
            group_ttl=group_ttl,
            if_not_exists=if_not_exists,
        )

    async def alter_topic(
        self,
        name: str,
        *,
        max_lag: int | None = UNSET,
        group_ttl: timedelta | None = UNSET,
        retention: timedelta | None = UNSET,
    ) -> None:
        """Change a topic's ``max_lag``, ``group_ttl`` or ``retention`` (None: off / the
        default / keep every message). Arguments left out stay as they are."""
        await self.log.alter_topic(name, max_lag=max_lag, group_ttl=group_ttl, retention=retention)

    async def list_topics(self) -> list[TopicInfo]:
        return await self.log.list_topics()

    async def describe_topic(self, name: str) -> TopicInfo:
        """The topic with each partition's low/high-water marks, message count and bytes."""
        return await self.log.describe_topic(name)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its messages and every group's cursors on it."""
        await self.log.delete_topic(name)

    async def add_partitions(self, name: str, total: int) -> None:
        """Grow the topic to ``total`` partitions (never fewer). Keys then map anew, as in Kafka."""
        await self.log.add_partitions(name, total)

    async def apply_retention(
        self, *, group_expiry: timedelta = timedelta(days=7), batch_size: int = 10000
    ) -> int:
        """Delete messages older than their topic's retention that every active group has read.

        A group is active while it committed within ``group_expiry``; an expired group no longer
        pins the log, and its lag then counts messages it will never see. Deletes at most
        ``batch_size`` messages per partition per call, so each transaction stays short; returns
        how many it deleted (call again while it returns a full batch). Running group members
        do this (with the defaults) every 30 s by themselves (``connect(retention_interval=)``,
        default ``POSTROOM_RETENTION_INTERVAL``), and VACUUM ``messages`` afterwards when
        their role owns it; None or ``off`` turns that off (docs/log.md, "Retention").
        """
        return await self.log.apply_retention(group_expiry=group_expiry, batch_size=batch_size)

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
        timeout: float | None = None,
    ) -> Published:
        """Write one message; with ``conn`` it commits or rolls back with the caller's work.

        Returns ``Published(partition, offset)``. In the caller's transaction (``conn``) the
        message is staged and takes its offset when that transaction commits, so ``offset``
        is None; no counter row is locked before the commit, so concurrent transactions never
        deadlock whatever partitions they publish to, in whatever order (docs/log.md).

        On a topic with ``max_lag`` whose backlog is full this raises :class:`BacklogFull`, or
        first waits up to ``timeout`` seconds for the slowest group to catch up (not with
        ``conn``: the refusal aborts the caller's transaction)."""
        return await self.log.publish(
            topic, value, key=key, headers=headers, partition=partition, conn=conn, timeout=timeout
        )

    async def publish_batch(
        self,
        topic: str,
        messages: Iterable[Any],
        *,
        conn: object = None,
        timeout: float | None = None,
    ) -> list[Published]:
        """Write many messages in one transaction (the caller's, with ``conn``).

        Each item is a value, or a mapping with ``value`` and optional ``key``, ``headers``,
        ``partition``. Unkeyed messages share one partition per call. ``timeout``: as in
        ``publish`` (admission control). With ``conn``, offsets are None (as in ``publish``)."""
        return await self.log.publish_batch(topic, messages, conn=conn, timeout=timeout)

    def producer(
        self,
        *,
        linger_ms: float = 5,
        batch_size: int = DEFAULT_BATCH_SIZE,
        backlog_timeout: float | None = None,
        buffer_messages: int = DEFAULT_BUFFER_MESSAGES,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        buffer_timeout: float | None = DEFAULT_BUFFER_TIMEOUT,
    ) -> AsyncProducer:
        """A batching, non-transactional producer; see ``Producer``/``AsyncProducer``.
        ``backlog_timeout``: how long a batch refused by ``max_lag`` is retried before its
        futures fail with :class:`BacklogFull` (default: not retried). ``buffer_messages``,
        ``buffer_bytes`` bound the sends not yet written: a ``send`` into a full buffer
        waits, up to ``buffer_timeout`` seconds, then raises :class:`BufferFull`."""
        return self.log.producer(
            linger_ms=linger_ms,
            batch_size=batch_size,
            backlog_timeout=backlog_timeout,
            buffer_messages=buffer_messages,
            buffer_bytes=buffer_bytes,
            buffer_timeout=buffer_timeout,
        )

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
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        on_assign: Callable[[set[TopicPartition]], Any] | None = None,
        on_revoke: Callable[[set[TopicPartition]], Any] | None = None,
    ) -> AsyncConsumer:
        """A member of ``group`` (manual ``partitions``: no membership); see ``AsyncConsumer``."""
        return self.log.consumer(
            group,
            topics,
            partitions=partitions,
            auto_offset_reset=auto_offset_reset,
            member_id=member_id,
            session_timeout=session_timeout,
            max_poll_interval=max_poll_interval,
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
        return self.log.subscribe(topics, group=group, **options)

    def runner(self) -> AsyncRunner:
        """A runner for the handlers registered with ``subscribe``; ``await runner.run()``."""
        return self.log.runner()

    async def list_dead_letters(self, topic: str, *, limit: int = 100) -> list[Message]:
        """Dead letters of ``topic`` (``<topic>.dlq``), oldest first; see docs/log.md."""
        return await self.log.list_dead_letters(topic, limit=limit)

    async def replay_dead_letters(
        self,
        topic: str,
        *,
        group: str = "postroom-replay",
        letters: Collection[tuple[int, int]] | None = None,
    ) -> int:
        """Publish ``topic``'s dead letters to their source again, each once and marked for the
        group that failed on it (others pass over it); returns how many. ``group`` is the
        replay's own cursor on the dead-letter topic. With ``letters`` (``(partition, offset)``
        pairs on the dead-letter topic) only those are published, each time it is called, and
        the cursor does not move."""
        return await self.log.replay_dead_letters(topic, group=group, letters=letters)

    async def dead_letter(
        self,
        message: Message,
        *,
        group: str,
        error: str,
        attempts: int = 1,
        topic: str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        conn: object = None,
    ) -> bool:
        """Publish ``message`` to its dead-letter topic (``topic``, default ``<topic>.dlq``,
        created if missing) as ``group``'s failure, with the ``postroom-dlq-*`` headers
        (docs/log.md) and ``headers``; with ``conn`` in the caller's transaction. One dead
        letter per group and message: returns False, writing nothing, if one was written
        already (by another process that handled the same message). The runner and the relay
        call it; a hand-written consumer loop may too."""
        return await self.log.dead_letter(
            message,
            group=group,
            error=error,
            attempts=attempts,
            topic=topic,
            headers=headers,
            conn=conn,
        )

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
        ``Route("debezium")`` relays it exactly as Debezium would. Returns its
        ``Published(partition, offset)``; the offset is None in the caller's transaction
        (assigned when it commits: no lock is held before, so writers never deadlock).

            async with conn.transaction():
                await conn.execute("INSERT INTO orders ...")
                await client.publish_event(conn, "order", 42, "OrderCreated", {"total": 10})
        """
        record = event_record(topic, aggregate_type, aggregate_id, event_type, payload, headers)
        return (await self.log.publish_records([record], conn))[0]

    def relay(self, topics: str | Iterable[str], sink: Sink | str, **options: Any) -> AsyncRelay:
        """A relay carrying ``topics`` to ``sink`` (a URL like ``redis://127.0.0.1:6379`` or a
        :class:`postroom.relay.Sink`); see :class:`AsyncRelay` for the options (``group``,
        ``route``, ``batch_size``, ``max_attempts``, ...). ``relay.run()`` runs it."""
        return AsyncRelay(self.log, topics, sink, **options)

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
        return await _relay_status(self.log, groups)

    async def move_topic(self, topic: str, *, to: str) -> AsyncTopicMove:
        """A prepared move of ``topic`` to the Kafka cluster at ``to`` (``kafka://...``): see
        ``AsyncTopicMove`` and docs/kafka.md, "Moving a topic"; ``close()`` it when done."""
        return await open_move(self.log, topic, to)

    # -- groups -----------------------------------------------------------------------------

    async def list_groups(self) -> list[GroupInfo]:
        return await self.log.list_groups()

    async def describe_group(self, group: str) -> GroupInfo:
        """Per partition: committed offset, high-water mark, lag in messages and in seconds."""
        return await self.log.describe_group(group)

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
        return await self.log.reset_group(group, topic, to=to, partition=partition)

    async def delete_group(self, group: str) -> None:
        """Forget a group's cursors; a consumer of that group then starts anew."""
        await self.log.delete_group(group)

    # -- jobs: the queue engine's methods (postroom.queue.jobs_async; docs/queue.md) --------

    job = delegate("jobs", AsyncJobs.job)
    around_job = delegate("jobs", AsyncJobs.around_job)
    around_enqueue = delegate("jobs", AsyncJobs.around_enqueue)
    periodic = delegate("jobs", AsyncJobs.periodic)
    enqueue = delegate("jobs", AsyncJobs.enqueue)
    enqueue_batch = delegate("jobs", AsyncJobs.enqueue_batch)
    enqueue_group = delegate("jobs", AsyncJobs.enqueue_group)
    pause_queue = delegate("jobs", AsyncJobs.pause_queue)
    resume_queue = delegate("jobs", AsyncJobs.resume_queue)
    worker = delegate("jobs", AsyncJobs.worker)
    get_job = delegate("jobs", AsyncJobs.get_job)
    job_handle = delegate("jobs", AsyncJobs.job_handle)
    list_jobs = delegate("jobs", AsyncJobs.list_jobs)
    retry_job = delegate("jobs", AsyncJobs.retry_job)
    retry_failed_jobs = delegate("jobs", AsyncJobs.retry_failed_jobs)
    cancel_job = delegate("jobs", AsyncJobs.cancel_job)
    purge_jobs = delegate("jobs", AsyncJobs.purge_jobs)
    job_stats = delegate("jobs", AsyncJobs.job_stats)
    set_job_limit = delegate("jobs", AsyncJobs.set_job_limit)
    set_queue_limit = delegate("jobs", AsyncJobs.set_queue_limit)


__all__ = ["AsyncClient", "connect_async"]  # sync: __all__ = ["Client", "connect"]
