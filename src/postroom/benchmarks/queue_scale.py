"""The queue benchmark's scale phase: one worker process against two on the same backlog.

Issue 19 asks that two worker processes drain a burst at >= 1.6x one. Each worker here is a
process of its own (``--serve --serve-go``: connected and its job registered, then it waits
for a line on stdin), so what is timed is what a user waits for once the processes are up:
from the go to the last job written back, the workers' start-up (``run()``) included. The
drain is over when the queue table holds no job any more (polled every 2 ms, as the
in-process burn-downs poll their counter).

On a small box the server shares the cores with the workers, so the phase records where the
CPU went while it drained: the server's processes (every ``postgres`` process, read from
``/proc``, when the server runs on this machine), the workers' and the whole box's busy
time. A second worker can only add what the box has left: the record shows how much that was.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

from ._common import rate
from .queue_phases import SCHEMA, Settings, connect, prepared, ready_count, vacuum

TARGET_TWO_WORKERS = 1.6  # two worker processes drain >= 1.6x one
WORKER_COUNTS = (1, 2)
POLL_SECONDS = 0.002

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of one process, from /proc; None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def _server_cpu() -> dict[int, float]:
    """CPU seconds of every ``postgres`` process on this machine, by pid."""
    found: dict[int, float] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "postgres":
                    continue
        except OSError:
            continue
        cpu = _proc_cpu(pid)
        if cpu is not None:
            found[pid] = cpu
    return found


def _box_busy() -> float | None:
    """Busy CPU seconds of the whole machine so far (all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / _TICK


def _start(url: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "postroom.benchmarks.queue", "--serve", "--serve-go", "--url", url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("the benchmark worker process did not start")
    return proc


def _any_job(conn: psycopg.Connection[Any]) -> bool:
    query = sql.SQL("SELECT EXISTS (SELECT FROM {})").format(sql.Identifier(SCHEMA, "jobs"))
    row = conn.execute(query).fetchone()
    return bool(row and row[0])


def _drain(url: str, workers: int, backlog: int) -> dict[str, Any]:
    procs = [_start(url) for _ in range(workers)]
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            server_before, box_before = _server_cpu(), _box_busy()
            workers_before = [_proc_cpu(p.pid) or 0.0 for p in procs]
            started = time.perf_counter()
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            while _any_job(conn):
                time.sleep(POLL_SECONDS)
            elapsed = time.perf_counter() - started
            server_after, box_after = _server_cpu(), _box_busy()
            workers_after = [_proc_cpu(p.pid) or 0.0 for p in procs]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.communicate(timeout=60)
    server = (
        sum(cpu - server_before.get(pid, 0.0) for pid, cpu in server_after.items())
        if server_after
        else None
    )
    box = None if box_before is None or box_after is None else box_after - box_before
    worker = sum(
        after - before for after, before in zip(workers_after, workers_before, strict=True)
    )
    return {
        "workers": workers,
        "jobs": backlog,
        "seconds": elapsed,
        "rate": round(rate(backlog, elapsed)),
        "server_cpu_seconds": None if server is None else round(server, 3),
        "worker_cpu_seconds": round(worker, 3),
        "box_busy_cores": None if box is None else round(box / elapsed, 2),
        "cores": os.cpu_count(),
    }


def measure_scale(url: str, settings: Settings) -> dict[str, Any]:
    """One worker process, then two, each draining the same backlog (twice the burn-down's,
    so start-up weighs as little as in it)."""
    backlog = settings.jobs * 2
    runs = []
    for workers in WORKER_COUNTS:
        with connect(url) as client:
            client.enqueue_batch(prepared(backlog - ready_count(url)))
        vacuum(url)
        runs.append(_drain(url, workers, backlog))
    return {"runs": runs, "ratio": round(runs[1]["rate"] / max(runs[0]["rate"], 1), 2)}


def format_scale(scale: dict[str, Any]) -> list[str]:
    lines = ["", "scale: worker processes draining the same backlog (timed from the go):"]
    for r in scale["runs"]:
        server = r["server_cpu_seconds"]
        per_job = "n/a" if server is None else f"{server / r['jobs'] * 1e6:.1f} us/job"
        busy = "n/a" if r["box_busy_cores"] is None else f"{r['box_busy_cores']:.2f}"
        lines.append(
            f"  {r['workers']} worker(s): {r['jobs']} jobs in {r['seconds']:.3f} s, "
            f"{r['rate']:,} jobs/s; server CPU {per_job}, workers' CPU "
            f"{r['worker_cpu_seconds'] / r['jobs'] * 1e6:.1f} us/job; box busy "
            f"{busy} of {r['cores']} cores"
        )
    lines.append(f"  two workers / one: {scale['ratio']:.2f} (target {TARGET_TWO_WORKERS})")
    return lines
