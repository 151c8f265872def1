"""``postroom bench churn``: retention without bloat (issue 8). A producer and a consumer group
run at a steady rate on a topic with a short retention for ``--minutes`` while the group
members' retention runner expires the log by itself (a batched DELETE, then a VACUUM of
``messages`` by the runner, which owns the table here); every few seconds the run samples the
total size of ``messages`` (pg_total_relation_size) and its dead tuples
(pg_stat_user_tables.n_dead_tup, and counted exactly where the pgstattuple extension is
installed). The goal: size flat, dead tuples near zero, whatever autovacuum does. Then a
200,000-message expired backlog is expired once, as the runner does it (apply_retention until
nothing is left, then VACUUM), and timed. Runs in a schema of its own, dropped at the end.

    postroom bench churn --minutes 10     # the soak
    postroom bench churn --quick          # 30 seconds, 20,000-message backlog: a smoke run
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

import postroom
from postroom.embedded import resolve_url

from . import _common

SCHEMA = "postroom_bench_churn"
TOPIC = "bench-churn"
BACKLOG_TOPIC = "bench-churn-backlog"


@dataclass(frozen=True)
class Settings:
    seconds: float = 600.0
    rate: int = 2_000
    """Messages per second the producer sends (in ten slices a second)."""
    value_bytes: int = 100
    partitions: int = 4
    retention_seconds: float = 30.0
    runner_interval: float = 5.0
    """POSTROOM_RETENTION_INTERVAL for this run's consumers."""
    sample_every: float = 5.0
    backlog: int = 200_000


def sample(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """messages: total bytes (heap, indexes, TOAST), dead and live tuples; other tables' dead
    tuples in the schema."""
    row = conn.execute(
        "SELECT pg_total_relation_size(c.oid), coalesce(s.n_dead_tup, 0),"
        " coalesce(s.n_live_tup, 0)"
        " FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid"
        " WHERE c.oid = %s::regclass",
        [f"{SCHEMA}.messages"],
    ).fetchone()
    others = conn.execute(
        "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables"
        " WHERE schemaname = %s AND relname <> 'messages'",
        [SCHEMA],
    ).fetchone()
    assert row is not None and others is not None
    result = {
        # This process runs the producer and the consumer: its RSS must not grow either.
        "client_rss_kb": _common.rss_kb().get("VmRSS", 0),
        "bytes": int(row[0]),
        "dead_tuples": int(row[1]),
        "live_tuples": int(row[2]),
        "other_dead_tuples": int(others[0]),
    }
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pgstattuple'").fetchone():
        # The statistics are estimates sent by each session in its own time; pgstattuple
        # counts the table's dead tuples exactly (a full scan), where it is installed.
        exact = conn.execute(
            "SELECT dead_tuple_count FROM pgstattuple(%s::regclass)", [f"{SCHEMA}.messages"]
        ).fetchone()
        assert exact is not None
        result["exact_dead_tuples"] = int(exact[0])
    return result


def _produce(
    client: postroom.Client,
    settings: Settings,
    stop: threading.Event,
    counts: dict[str, int],
    errors: list[str],
) -> None:
    """Send ``settings.rate`` messages a second, in ten flushed slices, until ``stop``."""
    per_slice = max(1, settings.rate // 10)
    value = b"x" * settings.value_bytes
    try:
        with client.producer() as producer:
            next_at = time.monotonic()
            while not stop.is_set():
                for _ in range(per_slice):
                    producer.send(TOPIC, value)
                producer.flush()
                counts["produced"] += per_slice
                next_at += 0.1
                stop.wait(max(0.0, next_at - time.monotonic()))
    except postroom.errors.PostroomError as exc:
        errors.append(f"producer: {exc}")


def _consume(
    client: postroom.Client, stop: threading.Event, counts: dict[str, int], errors: list[str]
) -> None:
    """Poll and commit in group ``churn`` until ``stop`` (its retention runner runs meanwhile)."""
    try:
        with client.consumer("churn", TOPIC) as consumer:
            while not stop.is_set():
                batch = consumer.poll(timeout=0.5, max_messages=2000)
                if batch:
                    consumer.commit()
                    counts["consumed"] += len(batch)
    except postroom.errors.PostroomError as exc:
        errors.append(f"consumer: {exc}")


def churn(client: postroom.Client, conninfo: str, settings: Settings) -> dict[str, Any]:
    """Produce and consume at ``rate`` for ``seconds``; the samples and the counts."""
    client.create_topic(
        TOPIC,
        partitions=settings.partitions,
        retention=timedelta(seconds=settings.retention_seconds),
    )
    client.reset_group("churn", TOPIC, to="earliest")
    stop = threading.Event()
    counts = {"produced": 0, "consumed": 0}
    errors: list[str] = []
    threads = [
        threading.Thread(
            target=_produce, args=(client, settings, stop, counts, errors), name="churn-producer"
        ),
        threading.Thread(
            target=_consume, args=(client, stop, counts, errors), name="churn-consumer"
        ),
    ]
    for thread in threads:
        thread.start()
    samples = []
    started = time.monotonic()
    try:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            while True:
                elapsed = time.monotonic() - started
                samples.append({"t": round(elapsed, 1), **sample(conn)})
                _progress(samples[-1], settings.seconds, counts)
                if elapsed >= settings.seconds or errors:
                    break
                stop.wait(min(settings.sample_every, settings.seconds - elapsed))
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    lag = client.describe_group("churn").lag
    return {"samples": samples, **counts, "final_lag": lag, "errors": errors}


def _progress(last: dict[str, Any], seconds: float, counts: dict[str, int]) -> None:
    """One status line per sample on stderr, so a soak of minutes shows it is working."""
    sys.stderr.write(
        f"churn {last['t']:.0f}/{seconds:.0f} s: {counts['produced']} produced, "
        f"{counts['consumed']} consumed, messages {last['bytes'] // 1024} kB, "
        f"{last['dead_tuples']} dead tuples\n"
    )
    sys.stderr.flush()


def summary(samples: list[dict[str, Any]], key: str) -> dict[str, int]:
    values = [s[key] for s in samples]
    return {"start": values[0], "max": max(values), "end": values[-1]}


def backlog(client: postroom.Client, conninfo: str, settings: Settings) -> dict[str, Any]:
    """Expire a backlog of ``settings.backlog`` messages once, as the retention runner does:
    ``apply_retention`` with its defaults until nothing is left, then VACUUM ``messages``."""
    client.create_topic(BACKLOG_TOPIC, retention=timedelta(days=1))
    sys.stderr.write(f"churn: expiring a backlog of {settings.backlog} messages\n")
    with client.producer() as producer:
        for _ in range(settings.backlog):
            producer.send(BACKLOG_TOPIC, b"y" * settings.value_bytes)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        vacuum = sql.SQL("VACUUM {}.messages").format(sql.Identifier(SCHEMA))
        conn.execute(vacuum)
        size_before = sample(conn)["bytes"]
        client.alter_topic(BACKLOG_TOPIC, retention=timedelta(milliseconds=1))
        started = time.perf_counter()
        removed = 0
        while done := client.apply_retention():
            removed += done
        delete_seconds = time.perf_counter() - started
        started = time.perf_counter()
        conn.execute(vacuum)
        vacuum_seconds = time.perf_counter() - started
        size_after = sample(conn)["bytes"]
    return {
        "messages": settings.backlog,
        "removed": removed,
        "delete_ms": round(delete_seconds * 1000, 1),
        "vacuum_ms": round(vacuum_seconds * 1000, 1),
        "bytes_before": size_before,
        "bytes_after": size_after,
    }


def run(url: str | None = None, settings: Settings | None = None) -> dict[str, Any]:
    settings = settings or Settings()
    conninfo = resolve_url(url)
    _common.drop_schema(conninfo, SCHEMA)
    saved = os.environ.get("POSTROOM_RETENTION_INTERVAL")
    os.environ["POSTROOM_RETENTION_INTERVAL"] = str(settings.runner_interval)
    result: dict[str, Any] = {
        "started_at": _common.started_at(),
        "settings": asdict(settings),
        "machine": _common.machine_info(),
        "server": _common.server_info(conninfo),
    }
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('autovacuum')").fetchone()
        result["server"]["autovacuum"] = "" if row is None else str(row[0])
    try:
        with postroom.connect(conninfo, schema=SCHEMA) as client:
            client.migrate()
            soak = churn(client, conninfo, settings)
            result["churn"] = {
                **{k: v for k, v in soak.items() if k != "samples"},
                "bytes": summary(soak["samples"], "bytes"),
                "dead_tuples": summary(soak["samples"], "dead_tuples"),
                "live_tuples": summary(soak["samples"], "live_tuples"),
                "other_dead_tuples": summary(soak["samples"], "other_dead_tuples"),
                "client_rss_kb": summary(soak["samples"], "client_rss_kb"),
                "bounded": _common.bounded(soak["samples"], ("bytes", "client_rss_kb")),
                **(
                    {"exact_dead_tuples": summary(soak["samples"], "exact_dead_tuples")}
                    if "exact_dead_tuples" in soak["samples"][0]
                    else {}
                ),
                "samples": soak["samples"],
            }
            client.delete_topic(TOPIC)  # the backlog's retention run times the backlog only
            result["backlog"] = backlog(client, conninfo, settings)
    finally:
        if saved is None:
            del os.environ["POSTROOM_RETENTION_INTERVAL"]
        else:
            os.environ["POSTROOM_RETENTION_INTERVAL"] = saved
        _common.drop_schema(conninfo, SCHEMA)
    return result


def format_report(result: dict[str, Any]) -> str:
    s = result["settings"]
    c = result["churn"]
    b = result["backlog"]
    lines = [
        f"postroom bench churn: {s['seconds'] / 60:g} min at {s['rate']:,} msg/s of "
        f"{s['value_bytes']} B, {s['partitions']} partitions, retention {s['retention_seconds']:g}"
        f" s, retention runner every {s['runner_interval']:g} s",
        _common.server_line(result["server"], result["machine"])
        + f", autovacuum={result['server'].get('autovacuum', '?')}",
        f"load average at start: {result['machine']['loadavg_1m_at_start']}",
        f"  produced {c['produced']:,}, consumed {c['consumed']:,}, final lag {c['final_lag']:,}"
        + (f", errors: {c['errors']}" if c["errors"] else ""),
    ]
    for key, label in (
        ("bytes", "messages size (bytes)"),
        ("dead_tuples", "messages dead tuples"),
        ("live_tuples", "messages live tuples"),
        ("other_dead_tuples", "other tables' dead tuples"),
        ("exact_dead_tuples", "messages dead tuples, exact (pgstattuple)"),
        ("client_rss_kb", "producer + consumer process RSS (KiB)"),
    ):
        if key not in c:
            continue
        f = c[key]
        lines.append(f"  {label}: start {f['start']:,}, max {f['max']:,}, end {f['end']:,}")
    total = b["delete_ms"] + b["vacuum_ms"]
    lines += [
        "  bounded (second half peaks at most 1.5x the first, size and RSS): "
        + ("yes" if c["bounded"] else "NO"),
        f"  backlog of {b['messages']:,}: retention deleted {b['removed']:,} in "
        f"{b['delete_ms']:,.1f} ms, then VACUUM {b['vacuum_ms']:,.1f} ms (total {total:,.1f} ms;"
        f" messages {b['bytes_before']:,} bytes before, {b['bytes_after']:,} after)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = _common.parser("postroom bench churn", __doc__ or "")
    parser.add_argument("--quick", action="store_true", help="30 s, 20,000-message backlog")
    parser.add_argument("--minutes", type=float, default=None, help="soak length (default 10)")
    parser.add_argument("--rate", type=int, default=Settings.rate, help="messages per second")
    parser.add_argument(
        "--retention", type=float, default=Settings.retention_seconds, help="seconds"
    )
    args = parser.parse_args(argv)
    seconds = 60 * args.minutes if args.minutes else (30.0 if args.quick else Settings.seconds)
    settings = Settings(
        seconds=seconds,
        rate=args.rate,
        retention_seconds=args.retention,
        backlog=20_000 if args.quick else Settings.backlog,
    )
    result = run(args.url, settings)
    return _common.report(result, args.json, format_report)


if __name__ == "__main__":
    raise SystemExit(main())
