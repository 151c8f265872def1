"""The batching producer: shared between threads, futures resolved at commit, errors delivered."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import psycopg
import pytest

import postroom
from postroom.errors import (
    BufferFull,
    InvalidArgument,
    InvalidName,
    InvalidType,
    MessageTooLarge,
    ProducerClosed,
    TopicNotFound,
)


def test_threads_share_one_producer(any_client: postroom.Client) -> None:
    any_client.create_topic("t", partitions=4)
    results: dict[str, list[postroom.Published]] = defaultdict(list)
    with any_client.producer(linger_ms=2, batch_size=64) as producer:

        def send(name: str) -> None:
            futures = [producer.send("t", f"{name}-{i}", key=name) for i in range(200)]
            results[name] = [f.result(timeout=30) for f in futures]

        threads = [threading.Thread(target=send, args=(f"k{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for published in results.values():
        # One key, one partition, in send order.
        assert len({p.partition for p in published}) == 1
        offsets = [p.offset for p in published if p.offset is not None]
        assert len(offsets) == len(published)
        assert offsets == sorted(offsets)
    with any_client.consumer("g", "t") as consumer:
        seen: list[postroom.Message] = []
        while len(seen) < 800:
            seen += consumer.poll(timeout=1, max_messages=1000)
    assert len({m.text() for m in seen}) == 800


def test_flush_and_errors(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    producer = any_client.producer(linger_ms=60_000)
    future = producer.send("t", "x")
    started = time.monotonic()
    producer.flush()  # writes at once: does not wait out the linger
    assert time.monotonic() - started < 30
    assert future.done() and future.result() == postroom.Published(0, 0)
    with pytest.raises(InvalidType):
        producer.send("t", object())  # type: ignore[arg-type]
    # A send to an unknown topic fails alone, not the batch it shares.
    failed = producer.send("missing", "x")
    fine = producer.send("t", "y")
    producer.flush()
    with pytest.raises(TopicNotFound):
        failed.result(timeout=10)
    assert fine.result(timeout=10) == postroom.Published(0, 1)
    producer.close()
    producer.close()
    with pytest.raises(ProducerClosed):
        producer.send("t", "late")


def _block_writes(dsn: str) -> psycopg.Connection[Any]:
    """A transaction holding every partition counter row: writers wait on it until it ends."""
    blocker = psycopg.connect(dsn)
    blocker.execute("SELECT FROM postroom.partitions FOR UPDATE")
    return blocker


def test_a_full_buffer_raises_buffer_full_after_buffer_timeout(
    any_client: postroom.Client, dsn: str
) -> None:
    any_client.create_topic("t")
    blocker = _block_writes(dsn)
    producer = any_client.producer(linger_ms=0, batch_size=1, buffer_messages=2, buffer_timeout=1)
    # One message in flight (the writer waits on the lock), two in the buffer: then full.
    futures = [producer.send("t", b"%d" % i) for i in range(3)]
    with pytest.raises(BufferFull, match="buffer_messages=2"):
        producer.send("t", b"3")
    blocker.rollback()
    blocker.close()
    producer.close()
    assert [f.result(timeout=30) for f in futures] == [postroom.Published(0, i) for i in range(3)]


def test_a_send_into_a_full_buffer_waits_for_room(any_client: postroom.Client, dsn: str) -> None:
    any_client.create_topic("t")
    blocker = _block_writes(dsn)
    producer = any_client.producer(linger_ms=0, batch_size=1, buffer_bytes=10, buffer_timeout=None)
    futures = [producer.send("t", b"12345") for _ in range(3)]  # in flight, then 10 bytes
    sent = threading.Event()

    def send_more() -> None:
        futures.append(producer.send("t", b"x"))
        sent.set()

    sender = threading.Thread(target=send_more)
    sender.start()
    assert not sent.wait(0.3)  # blocked: no room until the writer moves on
    blocker.commit()
    blocker.close()
    assert sent.wait(30)
    sender.join()
    producer.close()
    assert [f.result(timeout=30) for f in futures] == [postroom.Published(0, i) for i in range(4)]


@pytest.mark.parametrize(
    "arguments",
    [
        {"buffer_messages": 0},
        {"buffer_bytes": -1},
        {"buffer_messages": 1.5},
        {"buffer_timeout": -1},
    ],
)
def test_bad_buffer_limits_are_refused(any_client: postroom.Client, arguments: Any) -> None:
    with pytest.raises(InvalidArgument):
        any_client.producer(**arguments)


def test_plain_sends_resolve_to_gapless_positions_in_order(any_client: postroom.Client) -> None:
    """The plain-send path (bytes, no key, headers or partition): positions built on demand."""
    any_client.create_topic("t", partitions=3)
    with any_client.producer(linger_ms=1000, batch_size=500) as producer:
        futures = [producer.send("t", b"%d" % i) for i in range(1200)]
        producer.flush()
        waited = producer.send("t", b"last")
        results = [f.result(timeout=30) for f in futures]
        assert waited.result(timeout=30).offset is not None
    by_partition: dict[int, list[int]] = defaultdict(list)
    for published in results:
        assert published.offset is not None
        by_partition[published.partition].append(published.offset)
    for offsets in by_partition.values():
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    assert sum(len(o) for o in by_partition.values()) == 1200


def test_a_send_from_a_done_callback_never_waits_for_room(
    client: postroom.Client, dsn: str
) -> None:
    """The writer runs done-callbacks: a send there into a full buffer must not wait for the
    writer itself (it would wait out buffer_timeout and fail)."""
    client.create_topic("t")
    blocker = _block_writes(dsn)
    producer = client.producer(linger_ms=0, batch_size=1, buffer_messages=1, buffer_timeout=5)
    first = producer.send("t", b"a")  # in flight, waiting on the lock
    second = producer.send("t", b"b")  # fills the buffer
    from_callback: list[Any] = []
    first.add_done_callback(lambda f: from_callback.append(producer.send("t", b"c")))
    blocker.commit()
    blocker.close()
    assert second.result(timeout=30) == postroom.Published(0, 1)
    producer.flush()
    assert [f.result(timeout=30) for f in from_callback] == [postroom.Published(0, 2)]
    producer.close()


def test_publish_batch_of_plain_values(any_client: postroom.Client, any_connect: Any) -> None:
    """Plain bytes values take the lean write path: same positions, checks and transactions."""
    any_client.create_topic("t")
    assert any_client.publish_batch("t", [b"a", b"b", b"c"]) == [
        postroom.Published(0, i) for i in range(3)
    ]
    with any_connect() as conn:
        with conn.transaction():
            # In the caller's transaction: offsets assigned at its commit (3 and 4).
            assert any_client.publish_batch("t", iter([b"d", b"e"]), conn=conn) == [
                postroom.Published(0, None),
                postroom.Published(0, None),
            ]
    with pytest.raises(TopicNotFound):
        any_client.publish_batch("missing", [b"x"])
    with pytest.raises(InvalidName):
        any_client.publish_batch("bad name", [b"x"])
    with pytest.raises(MessageTooLarge):
        any_client.publish_batch("t", [b"x", b"y" * (1024 * 1024 + 1)])
    assert any_client.publish_batch("t", []) == []
    with any_client.consumer("g", "t") as consumer:
        seen: list[postroom.Message] = []
        while len(seen) < 5:
            seen += consumer.poll(timeout=1)
    assert [m.value for m in seen] == [b"a", b"b", b"c", b"d", b"e"]
    assert [m.offset for m in seen] == list(range(5))
