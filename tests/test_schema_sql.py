"""SQL files: comments never reach the server, schema.sql is what the migrations give, and
released migrations never change (Procrastinate's migration test is the model)."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import psycopg
import pytest
from psycopg import sql

import postroom
from postroom import _sql

ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = ROOT / "src" / "postroom" / "_sql"
FIX = "run `python tools/dump_schema.py` (after merging migrations) and commit schema.sql"


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dump_schema", ROOT / "tools/dump_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dump_schema"] = module
    spec.loader.exec_module(module)
    return module


# -- comments --------------------------------------------------------------------------------


def test_comments_are_stripped_but_quoted_text_is_kept() -> None:
    text = """
-- name: q
-- a {brace} and %(param)s in a comment
SELECT '--not a comment', E'it\\'s -- text', "odd--name" /* block /* nested */ end */, 1
FROM t -- trailing %(x)s
WHERE f($1) AND g = $tag$ -- kept $ body $tag$;
"""
    assert _sql.strip_comments(text) == (
        "SELECT '--not a comment', E'it\\'s -- text', \"odd--name\"  , 1\n"
        "FROM t\n"
        "WHERE f($1) AND g = $tag$ -- kept $ body $tag$;"
    )


def test_a_brace_or_placeholder_in_a_comment_cannot_break_a_query() -> None:
    # Before comments were stripped, `{` in a comment made SQL.format() raise and `%(x)s` made
    # psycopg expect a parameter.
    query = _sql.strip_comments("-- uses {nothing} nor %(x)s\nSELECT 1")
    assert _sql.render(query, "s").as_string(None) == "SELECT 1"


def test_no_loaded_query_or_migration_carries_a_comment() -> None:
    texts = list(_sql.all_queries().values()) + [m.statement for m in _sql.migrations()]
    for text in texts:
        outside_dollars = re.sub(r"\$(\w*)\$.*?\$\1\$", "", text, flags=re.DOTALL)
        lines = [line.strip() for line in outside_dollars.splitlines()]
        assert not [line for line in lines if line.startswith("--")], text[:200]


# -- schema.sql ------------------------------------------------------------------------------

# One row per catalog object of a schema, with the schema's name replaced by `S`.
CATALOG = """
SELECT 'table ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(c.reloptions::text, '')
       || ' rls=' || c.relrowsecurity || ' acl=' || coalesce(c.relacl::text, '')
FROM pg_class c WHERE c.relnamespace = %(ns)s::regnamespace AND c.relkind <> 'i'
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname || ' #'
       || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) || ' '
       || format_type(a.atttypid, a.atttypmod) || ' notnull=' || a.attnotnull
       || ' identity=' || a.attidentity::text || ' generated=' || a.attgenerated::text
       || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
       || ' acl=' || coalesce(a.attacl::text, '')
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = %(ns)s::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' '
       || pg_get_constraintdef(oid)
FROM pg_constraint WHERE connamespace = %(ns)s::regnamespace
UNION ALL
SELECT 'index ' || pg_get_indexdef(indexrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relnamespace = %(ns)s::regnamespace
UNION ALL
SELECT 'function ' || pg_get_functiondef(p.oid) || ' acl=' || coalesce(p.proacl::text, '')
FROM pg_proc p WHERE p.pronamespace = %(ns)s::regnamespace
UNION ALL
SELECT 'trigger ' || pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relnamespace = %(ns)s::regnamespace AND NOT t.tgisinternal
UNION ALL
SELECT 'type ' || t.typname || ' ' || t.typtype::text || ' '
       || coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                    FROM pg_enum e WHERE e.enumtypid = t.oid), '')
FROM pg_type t WHERE t.typnamespace = %(ns)s::regnamespace AND t.typtype IN ('e', 'd', 'r')
UNION ALL
SELECT 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid)
FROM pg_class c WHERE c.relnamespace = %(ns)s::regnamespace AND c.relkind IN ('v', 'm')
UNION ALL
SELECT 'policy ' || p.polname || ' ' || p.polrelid::regclass::text || ' '
       || coalesce(pg_get_expr(p.polqual, p.polrelid), '')
FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
WHERE c.relnamespace = %(ns)s::regnamespace
UNION ALL
SELECT 'sequence ' || s.seqrelid::regclass::text || ' ' || s.seqtypid::regtype::text || ' '
       || s.seqstart || ' ' || s.seqincrement || ' ' || s.seqmax || ' ' || s.seqmin
FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
WHERE c.relnamespace = %(ns)s::regnamespace
UNION ALL
SELECT 'schema acl=' || coalesce(nspacl::text, '')
FROM pg_namespace WHERE oid = %(ns)s::regnamespace
"""


def catalog(conn: psycopg.Connection, schema: str) -> list[str]:
    rows = conn.execute(CATALOG, {"ns": schema}).fetchall()
    named = re.compile(rf'"{schema}"|\b{schema}\b')
    return sorted(named.sub("S", row[0]) for row in rows)


def test_schema_sql_equals_every_migration_applied_in_order(dsn: str) -> None:
    with postroom.connect(dsn, schema="catalog_migrated") as client:
        client.migrate()
    schema_sql = (SQL_DIR / "schema.sql").read_text(encoding="utf-8")
    with psycopg.connect(dsn) as conn:
        conn.execute(_sql.render(_sql.strip_comments(schema_sql), "catalog_fresh"))
        conn.commit()
        migrated = catalog(conn, "catalog_migrated")
        fresh = catalog(conn, "catalog_fresh")
    assert len(migrated) > 50
    only_migrated = sorted(set(migrated) - set(fresh))
    only_fresh = sorted(set(fresh) - set(migrated))
    assert not only_migrated and not only_fresh, (
        f"schema.sql and the migrations differ: {FIX}\n"
        f"only after the migrations: {only_migrated}\nonly in schema.sql: {only_fresh}"
    )


def test_the_catalog_comparison_sees_a_difference(dsn: str) -> None:
    with (
        postroom.connect(dsn, schema="catalog_a") as a,
        postroom.connect(dsn, schema="catalog_b") as b,
    ):
        a.migrate()
        b.migrate()
    with psycopg.connect(dsn) as conn:
        before = catalog(conn, "catalog_a")
        assert before == catalog(conn, "catalog_b")
        conn.execute(
            sql.SQL("ALTER TABLE {}.topics ALTER COLUMN config SET DEFAULT '[]'").format(
                sql.Identifier("catalog_b")
            )
        )
        assert catalog(conn, "catalog_a") != catalog(conn, "catalog_b")


def test_schema_sql_names_every_migration() -> None:
    head = (SQL_DIR / "schema.sql").read_text(encoding="utf-8").splitlines()[1]
    last = _sql.migrations()[-1]
    assert f"{last.version:04d}_{last.name})" in head, FIX


# -- released migrations ---------------------------------------------------------------------


def test_released_migrations_are_never_edited() -> None:
    tool = _load_tool()
    sums = tool.checksums()
    assert {"0001_log.sql", "0002_queue.sql"} <= set(sums)
    for name, digest in sums.items():
        actual = hashlib.sha256((SQL_DIR / "migrations" / name).read_bytes()).hexdigest()
        assert actual == digest, (
            f"{name} was released and must not change (old installs would never see the edit): "
            "put the change in a new migration"
        )


def test_a_released_migration_edit_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = _load_tool()
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    (migrations / "0001_x.sql").write_text("CREATE TABLE {schema}.t ();\n")
    monkeypatch.setattr(tool, "MIGRATIONS", migrations)
    monkeypatch.setattr(tool, "RELEASED", migrations / "RELEASED.sha256")
    assert tool.release() == ["0001_x.sql"]
    assert tool.release() == []
    (migrations / "0001_x.sql").write_text("CREATE TABLE {schema}.t (id int);\n")
    assert tool.checksums()["0001_x.sql"] != tool.file_sha256(migrations / "0001_x.sql")


def test_every_named_query_is_used() -> None:
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "postroom").rglob("*.py"))
    unused = [name for name in _sql.all_queries() if f'"{name}"' not in source]
    assert not unused, f"named queries nothing runs: {unused}"
