"""Generate the sync twin of every ``*_async.py`` module under ``src/postroom``.

The asyncio code is written once; this tool removes ``async``/``await`` and renames the async names
(``AsyncClient`` -> ``Client``, ``foo_async`` -> ``foo``, ``_acompat`` -> ``_compat``, ...), then
formats the result with ruff. psycopg keeps ``pool.py`` generated from ``pool_async.py`` alike.

    python tools/async_to_sync.py          # rewrite the generated files
    python tools/async_to_sync.py --check  # exit 1 if any generated file is out of date
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "postroom"

# Names whose sync twin is not found by the generic rules below.
RENAMES = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "StopAsyncIteration": "StopIteration",
    "asynccontextmanager": "contextmanager",
    "aclose": "close",
    "_acompat": "_compat",
    "ALock": "Lock",
    "ACondition": "Condition",
    "AEvent": "Event",
    "AFuture": "Future",
    "AQueue": "Queue",
    "aspawn": "spawn",
    "agather": "gather",
    "asleep": "sleep",
    "ato_thread": "to_thread",
    "ajoin_all": "join_all",
    "AJobCall": "JobCall",
}
_ASYNC_CLASS = re.compile(r"^Async(?=[A-Z])")
_WORD = re.compile(r"\b\w+\b")


def sync_name(name: str) -> str:
    if name in RENAMES:
        return RENAMES[name]
    if name.endswith("_async"):
        return name[: -len("_async")]
    return _ASYNC_CLASS.sub("", name)


def _sync_text(text: str) -> str:
    """Rename inside strings and comments too, so docstrings describe the sync API."""
    text = re.sub(r"\b(?:await|async) (?=\w)", "", text)
    return _WORD.sub(lambda m: sync_name(m.group(0)), text)


def convert(source: str) -> str:
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def pos(rowcol: tuple[int, int]) -> int:
        return starts[rowcol[0] - 1] + rowcol[1]

    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    edits: list[tuple[int, int, str]] = []
    for index, tok in enumerate(tokens):
        if tok.type == tokenize.NAME and tok.string in ("async", "await"):
            following = tokens[index + 1]
            same_line = following.start[0] == tok.start[0]
            end = pos(following.start) if same_line else pos(tok.end)
            edits.append((pos(tok.start), end, ""))
        elif tok.type == tokenize.NAME:
            renamed = sync_name(tok.string)
            if renamed != tok.string:
                edits.append((pos(tok.start), pos(tok.end), renamed))
        elif tok.type in (tokenize.STRING, tokenize.COMMENT):
            renamed = _sync_text(tok.string)
            if renamed != tok.string:
                edits.append((pos(tok.start), pos(tok.end), renamed))
    out = source
    for start, end, text in reversed(edits):
        out = out[:start] + text + out[end:]
    return out


def generate(path: Path) -> str:
    relative = path.relative_to(ROOT)
    header = (
        f"# Generated from {relative.as_posix()} by tools/async_to_sync.py: do not edit.\n"
        "# Change the async module and run `python tools/async_to_sync.py`.\n"
    )
    converted = header + convert(path.read_text(encoding="utf-8"))
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(sync_path(path)), "-"],
        input=converted,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    fixed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--select",
            "I,F401,UP028",
            "--fix",
            "--unsafe-fixes",
            "--quiet",
            "--stdin-filename",
            str(sync_path(path)),
            "-",
        ],
        input=formatted,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    return fixed


def sync_path(path: Path) -> Path:
    return path.with_name(path.name.replace("_async.py", ".py"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a generated file is stale")
    args = parser.parse_args()
    stale = []
    for path in sorted(SOURCE.rglob("*_async.py")):
        target = sync_path(path)
        text = generate(path)
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        stale.append(target)
        if not args.check:
            target.write_text(text, encoding="utf-8")
    for target in stale:
        verb = "stale" if args.check else "wrote"
        print(f"{verb}: {target.relative_to(ROOT)}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())
