"""The Kafka producers' futures: the async producer's are ``ASendFuture`` (no
``asyncio.wrap_future`` per send), finished on the event loop though the delivery reports come
in the producer's own thread; both flavours give each send its ``Published`` position."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import postroom
from postroom._futures import ASendFuture


def test_async_send_futures_resolve_from_the_reporter_thread(
    kafka_broker: str, names: Callable[[str], str]
) -> None:
    topic = names("futures")

    async def scenario() -> None:
        async with await postroom.connect_async(f"kafka://{kafka_broker}") as client:
            await client.create_topic(topic, 2)
            async with client.producer(linger_ms=1) as producer:
                first = await producer.send(topic, b"first", partition=0)
                assert isinstance(first, ASendFuture)
                # Awaited before any flush: the reporter thread finishes it on this loop.
                published = await asyncio.wait_for(first, 30)
                assert (published.partition, published.offset) == (0, 0)
                futures = [await producer.send(topic, str(i), partition=i % 2) for i in range(200)]
                await producer.flush()
                assert all(f.done() for f in futures)  # readable at once after flush
                offsets = [(f.result().partition, f.result().offset) for f in futures]
            assert [o for p, o in offsets if p == 0] == list(range(1, 101))
            assert [o for p, o in offsets if p == 1] == list(range(100))
            await client.delete_topic(topic)

    asyncio.run(scenario())


def test_sync_send_futures_give_positions(kafka_broker: str, names: Callable[[str], str]) -> None:
    topic = names("futures")
    with postroom.connect(f"kafka://{kafka_broker}") as client:
        client.create_topic(topic, 1)
        with client.producer(linger_ms=1) as producer:
            futures = [producer.send(topic, str(i)) for i in range(100)]
            assert futures[0].result(timeout=30).offset == 0
        assert [f.result().offset for f in futures] == list(range(100))
        client.delete_topic(topic)
