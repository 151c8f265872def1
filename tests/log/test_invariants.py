"""ARCHITECTURE.md's log invariants, proven on real PostgreSQL with real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import postroom

from ..signals import wait_for

PRODUCER = """
import sys, postroom
url, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with postroom.connect(url) as client:
    sent = 0
    while sent < count:
        size = min(1 + sent % 7, count - sent)
        client.publish_batch("t", [
            {"value": {"producer": name, "seq": sent + i}, "partition": 0} for i in range(size)
        ])
        sent += size
"""


def partition_rows(conninfo: str, partition: int = 0) -> list[tuple[int, bytes]]:
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute(
            'SELECT "offset", value FROM postroom.messages WHERE partition = %s ORDER BY 1',
            [partition],
        ).fetchall()
    return [(r[0], bytes(r[1])) for r in rows]


@pytest.mark.slow
def test_producers_in_several_processes_get_gapless_offsets(client: postroom.Client) -> None:
    client.create_topic("t", partitions=2)
    procs = [
        subprocess.Popen([sys.executable, "-c", PRODUCER, client.conninfo, f"p{i}", "300"])
        for i in range(4)
    ]
    for proc in procs:
        assert proc.wait(timeout=90) == 0
    rows = partition_rows(client.conninfo)
    assert [offset for offset, _ in rows] == list(range(1200))
    seen = [json.loads(value) for _, value in rows]
    assert len({(m["producer"], m["seq"]) for m in seen}) == 1200  # each message once
    for name in ("p0", "p1", "p2", "p3"):
        seqs = [m["seq"] for m in seen if m["producer"] == name]
        assert seqs == list(range(300))  # each producer's order kept
    assert client.describe_topic("t").partition_info[0].high_water == 1200


def test_rolled_back_publish_leaves_no_message_and_no_gap(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    any_client.create_topic("t")
    any_client.publish("t", "first")
    with any_connect() as conn:
        conn.execute("CREATE TABLE orders (id int)")
        conn.execute("INSERT INTO orders VALUES (1)")
        # In the caller's transaction the offset is assigned at its commit: None here.
        assert any_client.publish("t", "lost", conn=conn) == postroom.Published(0, None)
        any_client.publish_batch("t", ["lost too", "and this"], conn=conn)
        conn.rollback()
    assert any_client.publish("t", "second") == postroom.Published(0, 1)
    assert [v for _, v in partition_rows(any_client.conninfo)] == [b"first", b"second"]
    with psycopg.connect(any_client.conninfo) as conn:
        assert conn.execute("SELECT to_regclass('orders')").fetchone() == (None,)


def test_committed_publish_commits_with_the_business_row(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    any_client.create_topic("t")
    with any_connect() as conn:
        conn.execute("CREATE TABLE orders (id int)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (42)")
        any_client.publish("t", {"order": 42}, conn=conn)
        # Not visible to others before the caller commits.
        assert partition_rows(any_client.conninfo) == []
        conn.commit()
    assert [v for _, v in partition_rows(any_client.conninfo)] == [b'{"order":42}']


def test_publish_with_an_autocommit_connection_is_atomic(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    any_client.create_topic("t", partitions=3)
    with any_connect(autocommit=True) as conn:
        published = any_client.publish_batch(
            "t", [{"value": i, "key": str(i)} for i in range(30)], conn=conn
        )
    assert len(published) == 30
    # Its own transaction, committed before publish_batch returns: the offsets are known.
    by_partition: dict[int, list[int | None]] = {}
    for p in published:
        by_partition.setdefault(p.partition, []).append(p.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())
    assert sum(p.messages for p in any_client.describe_topic("t").partition_info) == 30


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plans=st.lists(
        st.lists(st.tuples(st.integers(1, 40), st.booleans()), min_size=1, max_size=6),
        min_size=2,
        max_size=4,
    )
)
def test_reader_never_sees_a_gap_while_writers_are_in_flight(
    any_client: postroom.Client,
    any_connect: Callable[..., psycopg.Connection[Any]],
    plans: list[list[tuple[int, bool]]],
) -> None:
    """Writers commit or roll back batches at random while a reader polls: every poll continues
    exactly where the last ended, and the reader ends with every committed message."""
    topic = f"t{abs(hash(str(plans))) % 10**9}"
    any_client.create_topic(topic)
    committed = sum(size for plan in plans for size, rollback in plan if not rollback)
    writers_done = threading.Event()

    def write(plan: list[tuple[int, bool]]) -> None:
        with any_connect() as conn:
            for size, rollback in plan:
                any_client.publish_batch(topic, [b"x"] * size, conn=conn)
                time.sleep(0.001)  # widen the window in which the batch is uncommitted
                conn.rollback() if rollback else conn.commit()

    threads = [threading.Thread(target=write, args=(plan,)) for plan in plans]
    for thread in threads:
        thread.start()
    seen: list[int] = []
    with any_client.consumer("reader", topic) as consumer:
        deadline = time.monotonic() + 30
        while len(seen) < committed and time.monotonic() < deadline:
            for message in consumer.poll(timeout=0.05, max_messages=7):
                assert message.offset == len(seen), f"gap: got {message.offset} after {seen[-1:]}"
                seen.append(message.offset)
    for thread in threads:
        thread.join()
    writers_done.set()
    assert seen == list(range(committed))


def test_rolled_back_transactional_consume_redelivers(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish_batch("t", [f"m{i}" for i in range(5)])
    with any_client.consumer("g", "t") as consumer:
        with pytest.raises(RuntimeError, match="handler failed"):
            with consumer.transaction(max_messages=3) as batch:
                assert [m.offset for m in batch] == [0, 1, 2]
                batch.connection.execute("CREATE TABLE side_effect (x int)")
                raise RuntimeError("handler failed")
        assert consumer.committed(postroom.TopicPartition("t", 0)) == 0
        with consumer.transaction(max_messages=10) as batch:
            assert [m.text() for m in batch] == [f"m{i}" for i in range(5)]
        assert consumer.committed(postroom.TopicPartition("t", 0)) == 5
    with psycopg.connect(any_client.conninfo) as conn:
        assert conn.execute("SELECT to_regclass('side_effect')").fetchone() == (None,)


def test_transactional_consumers_in_one_group_share_partitions(any_client: postroom.Client) -> None:
    """Two consumers claiming at once take different partitions (SKIP LOCKED on the cursors),
    even when their manual assignments overlap (group members never share a partition)."""
    any_client.create_topic("t", partitions=2)
    any_client.publish_batch("t", [{"value": "a", "partition": 0}, {"value": "b", "partition": 1}])
    both = [postroom.TopicPartition("t", 0), postroom.TopicPartition("t", 1)]
    first = any_client.consumer("g", "t", partitions=both)
    second = any_client.consumer("g", "t", partitions=both)
    with first.transaction() as one, second.transaction() as two:
        assert {one.topic_partition, two.topic_partition} == {
            postroom.TopicPartition("t", 0),
            postroom.TopicPartition("t", 1),
        }
    first.close()
    second.close()


TRANSACTIONAL_CONSUMER = """
import sys, time, pathlib, postroom
url, marker = sys.argv[1], pathlib.Path(sys.argv[2])
with postroom.connect(url) as client, client.consumer("g", "t") as consumer:
    while True:
        with consumer.transaction(max_messages=50, timeout=1.0) as batch:
            if not batch.messages:
                break
            for i, message in enumerate(batch):
                batch.connection.execute(
                    "INSERT INTO processed (partition, \\"offset\\") VALUES (%s, %s)",
                    [message.partition, message.offset],
                )
                if i == 25 and not marker.exists():
                    marker.write_text("mid-batch")
                    time.sleep(60)  # killed here, with half a batch written
"""

POLL_CONSUMER = """
import sys, time, pathlib, psycopg, postroom
url, marker = sys.argv[1], pathlib.Path(sys.argv[2])
with postroom.connect(url) as client, client.consumer("g", "t") as consumer, \
        psycopg.connect(url, autocommit=True) as side:
    while True:
        messages = consumer.poll(timeout=1.0, max_messages=50)
        if not messages:
            break
        for i, message in enumerate(messages):
            side.execute(
                "INSERT INTO processed (partition, \\"offset\\") VALUES (%s, %s)",
                [message.partition, message.offset],
            )
            if i == 25 and not marker.exists():
                marker.write_text("mid-batch")
                time.sleep(60)  # killed here: processed but not committed
        consumer.commit()
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["transactional", "poll"])
def test_kill_9_of_a_consumer_mid_batch_loses_nothing(
    client: postroom.Client, tmp_path: Path, mode: str
) -> None:
    client.create_topic("t", partitions=3)
    client.publish_batch("t", [{"value": i, "key": str(i)} for i in range(600)])
    with psycopg.connect(client.conninfo) as conn:
        conn.execute('CREATE TABLE processed (partition int, "offset" bigint)')
    code = TRANSACTIONAL_CONSUMER if mode == "transactional" else POLL_CONSUMER
    marker = tmp_path / "marker"
    victim = subprocess.Popen([sys.executable, "-c", code, client.conninfo, str(marker)])
    try:
        wait_for(marker.exists)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        # A fresh member of the group resumes from the committed cursors.
        survivor = subprocess.run(
            [sys.executable, "-c", code, client.conninfo, str(marker)], timeout=90, check=True
        )
        assert survivor.returncode == 0
    finally:
        victim.kill()
    with psycopg.connect(client.conninfo) as conn:
        rows = conn.execute('SELECT partition, "offset" FROM processed').fetchall()
    expected = {
        (p.partition, o)
        for p in client.describe_topic("t").partition_info
        for o in range(p.high_water)
    }
    assert set(rows) == expected  # nothing lost
    if mode == "transactional":
        assert len(rows) == len(expected)  # database side effects exactly once
    else:
        assert len(rows) > len(expected)  # at least once: the uncommitted batch came again
    assert client.describe_group("g").lag == 0
