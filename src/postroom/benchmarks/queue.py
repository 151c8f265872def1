"""The job queue benchmark: postroom's enqueue and worker against a pure-SQL drain, one server.

One run measures, in order:

1. **batch enqueue** of N no-op jobs with ``client.enqueue_batch`` (Python checks and JSON
   encoding included), in one transaction;
2. **burn-down** of those jobs by one worker in this process (``concurrency=1``, claims of
   ``--claim`` jobs), finished jobs kept in ``finished_jobs`` (the default) and, on a second
   backlog, deleted at completion (``keep_finished=0``);
3. **pure-SQL reference**: the same rows drained by a two-step loop (claim 500 with
   ``UPDATE ... FOR UPDATE SKIP LOCKED``, commit, ``DELETE`` by id, commit), the floor cost
   of any SKIP LOCKED queue on this box;
4. **sustained**: a worker in another process while this one enqueues one job per
   transaction at ``--rate`` jobs/s; latency = the job's start time in the worker minus the
   time just before its ``enqueue()`` call (so the enqueue's own commit is included);
5. optionally (``--churn-seconds``) a **churn** run: enqueue and work at once at full speed,
   sampling the jobs table's dead tuples and size, to show that they stay bounded.

The benchmark works in its own schema (``postroom_bench_queue``), dropped and recreated.

    python -m postroom.benchmarks.queue --url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
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

SCHEMA = "postroom_bench_queue"
TARGET_ENQUEUE = 100_000.0  # jobs/s
TARGET_BURN_DOWN = 30_000.0  # jobs/s, one worker process
TARGET_REFERENCE_RATIO = 0.5  # burn-down >= 50% of the pure-SQL drain
TARGET_P99_MS = 10.0  # enqueue-to-start at the sustained rate


@dataclass(frozen=True)
class Settings:
    jobs: int = 20_000
    claim: int = 1_000
    reference_batch: int = 500
    rate: float = 100.0
    seconds: float = 10.0
    churn_seconds: float = 0.0
    churn_batch: int = 200


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    if not ordered:
        return 0.0
    rank = max(1, round(fraction * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def _connect(url: str) -> postroom.Client:
    return postroom.connect(url, schema=SCHEMA)


def _reset_schema(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    with _connect(url) as client:
        client.migrate()


def _vacuum(url: str) -> None:
    """VACUUM the queue tables, so each phase starts from the same state."""
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("jobs", "finished_jobs"):
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(SCHEMA, table)))


def _server_info(url: str) -> dict[str, str]:
    with psycopg.connect(url, autocommit=True) as conn:
        settings = {}
        for name in ("server_version", "synchronous_commit", "fsync", "shared_buffers"):
            row = conn.execute(sql.SQL("SELECT current_setting({})").format(name)).fetchone()
            settings[name] = "" if row is None else str(row[0])
    return settings


def _register(client: postroom.Client) -> None:
    @client.job("noop")
    def noop(n: int) -> None:
        pass

    @client.job("stamp")
    def stamp(t: float) -> float:
        return time.time() - t


def _prepared(count: int) -> list[dict[str, Any]]:
    return [{"kind": "noop", "args": {"n": n}} for n in range(count)]


# -- phases -----------------------------------------------------------------------------------


def measure_enqueue(url: str, settings: Settings) -> dict[str, Any]:
    with _connect(url) as client:
        _register(client)
        client.enqueue_batch(_prepared(100))  # warm up: connection, plans
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(SCHEMA, "jobs")))
        started = time.perf_counter()
        jobs = client.enqueue_batch(_prepared(settings.jobs))
        elapsed = time.perf_counter() - started
    return {"jobs": len(jobs), "seconds": elapsed, "rate": round(_rate(len(jobs), elapsed))}


def measure_burn_down(url: str, settings: Settings, *, keep: bool) -> dict[str, Any]:
    """One worker in this process drains the backlog; timed from run() to the last write."""
    with _connect(url) as client:
        _register(client)
        backlog = _backlog(url)
        worker = client.worker(
            concurrency=1,
            prefetch=settings.claim - 1,
            poll_interval=0.05,
            keep_finished=86400 if keep else 0,
        )
        thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
        started = time.perf_counter()
        thread.start()
        while worker.processed < backlog and thread.is_alive():
            time.sleep(0.001)
        elapsed = time.perf_counter() - started
        worker.stop()
        thread.join()
    return {
        "jobs": backlog,
        "seconds": elapsed,
        "rate": round(_rate(backlog, elapsed)),
        "keep_finished": keep,
    }


def measure_reference(url: str, settings: Settings) -> dict[str, Any]:
    """The pure-SQL two-step drain of the backlog: claim a batch, commit, delete it, commit."""
    jobs = sql.Identifier(SCHEMA, "jobs")
    claim = sql.SQL(
        "UPDATE {jobs} SET state = 'running', attempts = attempts + 1, worker = 'reference', "
        "lease_expires_at = now() + interval '30 seconds', started_at = now() "
        "WHERE id IN (SELECT id FROM {jobs} WHERE state = 'ready' AND queue = 'default' "
        "AND run_at <= now() ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED) "
        "RETURNING id, args"
    ).format(jobs=jobs)
    delete = sql.SQL("DELETE FROM {jobs} WHERE id = ANY(%s)").format(jobs=jobs)
    backlog = _backlog(url)
    drained = 0
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        while True:
            rows = conn.execute(claim, (settings.reference_batch,)).fetchall()
            conn.commit()
            if not rows:
                break
            conn.execute(delete, ([r[0] for r in rows],))
            conn.commit()
            drained += len(rows)
        elapsed = time.perf_counter() - started
    assert drained == backlog, (drained, backlog)
    return {"jobs": drained, "seconds": elapsed, "rate": round(_rate(drained, elapsed))}


def measure_sustained(url: str, settings: Settings) -> dict[str, Any]:
    """Enqueue at a steady rate while a worker in another process runs the jobs."""
    worker = _start_worker_process(url)
    try:
        count = max(1, round(settings.rate * settings.seconds))
        with _connect(url) as client:
            _register(client)
            client.enqueue("stamp", {"t": time.time()}).result(timeout=30)  # warm up
            handles = []
            interval = 1.0 / settings.rate
            begin = time.perf_counter()
            for i in range(count):
                target = begin + i * interval
                pause = target - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                handles.append(client.enqueue("stamp", {"t": time.time()}))
            elapsed = time.perf_counter() - begin
            latencies = sorted(float(h.result(timeout=30)) * 1000 for h in handles)
    finally:
        _stop_worker_process(worker)
    return {
        "jobs": count,
        "seconds": elapsed,
        "rate": round(_rate(count, elapsed), 1),
        "p50_ms": round(_percentile(latencies, 0.50), 2),
        "p99_ms": round(_percentile(latencies, 0.99), 2),
        "max_ms": round(latencies[-1], 2),
    }


def measure_churn(url: str, settings: Settings) -> dict[str, Any]:
    """Enqueue batches as fast as one thread can while a worker process drains them; sample
    the jobs table's dead tuples and size every few seconds."""
    worker = _start_worker_process(url, keep_finished="0")
    stop = threading.Event()
    samples: list[dict[str, Any]] = []
    enqueued = 0

    def sample() -> None:
        query = sql.SQL(
            "SELECT n_live_tup, n_dead_tup, pg_total_relation_size(relid), autovacuum_count "
            "FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'jobs'"
        )
        with psycopg.connect(url, autocommit=True) as conn:
            begin = time.perf_counter()
            while not stop.wait(5.0):
                row = conn.execute(query, (SCHEMA,)).fetchone()
                if row is not None:
                    live, dead, size, vacuums = row
                    samples.append(
                        {
                            "t": round(time.perf_counter() - begin),
                            "live": live,
                            "dead": dead,
                            "bytes": size,
                            "autovacuums": vacuums,
                        }
                    )

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        with _connect(url) as client:
            _register(client)
            sampler.start()
            deadline = time.perf_counter() + settings.churn_seconds
            while time.perf_counter() < deadline:
                client.enqueue_batch(_prepared(settings.churn_batch))
                enqueued += settings.churn_batch
                # Keep the backlog bounded: churn, not a growing queue.
                if enqueued % (settings.churn_batch * 50) == 0 and _backlog(url) > 20_000:
                    time.sleep(0.5)
    finally:
        stop.set()
        sampler.join()
        _stop_worker_process(worker)
    return {
        "seconds": settings.churn_seconds,
        "enqueued": enqueued,
        "rate": round(_rate(enqueued, settings.churn_seconds)),
        "max_dead": max((s["dead"] for s in samples), default=0),
        "max_bytes": max((s["bytes"] for s in samples), default=0),
        "samples": samples,
    }


def _backlog(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE state = 'ready'").format(
                sql.Identifier(SCHEMA, "jobs")
            )
        ).fetchone()
    return 0 if row is None else int(row[0])


def _start_worker_process(url: str, keep_finished: str = "86400") -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "postroom.benchmarks.queue",
            "--serve",
            "--url",
            url,
            "--keep-finished",
            keep_finished,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("the benchmark worker process did not start")
    return proc


def _stop_worker_process(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)


def serve(url: str, keep_finished: float) -> int:
    """The worker process of the sustained and churn phases: runs until SIGTERM."""
    with _connect(url) as client:
        _register(client)
        worker = client.worker(
            concurrency=4, prefetch=200, keep_finished=keep_finished, poll_interval=0.5
        )
        print("ready", flush=True)
        worker.run()
    return 0


# -- the run ----------------------------------------------------------------------------------


def run(url: str | None, settings: Settings) -> dict[str, Any]:
    resolved = resolve_url(url)
    _reset_schema(resolved)
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "server": _server_info(resolved),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "psycopg": psycopg.__version__,
        },
        "settings": asdict(settings),
    }
    result["enqueue"] = measure_enqueue(resolved, settings)
    _vacuum(resolved)
    result["burn_down"] = measure_burn_down(resolved, settings, keep=True)
    with _connect(resolved) as client:
        _register(client)
        client.enqueue_batch(_prepared(settings.jobs))
    _vacuum(resolved)
    result["burn_down_deleted"] = measure_burn_down(resolved, settings, keep=False)
    with _connect(resolved) as client:
        _register(client)
        client.enqueue_batch(_prepared(settings.jobs))
    _vacuum(resolved)
    result["reference"] = measure_reference(resolved, settings)
    _vacuum(resolved)
    result["sustained"] = measure_sustained(resolved, settings)
    if settings.churn_seconds > 0:
        _vacuum(resolved)
        result["churn"] = measure_churn(resolved, settings)
    result["targets"] = _targets(result)
    return result


def _targets(result: dict[str, Any]) -> dict[str, Any]:
    burn = max(result["burn_down"]["rate"], result["burn_down_deleted"]["rate"])
    return {
        "enqueue_jobs_per_s": (result["enqueue"]["rate"], TARGET_ENQUEUE),
        "burn_down_jobs_per_s": (result["burn_down"]["rate"], TARGET_BURN_DOWN),
        "burn_down_vs_reference": (
            round(burn / max(result["reference"]["rate"], 1), 2),
            TARGET_REFERENCE_RATIO,
        ),
        "p99_ms": (result["sustained"]["p99_ms"], TARGET_P99_MS),
    }


def format_report(result: dict[str, Any]) -> str:
    server, machine, s = result["server"], result["machine"], result["settings"]
    lines = [
        f"postroom queue benchmark, {result['date']}",
        f"PostgreSQL {server['server_version']} (synchronous_commit={server['synchronous_commit']},"
        f" fsync={server['fsync']}), {machine['cpus']} CPUs, Python {machine['python']}, "
        f"psycopg {machine['psycopg']}",
        "",
        f"{'phase':<58} {'jobs':>7} {'seconds':>8} {'jobs/s':>9}",
    ]
    rows = [
        (f"enqueue_batch of {s['jobs']} no-op jobs (1 transaction)", "enqueue"),
        (f"burn-down, 1 worker, claims of {s['claim']}, finished jobs kept", "burn_down"),
        ("burn-down, same, keep_finished=0 (deleted at completion)", "burn_down_deleted"),
        (f"pure-SQL reference: claim {s['reference_batch']} SKIP LOCKED + DELETE", "reference"),
    ]
    for label, name in rows:
        f = result[name]
        lines.append(f"{label:<58} {f['jobs']:>7} {f['seconds']:>8.3f} {f['rate']:>9,}")
    sus = result["sustained"]
    lines += [
        "",
        f"sustained: {sus['jobs']} jobs at {sus['rate']} jobs/s, one enqueue per transaction, "
        "worker in another process",
        f"  enqueue-to-start latency: p50 {sus['p50_ms']} ms, p99 {sus['p99_ms']} ms, "
        f"max {sus['max_ms']} ms",
    ]
    if "churn" in result:
        c = result["churn"]
        lines += [
            "",
            f"churn: {c['enqueued']} jobs in {c['seconds']:g} s ({c['rate']:,} jobs/s): "
            f"jobs table max dead tuples {c['max_dead']:,}, max size "
            f"{c['max_bytes'] / 1e6:.1f} MB",
        ]
    lines += ["", "targets:"]
    for name, (value, target) in result["targets"].items():
        met = value <= target if name == "p99_ms" else value >= target
        lines.append(f"  {name:<24} {value:>10,} (target {target:,}) {'met' if met else 'MISSED'}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    defaults = Settings()
    parser = argparse.ArgumentParser(
        prog="postroom bench queue",
        description="Benchmark the job queue (enqueue, burn-down, latency) against pure SQL.",
    )
    parser.add_argument(
        "--url", help="PostgreSQL URL (default: POSTROOM_URL, DATABASE_URL, else embedded)"
    )
    parser.add_argument("--jobs", type=int, default=defaults.jobs, help="backlog size")
    parser.add_argument("--claim", type=int, default=defaults.claim, help="jobs per claim")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="sustained jobs/s")
    parser.add_argument(
        "--seconds", type=float, default=defaults.seconds, help="sustained phase duration"
    )
    parser.add_argument(
        "--churn-seconds", type=float, default=0.0, help="also run a churn soak this long"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keep-finished", type=float, default=86400.0, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.serve:
        return serve(resolve_url(args.url), args.keep_finished)
    settings = Settings(
        jobs=2_000 if args.quick else args.jobs,
        claim=args.claim,
        rate=args.rate,
        seconds=1.0 if args.quick else args.seconds,
        churn_seconds=args.churn_seconds,
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
