"""Dead letters: list them, and replay them to their source topic exactly once."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidArgument, TopicNotFound
from .records import MAX_HEADER_BYTES, MAX_HEADERS, HeaderValue, Message, check_name
from .subscription import DLQ_SUFFIX

log = logging.getLogger("postroom.dlq")

HEADER_PREFIX = "postroom-dlq-"
TRIMMED_HEADER = f"{HEADER_PREFIX}trimmed"
"""Set on a dead letter whose original headers did not all fit beside postroom's own."""


def _header_size(name: str, value: HeaderValue) -> int:
    """What a header counts against MAX_HEADER_BYTES (as records.encode_headers counts)."""
    raw = value if isinstance(value, bytes) else value.encode("utf-8", "replace")
    return len(name) + len(raw)


def dead_letter_headers(message: Message, attempts: int, error: str) -> dict[str, HeaderValue]:
    """The headers of ``message``'s dead letter from the runner: its own, then where it came
    from, the attempts and the error (see ``fit_headers``)."""
    own: dict[str, HeaderValue] = {
        f"{HEADER_PREFIX}topic": message.topic,
        f"{HEADER_PREFIX}partition": str(message.partition),
        f"{HEADER_PREFIX}offset": str(message.offset),
        f"{HEADER_PREFIX}attempts": str(attempts),
        f"{HEADER_PREFIX}error": error,
    }
    return fit_headers(message.headers, own)


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


class AsyncDeadLetters:
    """Reads and replays dead-letter topics through the client's public operations."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def list(self, topic: str, limit: int) -> list[Message]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidArgument(f"invalid limit {limit!r}: an integer >= 1")
        found: list[Message] = []
        async with self._client.consumer(None, dead_letter_topic(topic)) as peek:
            while len(found) < limit:
                batch = await peek.poll(timeout=0, max_messages=limit - len(found))
                if not batch:
                    break
                found.extend(batch)
        return sorted(found, key=lambda m: (m.timestamp, m.partition, m.offset))

    async def replay(self, topic: str, group: str) -> int:
        """Republish each dead letter once: the cursor of ``group`` on the dead-letter topic
        advances in the transaction that publishes (transactional consumption). A dead letter
        that cannot be published (its source topic was deleted) is logged and passed over, so
        it does not hold back the others; it is not counted."""
        replayed = 0
        source_default = topic.removesuffix(DLQ_SUFFIX)
        dlq = dead_letter_topic(topic)
        meta = await self._client.describe_topic(dlq)
        partitions = [(dlq, p) for p in range(meta.partitions)]
        async with self._client.consumer(group, dlq, partitions=partitions) as consumer:
            while True:
                async with consumer.transaction(max_messages=500) as batch:
                    for message in batch:
                        headers = {
                            k: v
                            for k, v in message.headers.items()
                            if not k.startswith(HEADER_PREFIX)
                        }
                        source = message.headers.get(f"{HEADER_PREFIX}topic", source_default)
                        name = source if isinstance(source, str) else source.decode()
                        try:
                            # A savepoint: a refused publish leaves the batch's transaction
                            # usable for the dead letters after it.
                            async with batch.connection.transaction():
                                await self._client.publish(
                                    name,
                                    message.value,
                                    key=message.key,
                                    headers=headers,
                                    conn=batch.connection,
                                )
                        except (TopicNotFound, InvalidArgument) as exc:
                            log.warning("dead letter %s not replayed: %s", message.id, exc)
                            continue
                        replayed += 1
                if not batch.messages:
                    return replayed
