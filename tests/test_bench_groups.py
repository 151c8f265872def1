"""`postroom bench groups` runs end to end at a tiny size (never a timing assertion)."""

from __future__ import annotations

from postroom.benchmarks import groups as groups_bench


def test_quick_groups_benchmark_reports_every_figure(dsn: str) -> None:
    settings = groups_bench.Settings(messages=600, members=(1, 2), session_timeout=1.0)
    result = groups_bench.run(dsn, settings)
    assert set(result["drain_msg_per_s"]) == {"1", "2"}
    assert all(rate > 0 for rate in result["drain_msg_per_s"].values())
    assert result["takeover_s"] > 0
    report = groups_bench.format_report(result)
    assert "2 member(s)" in report and "kill -9" in report
