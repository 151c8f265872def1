"""poll()'s prefetch: after a full batch the next fetch is sent while the application handles
it. A prefetched row becomes a message only for a partition still held at the assignment and
position it was fetched for, and only for a poll with the same limits; anything else is
dropped, never delivered (nor delivered twice)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

import postroom
from postroom import TopicPartition

from ..signals import wait_for

SESSION = 1.0


def offsets(batch: list[postroom.Message]) -> list[int]:
    return [m.offset for m in batch]


def test_a_full_batch_prefetches_the_next_and_a_partial_one_does_not(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    client.publish_batch("t", [f"m{i}" for i in range(25)])
    with client.consumer("g", "t") as c:
        assert offsets(c.poll(timeout=1, max_messages=10)) == list(range(10))
        prefetch = c._fetcher._prefetch
        assert prefetch is not None and list(prefetch.starts.values()) == [10]
        assert offsets(c.poll(timeout=1, max_messages=10)) == list(range(10, 20))
        assert offsets(c.poll(timeout=1, max_messages=10)) == list(range(20, 25))
        assert c._fetcher._prefetch is None  # 5 < 10: no backlog behind it, nothing sent ahead
        assert c.poll(timeout=0.1, max_messages=10) == []


def test_each_message_comes_once_and_in_order_through_prefetches(
    any_client: postroom.Client,
) -> None:
    any_client.create_topic("t", partitions=3)
    any_client.publish_batch("t", [{"value": str(i), "partition": i % 3} for i in range(600)])
    got: list[postroom.Message] = []
    with any_client.consumer("g", "t") as c:
        while batch := c.poll(timeout=0.5, max_messages=64):
            got += batch
            c.commit()
    assert sorted((m.partition, m.offset) for m in got) == [
        (p, o) for p in range(3) for o in range(200)
    ]
    for p in range(3):
        assert [m.offset for m in got if m.partition == p] == list(range(200))


def test_seek_drops_the_prefetch(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish_batch("t", [f"m{i}" for i in range(30)])
    tp = TopicPartition("t", 0)
    with any_client.consumer("g", "t") as c:
        assert offsets(c.poll(timeout=1, max_messages=10)) == list(range(10))
        c.seek(tp, 3)  # back, below the prefetch's start
        assert offsets(c.poll(timeout=1, max_messages=10)) == list(range(3, 13))
        c.seek(tp, 25)  # forward, past it
        assert offsets(c.poll(timeout=1, max_messages=10)) == list(range(25, 30))


def test_a_prefetch_is_dropped_when_its_position_moved(client: postroom.Client) -> None:
    """Belt and braces under seek()'s own drop: rows fetched from another position than the
    partition's current one never reach its buffer."""
    client.create_topic("t")
    client.publish_batch("t", [f"m{i}" for i in range(30)])
    with client.consumer("g", "t") as c:
        assert offsets(c.poll(timeout=1, max_messages=10)) == list(range(10))
        assert c._fetcher._prefetch is not None
        assigned = c._state.get(TopicPartition("t", 0))
        assigned.position = 2  # as a seek back would, had the prefetch been kept
        assert offsets(c.poll(timeout=1, max_messages=10)) == list(range(2, 12))


def test_a_prefetch_for_other_limits_is_dropped(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish_batch("t", [b"x" * 100 for _ in range(30)])
    with any_client.consumer("g", "t") as c:
        assert len(c.poll(timeout=1, max_messages=5)) == 5
        batch = c.poll(timeout=1, max_messages=5, max_bytes=250)  # the budget holds
        assert offsets(batch) == [5, 6]
        batch = c.poll(timeout=1, max_messages=3)
        assert offsets(batch) == [7, 8, 9]


def test_a_failed_prefetch_is_fetched_again_in_the_poll(client: postroom.Client) -> None:
    client.create_topic("t")
    client.publish_batch("t", [f"m{i}" for i in range(30)])
    with client.consumer("g", "t") as c:
        real = c._fetcher.execute
        calls: list[str] = []

        def flaky(params: dict[str, Any], *sending: Any) -> Any:
            calls.append(threading.current_thread().name)
            if len(calls) == 2:
                raise psycopg.OperationalError("cut")
            return real(params, *sending)

        c._fetcher.execute = flaky  # type: ignore[method-assign,assignment]
        assert offsets(c.poll(timeout=1, max_messages=10)) == list(range(10))
        assert offsets(c.poll(timeout=1, max_messages=10)) == list(range(10, 20))
        assert calls[1].startswith("postroom-prefetch")  # the one that failed
        assert len(calls) >= 3


def test_close_waits_for_the_prefetch_and_ends_its_thread(client: postroom.Client) -> None:
    client.create_topic("t")
    client.publish_batch("t", [f"m{i}" for i in range(30)])
    c = client.consumer("g", "t")
    assert len(c.poll(timeout=1, max_messages=10)) == 10
    assert c._fetcher._prefetch is not None
    c.close()
    assert c._fetcher._prefetch is None
    wait_for(lambda: not any(t.name.startswith("postroom-prefetch") for t in threading.enumerate()))


def test_a_prefetch_for_a_partition_lost_to_a_rebalance_is_never_delivered(
    client: postroom.Client,
) -> None:
    client.create_topic("t", partitions=2)
    client.publish_batch("t", [{"value": str(i), "partition": i % 2} for i in range(400)])
    seen: dict[tuple[int, int], str] = {}
    first = client.consumer("g", "t", session_timeout=SESSION)
    second = client.consumer("g", "t", session_timeout=SESSION)
    try:

        def take(consumer: postroom.Consumer, name: str) -> int:
            batch = consumer.poll(timeout=0.05, max_messages=20)
            held = {tp.partition for tp in consumer._state.partitions()}
            for m in batch:
                assert m.partition in held, f"{name} got {m.partition} it no longer holds"
                key = (m.partition, m.offset)
                assert key not in seen, f"{key} delivered to {seen[key]} and {name}"
                seen[key] = name
            consumer.commit()
            return len(batch)

        assert take(first, "first") == 20  # both partitions held: a full batch, a prefetch
        assert first._fetcher._prefetch is not None
        deadline = time.monotonic() + 30
        while len(seen) < 400:
            assert time.monotonic() < deadline, f"only {len(seen)} of 400 consumed"
            take(second, "second")
            take(first, "first")
        assert {seen[(p, o)] for p in range(2) for o in range(200)} == {"first", "second"}
    finally:
        second.close()
        first.close()


def test_ends_finds_where_each_partition_stops() -> None:
    from postroom.log.partitions import row_ends as _ends

    rows = [(1, 2, o) for o in range(5, 9)] + [(1, 0, 3)] + [(2, 0, o) for o in range(100)]
    assert _ends(rows) == {(1, 2): 9, (1, 0): 4, (2, 0): 100}
    assert _ends([]) == {}


def test_a_backlog_is_read_through_prefetches_with_no_fetch_in_the_poll(
    client: postroom.Client,
) -> None:
    """Each prefetch is sent, from where the rows before it end, as soon as those arrive: its
    start matches the positions when it is used, so the poll never fetches itself."""
    client.create_topic("t", partitions=3)
    client.publish_batch("t", [{"value": str(i), "partition": i % 3} for i in range(600)])
    with client.consumer("g", "t") as c:
        real = c._fetcher.fetch
        foreground: list[dict[int, int]] = []

        def counted(limit: int, max_bytes: int) -> None:
            foreground.append({a.partition: a.position for a in c._state.in_use()})
            real(limit, max_bytes)

        c._fetcher.fetch = counted  # type: ignore[method-assign]
        got = 0
        while batch := c.poll(timeout=0.2, max_messages=64):
            got += len(batch)
            c.commit()
        assert got == 600
        # The first fetch only; the others, once all was read, found nothing.
        behind = [f for f in foreground if any(position < 200 for position in f.values())]
        assert behind == [{0: 0, 1: 0, 2: 0}], foreground


def test_a_pool_of_one_connection_is_enough(client: postroom.Client, dsn: str) -> None:
    """The prefetch gives its connection back as soon as its rows are in: commit() and the
    group's heartbeats, which need one too, never wait on the thread that waits on them."""
    client.create_topic("t", partitions=2)
    client.publish_batch("t", [{"value": str(i), "partition": i % 2} for i in range(300)])
    got = 0
    with postroom.connect(dsn, max_size=1) as small, small.consumer("g", "t") as c:
        while batch := c.poll(timeout=0.3, max_messages=20):
            got += len(batch)
            c.commit()
    assert got == 300
    assert client.describe_group("g").lag == 0
