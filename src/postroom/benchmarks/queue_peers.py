"""The queue benchmark's peers: pgmq and PgQueuer, the PostgreSQL queues a user would pick
instead, run in the same benchmark on the same server, each at its best setting.

Both are optional (``pip install pgmq pgqueuer``); a peer whose package is missing or whose
SQL cannot be installed is reported as skipped, with the reason, and the run goes on.

- **pgmq**: the Python client's SQL-only install (``pgmq.install``, the SQL its package ships)
  into schema ``pgmq``, so it runs where the ``pgmq`` extension is not available. Its
  burn-down is ``PGMQ_LOOPS`` read loops of ``read(qty=PGMQ_READ)`` + ``delete_batch`` on
  sessions with asynchronous commit (as postroom's worker sessions); its
  batch enqueue one ``send_batch`` in one transaction; its latency a consumer process
  polling ``read_with_poll`` every ``PGMQ_POLL_MS``.
- **PgQueuer**: ``Queries.install()`` into schema ``postroom_bench_pgqueuer``; the burn-down
  is a ``QueueManager`` in drain mode (``batch_size=PGQUEUER_BATCH``); enqueue one
  ``Queries.enqueue`` of every job; latency a ``QueueManager`` process (LISTEN/NOTIFY).

Each peer's burn-down is timed from creating its client (start-up included), as postroom's.
A schema this module creates is dropped at the end; an existing ``pgmq`` schema is left
alone and pgmq skipped (it is someone's).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from ._common import percentile, rate

PGMQ_QUEUE = "postroom_bench"
PGMQ_LOOPS = 4
PGMQ_READ = 500
"""pgmq's best burn-down in a sweep on this box (4 or 8 loops, 100 or 500 a read, the server's
commit or asynchronous commit): 4 x 500 with ``synchronous_commit=off``, as postroom's worker
sessions run; 1.7x its 4 x 100 with the server's commit."""
ASYNC_COMMIT = "-c synchronous_commit=off"
PGMQ_POLL_MS = 10
PGQUEUER_SCHEMA = "postroom_bench_pgqueuer"
PGQUEUER_BATCH = 100
PEERS = ("pgmq", "pgqueuer")


def _figure(jobs: int, seconds: float) -> dict[str, Any]:
    return {"jobs": jobs, "seconds": seconds, "rate": round(rate(jobs, seconds))}


class PeerSkipped(Exception):
    """A peer cannot run here; the message says why."""


def _schema_exists(url: str, schema: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return row is not None


def _drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# -- pgmq -------------------------------------------------------------------------------------


def _pgmq_install(url: str) -> str:
    try:
        from pgmq.install import get_embedded_install_sql, install_pgmq_sql
    except ImportError as exc:
        raise PeerSkipped(f"pgmq is not installed ({exc}; pip install pgmq)") from exc
    with psycopg.connect(url, autocommit=True) as conn:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'pgmq'"
        ).fetchone()
    if _schema_exists(url, "pgmq"):
        raise PeerSkipped("schema pgmq exists in this database already (not this benchmark's)")
    install_pgmq_sql(get_embedded_install_sql(), dsn=url)
    how = "extension available, SQL-only install used" if available else "extension not"
    if not available:
        how += " available on this server: the client's SQL-only install (pgmq.install)"
    return how


def _pgmq_client(url: str, pool_size: int) -> Any:
    from pgmq import PGMQueue

    return PGMQueue(conn_string=url, init_extension=False, pool_size=pool_size)


def _pgmq_fill(queue: Any, count: int) -> float:
    messages = [{"n": n} for n in range(count)]
    started = time.perf_counter()
    queue.send_batch(PGMQ_QUEUE, messages)  # one statement, one transaction
    return time.perf_counter() - started


def _pgmq_burn_down(url: str, count: int) -> float:
    """PGMQ_LOOPS threads read PGMQ_READ and delete them until the queue is empty; timed
    from the client's creation."""
    done = [0]
    lock = threading.Lock()
    started = time.perf_counter()
    queue = _pgmq_client(make_conninfo(url, options=ASYNC_COMMIT), PGMQ_LOOPS)

    def loop() -> None:
        while True:
            messages = queue.read(PGMQ_QUEUE, vt=30, qty=PGMQ_READ)
            if not messages:
                return
            queue.delete_batch(PGMQ_QUEUE, [m.msg_id for m in messages])
            with lock:
                done[0] += len(messages)

    threads = [threading.Thread(target=loop) for _ in range(PGMQ_LOOPS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    queue.close()
    assert done[0] == count, (done[0], count)
    return elapsed


def measure_pgmq(url: str, jobs: int, latency: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    how = _pgmq_install(url)
    try:
        queue = _pgmq_client(url, 2)
        queue.create_queue(PGMQ_QUEUE)
        _pgmq_fill(queue, 100)  # warm up: connection, plans
        queue.purge(PGMQ_QUEUE)
        enqueue_seconds = min(_pgmq_fill_round(url, queue, jobs) for _ in range(3))
        burn_seconds = _pgmq_burn_down(url, jobs)
        queue.close()
        return {
            "install": how,
            "setting": f"{PGMQ_LOOPS} read loops x {PGMQ_READ}, delete_batch, asynchronous "
            "commit; "
            f"latency: read_with_poll every {PGMQ_POLL_MS} ms",
            "enqueue": _figure(jobs, enqueue_seconds),
            "burn_down": _figure(jobs, burn_seconds),
            "sustained": latency("pgmq"),
        }
    finally:
        _drop_schema(url, "pgmq")


def _pgmq_fill_round(url: str, queue: Any, jobs: int) -> float:
    """One enqueue round on an empty queue; the last round's rows stay for the burn-down."""
    queue.purge(PGMQ_QUEUE)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM {}").format(sql.Identifier("pgmq", f"q_{PGMQ_QUEUE}")))
    return _pgmq_fill(queue, jobs)


def serve_pgmq(url: str) -> int:
    """The latency phase's pgmq consumer: polls every PGMQ_POLL_MS, deletes what it read,
    prints each message's enqueue-to-start latency (ms) as JSON on SIGTERM."""
    queue = _pgmq_client(url, 2)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    latencies: list[float] = []
    print("ready", flush=True)
    while not stop.is_set():
        messages = queue.read_with_poll(
            PGMQ_QUEUE, vt=30, qty=PGMQ_READ, max_poll_seconds=1, poll_interval_ms=PGMQ_POLL_MS
        )
        now = time.time()
        for m in messages:
            latencies.append((now - float(m.message["t"])) * 1000)
        if messages:
            queue.delete_batch(PGMQ_QUEUE, [m.msg_id for m in messages])
    queue.close()
    print(json.dumps(latencies), flush=True)
    return 0


@contextmanager
def _pgmq_send(url: str) -> Iterator[Callable[[], object]]:
    queue = _pgmq_client(url, 1)
    try:
        yield lambda: queue.send(PGMQ_QUEUE, {"t": time.time()})
    finally:
        queue.close()


# -- PgQueuer ---------------------------------------------------------------------------------


def _pgqueuer_env() -> None:
    # PgQueuer reads its schema from the environment when its settings load.
    os.environ["PGQUEUER_SCHEMA"] = PGQUEUER_SCHEMA


async def _pgqueuer_queries(url: str) -> tuple[Any, Any]:
    _pgqueuer_env()
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    return conn, Queries(PsycopgDriver(conn))


async def _pgqueuer_fill(url: str, jobs: int) -> float:
    conn, queries = await _pgqueuer_queries(url)
    async with conn:
        await queries.clear_queue()
        payload = json.dumps({"n": 0}).encode()
        started = time.perf_counter()
        await queries.enqueue(["noop"] * jobs, [payload] * jobs, [0] * jobs)
        return time.perf_counter() - started


async def _pgqueuer_burn_down(url: str, jobs: int) -> float:
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    started = time.perf_counter()
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    async with conn:
        manager = QueueManager(Queries(PsycopgDriver(conn)))
        done = [0]
        finished = [0.0]

        @manager.entrypoint("noop")
        async def noop(job: Job) -> None:
            done[0] += 1
            if done[0] == jobs:  # timed at the last job, as postroom's (drain mode's exit
                finished[0] = time.perf_counter()  # waits for its log buffers' timeouts)
                manager.shutdown.set()

        await manager.run(batch_size=PGQUEUER_BATCH, mode=QueueExecutionMode.drain)
    assert done[0] == jobs, (done[0], jobs)
    return finished[0] - started


async def _pgqueuer_phases(url: str, jobs: int) -> tuple[float, float]:
    conn, queries = await _pgqueuer_queries(url)
    async with conn:
        await queries.install()
    await _pgqueuer_fill(url, 100)  # warm up
    enqueue_seconds = min([await _pgqueuer_fill(url, jobs) for _ in range(3)])
    burn_seconds = await _pgqueuer_burn_down(url, jobs)
    return enqueue_seconds, burn_seconds


def measure_pgqueuer(
    url: str, jobs: int, latency: Callable[[str], dict[str, Any]]
) -> dict[str, Any]:
    try:
        import pgqueuer  # noqa: F401
    except ImportError as exc:
        raise PeerSkipped(f"pgqueuer is not installed ({exc}; pip install pgqueuer)") from exc
    if _schema_exists(url, PGQUEUER_SCHEMA):
        _drop_schema(url, PGQUEUER_SCHEMA)  # a leftover of an interrupted run of this benchmark
    try:
        enqueue_seconds, burn_seconds = asyncio.run(_pgqueuer_phases(url, jobs))
        return {
            "install": f"Queries.install() into schema {PGQUEUER_SCHEMA}",
            "setting": f"QueueManager, batch_size={PGQUEUER_BATCH}, drain mode; latency: "
            "QueueManager (LISTEN/NOTIFY) in another process",
            "enqueue": _figure(jobs, enqueue_seconds),
            "burn_down": _figure(jobs, burn_seconds),
            "sustained": latency("pgqueuer"),
        }
    finally:
        _drop_schema(url, PGQUEUER_SCHEMA)


async def _serve_pgqueuer(url: str) -> None:
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    latencies: list[float] = []
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    async with conn:
        manager = QueueManager(Queries(PsycopgDriver(conn)))

        @manager.entrypoint("stamp")
        async def stamp(job: Job) -> None:
            assert job.payload is not None
            latencies.append((time.time() - float(job.payload)) * 1000)

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, manager.shutdown.set)
        print("ready", flush=True)
        await manager.run(batch_size=10)
    print(json.dumps(latencies), flush=True)


def serve_pgqueuer(url: str) -> int:
    _pgqueuer_env()
    asyncio.run(_serve_pgqueuer(url))
    return 0


@contextmanager
def _pgqueuer_send(url: str) -> Iterator[Callable[[], object]]:
    _pgqueuer_env()
    from pgqueuer.db import SyncPsycopgDriver
    from pgqueuer.queries import SyncQueries

    with psycopg.connect(url, autocommit=True) as conn:
        queries = SyncQueries(SyncPsycopgDriver(conn))
        yield lambda: queries.enqueue("stamp", str(time.time()).encode())


# -- the latency phase, shared ----------------------------------------------------------------


def measure_peer_sustained(url: str, peer: str, job_rate: float, seconds: float) -> dict[str, Any]:
    """One job per transaction at ``job_rate`` jobs/s for ``seconds`` while the peer's
    consumer runs in another process (as postroom's sustained phase): latency = the job's
    start in the consumer minus the time just before its enqueue call."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "postroom.benchmarks.queue_peers", "--serve", peer, "--url", url],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {peer} consumer process did not start")
        count = max(1, round(job_rate * seconds))
        interval = 1.0 / job_rate
        with _pgmq_send(url) if peer == "pgmq" else _pgqueuer_send(url) as send:
            send()  # warm up
            time.sleep(0.5)
            begin = time.perf_counter()
            for i in range(count):
                pause = begin + i * interval - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                send()
            elapsed = time.perf_counter() - begin
        time.sleep(1.0)  # let the last jobs start
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    latencies = sorted(json.loads(out.strip().splitlines()[-1])[1:])  # less the warm-up job
    return {
        "jobs": count,
        "started": len(latencies),
        "seconds": elapsed,
        "rate": round(rate(count, elapsed), 1),
        "p50_ms": round(percentile(latencies, 0.50), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "max_ms": round(latencies[-1], 2) if latencies else 0.0,
    }


def measure_peers(url: str, jobs: int, job_rate: float, seconds: float) -> dict[str, Any]:
    """Every peer's figures, or ``{"skipped": reason}`` for one that cannot run here."""
    results: dict[str, Any] = {}

    def latency(peer: str) -> dict[str, Any]:
        return measure_peer_sustained(url, peer, job_rate, seconds)

    for name, measure in (("pgmq", measure_pgmq), ("pgqueuer", measure_pgqueuer)):
        try:
            results[name] = measure(url, jobs, latency)
        except PeerSkipped as exc:
            results[name] = {"skipped": str(exc)}
    return results


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # The consumer processes of the latency phase: --serve PEER --url URL
    peer, url = args[args.index("--serve") + 1], args[args.index("--url") + 1]
    return serve_pgmq(url) if peer == "pgmq" else serve_pgqueuer(url)


if __name__ == "__main__":
    sys.exit(main())
