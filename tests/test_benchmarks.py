"""The log benchmark runs end to end and counts right (never a timing assertion)."""

from __future__ import annotations

import json

import pytest

from postroom.benchmarks import log as log_bench


def test_quick_log_benchmark_reports_every_figure(dsn: str) -> None:
    settings = log_bench.Settings(
        messages=2_000, groups=2, latency_seconds=0.5, latency_rate=200, poll_max_messages=500
    )
    result = log_bench.run(dsn, settings)

    phases = ["copy", "producer", "publish_batch", "consume_1_group", "consume_n_groups"]
    for phase in phases:
        assert result[phase]["rate"] > 0, phase
        assert result[phase]["seconds"] > 0, phase
        assert result[phase]["copy_ratio"] > 0, phase
    assert result["copy"]["messages"] == 2_000
    assert result["producer"]["messages"] == 2_000
    assert result["publish_batch"]["messages"] == 2_000
    backlog = result["backlog"]
    assert backlog == 2_000 + 2_000 + 1  # + the producer's untimed warm-up message
    assert result["consume_1_group"]["messages"] == backlog
    assert result["consume_n_groups"]["per_group"] == [backlog, backlog]
    latency = result["latency"]
    assert latency["received"] == latency["sent"] == 100
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert set(result["targets"]) == {"produce_vs_copy", "consume_vs_produce", "latency_p99"}


def test_main_prints_json(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert log_bench.main(["--url", dsn, "--quick", "--json", "--groups", "1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["consume_n_groups"]["per_group"] == [printed["backlog"]]
