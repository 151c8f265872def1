"""Generated twins hold I/O only (issue 16, step 4): code that would come out the same in both
twins lives once, in a non-generated module, so each type, check and policy exists as one
object (a ``TopicMeta`` of the sync client is a ``TopicMeta`` of the async one).

The rule, on the syntax tree of every ``*_async.py``: each top-level function and class must
either do asyncio I/O (contain ``await``, ``async for``, ``async with`` or an ``async def``) or
use a name the generator renames (``AsyncDatabase``, ``AEvent``, ``acall_hook``, ...): what
differs between the twins. Anything else is plain code the twins would define twice.
Constants are left alone (equal values, no identity to lose)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "postroom"

# Plain code allowed in a generated module (none now): an entry must say why it cannot move.
EXCEPTIONS: set[tuple[str, str]] = set()


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("async_to_sync", ROOT / "tools/async_to_sync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("async_to_sync", module)
    spec.loader.exec_module(module)
    return module


tool = _load_tool()
RENAMED = tool.make_sync_name(tool.acompat_renames((SOURCE / "_acompat.py").read_text()))


def _differs(name: str) -> bool:
    """Whether the generator renames ``name`` (the rules of tools/async_to_sync.py)."""
    return (
        name in RENAMED
        or name in tool.CONSTANTS
        or name.endswith("_async")
        or bool(tool._ASYNC_CLASS.match(name))
    )


def _is_io(node: ast.AST) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Await | ast.AsyncFor | ast.AsyncWith | ast.AsyncFunctionDef):
            return True
        if isinstance(inner, ast.Name) and _differs(inner.id):
            return True
        if isinstance(inner, ast.Attribute) and _differs(inner.attr):
            return True
    return False


def plain_definitions(source: str) -> list[str]:
    """The top-level functions and classes of ``source`` that do no I/O and use nothing the
    generator renames."""
    return [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and not _is_io(node)
    ]


def test_the_rule_tells_io_from_plain_code() -> None:
    source = (
        "from ._acompat import AEvent\n"
        "class TopicMeta:\n    id: int\n"
        "def check(x): return x\n"
        "async def fetch(db): return await db.get()\n"
        "class AsyncThing:\n    def peek(self): return 1\n"
        "class Holder:\n    def __init__(self): self.e = AEvent()\n"
        "def opens(db):\n    async def inner(): ...\n    return inner\n"
    )
    # A class whose own name alone is renamed is still plain code, defined twice.
    assert plain_definitions(source) == ["TopicMeta", "check", "AsyncThing"]


def test_generated_twins_define_io_only() -> None:
    found: set[tuple[str, str]] = set()
    for path in sorted(SOURCE.rglob("*_async.py")):
        relative = path.relative_to(SOURCE).as_posix()
        found.update((relative, name) for name in plain_definitions(path.read_text()))
    unexpected = sorted(found - EXCEPTIONS)
    assert not unexpected, (
        f"plain code in generated modules (move it to a non-generated one): {unexpected}"
    )
    stale = sorted(EXCEPTIONS - found)
    assert not stale, f"moved already: remove {stale} from EXCEPTIONS"


def test_both_twins_share_one_object_of_each_type_and_sentinel() -> None:
    import importlib

    for module, names in {
        "log.metadata": ["TopicMeta"],
        "log.membership": ["Lease", "TopicMeta"],
        "log.assigners": ["Lease", "Assigned", "PartitionState"],
        "log.admin": ["UNSET", "check_max_lag", "check_retention", "check_group_ttl"],
        "log.deadletters": ["dead_letter_topic", "fit_headers", "replay_headers"],
        "_db": ["translate_errors", "unwrap_connection"],
    }.items():
        sync = importlib.import_module(f"postroom.{module}")
        asyncio_flavour = importlib.import_module(f"postroom.{module}_async")
        for name in names:
            assert getattr(sync, name) is getattr(asyncio_flavour, name), f"{module}.{name}"
