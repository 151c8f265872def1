"""The history workload in the suite (issue 18, docs/guarantees.md): a CI-sized run with a fixed
seed finds no anomaly, and builds with a bug injected into the workload's own processes (never
the library) are flagged by name. Each run starts its own PostgreSQL (the nemesis restarts it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.history.workload import run

pytestmark = pytest.mark.slow

CI_SEED = 20261204  # its 60-s fault window holds every kind of fault, kills of every role


@pytest.mark.timeout(400)
def test_a_two_minute_run_under_faults_finds_no_anomaly(tmp_path: Path) -> None:
    result = run(100, CI_SEED, tmp_path, log=lambda _line: None)
    report = result.report
    assert result.drained, result.notes
    assert report.valid, report.render()
    kinds = {fault.kind for fault in result.faults}
    assert {"kill", "pause", "terminate", "restart-fast", "restart-immediate"} <= kinds
    history = result.history.read_text()
    for needle in (
        '"f":"kill"',
        '"f":"pause"',
        '"f":"restart"',
        '"type":"ok","f":"txbatch"',
        '"type":"ok","f":"run"',
        '"type":"fail","f":"send-tx"',
        '"f":"assign"',
    ):
        assert needle in history, needle  # the run exercised what it checks


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("role", "bug", "anomaly"),
    [
        ("member", "commit-early", "unseen"),
        ("member", "skip-advance", "poll-skip"),
        ("worker", "double-claim", "lease-overlap"),
    ],
)
def test_an_injected_bug_is_flagged(tmp_path: Path, role: str, bug: str, anomaly: str) -> None:
    result = run(40, 3, tmp_path, faults={role: bug}, nemesis=False, log=lambda _line: None)
    assert anomaly in result.report.names(), result.report.render()
