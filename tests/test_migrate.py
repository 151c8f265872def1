"""Migrations: idempotent, serialized across processes, and one source of truth."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

import postroom
from postroom import _sql

MIGRATE = """
import sys, postroom
with postroom.connect(sys.argv[1], schema="fresh") as client:
    print(len(client.migrate()))
"""


@pytest.mark.slow
def test_ten_processes_migrating_at_once(dsn: str) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", MIGRATE, dsn], stdout=subprocess.PIPE, text=True)
        for _ in range(10)
    ]
    applied = []
    for proc in procs:
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0
        applied.append(int(out))
    # Exactly one process applied every migration; the others found nothing to do.
    assert sorted(applied) == [0] * 9 + [len(_sql.migrations())]
    with postroom.connect(dsn, schema="fresh") as client:
        assert client.pending_migrations() == []
        client.create_topic("works")
        assert client.publish("works", "x") == postroom.Published(0, 0)


def test_schemas_are_independent(dsn: str) -> None:
    with (
        postroom.connect(dsn, schema="tenant_a") as a,
        postroom.connect(dsn, schema="tenant_b") as b,
    ):
        a.migrate()
        b.migrate()
        a.create_topic("t")
        assert [t.name for t in a.list_topics()] == ["t"]
        assert b.list_topics() == []
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT version FROM tenant_a.schema_migrations ORDER BY 1").fetchall()
    assert [r[0] for r in rows] == [m.version for m in _sql.migrations()]


def test_migration_files_are_numbered_uniquely_in_order() -> None:
    # Numbers are handed out ahead to changes in flight, so one may land before another: a
    # gap is allowed, a duplicate is not.
    versions = [m.version for m in _sql.migrations()]
    assert versions[0] == 1 and versions == sorted(set(versions))
