"""The sync modules are generated from the async ones and must be current (psycopg checks its
generated pool.py the same way)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_sync_modules_are_generated_from_the_async_ones() -> None:
    result = subprocess.run(
        [sys.executable, "tools/async_to_sync.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"run `python tools/async_to_sync.py`:\n{result.stdout}"


def test_every_async_module_has_its_twin() -> None:
    sources = sorted((ROOT / "src" / "postroom").rglob("*_async.py"))
    assert sources, "no async modules found"
    for source in sources:
        twin = source.with_name(source.name.replace("_async.py", ".py"))
        assert twin.exists(), twin
        assert twin.read_text().startswith("# Generated from"), twin
