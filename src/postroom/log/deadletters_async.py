"""Dead letters: write them (one per group and message), list them, and replay each once to
the group that failed on it.

A dead letter is the failed message (key, value, headers) on ``<topic>.dlq`` with headers
saying where it came from and why: ``postroom-dlq-topic``, ``-partition``, ``-offset``, ``-id``
(the failed message's id), ``-group`` (the group that failed), ``-attempts``, ``-error``.
Writing it claims (group, message id) in the same transaction (migration 0021), so several
processes that handled the same message (a member that lost its partition while it retried,
and its successor) write one dead letter.

A replay publishes it to its source topic again, marked for the group that failed
(``postroom-replay-group``) and carrying the id of the message it replays
(``postroom-replay-of``, kept across replays of replays). The runner and the relay of other
groups pass over a message marked for another group, so a replay reaches only the group that
failed; ``Message.original_id`` is the id to deduplicate on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .._db_async import AsyncDatabase
from ..errors import InvalidArgument, TopicExists, TopicNotFound
from .records import (
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    HeaderValue,
    Message,
    TopicPartition,
    check_name,
)
from .subscription import DLQ_SUFFIX

if TYPE_CHECKING:
    from .engine_async import AsyncLog

log = logging.getLogger("postroom.dlq")

HEADER_PREFIX = "postroom-dlq-"
REPLAY_GROUP = "postroom-replay-group"
"""Header of a replayed dead letter: the group it is for (the one that failed on it)."""
REPLAY_OF = "postroom-replay-of"
"""Header of a replayed dead letter: the id of the message first dead-lettered."""

TRIMMED_HEADER = f"{HEADER_PREFIX}trimmed"
"""Set on a dead letter whose original headers did not all fit beside postroom's own."""


def _header_size(name: str, value: HeaderValue) -> int:
    """What a header counts against MAX_HEADER_BYTES (as records.encode_headers counts)."""
    raw = value if isinstance(value, bytes) else value.encode("utf-8", "replace")
    return len(name) + len(raw)


def fit_headers(
    original: Mapping[str, HeaderValue], own: dict[str, HeaderValue]
) -> dict[str, HeaderValue]:
    """A dead letter's headers: ``original`` then postroom's ``own``, always within the header
    limits. A poison whose headers leave no room (a message may carry up to MAX_HEADERS) keeps
    those that fit, in order, and gets ``postroom-dlq-trimmed`` saying how many were dropped:
    a dead letter that cannot be written would stop its partition for good (issue 23, item 8).
    ``own`` must fit by itself (a few short headers and an error cut to its limit)."""
    rest = {k: v for k, v in original.items() if k not in own}
    sizes = [_header_size(k, v) for k, v in rest.items()]
    own_size = sum(_header_size(k, v) for k, v in own.items())
    if len(rest) + len(own) <= MAX_HEADERS and sum(sizes) + own_size <= MAX_HEADER_BYTES:
        return {**rest, **own}
    note_room = len(TRIMMED_HEADER) + 120  # the note below is shorter than this
    room, slots = MAX_HEADER_BYTES - own_size - note_room, MAX_HEADERS - len(own) - 1
    kept: dict[str, HeaderValue] = {}
    for (name, value), size in zip(rest.items(), sizes, strict=True):
        if len(kept) < slots and size <= room:
            kept[name] = value
            room -= size
    note = (
        f"{len(rest) - len(kept)} of {len(rest)} original headers dropped to fit the limits "
        f"({MAX_HEADERS} headers, {MAX_HEADER_BYTES} bytes)"
    )
    return {**kept, **own, TRIMMED_HEADER: note}


def dead_letter_topic(topic: str) -> str:
    """``topic`` if it is already a dead-letter topic, else ``<topic>.dlq``."""
    check_name("topic", topic)
    return topic if topic.endswith(DLQ_SUFFIX) else f"{topic}{DLQ_SUFFIX}"


def replay_for_another_group(message: Message, group: str) -> bool:
    """True if ``message`` is a dead letter's replay for a group other than ``group``: that
    group's consumers pass over it (it succeeded for them the first time)."""
    target = message.headers.get(REPLAY_GROUP)
    if target is None:
        return False
    return (target if isinstance(target, str) else target.decode("utf-8", "replace")) != group


def _text(value: HeaderValue | None) -> str | None:
    return value if value is None or isinstance(value, str) else value.decode("utf-8", "replace")


class AsyncDeadLetters:
    """Writes, reads and replays dead-letter topics through the log engine's operations."""

    def __init__(self, engine: AsyncLog, db: AsyncDatabase) -> None:
        self._log = engine
        self._db = db

    async def write(
        self,
        message: Message,
        group: str,
        error: str,
        attempts: int,
        topic: str | None,
        headers: Mapping[str, HeaderValue] | None,
        conn: object,
    ) -> bool:
        """Publish ``message``'s dead letter for ``group`` unless one was written already;
        whether it was. With ``conn`` it joins the caller's transaction: the claim and the
        dead letter commit (or roll back) together with the caller's work. The dead-letter
        topic is created first if missing."""
        check_name("group", group)
        target = dead_letter_topic(message.topic) if topic is None else check_name("topic", topic)
        # Never too large: the original headers that do not fit beside postroom's are dropped
        # (and counted in postroom-dlq-trimmed), so a poison always leaves its partition.
        own: dict[str, HeaderValue] = {
            HEADER_PREFIX + "topic": message.topic,
            HEADER_PREFIX + "partition": str(message.partition),
            HEADER_PREFIX + "offset": str(message.offset),
            HEADER_PREFIX + "id": message.id,
            HEADER_PREFIX + "group": group,
            HEADER_PREFIX + "attempts": str(attempts),
            HEADER_PREFIX + "error": error,
            **(headers or {}),
        }
        letter = fit_headers(message.headers, own)
        try:
            await self._log.describe_topic(target)  # before the claim, which it would undo
        except TopicNotFound:
            try:
                await self._log.create_topic(target)
            except TopicExists:
                pass  # another process created it meanwhile
        async with self._db.connection(conn) as tx:
            cur = await tx.execute(
                self._db.q("claim_dead_letter"), {"group": group, "message_id": message.id}
            )
            row = await cur.fetchone()
            if row is None or not row[0]:
                return False
            await self._log.publish(target, message.value, key=message.key, headers=letter, conn=tx)
        return True

    async def _exists(self, topic: str) -> bool:
        """Whether ``topic``'s dead-letter topic exists. None yet (nothing failed, or no runner
        started) is no error when the source topic exists; raises TopicNotFound if neither
        does."""
        try:
            await self._log.describe_topic(dead_letter_topic(topic))
        except TopicNotFound:
            await self._log.describe_topic(topic.removesuffix(DLQ_SUFFIX))
            return False
        return True

    async def list(self, topic: str, limit: int) -> list[Message]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidArgument(f"invalid limit {limit!r}: an integer >= 1")
        found: list[Message] = []
        if not await self._exists(topic):
            return found
        async with self._log.consumer(None, dead_letter_topic(topic)) as peek:
            while len(found) < limit:
                batch = await peek.poll(timeout=0, max_messages=limit - len(found))
                if not batch:
                    break
                found.extend(batch)
        return sorted(found, key=lambda m: (m.timestamp, m.partition, m.offset))

    async def replay(self, topic: str, group: str) -> int:
        """Republish each dead letter once, marked for the group that failed on it: the cursor
        of ``group`` on the dead-letter topic advances in the transaction that publishes
        (transactional consumption). A dead letter that cannot be published (its source topic
        was deleted) is logged and passed over, so it does not hold back the others; it is not
        counted."""
        replayed = 0
        if not await self._exists(topic):
            return replayed
        source_default = topic.removesuffix(DLQ_SUFFIX)
        dlq = dead_letter_topic(topic)
        meta = await self._log.describe_topic(dlq)
        partitions = [TopicPartition(dlq, p) for p in range(meta.partitions)]
        async with self._log.consumer(group, dlq, partitions=partitions) as consumer:
            while True:
                async with consumer.transaction(max_messages=500) as batch:
                    for message in batch:
                        source = _text(message.headers.get(HEADER_PREFIX + "topic"))
                        try:
                            # A savepoint: a refused publish leaves the batch's transaction
                            # usable for the dead letters after it.
                            async with batch.connection.transaction():
                                await self._log.publish(
                                    source or source_default,
                                    message.value,
                                    key=message.key,
                                    headers=replay_headers(message.headers),
                                    conn=batch.connection,
                                )
                        except (TopicNotFound, InvalidArgument) as exc:
                            log.warning("dead letter %s not replayed: %s", message.id, exc)
                            continue
                        replayed += 1
                if not batch.messages:
                    return replayed


def replay_headers(letter: Mapping[str, HeaderValue]) -> dict[str, HeaderValue]:
    """The headers of a dead letter's replay: the failed message's own, marked for the group
    that failed (a dead letter that names none, written before postroom recorded it, goes to
    every group) and with the id of the message first dead-lettered."""
    headers = {k: v for k, v in letter.items() if not k.startswith(HEADER_PREFIX)}
    failed_group = letter.get(HEADER_PREFIX + "group")
    if failed_group is None:
        headers.pop(REPLAY_GROUP, None)
    else:
        headers[REPLAY_GROUP] = failed_group
    original = letter.get(REPLAY_OF) or letter.get(HEADER_PREFIX + "id")
    if original is not None:
        headers[REPLAY_OF] = original
    return headers
