"""Dashboard page times on a big schema: a 1,000,000-message topic and a 1,000,000-job history
(plus failed, ready and dead-lettered work), each page requested in process (ASGI, no network)
after two warm-up requests; the figure is the median of the timed requests, and the bar is
200 ms. Runs in a schema of its own, dropped at the end."""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import psycopg
from psycopg import sql

import postroom
import postroom.web
from postroom.embedded import resolve_url

from . import _common

SCHEMA = "postroom_bench_dashboard"
TOPIC = "bench"
BAR_MS = 200.0

# Test data for the finished-job history: one statement, run once (a benchmark fixture, as the
# other benchmarks' raw references are), ids above the live jobs' sequence.
FILL_FINISHED = """
INSERT INTO {schema}.finished_jobs (id, queue, kind, args, priority, run_at, attempts,
    max_attempts, state, worker, created_at, started_at, finished_at)
SELECT 10000000 + g, 'q' || (g %% 4), 'kind' || (g %% 10), jsonb_build_object('n', g), 0,
       now() - interval '2 hours', 1 + (g %% 3), 25,
       CASE WHEN g %% 50 = 0 THEN 'cancelled' ELSE 'done' END, 'bench',
       now() - interval '2 hours', now() - interval '2 hours',
       now() - interval '2 hours' + g * interval '1 millisecond'
FROM generate_series(1, %(n)s) AS g
"""
# The worker registry (migration 0038) of a fleet: 50 workers, the last 10 gone (crashed).
FILL_WORKERS = """
INSERT INTO {schema}.workers (worker, role_name, host, pid, queues, concurrency, started_at,
    heartbeat_at, expires_at)
SELECT 'bench-' || g, current_user, 'host-' || (g %% 5), 1000 + g, ARRAY['q' || (g %% 4)], 10,
       now() - interval '1 hour', now(),
       now() + CASE WHEN g > 40 THEN interval '-1 minute' ELSE interval '1 hour' END
FROM generate_series(1, 50) AS g
"""


@dataclass(frozen=True)
class Settings:
    messages: int = 1_000_000
    finished_jobs: int = 1_000_000
    failed_jobs: int = 2_000
    partitions: int = 4
    requests: int = 10


def fill(client: postroom.Client, conninfo: str, settings: Settings) -> dict[str, float]:
    started = time.perf_counter()
    client.create_topic(TOPIC, partitions=settings.partitions)
    chunk = 10_000
    for start in range(0, settings.messages, chunk):
        values = [b'{"n": %d, "kind": "order"}' % i for i in range(start, start + chunk)]
        client.publish_batch(TOPIC, values[: settings.messages - start])
    messages_s = time.perf_counter() - started
    client.reset_group("bench-group", TOPIC, to="earliest")
    client.reset_group("relay.bench", TOPIC, to="latest")
    started = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(
            sql.SQL(FILL_FINISHED).format(schema=sql.Identifier(SCHEMA)),
            {"n": settings.finished_jobs},
        )
        conn.execute(sql.SQL(FILL_WORKERS).format(schema=sql.Identifier(SCHEMA)), {})
    finished_s = time.perf_counter() - started
    client.enqueue_batch(
        {"kind": "explode", "args": {"n": i}, "max_attempts": 1}
        for i in range(settings.failed_jobs)
    )

    @client.job("explode", max_attempts=1)
    def explode(n: int) -> None:
        raise RuntimeError(f"bench failure {n}")

    client.worker(["default"], concurrency=10).run(burst=True, handle_signals=False)
    client.enqueue_batch({"kind": "later", "args": {"n": i}} for i in range(1000))
    with client.consumer(None, TOPIC) as consumer:
        message = consumer.poll(timeout=5)[0]
    client.dead_letter(message, group="bench-group", error="bench: refused")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ANALYZE {}.messages, {}.finished_jobs, {}.jobs, {}.workers").format(
                *(sql.Identifier(SCHEMA),) * 4
            )
        )
    return {"messages_s": round(messages_s, 1), "finished_jobs_s": round(finished_s, 1)}


def pages(client: postroom.Client) -> list[str]:
    failed = client.list_jobs(state="failed", limit=1)[0].id
    return [
        "/",
        "/topics",
        f"/topics/{TOPIC}",
        f"/topics/{TOPIC}?offset=0",
        f"/topics/{TOPIC}?partition=1&at=2000-01-01T00:00:00%2B00:00",
        f'/topics/{TOPIC}?offset=0&contains={{"n": -1}}',
        "/groups",
        "/groups/bench-group",
        f"/groups/bench-group?topic={TOPIC}&to=latest",
        "/queues",
        "/jobs?state=failed",
        "/jobs?state=ready",
        "/jobs?state=done",
        "/jobs?state=done&kind=no-such-kind",
        f"/jobs/{failed}",
        "/jobs/10000001",
        "/deadletters",
        "/relays",
        "/workers",
        "/metrics",
    ]


async def time_pages(conninfo: str, paths: list[str], requests: int) -> dict[str, dict[str, Any]]:
    aclient = await postroom.connect_async(conninfo, schema=SCHEMA)
    app = postroom.web.app(aclient, sample_interval=3600)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
    figures: dict[str, dict[str, Any]] = {}
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
            for path in paths:
                times = []
                for i in range(requests + 2):
                    started = time.perf_counter()
                    response = await http.get(path)
                    elapsed = (time.perf_counter() - started) * 1000
                    if response.status_code != 200:
                        raise RuntimeError(f"{path}: HTTP {response.status_code}")
                    if i >= 2:
                        times.append(elapsed)
                figures[path] = {
                    "median_ms": round(statistics.median(times), 1),
                    "max_ms": round(max(times), 1),
                }
    finally:
        await app.state.dashboard.stop()
        await aclient.close()
    return figures


def run(url: str | None = None, settings: Settings | None = None) -> dict[str, Any]:
    settings = settings or Settings()
    conninfo = resolve_url(url)
    _common.drop_schema(conninfo, SCHEMA)
    result: dict[str, Any] = {
        "started_at": _common.started_at(),
        "settings": asdict(settings),
        "machine": _common.machine_info(),
        "server": _common.server_info(conninfo),
    }
    try:
        with postroom.connect(conninfo, schema=SCHEMA) as client:
            client.migrate()
            result["fill"] = fill(client, conninfo, settings)
            paths = pages(client)
        result["load_average_before_timing"] = _common.load_average()
        result["pages"] = asyncio.run(time_pages(conninfo, paths, settings.requests))
        result["load_average_after_timing"] = _common.load_average()
    finally:
        _common.drop_schema(conninfo, SCHEMA)
    result["all_under_bar"] = all(p["median_ms"] < BAR_MS for p in result["pages"].values())
    return result


def format_report(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        f"postroom bench dashboard: {s['messages']:,} messages, {s['finished_jobs']:,} finished "
        f"jobs, {s['failed_jobs']:,} failed; median of {s['requests']} requests per page",
        _common.server_line(result["server"], result["machine"]),
        f"load average: {result['load_average_before_timing']} before timing, "
        f"{result['load_average_after_timing']} after",
    ]
    for path, f in result["pages"].items():
        mark = "" if f["median_ms"] < BAR_MS else f"  OVER {BAR_MS:g} ms"
        lines.append(f"  {path:<60} {f['median_ms']:>8.1f} ms (max {f['max_ms']:.1f}){mark}")
    lines.append(
        f"  every page under {BAR_MS:g} ms: " + ("yes" if result["all_under_bar"] else "NO")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = _common.parser("postroom bench dashboard", __doc__ or "")
    parser.add_argument(
        "--quick", action="store_true", help="20,000 messages and 20,000 finished jobs"
    )
    args = parser.parse_args(argv)
    settings = (
        Settings(messages=20_000, finished_jobs=20_000, failed_jobs=100, requests=3)
        if args.quick
        else Settings()
    )
    return _common.report(run(args.url, settings), args.json, format_report)


if __name__ == "__main__":
    raise SystemExit(main())
