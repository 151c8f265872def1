"""The queue benchmark's pinned-horizon phase (``--pinned-seconds``): a steady job rate with
the vacuum horizon free, then the same rate while one session holds a transaction with an XID
open (``idle in transaction``), so no dead row of the queue tables can be vacuumed away, then
the same rate while ``READERS`` sessions in REPEATABLE READ transactions scan the queue tables
over and over (each snapshot, held for the whole half, holds the horizon too, and each scan
walks every dead row behind it).

Each half runs ``pinned_seconds`` at ``pinned_rate`` jobs/s: batches of ``PINNED_BATCH``
``stamp`` jobs enqueued on a schedule while a default worker in another process runs them.
It reports, per half, the jobs finished per second, the enqueue-to-start latency (each job
returns how long it waited; kept in ``finished_jobs``) and, every ``SAMPLE_SECONDS``, the dead
tuples and size of ``jobs`` and ``finished_jobs`` from ``pgstattuple`` (created in the
benchmark's database if it can be; else the statistics views' estimates, and says so).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from ._common import percentile, rate
from .queue_phases import SCHEMA, connect, register, start_worker_process, stop_worker_process

PINNED_BATCH = 50
READERS = 4
SAMPLE_SECONDS = 10.0
HOT_TABLES = ("jobs", "finished_jobs")


def _pgstattuple(url: str) -> str | None:
    """None if pgstattuple can be used here, else why not."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    except psycopg.Error as exc:
        return f"pgstattuple unavailable ({str(exc).strip()}): n_dead_tup estimates instead"
    return None


def _dead_tuples(conn: psycopg.Connection[Any], exact: bool) -> dict[str, dict[str, int]]:
    figures = {}
    for table in HOT_TABLES:
        name = f"{SCHEMA}.{table}"
        if exact:
            row = conn.execute(
                "SELECT dead_tuple_count, table_len FROM pgstattuple(%s::regclass)", (name,)
            ).fetchone()
        else:
            row = conn.execute(
                "SELECT n_dead_tup, pg_relation_size(relid) FROM pg_stat_user_tables "
                "WHERE relid = %s::regclass",
                (name,),
            ).fetchone()
        dead, size = row if row is not None else (0, 0)
        figures[table] = {"dead": int(dead), "bytes": int(size)}
    return figures


def _steady(
    url: str,
    job_rate: float,
    seconds: float,
    exact: bool,
    on_empty: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """One half: ``job_rate`` jobs/s for ``seconds`` against a worker process; ``on_empty`` is
    called once ``finished_jobs`` is emptied (its TRUNCATE would wait for a reader's lock)."""
    finished = sql.SQL(
        "SELECT count(*), coalesce(array_agg((result #>> '{{}}')::float8), '{{}}') "
        "FROM {} WHERE kind = 'stamp' AND state = 'done'"
    ).format(sql.Identifier(SCHEMA, "finished_jobs"))
    truncate = sql.SQL("TRUNCATE {}").format(sql.Identifier(SCHEMA, "finished_jobs"))
    samples: list[dict[str, Any]] = []
    stop = threading.Event()

    def sample() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            begin = time.perf_counter()
            while not stop.wait(SAMPLE_SECONDS):
                tables = _dead_tuples(conn, exact)
                samples.append({"t": round(time.perf_counter() - begin), **tables})

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(truncate)
    if on_empty is not None:
        on_empty()
    worker = start_worker_process(url)
    sampler = threading.Thread(target=sample, daemon=True)
    enqueued = 0
    try:
        with connect(url) as client:
            register(client)
            interval = PINNED_BATCH / job_rate
            sampler.start()
            begin = time.perf_counter()
            batches = max(1, round(seconds * job_rate / PINNED_BATCH))
            for i in range(batches):
                pause = begin + i * interval - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                now = time.time()
                client.enqueue_batch(
                    [{"kind": "stamp", "args": {"t": now}} for _ in range(PINNED_BATCH)]
                )
                enqueued += PINNED_BATCH
            deadline = time.perf_counter() + 30
            done = 0
            with psycopg.connect(url, autocommit=True) as conn:
                while time.perf_counter() < deadline:
                    row = conn.execute(finished).fetchone()
                    done = 0 if row is None else int(row[0])
                    if done >= enqueued:
                        break
                    time.sleep(0.05)
                elapsed = time.perf_counter() - begin
                row = conn.execute(finished).fetchone()
    finally:
        stop.set()
        sampler.join()
        stop_worker_process(worker)
    latencies = sorted(v * 1000 for v in (row[1] if row is not None else []))
    return {
        "enqueued": enqueued,
        "done": done,
        "seconds": round(elapsed, 2),
        "rate": round(rate(done, elapsed)),
        "p50_ms": round(percentile(latencies, 0.50), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "max_dead": {t: max((s[t]["dead"] for s in samples), default=0) for t in HOT_TABLES},
        "max_bytes": {t: max((s[t]["bytes"] for s in samples), default=0) for t in HOT_TABLES},
        "samples": samples,
    }


def _scan_repeatably(url: str, stop: threading.Event, scans: list[int]) -> None:
    """One reader: a REPEATABLE READ transaction, held until ``stop``, counting the queue
    tables' rows over and over (its snapshot holds the horizon; each count walks the table)."""
    counts = [
        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(SCHEMA, t)) for t in HOT_TABLES
    ]
    with psycopg.connect(url) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        while not stop.is_set():
            for count in counts:
                conn.execute(count).fetchone()
            scans.append(1)
            stop.wait(0.1)
        conn.rollback()


def _with_readers(url: str, job_rate: float, seconds: float, exact: bool) -> dict[str, Any]:
    """A half with ``READERS`` REPEATABLE READ readers scanning the queue tables meanwhile."""
    stop = threading.Event()
    scans: list[int] = []
    readers = [
        threading.Thread(target=_scan_repeatably, args=(url, stop, scans), daemon=True)
        for _ in range(READERS)
    ]

    def start() -> None:
        for reader in readers:
            reader.start()

    try:
        half = _steady(url, job_rate, seconds, exact, on_empty=start)
    finally:
        stop.set()
        for reader in readers:
            if reader.ident is not None:  # started
                reader.join()
    return {**half, "readers": READERS, "scans": len(scans)}


def measure_pinned_horizon(url: str, seconds: float, job_rate: float) -> dict[str, Any]:
    """The clean half, the pinned half (one session idle in transaction with an XID), then the
    readers' half (``READERS`` REPEATABLE READ sessions scanning the queue tables)."""
    why_not = _pgstattuple(url)
    exact = why_not is None
    clean = _steady(url, job_rate, seconds, exact)
    with psycopg.connect(url) as pin:
        xid = pin.execute("SELECT txid_current()").fetchone()  # an XID: the horizon stops here
        try:
            pinned = _steady(url, job_rate, seconds, exact)
        finally:
            pin.rollback()
    readers = _with_readers(url, job_rate, seconds, exact)
    return {
        "seconds": seconds,
        "rate": job_rate,
        "dead_tuples_from": "pgstattuple" if exact else why_not,
        "pinned_xid": None if xid is None else int(xid[0]),
        "clean": clean,
        "pinned": pinned,
        "throughput_ratio": round(pinned["rate"] / max(clean["rate"], 1), 2),
        "p99_ratio": round(pinned["p99_ms"] / max(clean["p99_ms"], 0.01), 2),
        "readers": readers,
        "readers_throughput_ratio": round(readers["rate"] / max(clean["rate"], 1), 2),
        "readers_p99_ratio": round(readers["p99_ms"] / max(clean["p99_ms"], 0.01), 2),
    }


def format_pinned(p: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"pinned horizon: {p['rate']:g} jobs/s for {p['seconds']:g} s clean, then as long with "
        f"one session idle in transaction (XID {p['pinned_xid']}); dead tuples from "
        f"{p['dead_tuples_from']}",
    ]
    for half in ("clean", "pinned", "readers"):
        h = p[half]
        dead = ", ".join(
            f"{t} max {h['max_dead'][t]:,} dead / {h['max_bytes'][t] / 1e6:.1f} MB"
            for t in HOT_TABLES
        )
        lines.append(
            f"  {half:<6} {h['done']:,} of {h['enqueued']:,} jobs done, {h['rate']:,} jobs/s, "
            f"p50 {h['p50_ms']} ms, p99 {h['p99_ms']} ms; {dead}"
        )
    lines.append(
        f"  pinned / clean: throughput {p['throughput_ratio']}, p99 {p['p99_ratio']} "
        "(goals: >= 0.8 and <= 2)"
    )
    r = p["readers"]
    lines.append(
        f"  readers ({r['readers']} REPEATABLE READ sessions, {r['scans']:,} scans of both "
        f"tables) / clean: throughput {p['readers_throughput_ratio']}, p99 "
        f"{p['readers_p99_ratio']} (goals: >= 0.8 and <= 2)"
    )
    return lines
