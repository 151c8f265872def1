"""Generate the sync twin of every ``*_async.py`` module under ``src/postroom``.

The asyncio code is written once; this tool reads its syntax tree and edits the code, never the
text: it removes ``async``/``await`` and renames names (the table and rules below), and leaves
string literals (docstrings included) and comments exactly as written. Write docstrings so they
read right in both twins. psycopg generates ``pool.py`` from ``pool_async.py`` the same way.

    python tools/async_to_sync.py               # rewrite the generated files
    python tools/async_to_sync.py --check       # exit 1 if any generated file is out of date
    python tools/async_to_sync.py --output DIR  # write the twins under DIR instead

Renames, in order: the ``RENAMES`` table; ``_acompat``'s asyncio names (an ``A``/``a``-prefixed
name whose unprefixed twin is defined beside it: ``ALock`` -> ``Lock``); ``Async*`` classes
(``AsyncClient`` -> ``Client``); ``*_async`` modules and functions (``client_async`` ->
``client``). ``IS_ASYNC`` becomes ``False``.

Escape hatches, for code that differs between the twins:

    if True:  # ASYNC
        ...asyncio-only code...
    else:
        ...the sync code, which replaces the whole if statement...

    value = await queue.get()  # sync: value = queue.get(timeout=1)

The first keeps only the ``else`` body (nothing, if there is none); the second replaces one
simple statement by the code after ``# sync:`` (an empty one deletes the statement).

The result is formatted with the ruff version pinned in pyproject.toml (the ``lint`` extra); any
other version is refused, so the output depends on neither the Python nor the ruff installed.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "postroom"
ACOMPAT = SOURCE / "_acompat.py"

# Names whose sync twin the rules below do not find.
RENAMES = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "StopAsyncIteration": "StopIteration",
    "asynccontextmanager": "contextmanager",
    "aclose": "close",
    "aiter": "iter",
    "anext": "next",
    # _acompat names older than its prefix rule (see its docstring).
    "JobThreads": "SyncJobThreads",
    "install_stop_handler": "install_sync_stop_handler",
}
CONSTANTS = {"IS_ASYNC": "False"}
_ASYNC_CLASS = re.compile(r"^Async(?=[A-Z])")
_HATCH_IF = re.compile(r"#\s*ASYNC\s*$")
_HATCH_LINE = re.compile(r"#\s*sync:(.*)$")


class GenerationError(Exception):
    """The async source uses a form the generator cannot convert."""


def acompat_renames(source: str) -> dict[str, str]:
    """``_acompat``'s prefix rule: ``ALock`` -> ``Lock`` where both are defined at top level."""
    defined: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
    return {
        name: name[1:]
        for name in defined
        if re.match(r"^(A[A-Z]|a[a-z])", name) and name[1:] in defined
    }


def make_sync_name(acompat: dict[str, str]) -> dict[str, str]:
    """The whole rename table: ``_acompat``'s pairs, then ``RENAMES``."""
    return {**acompat, **RENAMES}


class _Source:
    """The source text, with AST (line, UTF-8 column) positions turned into text offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8"))

    def line_start(self, lineno: int) -> int:
        return self.starts[lineno - 1]

    def line_end(self, lineno: int) -> int:
        return self.starts[lineno]


class _Converter(ast.NodeVisitor):
    def __init__(self, source: _Source, names: dict[str, str], comments: dict[int, str]) -> None:
        self.src = source
        self.names = names
        self.comments = comments
        self.edits: list[tuple[int, int, str]] = []
        self.dedents: dict[int, int] = {}  # line -> columns to remove (`# ASYNC` else bodies)
        self.replaced: set[int] = set()  # lines a hatch removes or replaces whole

    # -- helpers ------------------------------------------------------------------------------
    def sync_name(self, name: str) -> str:
        if name in self.names:
            return self.names[name]
        if name.endswith("_async"):
            return name[: -len("_async")]
        return _ASYNC_CLASS.sub("", name)

    def rename_at(self, start: int, name: str, where: ast.AST, new: str | None = None) -> None:
        new = new or self.sync_name(name)
        if new == name:
            return
        if self.src.text[start : start + len(name)] != name:
            line = getattr(where, "lineno", "?")
            raise GenerationError(f"line {line}: cannot locate {name!r} in the source")
        self.edits.append((start, start + len(name), new))

    def rename_matched(self, node: ast.AST, pattern: str, group: int) -> None:
        """Rename the name matched by ``pattern`` at the start of ``node``."""
        start = self.src.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        match = re.compile(pattern).match(self.src.text, start)
        if match is None:
            raise GenerationError(f"line {node.lineno}: cannot parse {type(node).__name__}")  # type: ignore[attr-defined]
        self.rename_at(match.start(group), match.group(group), node)

    def drop_keyword(self, node: ast.AST, keyword: str) -> None:
        start = self.src.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        match = re.compile(rf"{keyword}\b\s*").match(self.src.text, start)
        if match is None:
            raise GenerationError(f"line {node.lineno}: expected {keyword!r}")  # type: ignore[attr-defined]
        self.edits.append((match.start(), match.end(), ""))

    # -- escape hatches -----------------------------------------------------------------------
    def generic_visit(self, node: ast.AST) -> None:
        for value in ast.iter_fields(node):
            items = value[1] if isinstance(value[1], list) else [value[1]]
            for item in items:
                if isinstance(item, ast.stmt) and self.hatch(item):
                    continue
                if isinstance(item, ast.AST):
                    self.visit(item)

    def hatch(self, stmt: ast.stmt) -> bool:
        """Apply an escape hatch to ``stmt`` if it has one; whether it had."""
        src = self.src
        if (
            isinstance(stmt, ast.If)
            and isinstance(stmt.test, ast.Constant)
            and stmt.test.value is True
            and _HATCH_IF.search(src.lines[stmt.lineno - 1])
        ):
            end = stmt.end_lineno or stmt.lineno
            if not stmt.orelse:
                self.edits.append((src.line_start(stmt.lineno), src.line_end(end), ""))
                self.replaced.update(range(stmt.lineno, end + 1))
                return True
            first = stmt.orelse[0].lineno
            if src.lines[first - 1].lstrip().startswith("elif"):
                raise GenerationError(f"line {stmt.lineno}: `# ASYNC` hatch with an elif")
            # Drop `if True:  # ASYNC`, its body and the `else:` line; dedent the else body.
            self.edits.append((src.line_start(stmt.lineno), src.line_start(first), ""))
            self.replaced.update(range(stmt.lineno, first))
            indent = stmt.orelse[0].col_offset - stmt.col_offset
            strings = [
                n
                for s in stmt.orelse
                for n in ast.walk(s)
                if isinstance(n, ast.Constant | ast.JoinedStr) and n.lineno != n.end_lineno
            ]
            if strings:
                raise GenerationError(
                    f"line {stmt.lineno}: a multi-line string in an `# ASYNC` hatch's else"
                )
            for lineno in range(first, end + 1):
                self.dedents[lineno] = self.dedents.get(lineno, 0) + indent
            for child in stmt.orelse:
                if not self.hatch(child):
                    self.visit(child)
            return True
        end = stmt.end_lineno or stmt.lineno
        comment = self.comments.get(end)
        match = _HATCH_LINE.search(comment) if comment else None
        if match is None or hasattr(stmt, "body") or isinstance(stmt, ast.Match):
            return False  # only a simple statement; a block's last line belongs to its body
        head = src.lines[stmt.lineno - 1]
        prefix = head[: len(head) - len(head.lstrip())][self.dedents.get(stmt.lineno, 0) :]
        self.replaced.update(range(stmt.lineno, end + 1))
        code = match.group(1).strip()
        replacement = f"{prefix}{code}\n" if code else ""
        self.edits.append((src.line_start(stmt.lineno), src.line_end(end), replacement))
        return True

    # -- async and await ----------------------------------------------------------------------
    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.drop_keyword(node, "async")
        self.rename_matched(node, r"(?:async\s+)?def\s+(\w+)", 1)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.rename_matched(node, r"def\s+(\w+)", 1)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.rename_matched(node, r"class\s+(\w+)", 1)
        self.generic_visit(node)

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        self.drop_keyword(node, "async")
        self.generic_visit(node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self.drop_keyword(node, "async")
        self.generic_visit(node)

    def visit_Await(self, node: ast.Await) -> None:
        self.drop_keyword(node, "await")
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        if node.is_async:
            target = self.src.offset(node.target.lineno, node.target.col_offset)
            found = list(re.finditer(r"\basync\s+(?=for\b)", self.src.text[:target]))
            if not found:
                raise GenerationError(f"line {node.target.lineno}: cannot find `async for`")
            self.edits.append((found[-1].start(), found[-1].end(), ""))
        self.generic_visit(node)

    # -- names --------------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        start = self.src.offset(node.lineno, node.col_offset)
        self.rename_at(start, node.id, node, CONSTANTS.get(node.id))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        end = self.src.offset(node.end_lineno or node.lineno, node.end_col_offset or 0)
        self.rename_at(end - len(node.attr), node.attr, node)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        self.rename_at(self.src.offset(node.lineno, node.col_offset), node.arg, node)
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None:
            self.rename_at(self.src.offset(node.lineno, node.col_offset), node.arg, node)
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        start = self.src.offset(node.lineno, node.col_offset)
        for match in re.finditer(r"\w+", node.name):
            self.rename_at(start + match.start(), match.group(), node)
        if node.asname:
            found = re.compile(r"\s+as\s+(\w+)").match(self.src.text, start + len(node.name))
            if found is None:
                raise GenerationError(f"line {node.lineno}: cannot find `as {node.asname}`")
            self.rename_at(found.start(1), node.asname, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        start = self.src.offset(node.lineno, node.col_offset)
        match = re.compile(r"from\s+\.*\s*([\w.]*)").match(self.src.text, start)
        if match is None:
            raise GenerationError(f"line {node.lineno}: cannot parse the import")
        for part in re.finditer(r"\w+", match.group(1)):
            self.rename_at(match.start(1) + part.start(), part.group(), node)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        for name in node.names:
            if self.sync_name(name) != name:
                raise GenerationError(f"line {node.lineno}: rename {name!r} by hand")

    visit_Nonlocal = visit_Global


def _comments(text: str) -> dict[int, str]:
    """The comment ending each line, by line number (tokenize never looks inside strings)."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string
    return found


def convert(text: str, names: dict[str, str] | None = None) -> str:
    """The sync twin of the async module ``text``, before formatting."""
    if names is None:
        names = make_sync_name(acompat_renames(ACOMPAT.read_text(encoding="utf-8")))
    source = _Source(text)
    converter = _Converter(source, names, _comments(text))
    converter.visit(ast.parse(text))
    for lineno, amount in converter.dedents.items():
        if lineno not in converter.replaced:
            line = source.lines[lineno - 1]
            cut = min(amount, len(line) - len(line.lstrip(" ")))
            converter.edits.append((source.line_start(lineno), source.line_start(lineno) + cut, ""))
    out = text
    last = len(text) + 1
    for start, end, new in sorted(set(converter.edits), reverse=True):
        if end > last:
            raise GenerationError(f"overlapping edits at offset {start}")
        out = out[:start] + new + out[end:]
        last = start
    return out


def pinned_ruff() -> str:
    """The ruff version pinned in pyproject.toml's ``lint`` extra."""
    with open(ROOT / "pyproject.toml", "rb") as file:
        extras = tomllib.load(file)["project"]["optional-dependencies"]
    for requirement in extras["lint"]:
        if requirement.startswith("ruff=="):
            return str(requirement.removeprefix("ruff=="))
    raise GenerationError("pyproject.toml's lint extra pins no ruff version")


def find_ruff() -> str:
    """The ruff executable: $POSTROOM_RUFF, else next to this Python, else on PATH; it must be
    the pinned version (formatting differs between versions)."""
    candidates = [
        os.environ.get("POSTROOM_RUFF"),
        str(Path(sys.executable).parent / "ruff"),
        shutil.which("ruff"),
    ]
    ruff = next((c for c in candidates if c and Path(c).is_file()), None)
    want = pinned_ruff()
    if ruff is None:
        raise GenerationError(f"ruff {want} not found: pip install -e '.[lint]'")
    version = subprocess.run(
        [ruff, "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    if version != want:
        raise GenerationError(f"{ruff} is ruff {version}; pip install -e '.[lint]' ({want})")
    return ruff


def _ruff(ruff: str, args: list[str], text: str, filename: Path) -> str:
    result = subprocess.run(
        [ruff, *args, "--stdin-filename", str(filename), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if result.returncode != 0 and not result.stdout:
        raise GenerationError(f"ruff {' '.join(args)} failed on {filename}:\n{result.stderr}")
    return result.stdout


def generate(path: Path, ruff: str, names: dict[str, str]) -> str:
    relative = path.relative_to(ROOT)
    header = (
        f"# Generated from {relative.as_posix()} by tools/async_to_sync.py: do not edit.\n"
        "# Change the async module and run `python tools/async_to_sync.py`.\n"
    )
    try:
        converted = header + convert(path.read_text(encoding="utf-8"), names)
    except GenerationError as exc:
        raise GenerationError(f"{relative}: {exc}") from None
    target = sync_path(path)
    # Drop what the sync code no longer uses (asyncio imports, IS_ASYNC), re-sort the imports
    # the renames moved, then format.
    fix = ["check", "--select", "I,F401,UP028", "--fix", "--unsafe-fixes", "--quiet"]
    fixed = _ruff(ruff, fix, converted, target)
    return _ruff(ruff, ["format"], fixed, target)


def sync_path(path: Path) -> Path:
    return path.with_name(path.name.replace("_async.py", ".py"))


def sources() -> Iterator[Path]:
    yield from sorted(SOURCE.rglob("*_async.py"))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a generated file is stale")
    parser.add_argument("--output", type=Path, help="write the twins under this folder instead")
    args = parser.parse_args()
    try:
        ruff = find_ruff()
        names = make_sync_name(acompat_renames(ACOMPAT.read_text(encoding="utf-8")))
        stale = []
        for path in sources():
            target = sync_path(path)
            text = generate(path, ruff, names)
            if args.output is not None:
                out = args.output / target.relative_to(ROOT)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(text, encoding="utf-8")
                continue
            current = target.read_text(encoding="utf-8") if target.exists() else None
            if current == text:
                continue
            stale.append(target)
            if not args.check:
                target.write_text(text, encoding="utf-8")
    except GenerationError as exc:
        print(f"async_to_sync: {exc}", file=sys.stderr)
        return 2
    for target in stale:
        verb = "stale" if args.check else "wrote"
        print(f"{verb}: {target.relative_to(ROOT)}")
    if args.check and stale:
        print("run `python tools/async_to_sync.py` and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
