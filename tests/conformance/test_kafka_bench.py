"""``postroom bench log --url kafka://...`` runs end to end at a tiny size and counts right
(never a timing assertion)."""

from __future__ import annotations

import json

import pytest

from postroom.benchmarks import log as log_bench


def test_the_kafka_log_benchmark_runs(
    kafka_broker: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--url", f"kafka://{kafka_broker}", "--messages", "300", "--rounds", "2", "--json"]
    args += ["--read", "all"]  # both consume loops read all seven fields (default: key, value)
    assert log_bench.main(args) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["messages"] == 300
    assert figures["read"] == "all"
    for name in ("raw_produce_per_s", "producer_per_s", "raw_consume_per_s", "consumer_per_s"):
        assert figures[name] > 0, name
    assert len(figures["rounds"]) == 2  # alternating: postroom's side first in the second
    phases = [name for name in figures["rounds"][1] if not name.endswith("_startup_s")]
    assert phases[:2] == ["producer", "raw_produce"]
    for name in ("raw_produce_startup_s", "producer_startup_s"):  # creation to first ack
        assert figures[name] > 0, name
    low, high = figures["consume_ratio_range"]
    assert low <= figures["consume_ratio"] <= high
