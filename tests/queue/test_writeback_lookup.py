"""The worker's write-backs (fail, snooze, finish cancelled) match each job to its own entries of
the parallel arrays, whatever their order, and never by a linear search per row (migration
0016: an O(batch^2) statement for a burst of failures)."""

from __future__ import annotations

import hashlib
import random
import uuid
from typing import Any

import psycopg

import postroom

COUNT = 300


def running_jobs(client: postroom.Client, conn: psycopg.Connection[Any]) -> list[int]:
    """COUNT jobs held by worker 'w' at attempt 1, as a claim leaves them, with claim tokens
    token(id)."""
    ids = [client.enqueue("noop", {"n": n}).id for n in range(COUNT)]
    conn.execute(
        "UPDATE postroom.jobs SET state = 'running', attempts = 1, worker = 'w',"
        " lease_expires_at = now() + interval '1 hour', claim_token = md5(id::text)::uuid"
        " WHERE id = ANY(%s)",
        (ids,),
    )
    return ids


def token(job_id: int) -> uuid.UUID:
    return uuid.UUID(hashlib.md5(str(job_id).encode()).hexdigest())


def test_each_failure_snooze_and_cancellation_lands_on_its_own_job(dsn: str) -> None:
    shuffle = random.Random(16).shuffle
    with postroom.connect(dsn) as client, psycopg.connect(dsn, autocommit=True) as conn:
        ids = running_jobs(client, conn)
        shuffle(ids)
        stale = set(ids[:10])  # a stale claim: that entry must be left alone
        tokens = [uuid.uuid4() if i in stale else token(i) for i in ids]
        conn.execute(
            "SELECT postroom.fail_jobs('w', %s, %s, %s, %s, %s)",
            (
                ids,
                tokens,
                [f"error {i}" for i in ids],
                [float(i % 7) * 3600 for i in ids],
                [i % 2 == 0 for i in ids],
            ),
        )
        rows = conn.execute(
            "SELECT id, state, last_error, run_at - now() > interval '1 minute', worker"
            " FROM postroom.jobs WHERE id = ANY(%s)",
            (ids,),
        ).fetchall()
        for job_id, state, error, later, worker in rows:
            if job_id in stale:
                assert (state, error, worker) == ("running", None, "w")
                continue
            final = job_id % 2 == 0  # max_attempts > 1: only the final flag fails it for good
            assert (state, error) == ("failed" if final else "ready", f"error {job_id}")
            assert later == (job_id % 7 != 0), job_id

        ids = running_jobs(client, conn)
        shuffle(ids)
        conn.execute(
            "SELECT postroom.snooze_jobs('w', %s, %s, %s)",
            (ids, [token(i) for i in ids], [float(i % 3) * 3600 for i in ids]),
        )
        rows = conn.execute(
            "SELECT id, state, attempts, run_at - now() > interval '1 minute'"
            " FROM postroom.jobs WHERE id = ANY(%s)",
            (ids,),
        ).fetchall()
        assert len(rows) == COUNT
        for job_id, state, attempts_left, later in rows:
            assert (state, attempts_left, later) == ("ready", 0, job_id % 3 != 0), job_id

        ids = running_jobs(client, conn)
        shuffle(ids)
        conn.execute(
            "SELECT postroom.finish_cancelled_jobs('w', %s, %s, %s)",
            (ids, [token(i) for i in ids], [f"stop {i}" for i in ids]),
        )
        rows = conn.execute(
            "SELECT id, state, last_error FROM postroom.finished_jobs WHERE id = ANY(%s)", (ids,)
        ).fetchall()
        assert sorted(rows) == sorted((i, "cancelled", f"stop {i}") for i in ids)


def test_no_write_back_searches_the_id_array_per_row(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        linear = conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'postroom' AND p.prosrc LIKE '%%array_position(job_ids%%'"
            " ORDER BY 1"
        ).fetchall()
    assert linear == []
