"""Dead letters: list them, and replay them to their source topic exactly once."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument, TopicNotFound
from .records import Message, check_name
from .subscription import DLQ_SUFFIX

HEADER_PREFIX = "postroom-dlq-"


def dead_letter_topic(topic: str) -> str:
    """``topic`` if it is already a dead-letter topic, else ``<topic>.dlq``."""
    check_name("topic", topic)
    return topic if topic.endswith(DLQ_SUFFIX) else f"{topic}{DLQ_SUFFIX}"


class AsyncDeadLetters:
    """Reads and replays dead-letter topics through the client's public operations."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def _exists(self, topic: str) -> bool:
        """Whether ``topic``'s dead-letter topic exists. None yet (nothing failed, or no runner
        started) is no error when the source topic exists; raises TopicNotFound if neither
        does."""
        try:
            await self._client.describe_topic(dead_letter_topic(topic))
        except TopicNotFound:
            await self._client.describe_topic(topic.removesuffix(DLQ_SUFFIX))
            return False
        return True

    async def list(self, topic: str, limit: int) -> list[Message]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidArgument(f"invalid limit {limit!r}: an integer >= 1")
        found: list[Message] = []
        if not await self._exists(topic):
            return found
        async with self._client.consumer(None, dead_letter_topic(topic)) as peek:
            while len(found) < limit:
                batch = await peek.poll(timeout=0, max_messages=limit - len(found))
                if not batch:
                    break
                found.extend(batch)
        return sorted(found, key=lambda m: (m.timestamp, m.partition, m.offset))

    async def replay(self, topic: str, group: str) -> int:
        """Republish each dead letter once: the cursor of ``group`` on the dead-letter topic
        advances in the transaction that publishes (transactional consumption)."""
        replayed = 0
        if not await self._exists(topic):
            return replayed
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
                        await self._client.publish(
                            source if isinstance(source, str) else source.decode(),
                            message.value,
                            key=message.key,
                            headers=headers,
                            conn=batch.connection,
                        )
                if not batch.messages:
                    return replayed
                replayed += len(batch.messages)
