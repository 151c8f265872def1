"""Completions of jobs that end no sequence do not read finished_jobs (migration 0030).

The sequences' clean-up trigger used to join every deleted job with finished_jobs, through a
plan PL/pgSQL cached while finished_jobs was empty: a scan of all of finished_jobs per deleted
job, so a worker's completions slowed down as finished_jobs filled up."""

from __future__ import annotations

from typing import Any

import psycopg

import postroom

from .test_writeback_lookup import running_jobs, token


def finished_jobs_reads(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """Sequential scans, rows they read and index scans of finished_jobs in this transaction."""
    row = conn.execute(
        "SELECT seq_scan, seq_tup_read, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables"
        " WHERE relid = 'postroom.finished_jobs'::regclass"
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def complete(conn: psycopg.Connection[Any], ids: list[int]) -> None:
    conn.execute(
        "SELECT postroom.complete_jobs_archived('w', %s, %s, %s::jsonb[])",
        (ids, [token(i) for i in ids], [None] * len(ids)),
    )


def test_completions_without_sequences_do_not_read_finished_jobs(dsn: str) -> None:
    with postroom.connect(dsn) as client, psycopg.connect(dsn, autocommit=True) as conn:
        ids = running_jobs(client, conn)
        # The session's first completion, of one job while finished_jobs is empty, planned the
        # trigger's join for that: one scan of finished_jobs per deleted job, kept for the
        # session (290 scans of 10 rows below, and of millions once finished_jobs fills up).
        complete(conn, ids[:1])
        complete(conn, ids[1:10])
        with conn.transaction():
            before = finished_jobs_reads(conn)
            complete(conn, ids[10:])
            after = finished_jobs_reads(conn)
        assert after == before, f"finished_jobs read by the completion: {before} -> {after}"
        kept = conn.execute(
            "SELECT count(*) FROM postroom.finished_jobs WHERE id = ANY(%s)", (ids,)
        ).fetchone()
        assert kept == (len(ids),)


def test_a_sequence_still_ends_with_its_last_job_and_a_cancelled_one_keeps_it(dsn: str) -> None:
    with postroom.connect(dsn) as client, psycopg.connect(dsn, autocommit=True) as conn:
        done = client.enqueue("noop", {"n": 1}, sequence="ends")
        cancelled = client.enqueue("noop", {"n": 2}, sequence="stays")
        assert client.cancel_job(cancelled.id) == "ready"
        conn.execute(
            "UPDATE postroom.jobs SET state = 'running', attempts = 1, worker = 'w',"
            " lease_expires_at = now() + interval '1 hour', claim_token = md5(id::text)::uuid"
            " WHERE id = %s",
            (done.id,),
        )
        complete(conn, [done.id])
        keys = conn.execute("SELECT key FROM postroom.job_sequences ORDER BY key").fetchall()
        assert keys == [("stays",)]
