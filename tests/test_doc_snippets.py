"""Every ```python block of README.md and docs/*.md runs as written, against a test database.

The blocks of one page run in order in one namespace, as a reader would type them into one
session: a later block may use what an earlier one defined (``client``, a job function). The
page's session gets ``POSTROOM_URL`` set to a fresh test database (the snippets call
``postroom.connect()`` without a URL, as the README shows) and runs in a temporary directory.

A block preceded by an HTML comment ``<!-- snippet: skip (reason) -->`` is not run; the
reason is visible in the page's source and listed by this test's ids. Keep such skips few:
each needs a reason a reader would accept (a framework's project, an external service, a
loop that runs until stopped).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(?P<skip><!--\s*snippet:\s*skip\s*\((?P<reason>.*?)\)\s*-->[ \t]*\n)?"
    r"^```python\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


def blocks(page: Path) -> list[tuple[int, str | None, str]]:
    """(line, skip reason or None, code) of each python block of ``page``."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code"))
        reason = match.group("reason") if match.group("skip") else None
        if match.group("skip") is not None and not (reason or "").strip():
            raise AssertionError(f"{page.name}:{line}: a skipped snippet needs a reason")
        found.append((line, reason, match.group("code")))
    return found


def session(page: Path) -> str:
    """One script running the page's blocks in order, each reported by its line on failure."""
    parts = ["import sys, traceback", "__ns = {'__name__': '__snippets__'}"]
    for line, reason, code in blocks(page):
        if reason is not None:
            continue
        parts.append(
            f"try:\n    exec(compile({code!r}, {f'{page.name}:{line + 1}'!r}, 'exec'), __ns)\n"
            f"except BaseException:\n    traceback.print_exc()\n"
            f"    sys.exit('snippet at {page.name} line {line + 1} failed')"
        )
    return "\n".join(parts) + "\n"


def test_every_page_has_few_justified_skips() -> None:
    skipped = [(p.name, line, r) for p in PAGES for line, r, _ in blocks(p) if r is not None]
    total = sum(len(blocks(p)) for p in PAGES)
    assert len(skipped) * 4 <= total, skipped  # at most a quarter of the snippets


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_the_python_snippets_of_a_page_run_as_written(page: Path, dsn: str, tmp_path: Path) -> None:
    if not any(reason is None for _, reason, _ in blocks(page)):
        pytest.skip(f"{page.name} has no snippet to run")
    script = tmp_path / "snippets.py"
    script.write_text(session(page), encoding="utf-8")
    env = {**os.environ, "POSTROOM_URL": dsn, "PYTHONPATH": str(ROOT / "src")}
    env.pop("DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-4000:]
