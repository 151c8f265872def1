"""Runtime SQL: named queries in ``*.sql`` files and the numbered migrations.

A query file holds statements each introduced by ``-- name: query_name`` and a one-line comment
saying what it does and which locks it takes. Queries are loaded once, then rendered per client
with the schema name as a quoted identifier (``{schema}`` placeholders; literal braces doubled).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import LiteralString, cast

from psycopg import sql

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _read(path: str) -> str:
    return resources.files(__package__).joinpath(path).read_text(encoding="utf-8")


def load_queries(filename: str) -> dict[str, LiteralString]:
    """Parse ``filename`` (next to this module) into ``{name: statement}``."""
    text = _read(filename)
    parts = _NAME.split(text)
    queries: dict[str, LiteralString] = {}
    # parts = [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{filename}: query {name!r} is defined twice")
        # The file is package data shipped with postroom, never user input.
        queries[name] = cast(LiteralString, body.strip().rstrip(";"))
    return queries


def render(statement: LiteralString, schema: str, **identifiers: str) -> sql.Composed:
    """The statement with ``{schema}`` (and any other named placeholders in ``identifiers``,
    such as ``{role}``) replaced by quoted identifiers."""
    names = {name: sql.Identifier(value) for name, value in identifiers.items()}
    return sql.SQL(statement).format(schema=sql.Identifier(schema), **names)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statement: LiteralString


def migrations() -> list[Migration]:
    """Every migration shipped with this version of postroom, in version order."""
    found = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            text: LiteralString = entry.read_text(encoding="utf-8")  # package data
            found.append(Migration(int(match.group(1)), match.group(2), text))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    # Numbers are handed out ahead (one per change in flight), so a gap is allowed; a
    # duplicate is not.
    if len(set(versions)) != len(versions) or (versions and versions[0] != 1):
        raise RuntimeError(f"migration versions must be unique from 1 up, found {versions}")
    return found


def all_queries() -> dict[str, LiteralString]:
    """The named queries of every ``*.sql`` file next to this module."""
    queries: dict[str, LiteralString] = {}
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, text in load_queries(entry.name).items():
                if name in queries:
                    raise ValueError(f"query {name!r} is defined in two .sql files")
                queries[name] = text
    return queries
