# Generated from src/postroom/log/deadletters_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
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
failed; ``Message.original_id`` is the id to deduplicate on. A replay of chosen dead letters
(``letters``: their partitions and offsets on the dead-letter topic) publishes just those, each
time it is asked, and leaves the cursor of the replay of all as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from .._checks import check_int
from .._db import Database
from ..errors import InvalidArgument, OffsetOutOfRange, TopicExists, TopicNotFound
from .deadletter_headers import (
    HEADER_PREFIX,
    dead_letter_topic,
    fit_headers,
    header_text,
    replay_headers,
)
from .records import (
    HeaderValue,
    Message,
    TopicPartition,
    check_name,
    check_offset,
)
from .subscription import DLQ_SUFFIX

if TYPE_CHECKING:
    from .engine import Log

log = logging.getLogger("postroom.dlq")


class DeadLetters:
    """Writes, reads and replays dead-letter topics through the log engine's operations."""

    def __init__(self, engine: Log, db: Database) -> None:
        self._log = engine
        self._db = db

    def write(
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
            self._log.describe_topic(target)  # before the claim, which it would undo
        except TopicNotFound:
            try:
                self._log.create_topic(target)
            except TopicExists:
                pass  # another process created it meanwhile
        with self._db.connection(conn) as tx:
            cur = tx.execute(
                self._db.q("claim_dead_letter"), {"group": group, "message_id": message.id}
            )
            row = cur.fetchone()
            if row is None or not row[0]:
                return False
            self._log.publish(target, message.value, key=message.key, headers=letter, conn=tx)
        return True

    def _exists(self, topic: str) -> bool:
        """Whether ``topic``'s dead-letter topic exists. None yet (nothing failed, or no runner
        started) is no error when the source topic exists; raises TopicNotFound if neither
        does."""
        try:
            self._log.describe_topic(dead_letter_topic(topic))
        except TopicNotFound:
            self._log.describe_topic(topic.removesuffix(DLQ_SUFFIX))
            return False
        return True

    def list(self, topic: str, limit: int) -> list[Message]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidArgument(f"invalid limit {limit!r}: an integer >= 1")
        found: list[Message] = []
        if not self._exists(topic):
            return found
        with self._log.consumer(None, dead_letter_topic(topic)) as peek:
            while len(found) < limit:
                batch = peek.poll(timeout=0, max_messages=limit - len(found))
                if not batch:
                    break
                found.extend(batch)
        return sorted(found, key=lambda m: (m.timestamp, m.partition, m.offset))

    def replay(
        self, topic: str, group: str, letters: Collection[tuple[int, int]] | None = None
    ) -> int:
        """Republish each dead letter once, marked for the group that failed on it: the cursor
        of ``group`` on the dead-letter topic advances in the transaction that publishes
        (transactional consumption). A dead letter that cannot be published (its source topic
        was deleted) is logged and passed over, so it does not hold back the others; it is not
        counted. With ``letters`` ((partition, offset) on the dead-letter topic) only those are
        republished and ``group``'s cursor does not move."""
        replayed = 0
        if not self._exists(topic):
            return replayed
        if letters is not None:
            return self._replay_chosen(topic, letters)
        source_default = topic.removesuffix(DLQ_SUFFIX)
        dlq = dead_letter_topic(topic)
        meta = self._log.describe_topic(dlq)
        partitions = [TopicPartition(dlq, p) for p in range(meta.partitions)]
        with self._log.consumer(group, dlq, partitions=partitions) as consumer:
            while True:
                with consumer.transaction(max_messages=500) as batch:
                    for message in batch:
                        source = header_text(message.headers.get(HEADER_PREFIX + "topic"))
                        try:
                            # A savepoint: a refused publish leaves the batch's transaction
                            # usable for the dead letters after it.
                            with batch.connection.transaction():
                                self._log.publish(
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

    def _read(self, dlq: str, letters: Collection[tuple[int, int]]) -> Sequence[Message]:
        """The dead letters at ``letters`` ((partition, offset) on ``dlq``), in offset order;
        those retention removed (or never written) are left out. One seek a run of offsets."""
        partitions = (self._log.describe_topic(dlq)).partitions
        by_partition: dict[int, set[int]] = {}
        for partition, offset in letters:
            check_int("partition", partition, 0, partitions - 1)
            by_partition.setdefault(partition, set()).add(check_offset(offset))
        found: list[Message] = []
        for partition, wanted in sorted(by_partition.items()):
            tp = TopicPartition(dlq, partition)
            with self._log.consumer(None, dlq, partitions=[tp]) as peek:
                read_to = -1  # offsets below this were read already
                for offset in sorted(wanted):
                    if offset < read_to:
                        continue
                    try:
                        peek.seek(tp, offset)
                    except OffsetOutOfRange:
                        break  # past the high-water mark: so are the rest
                    batch = peek.poll(timeout=0, max_messages=500)
                    if not batch:
                        break
                    found.extend(m for m in batch if m.offset in wanted)
                    read_to = batch[-1].offset + 1
        return found

    def _replay_chosen(self, topic: str, letters: Collection[tuple[int, int]]) -> int:
        dlq = dead_letter_topic(topic)
        source_default = topic.removesuffix(DLQ_SUFFIX)
        replayed = 0
        chosen = self._read(dlq, letters)
        with self._db.connection() as tx:
            for message in chosen:
                source = header_text(message.headers.get(HEADER_PREFIX + "topic"))
                try:
                    with tx.transaction():
                        self._log.publish(
                            source or source_default,
                            message.value,
                            key=message.key,
                            headers=replay_headers(message.headers),
                            conn=tx,
                        )
                except (TopicNotFound, InvalidArgument) as exc:
                    log.warning("dead letter %s not replayed: %s", message.id, exc)
                    continue
                replayed += 1
        return replayed
