"""The log benchmark: postroom's producer and consumers against raw COPY on the same server.

One run measures, in order and on one server:

1. **raw COPY**: binary ``COPY`` of the same rows (topic id, partition, offset, 100-byte value)
   into a plain table with no index: the reference, what this box can ingest at best;
2. **producer**: ``client.producer()`` with ``send()`` from one or more threads, then ``flush()``;
3. **publish_batch**: ``client.publish_batch()`` in chunks, for comparison;
4. **1 group** consuming the whole backlog with ``poll(max_messages=...)`` + ``commit()``;
5. **N groups at once**, one process each (processes, not threads: the GIL would serialize
   their Python work and measure the interpreter rather than the database);
6. **end-to-end latency**: a producer paced at a steady rate, with the send time in the value,
   and a consumer in another process polling; latency = receive time - send time.

Every throughput is printed as messages/s and as a ratio to the raw COPY rate of the same run.
The benchmark works in its own schema (``postroom_bench``), dropped and recreated on every run.

    python -m postroom.benchmarks.log --url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql

import postroom
from postroom.embedded import resolve_url

SCHEMA = "postroom_bench"
TOPIC = "bench"
LATENCY_TOPIC = "latency"
TARGET_PRODUCE_RATIO = 0.5  # producer >= 50% of the raw COPY rate
TARGET_CONSUME_FACTOR = 2.0  # one group consumes a backlog >= 2x the produce rate
TARGET_P99_MS = 10.0  # p99 end-to-end at the latency phase's rate


@dataclass(frozen=True)
class Settings:
    messages: int = 200_000
    value_size: int = 100
    partitions: int = 4
    groups: int = 5
    producer_threads: int = 1
    linger_ms: float = 5.0
    batch_size: int = 10_000
    publish_batch_size: int = 10_000
    poll_max_messages: int = 5_000
    latency_seconds: float = 10.0
    latency_rate: int = 1_000
    latency_linger_ms: float = 0.0
    latency_commit_interval: float = 1.0


# -- helpers ----------------------------------------------------------------------------------


def _values(count: int, size: int) -> list[bytes]:
    """``count`` distinct values of exactly ``size`` bytes."""
    pad = b"x" * size
    return [(b"%012d" % i + pad)[:size] for i in range(count)]


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    if not ordered:
        return 0.0
    rank = max(1, round(fraction * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def _reset_schema(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))


def _server_info(url: str) -> dict[str, str]:
    with psycopg.connect(url, autocommit=True) as conn:
        settings = {}
        for name in ("server_version", "synchronous_commit", "fsync", "shared_buffers"):
            row = conn.execute(sql.SQL("SELECT current_setting({})").format(name)).fetchone()
            settings[name] = "" if row is None else str(row[0])
    return settings


def _backlog(client: postroom.Client, topic: str) -> int:
    return client.describe_topic(topic).high_water


# -- phases -----------------------------------------------------------------------------------


def measure_copy(url: str, values: list[bytes], partitions: int) -> float:
    """Seconds to binary-COPY ``values`` as log rows into a plain table, commit included."""
    table = sql.Identifier(SCHEMA, "raw_copy")
    rows = [(1, i % partitions, i // partitions, v) for i, v in enumerate(values)]
    with psycopg.connect(url) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (topic_id integer NOT NULL, partition integer NOT NULL, "
                '"offset" bigint NOT NULL, key bytea, value bytea NOT NULL, headers jsonb, '
                "created_at timestamptz NOT NULL DEFAULT now())"
            ).format(table)
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


def measure_producer(
    client: postroom.Client, values: list[bytes], settings: Settings
) -> tuple[float, int]:
    """Seconds for ``send()`` of every value from ``producer_threads`` threads, then ``flush()``;
    and the number of messages written."""
    before = _backlog(client, TOPIC)
    threads = max(1, settings.producer_threads)
    chunks = [values[i::threads] for i in range(threads)]
    with client.producer(linger_ms=settings.linger_ms, batch_size=settings.batch_size) as producer:
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
    return elapsed, _backlog(client, TOPIC) - before


def measure_publish_batch(
    client: postroom.Client, values: list[bytes], chunk: int
) -> tuple[float, int]:
    before = _backlog(client, TOPIC)
    started = time.perf_counter()
    for i in range(0, len(values), chunk):
        client.publish_batch(TOPIC, values[i : i + chunk])
    elapsed = time.perf_counter() - started
    return elapsed, _backlog(client, TOPIC) - before


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
    return sorted(ns / 1e6 for ns in latencies_ns), total, _rate(total, sent_seconds)


# -- the run ----------------------------------------------------------------------------------


def run(url: str | None = None, settings: Settings | None = None) -> dict[str, Any]:
    """Run every phase and return the figures (see the module docstring)."""
    settings = settings or Settings()
    url = resolve_url(url)
    _reset_schema(url)
    values = _values(settings.messages, settings.value_size)
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "psycopg": psycopg.__version__,
            # Other work on the machine skews every figure: worth keeping next to them.
            "loadavg_1m_at_start": round(os.getloadavg()[0], 2)
            if hasattr(os, "getloadavg")
            else None,
        },
        "server": _server_info(url),
        "settings": asdict(settings),
    }
    try:
        with postroom.connect(url, schema=SCHEMA) as client:
            client.migrate()
            client.create_topic(TOPIC, partitions=settings.partitions)
            client.create_topic(LATENCY_TOPIC, partitions=settings.partitions)

            copy_seconds = measure_copy(url, values, settings.partitions)
            copy_rate = _rate(len(values), copy_seconds)

            def figure(count: int, seconds: float) -> dict[str, float]:
                rate = _rate(count, seconds)
                return {
                    "messages": count,
                    "seconds": round(seconds, 4),
                    "rate": round(rate),
                    "copy_ratio": round(rate / copy_rate, 3) if copy_rate else 0.0,
                }

            def with_cpu(fig: dict[str, float], cpu_before: float) -> dict[str, float]:
                # This process's CPU time (all threads) per message: what bounds a GIL-bound
                # client, whatever else runs on the machine.
                used = time.process_time() - cpu_before
                return {**fig, "client_cpu_us": round(used / max(1, fig["messages"]) * 1e6, 2)}

            result["copy"] = figure(len(values), copy_seconds)
            cpu = time.process_time()
            seconds, count = measure_producer(client, values, settings)
            result["producer"] = with_cpu(figure(count, seconds), cpu)
            cpu = time.process_time()
            seconds, count = measure_publish_batch(client, values, settings.publish_batch_size)
            result["publish_batch"] = with_cpu(figure(count, seconds), cpu)

            backlog = _backlog(client, TOPIC)
            result["backlog"] = backlog
            cpu = time.process_time()
            seconds, count = measure_one_group(
                client, "bench-one", backlog, settings.poll_max_messages
            )
            result["consume_1_group"] = with_cpu(figure(count, seconds), cpu)
            seconds, counts = measure_groups(
                url, settings.groups, backlog, settings.poll_max_messages
            )
            result["consume_n_groups"] = {
                **figure(sum(counts), seconds),
                "groups": settings.groups,
                "per_group": counts,
                "mode": "processes",
            }

            latencies, sent, send_rate = measure_latency(url, client, settings)
            result["latency"] = {
                "sent": sent,
                "received": len(latencies),
                "send_rate": round(send_rate),
                "p50_ms": round(_percentile(latencies, 0.50), 3),
                "p99_ms": round(_percentile(latencies, 0.99), 3),
                "max_ms": round(latencies[-1], 3) if latencies else 0.0,
            }
    finally:
        _reset_schema(url)
    result["targets"] = _targets(result)
    return result


def _targets(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    produce = result["producer"]["rate"]
    copy = result["copy"]["rate"]
    consume = result["consume_1_group"]["rate"]
    p99 = result["latency"]["p99_ms"]
    return {
        "produce_vs_copy": {
            "target": f">= {TARGET_PRODUCE_RATIO:.0%} of raw COPY",
            "value": round(produce / copy, 3) if copy else 0.0,
            "met": produce >= TARGET_PRODUCE_RATIO * copy,
        },
        "consume_vs_produce": {
            "target": f">= {TARGET_CONSUME_FACTOR:g}x the produce rate",
            "value": round(consume / produce, 3) if produce else 0.0,
            "met": consume >= TARGET_CONSUME_FACTOR * produce,
        },
        "latency_p99": {
            "target": f"<= {TARGET_P99_MS:g} ms",
            "value": p99,
            "met": p99 <= TARGET_P99_MS,
        },
    }


# -- command line -----------------------------------------------------------------------------


def format_report(result: dict[str, Any]) -> str:
    settings = result["settings"]
    server = result["server"]
    lines = [
        f"postroom log benchmark, {result['date']}",
        f"PostgreSQL {server['server_version']} (synchronous_commit={server['synchronous_commit']},"
        f" fsync={server['fsync']}), {result['machine']['cpus']} CPUs, "
        f"Python {result['machine']['python']}, psycopg {result['machine']['psycopg']}",
        f"{settings['messages']} messages of {settings['value_size']} bytes, "
        f"{settings['partitions']} partitions; load average at start "
        f"{result['machine']['loadavg_1m_at_start']}",
        "",
        f"{'phase':<44} {'messages':>9} {'seconds':>8} {'msg/s':>10} {'vs COPY':>8} "
        f"{'client CPU/msg':>15}",
    ]
    rows = [
        ("raw binary COPY (reference)", "copy"),
        (
            f"producer.send() x{settings['producer_threads']} thread(s), "
            f"linger {settings['linger_ms']:g} ms",
            "producer",
        ),
        (f"publish_batch({settings['publish_batch_size']})", "publish_batch"),
        (f"consume, 1 group (poll {settings['poll_max_messages']})", "consume_1_group"),
        (
            f"consume, {settings['groups']} groups (processes), total",
            "consume_n_groups",
        ),
    ]
    for label, name in rows:
        f = result[name]
        cpu = f"{f['client_cpu_us']:>12.2f} us" if "client_cpu_us" in f else ""
        lines.append(
            f"{label:<44} {f['messages']:>9} {f['seconds']:>8.3f} {f['rate']:>10,} "
            f"{f['copy_ratio']:>7.1%} {cpu}"
        )
    lat = result["latency"]
    lines += [
        "",
        f"end-to-end latency at {lat['send_rate']:,} msg/s "
        f"(linger {settings['latency_linger_ms']:g} ms), {lat['received']}/{lat['sent']} received:"
        f" p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.2f} ms",
        "",
        "targets:",
    ]
    for name, target in result["targets"].items():
        mark = "met" if target["met"] else "MISSED"
        lines.append(f"  {name:<20} {target['target']:<28} {target['value']:>8}  {mark}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    defaults = Settings()
    parser = argparse.ArgumentParser(
        prog="postroom bench log",
        description="Benchmark the log (producer, consumers, latency) against raw COPY.",
    )
    parser.add_argument(
        "--url", help="PostgreSQL URL (default: POSTROOM_URL, DATABASE_URL, else embedded)"
    )
    parser.add_argument("--messages", type=int, default=defaults.messages, help="per phase")
    parser.add_argument(
        "--seconds",
        type=float,
        default=defaults.latency_seconds,
        help="duration of the latency phase",
    )
    parser.add_argument("--rate", type=int, default=defaults.latency_rate, help="latency msg/s")
    parser.add_argument("--partitions", type=int, default=defaults.partitions)
    parser.add_argument("--groups", type=int, default=defaults.groups)
    parser.add_argument("--producer-threads", type=int, default=defaults.producer_threads)
    parser.add_argument("--linger-ms", type=float, default=defaults.linger_ms)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--poll-max-messages", type=int, default=defaults.poll_max_messages)
    parser.add_argument("--latency-linger-ms", type=float, default=defaults.latency_linger_ms)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--quick", action="store_true", help="a small smoke run (5,000 messages, 1 s latency)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = Settings(
        messages=5_000 if args.quick else args.messages,
        partitions=args.partitions,
        groups=args.groups,
        producer_threads=args.producer_threads,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        poll_max_messages=args.poll_max_messages,
        latency_seconds=1.0 if args.quick else args.seconds,
        latency_rate=args.rate,
        latency_linger_ms=args.latency_linger_ms,
    )
    result = run(args.url, settings)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
