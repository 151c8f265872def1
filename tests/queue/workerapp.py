"""A worker process for the multi-process queue tests: ``python -m tests.queue.workerapp DSN``.

Its jobs record each run in the test database's ``runs`` table (created by the tests) on a
connection of their own, and signal it (a notification on channel 'runs', payload
``n:phase:pid``), so the tests wait for events instead of sleeping or polling.
"""

from __future__ import annotations

import argparse
import os
import time

import psycopg

import postroom

parser = argparse.ArgumentParser()
parser.add_argument("dsn")
parser.add_argument("--queue", action="append")
parser.add_argument("--concurrency", type=int, default=4)
parser.add_argument("--prefetch", type=int, default=0)
parser.add_argument("--lease", type=float, default=2.0)
parser.add_argument("--heartbeat", type=float, default=None, help="default: lease/4")
parser.add_argument("--grace", type=float, default=10.0)
parser.add_argument("--limit", type=int, default=None)
parser.add_argument("--rate", type=float, default=None)
parser.add_argument("--cron", default=None)
parser.add_argument("--poll-only", action="store_true")
options = parser.parse_args()

client = postroom.connect(options.dsn, max_size=options.concurrency + 2)
PID = os.getpid()


def record(n: int, phase: str) -> None:
    """Store the run and signal it to the test (``tests.signals.Signals`` on channel 'runs')."""
    with psycopg.connect(options.dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("INSERT INTO runs (n, pid, phase) VALUES (%s, %s, %s)", (n, PID, phase))
        conn.execute("SELECT pg_notify('runs', %s)", (f"{n}:{phase}:{PID}",))


@client.job("record")
def record_job(n: int) -> int:
    record(n, "run")
    return n


@client.job("slow")
def slow_job(n: int, seconds: float) -> None:
    record(n, "start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)
    record(n, "end")


@client.job("limited", max_concurrency=options.limit, rate_limit=options.rate)
def limited_job(n: int, seconds: float = 0.0) -> None:
    record(n, "start")
    time.sleep(seconds)
    record(n, "end")


@client.job("boom", max_attempts=1)
def boom_job(n: int) -> None:
    record(n, "boom")
    raise RuntimeError(f"boom {n}")


if options.cron:

    @client.periodic(options.cron)
    @client.job("tick")
    def tick() -> None:
        record(0, "tick")


worker = client.worker(
    options.queue,
    concurrency=options.concurrency,
    prefetch=options.prefetch,
    lease=options.lease,
    heartbeat=options.heartbeat or options.lease / 4,
    rescue_interval=options.lease / 4,
    poll_interval=0.2,
    shutdown_grace=options.grace,
    listen=not options.poll_only,
)
print("ready", flush=True)
worker.run()
print(f"stopped processed={worker.processed}", flush=True)
