"""bench/hot_claim_bench.py, the issue 19 layout prototype: on a small backlog it drains every
layout, and the claim is a HOT update on the pointer layouts and never on a copy of ``jobs``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench" / "hot_claim_bench.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hot_claim_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pointer_layouts_claim_with_hot_updates_and_jobs_does_not(dsn: str) -> None:
    result = load().run(dsn, jobs=300, batch=50, rounds=1)  # drain() asserts all 300 drained
    assert set(result) == {"jobs", "hot", "hot-domains"}
    assert all(len(f["drain"]) == 1 and f["drain"][0] > 0 for f in result.values())
    assert result["jobs"]["hot_share"] == 0.0  # the claim changes `state`, which indexes name
    assert result["hot"]["hot_share"] > 0.8
    assert result["hot-domains"]["hot_share"] > 0.8
