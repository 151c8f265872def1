"""Every public SQL function given a NULL argument answers with a clear error naming it (or
treats the NULL as meaning something), never a raw NOT NULL, CHECK or foreign key violation on
the table it writes, nor an internal error (issue 23, item 12). Enumerated from the catalog, so
a function added later is covered without a change here."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import postroom
from postroom.errors import InvalidArgument

# Raw constraint errors, internal errors, and an overload missed by a cast (a test defect).
RAW = {"23502", "23503", "23514", "XX000", "42883", "42725"}

FUNCTIONS = """
SELECT p.proname, array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t),
       coalesce(p.proargnames[1:p.pronargs], array_fill(''::text, ARRAY[p.pronargs]))
FROM pg_proc p
WHERE p.pronamespace = 'postroom'::regnamespace AND p.proname !~ '^_' AND p.prokind = 'f'
  AND p.prorettype <> 'trigger'::regtype
ORDER BY 1, 2
"""

BY_TYPE = {
    "text": "'t'",
    "integer": "1",
    "bigint": "1",
    "smallint": "1",
    "interval": "'1 hour'",
    "jsonb": "'{}'",
    "bytea": "'v'",
    "boolean": "false",
    "timestamp with time zone": "now()",
    "double precision": "1",
    "uuid": "gen_random_uuid()",
}
TOPIC_ID = "(SELECT id FROM postroom.topics WHERE name = 't')"
BY_NAME = {
    "schedule_cron": "'* * * * *'",
    "limit_scope": "'kind'",
    "reset": "'earliest'",
    "job_state": "'completed'",
    "on_parent_failure": "'cancel'",
    "p_role": "'postgres'",
    "partition": "0",
    "p_partition": "0",
    "topic_ids": f"ARRAY[{TOPIC_ID}]",
    "p_topic_ids": f"ARRAY[{TOPIC_ID}]",
    "partitions": "ARRAY[0]",
    "p_partitions": "ARRAY[0]",
}


def plausible(name: str, type_: str) -> str:
    """A value that passes the function's other checks where it can (topic 't' exists)."""
    known = BY_NAME.get(name)
    if known is not None and known.startswith("ARRAY") == type_.endswith("[]"):
        return known
    if type_.endswith("[]"):
        base = type_[:-2]
        return f"ARRAY[{BY_TYPE[base]}::{base}]"
    return BY_TYPE[type_]


def calls(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """(what, statement) for each function: all arguments NULL, then one NULL at a time."""
    out = []
    for name, types, names in conn.execute(FUNCTIONS).fetchall():
        for position in [-1, *range(len(types))]:
            args = [
                f"NULL::{t}" if position in (-1, i) else f"{plausible(n, t)}::{t}"
                for i, (n, t) in enumerate(zip(names, types, strict=True))
            ]
            nulled = names[position] if position >= 0 else "all"
            what = f"{name}({', '.join(types)}) with {nulled} NULL"
            out.append((what, f"SELECT * FROM postroom.{name}({', '.join(args)})"))
    return out


def test_no_sql_function_answers_a_null_argument_with_a_raw_constraint_error(
    client: postroom.Client,
) -> None:
    client.create_topic("t", partitions=2)
    raw = []
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '10s'")
        conn.execute("SET lock_timeout = '5s'")
        tried = calls(conn)
        for what, statement in tried:
            try:
                with conn.transaction(force_rollback=True):
                    conn.execute(statement.encode()).fetchall()
            except psycopg.Error as exc:
                if exc.sqlstate in RAW or exc.sqlstate in ("57014", "55P03"):
                    raw.append(f"{what}: {exc.sqlstate} {str(exc).splitlines()[0]}")
    assert len(tried) > 200  # the catalog query found the functions
    assert raw == []


@pytest.mark.parametrize(
    ("statement", "argument"),
    [
        ("SELECT postroom.create_topic(NULL, 1)", "name"),
        ("SELECT postroom.create_topic('t', NULL)", "partitions"),
        ("SELECT postroom.set_job_limit(NULL, 'k', 1, NULL, NULL)", "limit_scope"),
        (
            "SELECT postroom.upsert_schedule(NULL, '* * * * *', 'k', 'default', '{}', 0, 1, now())",
            "schedule_name",
        ),
    ],
)
def test_a_null_argument_is_null_value_not_allowed_naming_it(
    client: postroom.Client, statement: str, argument: str
) -> None:
    with psycopg.connect(client.conninfo) as conn:
        with pytest.raises(psycopg.errors.NullValueNotAllowed, match=f"argument {argument} "):
            conn.execute(statement.encode())


def test_a_null_argument_through_the_client_is_an_invalid_argument_naming_it(
    client: postroom.Client,
) -> None:
    with pytest.raises(InvalidArgument, match="set_job_limit\\(\\): argument limit_name must not"):
        with client._db.connection() as conn:
            conn.execute("SELECT postroom.set_job_limit('kind', NULL, 1, NULL, NULL)")
