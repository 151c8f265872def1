"""The entry point: ``connect()`` (``connect_async()`` for asyncio) returns a client for one
postroom schema."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from ._checks import check_schema
from ._db_async import AsyncDatabase, open_database
from ._delegate import delegate
from ._maintenance import UNSET as UNSET_OPTION
from ._maintenance import client_options
from ._schema_async import AsyncSchema
from .log.engine_async import AsyncLog
from .log.kafka.engine_async import open_kafka_log
from .log.kafka.move_async import AsyncTopicMove, open_move
from .log.kafka.nodatabase_async import AsyncNoDatabase
from .log.kafka.settings import is_kafka_url
from .log.records import (
    HeaderValue,
    Published,
    Value,
)
from .queue.jobs_async import AsyncJobs
from .queue.serializer import Serializer, check_serializer
from .relay.inbox_async import AsyncInbox, prune_inbox
from .relay.loop import AsyncRelay
from .relay.records import RelayStatus
from .relay.routing import event_record
from .relay.sinks import Sink
from .relay.status_async import relay_status as _relay_status


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
        options = client_options(retention_interval, pause_gc)  # checked as on PostgreSQL
        engine = await open_kafka_log(str(target), pause_gc=options.pause_gc)
        return AsyncClient(AsyncNoDatabase(engine), serializer=serializer, log=engine)  # type: ignore[arg-type]
    check_schema(schema)
    return AsyncClient(
        await open_database(
            url, schema, min_size, max_size, client_options(retention_interval, pause_gc)
        ),
        serializer=check_serializer(serializer),
    )


class AsyncClient:
    """Topics, publishing, consumers, groups, the relay and the job queue on one postroom
    schema. The client composes engines and delegates to them (``_delegate.py``): the log
    methods are ``client.log``'s (documented there), the job methods ``client.jobs``', the
    schema methods its schema's; what it writes out itself composes several rooms (the relay,
    the inbox, outbox events, topic moves).

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

    create_topic = delegate("log", AsyncLog.create_topic)
    alter_topic = delegate("log", AsyncLog.alter_topic)
    list_topics = delegate("log", AsyncLog.list_topics)
    describe_topic = delegate("log", AsyncLog.describe_topic)
    delete_topic = delegate("log", AsyncLog.delete_topic)
    add_partitions = delegate("log", AsyncLog.add_partitions)
    apply_retention = delegate("log", AsyncLog.apply_retention)

    # -- producing --------------------------------------------------------------------------

    publish = delegate("log", AsyncLog.publish)
    publish_batch = delegate("log", AsyncLog.publish_batch)
    producer = delegate("log", AsyncLog.producer)

    # -- consuming --------------------------------------------------------------------------

    consumer = delegate("log", AsyncLog.consumer)
    subscribe = delegate("log", AsyncLog.subscribe)
    runner = delegate("log", AsyncLog.runner)
    list_dead_letters = delegate("log", AsyncLog.list_dead_letters)
    replay_dead_letters = delegate("log", AsyncLog.replay_dead_letters)
    dead_letter = delegate("log", AsyncLog.dead_letter)

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

    list_groups = delegate("log", AsyncLog.list_groups)
    describe_group = delegate("log", AsyncLog.describe_group)
    reset_group = delegate("log", AsyncLog.reset_group)
    delete_group = delegate("log", AsyncLog.delete_group)

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
