"""The job queue benchmark: postroom's enqueue and worker against pure SQL and against the
PostgreSQL queues a user would pick instead, on one server, in one run.

One run measures, in order (the phases live in ``queue_phases``, ``queue_references``,
``queue_peers`` and ``queue_soak``):

1. **batch enqueue** of N no-op jobs with ``client.enqueue_batch`` (Python checks and JSON
   encoding included), in one transaction, against the server's own ``INSERT ... SELECT``
   of the same rows: three alternating rounds, the best of each;
2. **burn-downs** of N jobs by one worker in this process, timed from ``run()`` (start-up
   included): ``def`` and ``async def`` jobs with the worker's defaults, and a tuned worker;
3. the **references**: the minimal claim + delete loop on a two-column table (one
   connection), and the same loop on postroom's ``jobs`` table; then the **scale** phase
   (``queue_scale``): one worker process against two on the same backlog, with where the CPU
   went (``--no-scale`` skips it);
4. **sustained**: a worker in another process while this one enqueues one job per
   transaction at ``--rate`` jobs/s; latency = the job's start time in the worker minus the
   time just before its ``enqueue()`` call (so the enqueue's own commit is included);
5. the **peers** (pgmq, PgQueuer, where installed; ``--no-peers`` skips them): their batch
   enqueue, burn-down and latency at the same sizes and rate, each at its best setting;
6. a **memory** phase (a worker holding ``--hold-jobs`` claimed jobs) and optionally
   (``--churn-seconds``) a **churn** soak.

It prints issue 19's ratios from the one run: burn-down vs the minimal reference and vs the
best peer, batch enqueue vs the best peer, p99 enqueue-to-start vs the best peer. The
benchmark works in its own schema (``postroom_bench_queue``), dropped and recreated.

    python -m postroom.benchmarks.queue --url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any

from postroom.embedded import resolve_url

from . import _common
from .queue_horizon import format_pinned, measure_pinned_horizon
from .queue_peers import measure_peers
from .queue_phases import (
    ENQUEUE_ROUNDS,
    Settings,
    measure_burn_down,
    measure_enqueue,
    measure_sustained,
    refill,
    reset_schema,
    serve,
    vacuum,
)
from .queue_references import measure_minimal_reference, measure_reference
from .queue_scale import TARGET_TWO_WORKERS, format_scale, measure_scale
from .queue_soak import measure_churn, measure_memory, serve_hold

__all__ = ["Settings", "best_peer", "format_report", "main", "run"]

TARGET_ENQUEUE = 100_000.0  # jobs/s
TARGET_BURN_DOWN = 30_000.0  # jobs/s, one worker process
TARGET_REFERENCE_RATIO = 0.5  # burn-down >= 50% of the pure-SQL drain
TARGET_P99_MS = 10.0  # enqueue-to-start at the sustained rate
# Issue 19's goals against the best peer of the same run (pgmq, PgQueuer):
TARGET_BURN_DOWN_VS_PEER = 1.2  # burn-down >= 1.2x the best peer's
TARGET_ENQUEUE_VS_PEER = 1.0  # batch enqueue >= the best peer's
TARGET_P99_VS_PEER = 0.75  # p99 enqueue-to-start <= 0.75x the best peer's
TARGET_PINNED_THROUGHPUT = 0.8  # under a pinned horizon, of the clean throughput
TARGET_PINNED_P99 = 2.0  # under a pinned horizon, p99 within 2x of clean


# -- the run ----------------------------------------------------------------------------------


BURN_DOWNS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    # (result key, label, flavour, worker options): defaults first, they are the goal
    ("burn_down", "burn-down, def jobs, worker defaults", "sync", {}),
    ("burn_down_async", "burn-down, async def jobs, worker defaults", "async", {}),
)


def _burn_downs(settings: Settings) -> list[tuple[str, str, str, dict[str, Any]]]:
    tuned = {"concurrency": 1, "prefetch": settings.claim - 1, "keep_finished": 0}
    return [
        *BURN_DOWNS,
        (
            "burn_down_tuned",
            f"burn-down, def jobs, concurrency=1 prefetch={settings.claim - 1} keep_finished=0",
            "sync",
            tuned,
        ),
    ]


def run(url: str | None, settings: Settings) -> dict[str, Any]:
    resolved = resolve_url(url)
    reset_schema(resolved)
    result: dict[str, Any] = {
        "date": _common.started_at(),
        "server": _common.server_info(resolved),
        "machine": _common.machine_info(),
        "settings": asdict(settings),
    }
    result["enqueue"] = measure_enqueue(resolved, settings)
    for key, _, flavour, options in _burn_downs(settings):
        refill(resolved, settings)
        result[key] = measure_burn_down(resolved, settings, flavour=flavour, **options)
    vacuum(resolved)
    result["minimal_reference"] = measure_minimal_reference(resolved, settings)
    result["minimal_reference_async_commit"] = measure_minimal_reference(
        resolved, settings, async_commit=True
    )
    refill(resolved, settings)
    result["reference"] = measure_reference(resolved, settings)
    vacuum(resolved)
    if settings.scale:
        result["scale"] = measure_scale(resolved, settings)
        vacuum(resolved)
    result["sustained"] = measure_sustained(resolved, settings)
    if settings.peers:
        result["peers"] = measure_peers(resolved, settings.jobs, settings.rate, settings.seconds)
    if settings.hold_jobs > 0:
        vacuum(resolved)
        result["memory"] = measure_memory(resolved, settings)
    if settings.churn_seconds > 0:
        vacuum(resolved)
        result["churn"] = measure_churn(resolved, settings)
    if settings.pinned_seconds > 0:
        vacuum(resolved)
        result["pinned_horizon"] = measure_pinned_horizon(
            resolved, settings.pinned_seconds, settings.pinned_rate
        )
    result["targets"] = _targets(result, settings)
    return result


def _minimal(result: dict[str, Any]) -> int:
    """The reference the ratios divide by: the faster minimal-table drain (normally the one
    with the workers' asynchronous commit)."""
    names = ("minimal_reference", "minimal_reference_async_commit")
    return max(1, *(int(result[n]["rate"]) for n in names if n in result))


def best_peer(result: dict[str, Any], phase: str, figure: str) -> tuple[str, float] | None:
    """The peer with the best ``figure`` of ``phase`` in this run (the highest rate, the
    lowest latency), as (name, value); None when no peer ran."""
    ran = [
        (name, float(peer[phase][figure]))
        for name, peer in result.get("peers", {}).items()
        if "skipped" not in peer
    ]
    if not ran:
        return None
    lowest = figure.endswith("_ms")
    return min(ran, key=lambda p: p[1]) if lowest else max(ran, key=lambda p: p[1])


def _targets(result: dict[str, Any], settings: Settings) -> dict[str, Any]:
    minimal = _minimal(result)
    targets: dict[str, Any] = {
        "enqueue_vs_insert_select": (
            round(
                result["enqueue"]["rate"] / max(result["enqueue"]["server_insert_floor_rate"], 1), 2
            ),
            TARGET_REFERENCE_RATIO,
        ),
    }
    for key, *_ in _burn_downs(settings):
        targets[f"{key}_vs_minimal"] = (
            round(result[key]["rate"] / minimal, 2),
            TARGET_REFERENCE_RATIO,
        )
    targets["p99_ms"] = (result["sustained"]["p99_ms"], TARGET_P99_MS)
    burn = best_peer(result, "burn_down", "rate")
    if burn is not None:
        for key in ("burn_down", "burn_down_async"):
            targets[f"{key}_vs_best_peer"] = (
                round(result[key]["rate"] / max(burn[1], 1), 2),
                TARGET_BURN_DOWN_VS_PEER,
            )
    enqueue = best_peer(result, "enqueue", "rate")
    if enqueue is not None:
        targets["enqueue_vs_best_peer"] = (
            round(result["enqueue"]["rate"] / max(enqueue[1], 1), 2),
            TARGET_ENQUEUE_VS_PEER,
        )
    p99 = best_peer(result, "sustained", "p99_ms")
    if p99 is not None:
        targets["p99_vs_best_peer"] = (
            round(result["sustained"]["p99_ms"] / max(p99[1], 0.01), 2),
            TARGET_P99_VS_PEER,
        )
    if "scale" in result:
        targets["two_workers_vs_one"] = (result["scale"]["ratio"], TARGET_TWO_WORKERS)
    if "pinned_horizon" in result:
        pinned = result["pinned_horizon"]
        targets["pinned_throughput_ratio"] = (pinned["throughput_ratio"], TARGET_PINNED_THROUGHPUT)
        targets["pinned_p99_ratio"] = (pinned["p99_ratio"], TARGET_PINNED_P99)
        targets["readers_throughput_ratio"] = (
            pinned["readers_throughput_ratio"],
            TARGET_PINNED_THROUGHPUT,
        )
        targets["readers_p99_ratio"] = (pinned["readers_p99_ratio"], TARGET_PINNED_P99)
    return targets


def format_report(result: dict[str, Any]) -> str:
    server, machine, s = result["server"], result["machine"], result["settings"]
    minimal = _minimal(result)
    lines = [
        f"postroom queue benchmark, {result['date']}",
        _common.server_line(server, machine)
        + f", load average {machine.get('loadavg_1m_at_start')}",
        "",
        f"{'phase':<66} {'jobs':>7} {'seconds':>8} {'jobs/s':>9} {'ratio':>6}",
    ]

    def row(label: str, f: dict[str, Any], extra: str = "") -> None:
        ratio = f["rate"] / minimal
        lines.append(
            f"{label:<66} {f['jobs']:>7} {f['seconds']:>8.3f} {f['rate']:>9,} {ratio:>6.2f}{extra}"
        )

    row(
        f"minimal reference: 2-column table, claim {s['reference_batch']} SKIP LOCKED + DELETE",
        result["minimal_reference"],
    )
    row(
        "  same, synchronous_commit=off (as postroom's workers)",
        result["minimal_reference_async_commit"],
    )
    row(
        f"jobs-table reference: claim {s['reference_batch']} SKIP LOCKED + DELETE",
        result["reference"],
    )
    for key, label, *_ in _burn_downs(s_obj(s)):
        f = result[key]
        row(label, f, f"  (worker CPU {f['worker_cpu_us_per_job']:.1f} us/job)")
    lines.append(
        "  ratio: jobs/s / the faster minimal reference, same run (the jobs-table reference "
        "uses the server's commit)"
    )
    enq = result["enqueue"]
    lines += [
        "",
        f"enqueue_batch of {s['jobs']} no-op jobs (1 transaction): {enq['rate']:,} jobs/s; "
        f"server-side INSERT ... SELECT into jobs: {enq['server_insert_floor_rate']:,} rows/s "
        f"(ratio {enq['rate'] / max(enq['server_insert_floor_rate'], 1):.2f}; best of "
        f"{ENQUEUE_ROUNDS} alternating rounds each; client CPU "
        f"{enq.get('client_cpu_us_per_job', '?')} us a job, the caller's dicts included)",
    ]
    sus = result["sustained"]
    lines += [
        "",
        f"sustained: {sus['jobs']} jobs at {sus['rate']} jobs/s, one enqueue per transaction, "
        "worker (defaults) in another process",
        f"  enqueue-to-start latency: p50 {sus['p50_ms']} ms, p99 {sus['p99_ms']} ms, "
        f"max {sus['max_ms']} ms",
        f"  of which the enqueue() call itself (insert + commit): p50 "
        f"{sus['enqueue_call_p50_ms']} ms, p99 {sus['enqueue_call_p99_ms']} ms",
    ]
    if "memory" in result:
        m = result["memory"]
        lines += [
            "",
            f"memory: worker holding {m['held'] - 1:,} claimed-but-not-started jobs (+1 running):"
            f" peak RSS {m['peak_rss_kb'] / 1024:.1f} MiB (idle {m['rss_idle_kb'] / 1024:.1f} MiB,"
            f" {m['bytes_per_held_job']:,} bytes per held job)",
        ]
    if "churn" in result:
        c = result["churn"]
        rss = c["worker_rss_kb"]
        lines += [
            "",
            f"churn: {c['enqueued']} jobs in {c['seconds']:g} s ({c['rate']:,} jobs/s): "
            f"jobs table max dead tuples {c['max_dead']:,}, max size "
            f"{c['max_bytes'] / 1e6:.1f} MB; at the end {c['final_dead']:,} dead, "
            f"{c['final_bytes'] / 1e6:.1f} MB",
            "  worker RSS (MiB) per sample: "
            + " ".join(f"{r / 1024:.0f}" for r in rss)
            + f"; growth {'bounded' if c['bounded'] else 'UNBOUNDED'}",
        ]
    if "scale" in result:
        lines += format_scale(result["scale"])
    lines += _peer_lines(result)
    if "pinned_horizon" in result:
        lines += format_pinned(result["pinned_horizon"])
    lines += ["", "targets:"]
    for name, (value, target) in result["targets"].items():
        met = value <= target if "p99" in name else value >= target
        lines.append(f"  {name:<32} {value:>10,} (target {target:,}) {'met' if met else 'MISSED'}")
    return "\n".join(lines)


def _peer_lines(result: dict[str, Any]) -> list[str]:
    """The peers' figures beside postroom's, same run."""
    if "peers" not in result:
        return []
    lines = ["", "peers, same run (each at its best setting; burn-down timed from start-up):"]
    for name, peer in result["peers"].items():
        if "skipped" in peer:
            lines.append(f"  {name}: skipped: {peer['skipped']}")
            continue
        sus = peer["sustained"]
        lines += [
            f"  {name} ({peer['setting']}; {peer['install']})",
            f"    burn-down {peer['burn_down']['rate']:,} jobs/s; batch enqueue "
            f"{peer['enqueue']['rate']:,} jobs/s; at {sus['rate']} jobs/s enqueue-to-start "
            f"p50 {sus['p50_ms']} ms, p99 {sus['p99_ms']} ms ({sus['started']} of {sus['jobs']})",
        ]
    for phase, figure, label in (
        ("burn_down", "rate", "burn-down"),
        ("enqueue", "rate", "batch enqueue"),
        ("sustained", "p99_ms", "p99 enqueue-to-start"),
    ):
        best = best_peer(result, phase, figure)
        if best is not None:
            lines.append(f"  best peer, {label}: {best[0]} ({best[1]:,.2f})")
    return lines


def s_obj(settings: dict[str, Any]) -> Settings:
    return Settings(**settings)


def main(argv: list[str] | None = None) -> int:
    defaults = Settings()
    parser = _common.parser(
        "postroom bench queue",
        "Benchmark the job queue (enqueue, burn-down, latency) against pure SQL.",
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
    parser.add_argument(
        "--hold-jobs",
        type=int,
        default=defaults.hold_jobs,
        help="memory phase: claimed-but-not-started jobs a worker holds (0: skip)",
    )
    parser.add_argument(
        "--pinned-seconds",
        type=float,
        default=0.0,
        help="also run the pinned-horizon phase: each part (clean, pinned, readers) this long",
    )
    parser.add_argument(
        "--pinned-rate", type=float, default=1_000.0, help="pinned-horizon phase jobs/s"
    )
    parser.add_argument(
        "--no-peers", action="store_true", help="skip the pgmq and PgQueuer comparisons"
    )
    parser.add_argument(
        "--no-scale", action="store_true", help="skip the one-against-two worker processes phase"
    )
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--serve-hold", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-go", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keep-finished", type=float, default=86400.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(resolve_url(args.url), args.keep_finished, wait_go=args.serve_go)
    if args.serve_hold:
        return serve_hold(resolve_url(args.url), args.serve_hold)
    settings = Settings(
        jobs=2_000 if args.quick else args.jobs,
        claim=args.claim,
        rate=args.rate,
        seconds=1.0 if args.quick else args.seconds,
        churn_seconds=args.churn_seconds,
        hold_jobs=2_000 if args.quick else args.hold_jobs,
        peers=not args.no_peers,
        scale=not args.no_scale,
        pinned_seconds=args.pinned_seconds,
        pinned_rate=args.pinned_rate,
    )
    return _common.report(run(args.url, settings), args.json, format_report)


if __name__ == "__main__":
    sys.exit(main())
