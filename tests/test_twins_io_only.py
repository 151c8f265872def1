"""Generated twins hold I/O only (issue 16): a plain function or a class with no coroutine in
an ``*_async.py`` module exists twice, as two different objects, once per twin. Shared types,
checks and policies live in hand-written modules that both twins import.

This covers the queue and the shared rooms; the log's modules are listed as they are split.
"""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "postroom"
ROOMS = [*SOURCE.glob("_*_async.py"), *(SOURCE / "queue").glob("*_async.py")]
FLAVOURED = {
    # Typed with the flavour's own connection and cursor classes.
    ("_db_async.py", "server_side_binding"),
    ("_db_async.py", "unwrap_connection"),
    # The fetcher's claim internals belong to the claim-path work of issue 19.
    ("fetcher_async.py", "low_water"),
}


def non_io_definitions(path: Path) -> list[str]:
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef):
            found.append(node.name)
        elif isinstance(node, ast.ClassDef):
            coroutine = (ast.AsyncFunctionDef, ast.Await, ast.AsyncWith, ast.AsyncFor)
            if not any(isinstance(inner, coroutine) for inner in ast.walk(node)):
                found.append(node.name)
    return [name for name in found if (path.name, name) not in FLAVOURED]


def test_the_rooms_twins_define_io_only() -> None:
    assert len(ROOMS) > 10
    offenders = {str(p.relative_to(SOURCE)): non_io_definitions(p) for p in sorted(ROOMS)}
    assert {k: v for k, v in offenders.items() if v} == {}
