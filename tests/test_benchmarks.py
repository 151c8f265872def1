"""The benchmarks run end to end at tiny sizes and count right (never a timing assertion)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from postroom.benchmarks import _common
from postroom.benchmarks import log as log_bench
from postroom.benchmarks import queue as queue_bench


def test_quick_log_benchmark_reports_every_figure(dsn: str) -> None:
    settings = log_bench.Settings(
        messages=2_000,
        groups=2,
        latency_seconds=0.5,
        latency_rate=200,
        poll_max_messages=500,
        memory_messages=3_000,
    )
    result = log_bench.run(dsn, settings)

    phases = ["copy_pk", "copy", "producer", "publish_batch", "range_read"]
    phases += ["consume_1_group", "consume_n_groups"]
    for phase in phases:
        assert result[phase]["rate"] > 0, phase
        assert result[phase]["seconds"] > 0, phase
        assert result[phase]["ratio"] > 0, phase
    assert result["copy_pk"]["ratio"] == result["range_read"]["ratio"] == 1.0
    assert result["copy_pk"]["messages"] == result["copy"]["messages"] == 2_000
    assert result["producer"]["messages"] == 2_000
    assert result["publish_batch"]["messages"] == 2_000
    backlog = result["backlog"]
    assert backlog == 2_000 + 2_000 + 1  # + the producer's untimed warm-up message
    assert result["consume_1_group"]["messages"] == backlog
    assert result["range_read"]["messages"] == backlog
    assert result["consume_n_groups"]["per_group"] == [backlog, backlog]
    latency = result["latency"]
    assert latency["received"] == latency["sent"] == 100
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    for mode in ("defaults", "all_pending"):
        memory = result["memory"][mode]
        assert memory["messages"] == 3_000
        assert memory["peak_rss_mb"] >= memory["baseline_rss_mb"] > 0
    assert set(result["targets"]) == {
        "produce_vs_copy_pk",
        "consume_vs_read",
        "consume_vs_produce",
        "latency_p99",
    }


def test_main_prints_json(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert log_bench.main(["--url", dsn, "--quick", "--json", "--groups", "1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["consume_n_groups"]["per_group"] == [printed["backlog"]]


def test_quick_queue_benchmark_reports_every_figure(dsn: str) -> None:
    settings = queue_bench.Settings(
        jobs=300, claim=100, reference_batch=100, rate=40, seconds=0.5, hold_jobs=200
    )
    result = queue_bench.run(dsn, settings)

    assert result["enqueue"]["jobs"] == 300
    for phase in ("burn_down", "burn_down_async", "burn_down_tuned"):
        assert result[phase]["jobs"] == 300, phase
        assert result[phase]["rate"] > 0, phase
        assert result[phase]["worker_cpu_us_per_job"] > 0, phase
    for phase in ("minimal_reference", "minimal_reference_async_commit", "reference"):
        assert result[phase]["jobs"] == 300, phase
        assert result[phase]["rate"] > 0, phase
    sustained = result["sustained"]
    assert sustained["jobs"] == 20
    assert 0 < sustained["p50_ms"] <= sustained["p99_ms"] <= sustained["max_ms"]
    memory = result["memory"]
    assert memory["held"] >= 200
    assert memory["peak_rss_kb"] >= memory["rss_idle_kb"] > 0
    targets = {
        "enqueue_vs_insert_select",
        "burn_down_vs_minimal",
        "burn_down_async_vs_minimal",
        "burn_down_tuned_vs_minimal",
        "p99_ms",
        "two_workers_vs_one",
    }
    scale = result["scale"]
    assert [r["workers"] for r in scale["runs"]] == [1, 2]
    for r in scale["runs"]:  # each drained the whole backlog: the queue table was empty
        assert r["jobs"] == 600 and r["rate"] > 0, r
        # /proc counts in clock ticks (10 ms): 600 jobs' CPU may read as 0 (the readings
        # themselves: test_the_scale_phase_reads_the_servers_and_the_boxs_cpu)
        assert r["worker_cpu_seconds"] >= 0, r
        assert r["server_cpu_seconds"] is None or r["server_cpu_seconds"] >= 0, r
        assert r["box_busy_cores"] is None or r["box_busy_cores"] > 0, r  # ticks: may pass cores
    assert scale["ratio"] == round(scale["runs"][1]["rate"] / scale["runs"][0]["rate"], 2)
    peers = result["peers"]
    assert set(peers) == {"pgmq", "pgqueuer"}
    ran = [name for name, peer in peers.items() if "skipped" not in peer]
    for name in ran:  # where the optional packages are installed
        for phase in ("enqueue", "burn_down"):
            assert peers[name][phase]["jobs"] == 300 and peers[name][phase]["rate"] > 0
        assert peers[name]["sustained"]["started"] == peers[name]["sustained"]["jobs"] == 20
    for name in set(peers) - set(ran):
        assert peers[name]["skipped"], name  # says why
    if ran:
        targets |= {"burn_down_vs_best_peer", "burn_down_async_vs_best_peer"}
        targets |= {"enqueue_vs_best_peer", "p99_vs_best_peer"}
    assert set(result["targets"]) == targets
    report = queue_bench.format_report(result)
    lines = (
        "minimal reference: 2-column table",
        "async def jobs, worker defaults",
        "memory:",
        "2 worker(s): 600 jobs",
        "two workers / one",
    )
    for line in (*lines, "peers, same run", "pgmq", "pgqueuer"):
        assert line in report, line


def test_the_best_peer_is_the_fastest_or_the_quickest_one_that_ran() -> None:
    result = {
        "peers": {
            "pgmq": {"burn_down": {"rate": 900}, "sustained": {"p99_ms": 30.0}},
            "pgqueuer": {"burn_down": {"rate": 400}, "sustained": {"p99_ms": 20.0}},
            "other": {"skipped": "not installed"},
        }
    }
    assert queue_bench.best_peer(result, "burn_down", "rate") == ("pgmq", 900.0)
    assert queue_bench.best_peer(result, "sustained", "p99_ms") == ("pgqueuer", 20.0)
    assert queue_bench.best_peer({"peers": {"a": {"skipped": "x"}}}, "burn_down", "rate") is None


def test_the_churn_verdict_flags_growth() -> None:
    flat = [{"bytes": 100, "worker_rss_kb": 50_000}] * 6
    growing = [{"bytes": 100 * 2**i, "worker_rss_kb": 50_000} for i in range(6)]
    keys = ("bytes", "worker_rss_kb")
    assert _common.bounded(flat, keys)
    assert not _common.bounded(growing, keys)


def test_the_log_report_names_every_phase(dsn: str) -> None:
    settings = log_bench.Settings(
        messages=500,
        groups=1,
        latency_seconds=0.2,
        latency_rate=100,
        poll_max_messages=500,
        memory_messages=500,
    )
    report = log_bench.format_report(log_bench.run(dsn, settings))
    lines = (
        "binary COPY, primary key (produce reference)",
        "raw binary range read (consume reference)",
        "publish_batch(10000)",
        "end-to-end latency",
        "memory, 500 sends, defaults (bounded buffer): peak RSS",
    )
    for line in lines:
        assert line in report


def test_the_benchmarks_contract_forbids_every_module_outside_the_public_api() -> None:
    root = Path(__file__).resolve().parent.parent
    with open(root / "pyproject.toml", "rb") as file:
        contracts = tomllib.load(file)["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"] == "the benchmarks use the public API only"]
    package = root / "src" / "postroom"
    modules = {
        f"postroom.{path.stem}"
        for path in package.iterdir()
        if path.suffix == ".py" or (path.is_dir() and any(path.glob("*.py")))
    } - {"postroom.__init__"}
    public = {"postroom.benchmarks", "postroom.errors", "postroom.embedded", "postroom.web"}
    missing = modules - public - set(contract["forbidden_modules"])
    assert not missing, f"add {sorted(missing)} to the benchmarks contract"


def test_quick_churn_benchmark_reports_every_figure(dsn: str) -> None:
    from postroom.benchmarks import churn

    settings = churn.Settings(
        seconds=3.0,
        rate=300,
        partitions=2,
        retention_seconds=1.0,
        runner_interval=0.5,
        sample_every=1.0,
        backlog=3_000,
    )
    result = churn.run(dsn, settings)
    soak = result["churn"]
    assert soak["errors"] == [] and soak["produced"] > 0
    assert soak["consumed"] + soak["final_lag"] == soak["produced"]
    assert len(soak["samples"]) >= 3 and {"start", "max", "end"} <= set(soak["dead_tuples"])
    assert soak["client_rss_kb"]["max"] >= soak["client_rss_kb"]["start"] > 0
    assert isinstance(soak["bounded"], bool)
    assert result["backlog"]["removed"] == 3_000
    report = churn.format_report(result)
    assert "messages dead tuples" in report and "VACUUM" in report
    assert "producer + consumer process RSS" in report


def test_the_pinned_horizon_phase_runs_its_three_parts_and_records_dead_tuples(dsn: str) -> None:
    from postroom.benchmarks import queue_horizon, queue_phases

    queue_phases.reset_schema(dsn)
    result = queue_horizon.measure_pinned_horizon(dsn, seconds=1.0, job_rate=200.0)

    for half in ("clean", "pinned", "readers"):
        figures = result[half]
        assert figures["done"] == figures["enqueued"] == 200, half
        assert 0 < figures["p50_ms"] <= figures["p99_ms"], half
        assert set(figures["max_dead"]) == {"jobs", "finished_jobs"}, half
    assert result["pinned_xid"] is not None
    assert result["dead_tuples_from"]  # pgstattuple, or why not
    readers = result["readers"]
    assert readers["readers"] == queue_horizon.READERS and readers["scans"] >= readers["readers"]
    assert result["readers_throughput_ratio"] > 0 and result["readers_p99_ratio"] > 0
    lines = queue_horizon.format_pinned(result)
    assert any("pinned / clean: throughput" in line for line in lines)
    assert any("REPEATABLE READ sessions" in line for line in lines)


def test_a_benchmarks_worker_process_stops_when_the_benchmark_dies(dsn: str) -> None:
    """Seen: a benchmark killed mid-run left its worker process running, which took the next
    run's jobs. The worker's stdin is the benchmark's pipe; its end stops the worker."""
    from postroom.benchmarks import queue_phases

    queue_phases.reset_schema(dsn)
    benchmark = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys\n"
            "from postroom.benchmarks import queue_phases\n"
            "proc = queue_phases.start_worker_process(sys.argv[1])\n"
            "print(proc.pid, flush=True)\n"
            "os._exit(0)  # killed: no stop_worker_process\n",
            dsn,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # else an orphaned worker would hold it open
        text=True,
        timeout=120,
        check=True,
    )
    worker = int(benchmark.stdout.split()[-1])
    try:
        gone = os.pidfd_open(worker)
    except ProcessLookupError:
        return  # already gone (and reaped)
    ready: list[int] = []
    try:
        ready, _, _ = select.select([gone], [], [], 60)  # readable once the process ended
        assert ready, "the worker outlived the benchmark that started it"
    finally:
        os.close(gone)
        if not ready:
            os.kill(worker, 9)


def test_the_scale_phase_reads_the_servers_and_the_boxs_cpu() -> None:
    from postroom.benchmarks import queue_scale

    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc on this system: the scale phase records no CPU")
    server = queue_scale._server_cpu()
    assert server, "this machine runs PostgreSQL: its postgres processes are found"
    assert all(cpu >= 0 for cpu in server.values())
    own = queue_scale._proc_cpu(os.getpid())
    assert own is not None and own > 0  # this process has run
    busy = queue_scale._box_busy()
    assert busy is not None and busy > 0
