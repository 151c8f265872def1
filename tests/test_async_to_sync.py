"""tools/async_to_sync.py edits code, never text, and its output depends on neither the Python
nor an unpinned ruff (psycopg checks its generated pool.py the same way)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON_312 = Path("/root/.pyenv/versions/3.12.1/bin/python")


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("async_to_sync", ROOT / "tools/async_to_sync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["async_to_sync"] = module
    spec.loader.exec_module(module)
    return module


tool = _load_tool()


def convert(source: str) -> str:
    return str(tool.convert(textwrap.dedent(source)))


def test_code_loses_async_and_await_and_async_names() -> None:
    out = convert(
        """
        from .._acompat import ALock, asleep
        from .jobs_async import AsyncJobs

        class AsyncThing(AsyncJobs):
            async def __aenter__(self) -> AsyncThing:
                async with ALock():
                    await asleep(1)
                return [x async for x in self.items_async()]
        """
    )
    assert out == textwrap.dedent(
        """
        from .._acompat import Lock, sleep
        from .jobs import Jobs

        class Thing(Jobs):
            def __enter__(self) -> Thing:
                with Lock():
                    sleep(1)
                return [x for x in self.items()]
        """
    )


def test_string_literals_and_comments_are_left_alone() -> None:
    source = '''
        async def run_async() -> str:
            """Returns ``AsyncClient`` text; await it."""
            # AsyncClient in a comment stays as written
            return f"{AsyncClient.__name__} await async_x" + "AsyncClient"
        '''
    out = convert(source)
    assert '"""Returns ``AsyncClient`` text; await it."""' in out
    assert "# AsyncClient in a comment stays as written" in out
    assert 'f"{Client.__name__} await async_x" + "AsyncClient"' in out
    assert "def run() -> str:" in out


def test_is_async_becomes_false() -> None:
    out = convert(
        """
        from ._acompat import IS_ASYNC
        allow = IS_ASYNC
        """
    )
    assert "allow = False" in out
    assert "import IS_ASYNC" in out  # ruff's F401 fix drops the unused import afterwards


def test_async_if_hatch_keeps_the_else_body_dedented() -> None:
    out = convert(
        """
        def f():
            if True:  # ASYNC
                x = await queue.get()
            else:
                x = queue.get(timeout=1)
                y = AsyncThing
            return x
        """
    )
    assert out == textwrap.dedent(
        """
        def f():
            x = queue.get(timeout=1)
            y = Thing
            return x
        """
    )


def test_async_if_hatch_without_else_disappears() -> None:
    out = convert(
        """
        if True:  # ASYNC
            import asyncio
        x = 1
        """
    )
    assert out == "\nx = 1\n"


def test_line_hatch_replaces_one_statement() -> None:
    out = convert(
        """
        __all__ = [
            "AsyncClient",
        ]  # sync: __all__ = ["Client"]
        await asleep(1)  # sync:
        done = True
        """
    )
    assert out == '\n__all__ = ["Client"]\ndone = True\n'


def test_a_name_it_cannot_locate_is_an_error_not_a_guess() -> None:
    with pytest.raises(tool.GenerationError, match="rename 'AsyncThing' by hand"):
        convert(
            """
            def f():
                global AsyncThing
            """
        )


def test_acompat_prefix_rule_pairs_only_names_defined_side_by_side() -> None:
    pairs = tool.acompat_renames((ROOT / "src/postroom/_acompat.py").read_text())
    assert pairs["ALock"] == "Lock"
    assert pairs["agather"] == "gather"
    assert pairs["AJobCall"] == "JobCall"
    assert "asyncio" not in pairs


def _generate(python: str, out: Path) -> None:
    subprocess.run(
        [python, "tools/async_to_sync.py", "--output", str(out)],
        cwd=ROOT,
        check=True,
        timeout=120,
        env={"POSTROOM_RUFF": tool.find_ruff(), "PATH": "/usr/bin:/bin"},
    )


def test_output_is_the_same_under_python_3_11_and_3_12(tmp_path: Path) -> None:
    if not PYTHON_312.exists():
        pytest.skip(f"{PYTHON_312} is absent")
    _generate(sys.executable, tmp_path / "here")
    _generate(str(PYTHON_312), tmp_path / "py312")
    here = sorted(p.relative_to(tmp_path / "here") for p in (tmp_path / "here").rglob("*.py"))
    assert here, "nothing generated"
    for relative in here:
        assert (tmp_path / "here" / relative).read_text() == (
            tmp_path / "py312" / relative
        ).read_text(), relative


def test_another_ruff_version_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "ruff"
    fake.write_text("#!/bin/sh\necho ruff 0.0.1\n")
    fake.chmod(0o755)
    result = subprocess.run(
        [sys.executable, "tools/async_to_sync.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"POSTROOM_RUFF": str(fake), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "is ruff 0.0.1" in result.stderr


def test_an_elif_after_an_async_hatch_is_refused() -> None:
    with pytest.raises(tool.GenerationError, match="elif"):
        convert(
            """
            if True:  # ASYNC
                x = 1
            elif other:
                x = 2
            """
        )


def test_hatches_nest_inside_an_else_body() -> None:
    out = convert(
        """
        if True:  # ASYNC
            x = 1
        else:
            y = AsyncThing  # sync: y = Thing()
        """
    )
    assert out == "\ny = Thing()\n"


def test_async_hatches_nest() -> None:
    out = convert(
        """
        def f():
            if True:  # ASYNC
                a = 1
            else:
                if True:  # ASYNC
                    b = 2
                else:
                    c = AsyncThing
                d = 4  # sync: d = 5
        """
    )
    assert out == "\ndef f():\n    c = Thing\n    d = 5\n"
