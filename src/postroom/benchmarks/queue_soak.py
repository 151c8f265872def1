"""The queue benchmark's long phases: a worker holding many claimed jobs (memory), and an
optional churn soak (enqueue and work at once, sampling the jobs table's dead tuples and size
and the worker's RSS, with a bounded/unbounded verdict).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

from . import _common
from ._common import rate
from .queue_phases import (
    SCHEMA,
    Settings,
    connect,
    prepared,
    ready_count,
    register,
    start_worker_process,
    stop_worker_process,
)


def measure_churn(url: str, settings: Settings) -> dict[str, Any]:
    """Enqueue batches as fast as one thread can while a worker process drains them; sample
    the jobs table's dead tuples and size every few seconds."""
    worker = start_worker_process(url, keep_finished="0")
    stop = threading.Event()
    samples: list[dict[str, Any]] = []
    enqueued = 0

    def sample() -> None:
        query = sql.SQL(
            "SELECT n_live_tup, n_dead_tup, pg_total_relation_size(relid), "
            "autovacuum_count + vacuum_count "
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
                            "vacuums": vacuums,
                            "worker_rss_kb": _common.rss_kb(worker.pid).get("VmRSS", 0),
                        }
                    )

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        with connect(url) as client:
            register(client)
            sampler.start()
            deadline = time.perf_counter() + settings.churn_seconds
            while time.perf_counter() < deadline:
                client.enqueue_batch(prepared(settings.churn_batch))
                enqueued += settings.churn_batch
                # Enqueue as fast as the worker drains: churn, not a growing backlog.
                if enqueued % (settings.churn_batch * 10) == 0:
                    while ready_count(url) > 10_000 and time.perf_counter() < deadline:
                        time.sleep(0.1)
    finally:
        stop.set()
        sampler.join()
        stop_worker_process(worker)
    return {
        "seconds": settings.churn_seconds,
        "enqueued": enqueued,
        "final_dead": samples[-1]["dead"] if samples else 0,
        "final_bytes": samples[-1]["bytes"] if samples else 0,
        "rate": round(rate(enqueued, settings.churn_seconds)),
        "max_dead": max((s["dead"] for s in samples), default=0),
        "max_bytes": max((s["bytes"] for s in samples), default=0),
        "worker_rss_kb": [s["worker_rss_kb"] for s in samples],
        "bounded": _common.bounded(samples, ("bytes", "worker_rss_kb")),
        "samples": samples,
    }


def measure_memory(url: str, settings: Settings) -> dict[str, Any]:
    """Peak RSS of a worker process holding ``hold_jobs`` claimed-but-not-started jobs: one
    slot runs a job that blocks until released, ``prefetch=hold_jobs`` holds the rest."""
    count = settings.hold_jobs
    with connect(url) as client:
        client.enqueue_batch([{"kind": "hold", "args": {"n": n}} for n in range(count + 1)])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "postroom.benchmarks.queue",
            "--serve-hold",
            str(count),
            "--url",
            url,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the benchmark worker process did not start")
        before = _common.rss_kb(proc.pid)
        started = time.perf_counter()
        held = 0
        with psycopg.connect(url, autocommit=True) as conn:
            query = sql.SQL("SELECT count(*) FROM {} WHERE state = 'running'").format(
                sql.Identifier(SCHEMA, "jobs")
            )
            while held < count and time.perf_counter() - started < 120:
                row = conn.execute(query).fetchone()
                held = 0 if row is None else int(row[0])
                time.sleep(0.1)
        time.sleep(0.5)  # let the buffer settle
        holding = _common.rss_kb(proc.pid)
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE kind = 'hold'").format(sql.Identifier(SCHEMA, "jobs"))
        )
    rss_before = before.get("VmRSS", 0)
    peak = holding.get("VmHWM", 0)
    return {
        "jobs": count,
        "held": held,
        "claim_seconds": round(time.perf_counter() - started, 2),
        "rss_idle_kb": rss_before,
        "rss_holding_kb": holding.get("VmRSS", 0),
        "peak_rss_kb": peak,
        "bytes_per_held_job": round((peak - rss_before) * 1024 / max(held, 1)),
    }


def serve_hold(url: str, count: int) -> int:
    """The worker process of the memory phase: one slot blocked, ``count`` jobs prefetched;
    stops when a line arrives on stdin."""
    release = threading.Event()
    with connect(url) as client:

        @client.job("hold")
        def hold(n: int) -> None:
            release.wait()

        worker = client.worker(concurrency=1, prefetch=count, shutdown_grace=0)
        thread = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
        print("ready", flush=True)
        thread.start()
        sys.stdin.readline()
        worker.stop()
        release.set()
        thread.join()
    return 0
