"""The log engine: topics, publishing, producers, consumers, groups and dead letters over one
postroom schema. The client builds one (``client.log``) and delegates its log methods to it;
the runner, dead letters and the relay take the engine, never the client.

Its public surface is :class:`postroom.log.seam.LogEngine`: another engine (Kafka's) plugs in
behind the same protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from .. import _tracing
from .._db_async import AsyncDatabase
from .admin_async import AsyncLogAdmin
from .appender_async import AsyncAppender
from .consumer_async import AsyncConsumer
from .deadletters_async import AsyncDeadLetters
from .membership_async import DEFAULT_MAX_POLL_INTERVAL
from .metadata_async import AsyncTopicCache
from .producer_async import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BUFFER_BYTES,
    DEFAULT_BUFFER_MESSAGES,
    DEFAULT_BUFFER_TIMEOUT,
    AsyncProducer,
)
from .records import (
    DEFAULT_SESSION_TIMEOUT,
    MAX_VALUE_BYTES,
    UNSET,
    GroupInfo,
    HeaderValue,
    Message,
    OffsetReset,
    Published,
    Record,
    TopicInfo,
    TopicPartition,
    Value,
    batch_record,
    check_name,
    make_record,
    traced_records,
)
from .runner_async import AsyncRunner
from .subscription import Subscriptions


class AsyncLog:
    """The log of one postroom schema, on the database handle ``db`` (its pool).

    Composed of a topic metadata cache, an appender (the write path), an admin (topics,
    groups, retention) and the dead letters; producers and consumers it makes share them.
    The methods are the client's log methods: the client delegates to them (``_delegate.py``),
    so ``help(client.publish)`` shows this class's docstrings.

        log = client.log
        await log.publish("orders", b"...")
        async with log.consumer("billing", "orders") as consumer: ...
    """

    def __init__(self, db: AsyncDatabase) -> None:
        self._db = db
        self.topics = AsyncTopicCache(db)
        self.appender = AsyncAppender(db, self.topics)
        self.admin = AsyncLogAdmin(db, self.topics)
        self.dead_letters = AsyncDeadLetters(self, db)
        self.subscriptions = Subscriptions()

    @property
    def schema(self) -> str:
        return self._db.schema

    @property
    def conninfo(self) -> str:
        return self._db.conninfo

    @property
    def database(self) -> AsyncDatabase:
        """The database handle (pool, schema, named queries) the engine runs on."""
        return self._db

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
        return await self.admin.create_topic(
            name, partitions, retention, max_lag, group_ttl, if_not_exists
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
        await self.admin.alter_topic(name, max_lag, group_ttl, retention)

    async def list_topics(self) -> list[TopicInfo]:
        return await self.admin.list_topics()

    async def describe_topic(self, name: str) -> TopicInfo:
        """The topic with each partition's low/high-water marks, message count and bytes."""
        return await self.admin.describe_topic(name)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its messages and every group's cursors on it."""
        await self.admin.delete_topic(name)

    async def add_partitions(self, name: str, total: int) -> None:
        """Grow the topic to ``total`` partitions (never fewer). Keys then map anew, as in Kafka."""
        await self.admin.add_partitions(name, total)

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
        return await self.admin.apply_retention(group_expiry, batch_size)

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
        if _tracing.ENABLED and _tracing.recording():
            with _tracing.sending(topic) as span:
                record = make_record(topic, value, key, _tracing.carry(span, headers), partition)
                published = (await self.appender.append([record], conn, timeout))[0]
                _tracing.published(span, published)
                return published
        record = make_record(topic, value, key, headers, partition)
        return (await self.appender.append([record], conn, timeout))[0]

    async def publish_records(
        self, records: list[Record], conn: object = None, timeout: float | None = None
    ) -> list[Published]:
        """Write records already made (``make_record``) in one transaction (the caller's,
        with ``conn``)."""
        if _tracing.ENABLED and records and _tracing.recording():
            with _tracing.sending(
                records[0].topic, messaging__batch__message_count=_tracing.batch(records)
            ) as span:
                records = traced_records(records, _tracing.carry(span, None))
                published = await self.appender.append(records, conn, timeout)
                if len(published) == 1:
                    _tracing.published(span, published[0])
                return published
        return await self.appender.append(records, conn, timeout)

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
        items = messages if isinstance(messages, list) else list(messages)
        if _tracing.ENABLED and items and _tracing.recording():
            with _tracing.sending(
                topic, messaging__batch__message_count=_tracing.batch(items)
            ) as span:
                context = _tracing.carry(span, None)
                records = [batch_record(topic, item, context) for item in items]
                return await self.appender.append(records, conn, timeout)
        if (
            items
            and all(type(item) is bytes and len(item) <= MAX_VALUE_BYTES for item in items)
            and check_name("topic", topic)
        ):
            # The common case, plain values: written by the lean path, no record per item.
            partition, first = await self.appender.append_values(topic, items, conn, timeout)
            if first is None:  # in the caller's transaction: offsets are assigned at commit
                return [Published(partition, None)] * len(items)
            return [Published(partition, offset) for offset in range(first, first + len(items))]
        records = [batch_record(topic, item) for item in items]
        return await self.appender.append(records, conn, timeout)

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
        return AsyncProducer(
            self.appender,
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
        return AsyncConsumer(
            self._db,
            self.topics,
            group,
            [topics] if isinstance(topics, str) else topics,
            partitions=partitions,
            auto_offset_reset=auto_offset_reset,
            member_id=member_id,
            session_timeout=session_timeout,
            max_poll_interval=max_poll_interval,
            on_assign=on_assign,
            on_revoke=on_revoke,
        )

    def subscribe(
        self, /, topics: str | Iterable[str], *, group: str, **options: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        # ``self, /``: with ``**options``, mypy matches the client's delegate to this method
        # only if ``self`` cannot be passed by name.
        """Register a handler that ``runner()`` (or ``postroom run MODULE``) runs as members of
        ``group``; returns it unchanged. Options: see ``postroom.log.subscription.Subscription``.

            @client.subscribe("orders", group="billing", transactional=True)
            async def bill(message, conn): ...
        """
        return self.subscriptions.decorator(topics, group, options)

    def runner(self) -> AsyncRunner:
        """A runner for the handlers registered with ``subscribe``; ``await runner.run()``."""
        return AsyncRunner(self, self.subscriptions.items)

    # -- dead letters -----------------------------------------------------------------------

    async def list_dead_letters(self, topic: str, *, limit: int = 100) -> list[Message]:
        """Dead letters of ``topic`` (``<topic>.dlq``), oldest first; see docs/log.md."""
        return await self.dead_letters.list(topic, limit)

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
        return await self.dead_letters.replay(topic, group, letters)

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
        return await self.dead_letters.write(message, group, error, attempts, topic, headers, conn)

    # -- groups -----------------------------------------------------------------------------

    async def list_groups(self) -> list[GroupInfo]:
        return await self.admin.list_groups()

    async def describe_group(self, group: str) -> GroupInfo:
        """Per partition: committed offset, high-water mark, lag in messages and in seconds."""
        return await self.admin.describe_group(group)

    async def lag(self, group: str) -> int:
        """Messages ``group`` has not committed yet, over all its partitions."""
        return (await self.admin.describe_group(group)).lag

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
        return await self.admin.reset_group(group, topic, to, partition)

    async def delete_group(self, group: str) -> None:
        """Forget a group's cursors; a consumer of that group then starts anew."""
        await self.admin.delete_group(group)
