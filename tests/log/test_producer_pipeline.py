"""The producer writes two batches at once (``MAX_IN_FLIGHT``), each on its own connection:
lean batches (plain sends to one topic) on distinct partitions, any other batch alone. Order
within a partition stays the send order, and a lean batch refused in part is written again to
its own partition."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from typing import Any

import psycopg
import pytest

import postroom
from postroom.errors import MessageTooLarge
from postroom.log import records
from postroom.log.batching import MAX_IN_FLIGHT, OVERLAP_MIN_PENDING
from postroom.log.records import MAX_VALUE_BYTES

from ..blocking import unwrap


def _stick_from_zero(producer: Any) -> None:
    """Make the producer's sticky partitions 0, 1, 2, ... from now on."""
    unwrap(producer)._appender._sticky = itertools.count(0)


def _warm_up(producer: Any) -> None:
    """A first send to ``t`` (to partition 1), after which plain sends there take the lean
    path (the first send of a topic name checks it); then sticky partitions from 0."""
    future = producer.send("t", b"warm-up", partition=1)
    producer.flush()
    assert future.result(timeout=30).offset == 0
    _stick_from_zero(producer)


def _hold_offset_zero(dsn: str, partition: int) -> psycopg.Connection[Any]:
    """A transaction holding an uncommitted message at offset 0 of ``partition`` of topic
    ``t`` (triggers off, as a superuser may): a COPY writing that offset waits on the unique
    index until the transaction ends, after its data is sent."""
    blocker = psycopg.connect(dsn)
    blocker.execute("SET session_replication_role = replica")
    blocker.execute(
        'INSERT INTO postroom.messages (topic_id, partition, "offset", value) '
        "SELECT id, %s, 0, 'blocker' FROM postroom.topics WHERE name = 't'",
        (partition,),
    )
    return blocker


def test_a_batch_is_written_while_the_previous_one_waits_on_the_server(
    any_client: postroom.Client, dsn: str
) -> None:
    assert MAX_IN_FLIGHT == 2
    any_client.create_topic("t", partitions=2)
    with any_client.producer(linger_ms=0) as producer:
        _warm_up(producer)
        blocker = _hold_offset_zero(dsn, 0)
        try:
            first = producer.send("t", b"first")  # partition 0: its COPY waits on the blocker
            time.sleep(0.3)
            # Enough sends for a batch beside the one in flight: partition 1, written meanwhile.
            more = [producer.send("t", b"%d" % i) for i in range(OVERLAP_MIN_PENDING)]
            assert [f.result(timeout=30) for f in more] == [
                postroom.Published(1, 1 + i) for i in range(OVERLAP_MIN_PENDING)
            ]
            assert not first.done()
        finally:
            blocker.rollback()
            blocker.close()
        assert first.result(timeout=30) == postroom.Published(0, 0)


def test_batches_in_flight_keep_each_partition_in_send_order(
    any_client: postroom.Client,
) -> None:
    any_client.create_topic("t", partitions=3)
    count = 6000
    with any_client.producer(linger_ms=1, batch_size=200) as producer:
        futures = [producer.send("t", b"%d" % i) for i in range(count)]
        producer.flush()
        published = [f.result(timeout=30) for f in futures]
    by_partition: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for sent, position in enumerate(published):
        assert position.offset is not None
        by_partition[position.partition].append((position.offset, sent))
    for positions in by_partition.values():
        offsets = [offset for offset, _ in positions]
        assert offsets == list(range(len(offsets)))  # gapless from 0
        assert [sent for _, sent in sorted(positions)] == sorted(s for _, s in positions)
    with any_client.consumer("g", "t") as consumer:
        seen: list[postroom.Message] = []
        while len(seen) < count:
            seen += consumer.poll(timeout=1, max_messages=count)
    read: dict[int, list[int]] = defaultdict(list)
    for message in seen:
        read[message.partition].append(int(message.value))
    for values in read.values():
        assert values == sorted(values)  # each partition holds its sends in send order


def test_a_plain_batch_refused_in_part_is_written_again_to_its_own_partition(
    any_client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A value the Python check lets through (its limit raised here) but the database refuses.
    any_client.create_topic("t", partitions=4)
    monkeypatch.setattr(records, "MAX_VALUE_BYTES", 2 * MAX_VALUE_BYTES)
    monkeypatch.setattr("postroom.log.producer_async.MAX_VALUE_BYTES", 2 * MAX_VALUE_BYTES)
    monkeypatch.setattr("postroom.log.producer.MAX_VALUE_BYTES", 2 * MAX_VALUE_BYTES)
    with any_client.producer(linger_ms=60_000, batch_size=100) as producer:
        _warm_up(producer)
        futures = [producer.send("t", b"m%d" % i) for i in range(7)]
        bad = producer.send("t", b"x" * (MAX_VALUE_BYTES + 1))
        futures += [producer.send("t", b"m%d" % i) for i in range(7, 12)]
        producer.flush()
    with pytest.raises(MessageTooLarge):
        bad.result(timeout=10)
    # Written again piece by piece, all to the partition the batch was given: in send order.
    assert [f.result(timeout=10) for f in futures] == [postroom.Published(0, i) for i in range(12)]


def test_a_keyed_batch_waits_for_the_batches_in_flight(
    any_client: postroom.Client, dsn: str
) -> None:
    """A batch of the general path may write any partition: it is written alone, after the
    batches taken before it."""
    any_client.create_topic("t", partitions=2)
    with any_client.producer(linger_ms=0) as producer:
        _warm_up(producer)
        blocker = _hold_offset_zero(dsn, 0)
        try:
            first = producer.send("t", b"first")  # partition 0, waiting on the blocker
            time.sleep(0.3)
            keyed = [producer.send("t", b"%d" % i, partition=1) for i in range(OVERLAP_MIN_PENDING)]
            time.sleep(0.3)
            assert not any(f.done() for f in keyed)  # not beside the plain batch in flight
        finally:
            blocker.rollback()
            blocker.close()
        assert first.result(timeout=30) == postroom.Published(0, 0)
        assert [f.result(timeout=30) for f in keyed] == [
            postroom.Published(1, 1 + i) for i in range(OVERLAP_MIN_PENDING)
        ]


def test_a_few_pending_sends_wait_for_the_batch_in_flight(
    any_client: postroom.Client, dsn: str
) -> None:
    """Fewer than OVERLAP_MIN_PENDING sends are not taken beside a batch in flight: at low
    rates batches go one at a time (two commits at once would only wait on each other)."""
    any_client.create_topic("t", partitions=2)
    with any_client.producer(linger_ms=0) as producer:
        _warm_up(producer)
        blocker = _hold_offset_zero(dsn, 0)
        try:
            first = producer.send("t", b"first")  # partition 0, waiting on the blocker
            time.sleep(0.3)
            few = [producer.send("t", b"%d" % i) for i in range(10)]
            time.sleep(0.3)
            assert not any(f.done() for f in few)
        finally:
            blocker.rollback()
            blocker.close()
        assert first.result(timeout=30) == postroom.Published(0, 0)
        assert [f.result(timeout=30) for f in few] == [
            postroom.Published(1, 1 + i) for i in range(10)
        ]


def test_the_producer_opens_a_connection_for_each_batch_in_flight(dsn: str) -> None:
    with postroom.connect(dsn, min_size=1, max_size=4) as client:
        client.create_topic("t")
        with client.producer() as producer:
            producer.send("t", b"x").result(timeout=30)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if client._db.pool.get_stats()["pool_size"] >= MAX_IN_FLIGHT:
                    break
                time.sleep(0.05)
            assert client._db.pool.get_stats()["pool_size"] >= MAX_IN_FLIGHT


def test_threads_sending_plain_and_keyed_keep_per_key_order(any_client: postroom.Client) -> None:
    any_client.create_topic("t", partitions=4)
    results: dict[str, list[postroom.Published]] = {}
    with any_client.producer(linger_ms=1, batch_size=50) as producer:

        def send(name: str, keyed: bool) -> None:
            futures = [
                producer.send("t", f"{name}-{i}".encode(), key=name if keyed else None)
                for i in range(300)
            ]
            results[name] = [f.result(timeout=30) for f in futures]

        threads = [threading.Thread(target=send, args=(f"k{i}", i % 2 == 0)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for name in ("k0", "k2"):
        published = results[name]
        assert len({p.partition for p in published}) == 1
        offsets = [p.offset for p in published if p.offset is not None]
        assert len(offsets) == len(published)
        assert offsets == sorted(offsets)
    positions = [p for published in results.values() for p in published]
    assert len(set(positions)) == 1200
