"""The log benchmark: postroom's producer and consumers against raw COPY on the same server.

One run measures, in order and on one server:

1. **COPY with the primary key**: binary ``COPY`` of the same rows (topic id, partition, offset,
   100-byte value) into a scratch table with the column types and the primary key of
   ``messages``, in one transaction: the produce reference, what the server can ingest;
   and the same into a table with no index at all (a secondary figure); the reference is the
   fastest of three runs;
2. **producer**: ``client.producer()`` with ``send()`` from one or more threads, then ``flush()``;
3. **publish_batch**: ``client.publish_batch()`` in chunks, for comparison;
4. **raw range read**: a binary primary-key range read of the whole backlog, partition by
   partition, in chunks of ``poll_max_messages``: the consume reference (fastest of three);
5. **1 group** consuming the whole backlog with ``poll(max_messages=...)`` + ``commit()``;
6. **N groups at once**, one process each (processes, not threads: the GIL would serialize
   their Python work and measure the interpreter rather than the database);
7. **end-to-end latency**: a producer paced at a steady rate, with the send time in the value,
   and a consumer in another process polling; latency = receive time - send time;
8. **memory**: the peak RSS of a producer process making ``memory_messages`` sends (1,000,000)
   as fast as it can with its defaults (its bounded buffer holds the memory), and of one holding
   them all pending (writer blocked, buffer limits lifted): what a pending send costs.

Every throughput is printed as messages/s and as a ratio to its reference of the same run (the
produce phases to the COPY with the primary key, the consume phases to the raw range read).
The benchmark works in its own schema (``postroom_bench``), dropped and recreated on every run.

    python -m postroom.benchmarks.log --url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from typing import Any

import postroom
from postroom.embedded import resolve_url

from . import _common
from ._common import percentile, rate
from .log_phases import (
    LATENCY_TOPIC,
    MEMORY_TOPIC,
    SCHEMA,
    TOPIC,
    Settings,
    backlog,
    measure_copy,
    measure_groups,
    measure_latency,
    measure_memory,
    measure_one_group,
    measure_producer,
    measure_publish_batch,
    measure_range_read,
    producer_batch_size,
    values_of,
)

__all__ = ["Settings", "format_report", "main", "run"]

REFERENCE_RUNS = 3  # each reference is measured this many times; the fastest counts
TARGET_PRODUCE_RATIO = 0.5  # producer >= 50% of the COPY-with-primary-key rate
TARGET_CONSUME_RATIO = 0.5  # one group consumes >= 50% of the raw range read rate
TARGET_CONSUME_FACTOR = 2.0  # one group consumes a backlog >= 2x the produce rate
TARGET_P99_MS = 10.0  # p99 end-to-end at the latency phase's rate


# -- the run ----------------------------------------------------------------------------------


def run(url: str | None = None, settings: Settings | None = None) -> dict[str, Any]:
    """Run every phase and return the figures (see the module docstring)."""
    settings = settings or Settings()
    url = resolve_url(url)
    _common.drop_schema(url, SCHEMA)
    values = values_of(settings.messages, settings.value_size)
    result: dict[str, Any] = {
        "date": _common.started_at(),
        "machine": _common.machine_info(),
        "server": _common.server_info(url),
        "settings": asdict(settings),
    }
    try:
        with postroom.connect(url, schema=SCHEMA) as client:
            client.migrate()
            client.create_topic(TOPIC, partitions=settings.partitions)
            client.create_topic(LATENCY_TOPIC, partitions=settings.partitions)
            client.create_topic(MEMORY_TOPIC, partitions=settings.partitions)

            batch = producer_batch_size(settings)
            # The references are the best of REFERENCE_RUNS: what the server can do, not what
            # a moment of load on the box let it do (a single run varied 1.7x on a busy box).
            pk_runs = [
                measure_copy(url, values, settings.partitions, batch, primary_key=True)
                for _ in range(REFERENCE_RUNS)
            ]
            pk_seconds = min(pk_runs)
            copy_seconds = measure_copy(url, values, settings.partitions, batch, primary_key=False)
            produce_ref = rate(len(values), pk_seconds)

            def figure(count: int, seconds: float, reference: float) -> dict[str, float]:
                per_second = rate(count, seconds)
                return {
                    "messages": count,
                    "seconds": round(seconds, 4),
                    "rate": round(per_second),
                    "ratio": round(per_second / reference, 3) if reference else 0.0,
                }

            def with_cpu(fig: dict[str, float], cpu_before: float) -> dict[str, float]:
                # This process's CPU time (all threads) per message: what bounds a GIL-bound
                # client, whatever else runs on the machine.
                used = time.process_time() - cpu_before
                return {**fig, "client_cpu_us": round(used / max(1, fig["messages"]) * 1e6, 2)}

            result["copy_pk"] = {
                **figure(len(values), pk_seconds, produce_ref),
                "runs_seconds": [round(r, 4) for r in pk_runs],
            }
            result["copy"] = figure(len(values), copy_seconds, produce_ref)
            cpu = time.process_time()
            seconds, count = measure_producer(client, values, settings)
            result["producer"] = with_cpu(figure(count, seconds, produce_ref), cpu)
            cpu = time.process_time()
            seconds, count = measure_publish_batch(client, values, settings.publish_batch_size)
            result["publish_batch"] = with_cpu(figure(count, seconds, produce_ref), cpu)

            total = backlog(client, TOPIC)
            result["backlog"] = total
            cpu = time.process_time()
            read_runs = [
                measure_range_read(url, TOPIC, settings.poll_max_messages)
                for _ in range(REFERENCE_RUNS)
            ]
            seconds, count = min(read_runs)
            read_ref = rate(count, seconds)
            result["range_read"] = {
                **with_cpu(figure(count * REFERENCE_RUNS, seconds * REFERENCE_RUNS, read_ref), cpu),
                "messages": count,
                "seconds": round(seconds, 4),
                "runs_seconds": [round(r[0], 4) for r in read_runs],
            }
            cpu = time.process_time()
            seconds, count = measure_one_group(
                client, "bench-one", total, settings.poll_max_messages
            )
            result["consume_1_group"] = with_cpu(figure(count, seconds, read_ref), cpu)
            seconds, counts = measure_groups(
                url, settings.groups, total, settings.poll_max_messages
            )
            result["consume_n_groups"] = {
                **figure(sum(counts), seconds, read_ref),
                "groups": settings.groups,
                "per_group": counts,
                "mode": "processes",
            }

            latencies, sent, send_rate = measure_latency(url, client, settings)
            result["latency"] = {
                "sent": sent,
                "received": len(latencies),
                "send_rate": round(send_rate),
                "p50_ms": round(percentile(latencies, 0.50), 3),
                "p99_ms": round(percentile(latencies, 0.99), 3),
                "max_ms": round(latencies[-1], 3) if latencies else 0.0,
            }
            result["memory"] = {
                "defaults": measure_memory(url, settings, blocked=False),
                "all_pending": measure_memory(url, settings, blocked=True),
            }
    finally:
        _common.drop_schema(url, SCHEMA)
    result["targets"] = _targets(result)
    return result


def _targets(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    produce = result["producer"]["rate"]
    consume = result["consume_1_group"]["rate"]
    p99 = result["latency"]["p99_ms"]
    return {
        "produce_vs_copy_pk": {
            "target": f">= {TARGET_PRODUCE_RATIO:.0%} of COPY with PK",
            "value": result["producer"]["ratio"],
            "met": result["producer"]["ratio"] >= TARGET_PRODUCE_RATIO,
        },
        "consume_vs_read": {
            "target": f">= {TARGET_CONSUME_RATIO:.0%} of raw range read",
            "value": result["consume_1_group"]["ratio"],
            "met": result["consume_1_group"]["ratio"] >= TARGET_CONSUME_RATIO,
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
        _common.server_line(server, result["machine"]),
        f"{settings['messages']} messages of {settings['value_size']} bytes, "
        f"{settings['partitions']} partitions; load average at start "
        f"{result['machine']['loadavg_1m_at_start']}",
        "",
        f"{'phase':<44} {'messages':>9} {'seconds':>8} {'msg/s':>10} {'vs ref':>8} "
        f"{'client CPU/msg':>15}",
    ]
    rows = [
        ("binary COPY, primary key (produce reference)", "copy_pk"),
        ("binary COPY, no index", "copy"),
        (
            f"producer.send() x{settings['producer_threads']} thread(s), "
            f"linger {settings['linger_ms']:g} ms",
            "producer",
        ),
        (f"publish_batch({settings['publish_batch_size']})", "publish_batch"),
        ("raw binary range read (consume reference)", "range_read"),
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
            f"{f['ratio']:>7.1%} {cpu}"
        )
    lat = result["latency"]
    lines += [
        "",
        f"end-to-end latency at {lat['send_rate']:,} msg/s "
        f"(linger {settings['latency_linger_ms']:g} ms), {lat['received']}/{lat['sent']} received:"
        f" p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.2f} ms",
    ]
    memory = result["memory"]
    bounded, pending = memory["defaults"], memory["all_pending"]
    lines += [
        f"memory, {bounded['messages']:,} sends, defaults (bounded buffer): peak RSS "
        f"{bounded['peak_rss_mb']:.0f} MiB (baseline {bounded['baseline_rss_mb']:.0f} MiB)",
        f"memory, {pending['messages']:,} sends all pending (writer blocked, no limit): peak RSS "
        f"{pending['peak_rss_mb']:.0f} MiB (baseline {pending['baseline_rss_mb']:.0f} MiB, "
        f"{pending['bytes_per_message']} B per pending send)",
    ]
    lines += [
        "",
        "targets:",
    ]
    for name, target in result["targets"].items():
        mark = "met" if target["met"] else "MISSED"
        lines.append(f"  {name:<20} {target['target']:<32} {target['value']:>8}  {mark}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args_given = sys.argv[1:] if argv is None else argv
    if any(a.startswith("kafka://") or a.startswith("--url=kafka://") for a in args_given):
        from . import log_kafka  # the Kafka run: against raw confluent-kafka

        return log_kafka.main(args_given)
    defaults = Settings()
    parser = _common.parser(
        "postroom bench log",
        "Benchmark the log (producer, consumers, latency) against raw COPY and raw reads.",
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
    parser.add_argument(
        "--batch-size", type=int, default=defaults.batch_size, help="default: the producer's"
    )
    parser.add_argument("--poll-max-messages", type=int, default=defaults.poll_max_messages)
    parser.add_argument("--latency-linger-ms", type=float, default=defaults.latency_linger_ms)
    parser.add_argument(
        "--memory-messages",
        type=int,
        default=defaults.memory_messages,
        help="sends of the memory phase",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small smoke run (5,000 messages, 1 s latency, 20,000 sends for memory)",
    )
    args = parser.parse_args(argv)
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
        memory_messages=20_000 if args.quick else args.memory_messages,
    )
    return _common.report(run(args.url, settings), args.json, format_report)


if __name__ == "__main__":
    sys.exit(main())
