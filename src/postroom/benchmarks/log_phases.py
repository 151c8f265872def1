"""The phases of the log benchmark (``postroom.benchmarks.log`` runs them and reports).

Each ``measure_*`` function times one phase in the benchmark's own schema and returns its
seconds and counts; the consumer phases run their consumers in processes of their own
(``spawn``: the functions those processes run live here, importable by name).
"""

from __future__ import annotations

import inspect
import multiprocessing
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

import postroom

from ._common import rate, rss_kb

SCHEMA = "postroom_bench"
TOPIC = "bench"
LATENCY_TOPIC = "latency"
MEMORY_TOPIC = "memory"


@dataclass(frozen=True)
class Settings:
    messages: int = 200_000
    value_size: int = 100
    partitions: int = 4
    groups: int = 5
    producer_threads: int = 1
    linger_ms: float = 5.0
    batch_size: int | None = None  # None: the producer's default
    publish_batch_size: int = 10_000
    poll_max_messages: int = 5_000
    latency_seconds: float = 10.0
    latency_rate: int = 1_000
    latency_linger_ms: float = 0.0
    latency_commit_interval: float = 1.0
    memory_messages: int = 1_000_000


def producer_batch_size(settings: Settings) -> int:
    """The producer's batch size in the producer phase: the setting, or the default."""
    if settings.batch_size is not None:
        return settings.batch_size
    default: int = inspect.signature(postroom.Client.producer).parameters["batch_size"].default
    return default


def values_of(count: int, size: int) -> list[bytes]:
    """``count`` distinct values of exactly ``size`` bytes."""
    pad = b"x" * size
    return [(b"%012d" % i + pad)[:size] for i in range(count)]


def backlog(client: postroom.Client, topic: str) -> int:
    return client.describe_topic(topic).high_water


def measure_copy(
    url: str, values: list[bytes], partitions: int, batch_size: int, *, primary_key: bool
) -> float:
    """Seconds to binary-COPY ``values`` as log rows into a scratch table, commit included: one
    COPY, one commit, what the server can ingest at best.

    The table has the column types of ``messages``; with ``primary_key`` also its primary key
    (topic_id, partition, offset), the reference the producer is measured against, and the rows
    come in the producer's order (``batch_size`` consecutive offsets of one partition, then the
    next partition). Without it (no index at all) rows go round-robin: a secondary figure."""
    table = sql.Identifier(SCHEMA, "raw_copy_pk" if primary_key else "raw_copy")
    if primary_key:
        rows = []
        next_offsets = [0] * partitions
        for start in range(0, len(values), batch_size):
            partition = (start // batch_size) % partitions
            first = next_offsets[partition]
            chunk = values[start : start + batch_size]
            rows += [(1, partition, first + i, v) for i, v in enumerate(chunk)]
            next_offsets[partition] += len(chunk)
    else:
        rows = [(1, i % partitions, i // partitions, v) for i, v in enumerate(values)]
    key = sql.SQL(', PRIMARY KEY (topic_id, partition, "offset")' if primary_key else "")
    with psycopg.connect(url) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (topic_id integer NOT NULL, partition integer NOT NULL, "
                '"offset" bigint NOT NULL, key bytea, value bytea NOT NULL, headers jsonb, '
                "created_at timestamptz NOT NULL DEFAULT now(){})"
            ).format(table, key)
        )
        conn.commit()
        started = time.perf_counter()
        copy_sql = sql.SQL(
            'COPY {} (topic_id, partition, "offset", value) FROM STDIN (FORMAT BINARY)'
        ).format(table)
        with conn.cursor().copy(copy_sql) as copy:
            copy.set_types(["integer", "integer", "bigint", "bytea"])
            for row in rows:
                copy.write_row(row)
        conn.commit()
        elapsed = time.perf_counter() - started
        conn.execute(sql.SQL("DROP TABLE {}").format(table))
        conn.commit()
    return elapsed


def measure_range_read(url: str, topic: str, max_messages: int) -> tuple[float, int]:
    """Seconds for a raw binary range read of every message of ``topic``: per partition, the
    primary-key range ``offset >= n ORDER BY offset LIMIT max_messages``, every column the
    consumer reads, rows fetched as tuples; no cursors, no commits (the consume reference)."""
    messages = sql.Identifier(SCHEMA, "messages")
    query = sql.SQL(
        'SELECT "offset", key, value, headers, created_at FROM {} '
        'WHERE topic_id = %s AND partition = %s AND "offset" >= %s ORDER BY "offset" LIMIT %s'
    ).format(messages)
    received = 0
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT id, partitions FROM {} WHERE name = %s").format(
                sql.Identifier(SCHEMA, "topics")
            ),
            (topic,),
        ).fetchone()
        assert row is not None
        topic_id, partitions = row
        cur = conn.cursor(binary=True)
        started = time.perf_counter()
        for partition in range(partitions):
            position = 0
            while True:
                cur.execute(query, (topic_id, partition, position, max_messages), prepare=True)
                rows = cur.fetchall()
                if not rows:
                    break
                received += len(rows)
                position = rows[-1][0] + 1
        elapsed = time.perf_counter() - started
    return elapsed, received


def measure_producer(
    client: postroom.Client, values: list[bytes], settings: Settings
) -> tuple[float, int]:
    """Seconds for ``send()`` of every value from ``producer_threads`` threads, then ``flush()``;
    and the number of messages written."""
    before = backlog(client, TOPIC)
    threads = max(1, settings.producer_threads)
    chunks = [values[i::threads] for i in range(threads)]
    options: dict[str, Any] = {"linger_ms": settings.linger_ms}
    if settings.batch_size is not None:
        options["batch_size"] = settings.batch_size
    with client.producer(**options) as producer:
        producer.send(TOPIC, b"warm-up").result()  # starts the writer; not timed
        before += 1

        def send_all(chunk: list[bytes]) -> None:
            send = producer.send
            for value in chunk:
                send(TOPIC, value)

        started = time.perf_counter()
        if threads == 1:
            send_all(chunks[0])
        else:
            workers = [threading.Thread(target=send_all, args=(c,)) for c in chunks]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        producer.flush()
        elapsed = time.perf_counter() - started
    return elapsed, backlog(client, TOPIC) - before


def measure_publish_batch(
    client: postroom.Client, values: list[bytes], chunk: int
) -> tuple[float, int]:
    before = backlog(client, TOPIC)
    started = time.perf_counter()
    for i in range(0, len(values), chunk):
        client.publish_batch(TOPIC, values[i : i + chunk])
    elapsed = time.perf_counter() - started
    return elapsed, backlog(client, TOPIC) - before


def _drain(consumer: postroom.Consumer, expected: int, max_messages: int) -> int:
    received = 0
    idle_deadline = time.monotonic() + 10
    while received < expected:
        batch = consumer.poll(timeout=1.0, max_messages=max_messages)
        if batch:
            received += len(batch)
            consumer.commit()
            idle_deadline = time.monotonic() + 10
        elif time.monotonic() > idle_deadline:
            break  # the backlog is smaller than expected: report what was read
    return received


def measure_one_group(
    client: postroom.Client, group: str, expected: int, max_messages: int
) -> tuple[float, int]:
    with client.consumer(group, TOPIC) as consumer:
        consumer.assignment()  # joins and reads the cursors: setup, not timed
        started = time.perf_counter()
        received = _drain(consumer, expected, max_messages)
        elapsed = time.perf_counter() - started
    return elapsed, received


def _group_process(
    url: str,
    group: str,
    expected: int,
    max_messages: int,
    barrier: Any,
    results: Any,
) -> None:
    """One consumer group in a process of its own (the N-groups phase)."""
    with postroom.connect(url, schema=SCHEMA, min_size=1, max_size=2) as client:
        with client.consumer(group, TOPIC) as consumer:
            consumer.assignment()
            barrier.wait()
            started = time.time()
            received = _drain(consumer, expected, max_messages)
            results.put((group, received, started, time.time()))


def measure_groups(
    url: str, groups: int, expected: int, max_messages: int
) -> tuple[float, list[int]]:
    """Wall seconds for ``groups`` processes, one group each, to drain the backlog at once;
    and the count each group read."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(groups + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_group_process,
            args=(url, f"bench-many-{i}", expected, max_messages, barrier, results),
            daemon=True,
        )
        for i in range(groups)
    ]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(timeout=60)
        started = time.time()
        finished = [results.get(timeout=120) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    return max(f[3] for f in finished) - started, [f[1] for f in finished]


def _latency_process(
    url: str, expected: int, seconds: float, commit_interval: float, barrier: Any, results: Any
) -> None:
    """The latency phase's consumer: stamps each message's receive time against its send time.

    It commits every ``commit_interval`` seconds, as Kafka's auto-commit does (every 5 s there):
    a commit is a durable write (a WAL flush) that blocks the poll loop for a millisecond or
    more; at a commit per poll, or even every 100 ms, those pauses were the p99."""
    latencies: list[int] = []
    with postroom.connect(url, schema=SCHEMA, min_size=1, max_size=2) as client:
        with client.consumer("bench-latency", LATENCY_TOPIC) as consumer:
            consumer.assignment()
            barrier.wait()
            deadline = time.monotonic() + seconds + 10
            next_commit = time.monotonic() + commit_interval
            while len(latencies) < expected and time.monotonic() < deadline:
                batch = consumer.poll(timeout=0.5, max_messages=1000)
                received_ns = time.time_ns()
                for message in batch:
                    sent_ns = int.from_bytes(message.value[:8], "big")
                    if sent_ns:  # 0: the untimed warm-up message
                        latencies.append(received_ns - sent_ns)
                if time.monotonic() >= next_commit:
                    consumer.commit()
                    next_commit = time.monotonic() + commit_interval
            consumer.commit()
    results.put(latencies)


def measure_latency(
    url: str, client: postroom.Client, settings: Settings
) -> tuple[list[float], int, float]:
    """Latencies in ms of messages sent at ``latency_rate`` per second for ``latency_seconds``;
    the number sent and the achieved send rate."""
    total = max(1, int(settings.latency_seconds * settings.latency_rate))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    proc = ctx.Process(
        target=_latency_process,
        args=(
            url,
            total,
            settings.latency_seconds,
            settings.latency_commit_interval,
            barrier,
            results,
        ),
        daemon=True,
    )
    proc.start()
    pad = b"\0" * max(0, settings.value_size - 8)
    interval = 1 / settings.latency_rate
    try:
        with client.producer(linger_ms=settings.latency_linger_ms) as producer:
            producer.send(LATENCY_TOPIC, bytes(8) + pad).result()  # warm-up, not counted
            barrier.wait(timeout=60)
            started = next_send = time.perf_counter()
            for _ in range(total):
                next_send += interval
                delay = next_send - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                producer.send(LATENCY_TOPIC, time.time_ns().to_bytes(8, "big") + pad)
            sent_seconds = time.perf_counter() - started
        latencies_ns: list[int] = results.get(timeout=settings.latency_seconds + 60)
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    return sorted(ns / 1e6 for ns in latencies_ns), total, rate(total, sent_seconds)


def _peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MiB: ``VmHWM`` of /proc/self/status
    (``ru_maxrss`` would carry the parent's peak over the fork + exec that spawned it)."""
    peak = rss_kb().get("VmHWM")
    if peak is not None:
        return peak / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _memory_process(url: str, count: int, value_size: int, blocked: bool, results: Any) -> None:
    """The memory phase's producer, in a fresh process so its peak RSS is its own.

    ``blocked``: the writer is held (another transaction locks the topic's counter rows) and the
    buffer limits are lifted, so all ``count`` sends are pending at once: what each pending send
    costs. Otherwise the producer has its defaults and ``count`` sends go as fast as they can:
    its bounded buffer (``buffer_messages``, ``buffer_bytes``) holds the memory."""
    pad = b"x" * value_size
    with postroom.connect(url, schema=SCHEMA, min_size=1, max_size=2) as client:
        options: dict[str, Any] = {}
        if blocked:
            options = {"buffer_messages": count + 1, "buffer_bytes": 1 << 62}
        blocker = psycopg.connect(url)
        with client.producer(**options) as producer:
            producer.send(MEMORY_TOPIC, b"warm-up").result()
            baseline = _peak_rss_mb()
            if blocked:
                blocker.execute(
                    sql.SQL("SELECT FROM {} FOR UPDATE").format(
                        sql.Identifier(SCHEMA, "partitions")
                    )
                )
            started = time.perf_counter()
            send = producer.send
            for i in range(count):
                send(MEMORY_TOPIC, (b"%012d" % i + pad)[:value_size])  # distinct objects
            sent = time.perf_counter() - started
            peak = _peak_rss_mb()
            blocker.rollback()
            blocker.close()
        results.put(
            {
                "messages": count,
                "send_seconds": round(sent, 3),
                "baseline_rss_mb": round(baseline, 1),
                "peak_rss_mb": round(peak, 1),
                "bytes_per_message": round((peak - baseline) * 1024 * 1024 / max(1, count)),
            }
        )


def measure_memory(url: str, settings: Settings, *, blocked: bool) -> dict[str, Any]:
    """Peak RSS of a producer process making ``memory_messages`` sends (see _memory_process)."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(
        target=_memory_process,
        args=(url, settings.memory_messages, settings.value_size, blocked, results),
        daemon=True,
    )
    proc.start()
    try:
        figures: dict[str, Any] = results.get(timeout=600)
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    return figures
