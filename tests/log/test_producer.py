"""The batching producer: shared between threads, futures resolved at commit, errors delivered."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

import postroom
from postroom.errors import InvalidType, ProducerClosed, TopicNotFound


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
        offsets = [p.offset for p in published]
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
