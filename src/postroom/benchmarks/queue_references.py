"""The queue benchmark's references: what the server does for any SKIP LOCKED queue without
a client library, the floor each burn-down is compared with in the same run.

- the **minimal reference**: claim + delete on a two-column table, one connection;
- the **jobs-table reference**: the same loop on postroom's own ``jobs`` table.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import sql

from ._common import rate
from .queue_phases import SCHEMA, Settings, ready_count


def measure_minimal_reference(
    url: str, settings: Settings, *, async_commit: bool = False
) -> dict[str, Any]:
    """The physical reference: the same claim + delete loop on a minimal two-column queue
    table (``id bigint PRIMARY KEY, claimed boolean``), one connection, in a scratch table
    this benchmark creates and drops. What the server can do for any SKIP LOCKED queue.

    With the server's settings its 2 x jobs/batch commits wait for WAL flushes; with
    ``async_commit`` the session runs as postroom's workers do (``synchronous_commit =
    off``), so the burn-downs are compared with the same commit cost."""
    table = sql.Identifier(SCHEMA, "reference_queue")
    claim = sql.SQL(
        "UPDATE {t} SET claimed = true WHERE id IN (SELECT id FROM {t} WHERE NOT claimed "
        "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id"
    ).format(t=table)
    delete = sql.SQL("DELETE FROM {t} WHERE id = ANY(%s)").format(t=table)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        conn.execute(
            sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, claimed boolean NOT NULL)").format(
                table
            )
        )
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT g, false FROM generate_series(1, %s) AS g").format(
                table
            ),
            (settings.jobs,),
        )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
    with psycopg.connect(url) as conn:
        if async_commit:
            conn.execute("SET synchronous_commit = off")
            conn.commit()
        drained, elapsed = _drain(conn, claim, delete, settings.reference_batch)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE {}").format(table))
    assert drained == settings.jobs, (drained, settings.jobs)
    return {"jobs": drained, "seconds": elapsed, "rate": round(rate(drained, elapsed))}


def _drain(
    conn: psycopg.Connection[Any], claim: sql.Composed, delete: sql.Composed, batch: int
) -> tuple[int, float]:
    """A reference's loop: claim ``batch`` rows and commit, delete them and commit, until the
    claim finds nothing. Returns the rows drained and the seconds it took."""
    drained = 0
    started = time.perf_counter()
    while True:
        rows = conn.execute(claim, (batch,)).fetchall()
        conn.commit()
        if not rows:
            return drained, time.perf_counter() - started
        conn.execute(delete, ([r[0] for r in rows],))
        conn.commit()
        drained += len(rows)


def measure_reference(url: str, settings: Settings) -> dict[str, Any]:
    """The pure-SQL two-step drain of the backlog: claim a batch, commit, delete it, commit."""
    jobs = sql.Identifier(SCHEMA, "jobs")
    claim = sql.SQL(
        "UPDATE {jobs} SET state = 'running', attempts = attempts + 1, worker = 'reference', "
        "lease_expires_at = now() + interval '30 seconds', started_at = now() "
        "WHERE id IN (SELECT id FROM {jobs} WHERE state = 'ready' AND queue = 'default' "
        "AND run_at <= now() ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED) "
        "RETURNING id, args"
    ).format(jobs=jobs)
    delete = sql.SQL("DELETE FROM {jobs} WHERE id = ANY(%s)").format(jobs=jobs)
    backlog = ready_count(url)
    with psycopg.connect(url) as conn:
        drained, elapsed = _drain(conn, claim, delete, settings.reference_batch)
    assert drained == backlog, (drained, backlog)
    return {"jobs": drained, "seconds": elapsed, "rate": round(rate(drained, elapsed))}
