"""The relay benchmark runs end to end and counts right (never a timing assertion)."""

from __future__ import annotations

import pytest

from postroom.benchmarks import relay as relay_bench

pytest.importorskip("redis")


@pytest.mark.slow
def test_tiny_relay_benchmark_reports_every_figure(dsn: str, broker: str) -> None:
    settings = relay_bench.Settings(
        messages=500, kafka=broker, latency_rate=50, latency_seconds=0.5, batch_size=100
    )
    result = relay_bench.run(dsn, settings)
    for phase in ("redis_raw", "redis_relay", "kafka_raw", "kafka_relay"):
        assert result[phase]["messages"] == 500, phase
        assert result[phase]["rate"] > 0, phase
    assert result["redis_relay"]["raw_ratio"] > 0
    latency = result["latency"]
    assert latency["received"] == latency["sent"] == 25
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert result["kafka_relay"]["steady_rate"] > 0
    assert result["kafka_relay"]["raw_ratio"] > 0
    kafka_latency = result["kafka_latency"]
    for side in ("raw", "relay"):
        assert kafka_latency[side]["received"] == kafka_latency[side]["sent"] == 25, side
        assert 0 < kafka_latency[side]["p50_ms"] <= kafka_latency[side]["p99_ms"]
    assert set(result["targets"]) == {
        "redis_vs_raw",
        "kafka_vs_raw",
        "latency_p99",
        "kafka_latency_p99_vs_raw",
    }
