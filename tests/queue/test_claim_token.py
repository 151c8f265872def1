"""A worker role cannot forge another worker's write-backs (issue 23 item 3, issue 21 item 14):
they are fenced by a per-claim token that only the claiming connection learns, not by the
worker name and attempt, which job_outcome shows after a lease expiry. Both workers log in as
roles granted only "worker"."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom

from ..roles import login_role
from .helpers import query

WRITE_BACKS = [
    "SELECT postroom.complete_jobs_archived('alice', %(ids)s, %(tokens)s, ARRAY['1'::jsonb])",
    "SELECT postroom.complete_jobs_deleted('alice', %(ids)s, %(tokens)s)",
    "SELECT postroom.fail_jobs('alice', %(ids)s, %(tokens)s, ARRAY['x'], ARRAY[0::float8],"
    " ARRAY[true])",
    "SELECT postroom.snooze_jobs('alice', %(ids)s, %(tokens)s, ARRAY[1e9::float8])",
    "SELECT postroom.release_jobs('alice', %(ids)s, %(tokens)s, ARRAY[true], 'forged')",
    "SELECT postroom.finish_cancelled_jobs('alice', %(ids)s, %(tokens)s, ARRAY['forged'])",
    "SELECT * FROM postroom.heartbeat_jobs('alice', %(ids)s, %(tokens)s, '100 years')",
]


@pytest.fixture
def workers(client: postroom.Client) -> Iterator[tuple[str, str]]:
    """The URLs of two LOGIN roles granted "worker", dropped after the test."""
    with (
        login_role(client.conninfo, "postroom_alice") as alice,
        login_role(client.conninfo, "postroom_mallory") as mallory,
    ):
        client.grant(alice, "worker")
        client.grant(mallory, "worker")
        yield (
            make_conninfo(client.conninfo, user=alice),
            make_conninfo(client.conninfo, user=mallory),
        )


def claim(conn: psycopg.Connection[Any], worker: str) -> tuple[int, int, uuid.UUID]:
    row = conn.execute(
        "SELECT id, attempts, claim_token"
        " FROM postroom.claim_jobs(ARRAY['default'], 1, %s, '1 hour')",
        [worker],
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def job_row(client: postroom.Client, job_id: int) -> tuple[Any, ...]:
    return query(
        client.conninfo,
        "SELECT state, worker, attempts, run_at, lease_expires_at, last_error FROM postroom.jobs"
        " WHERE id = %s",
        (job_id,),
    )[0]


def test_worker_role_knowing_name_and_attempt_cannot_write_back_another_workers_job(
    client: postroom.Client, workers: tuple[str, str]
) -> None:
    alice_url, mallory_url = workers
    job = client.enqueue("ok")
    with (
        psycopg.connect(alice_url, autocommit=True) as alice,
        psycopg.connect(mallory_url, autocommit=True) as mallory,
    ):
        job_id, attempt, token = claim(alice, "alice")
        assert job_id == job.id and attempt == 1
        before = job_row(client, job_id)
        # Mallory knows the worker name and the attempt (last_error shows them after a lease
        # expiry); the fence of the earlier write-backs took exactly these.
        for statement in WRITE_BACKS:
            for tokens in ([uuid.uuid4()], [uuid.UUID(int=attempt)]):
                rows = mallory.execute(
                    statement.encode(), {"ids": [job_id], "tokens": tokens}
                ).fetchall()
                assert rows in ([], [("",)], [(None,)]), statement
        # The name-and-attempt forms are gone.
        with pytest.raises(psycopg.errors.UndefinedFunction):
            mallory.execute(
                "SELECT postroom.complete_jobs_deleted('alice', %s, %s::integer[])",
                [[job_id], [attempt]],
            )
        assert job_row(client, job_id) == before
        # Alice's token is hers alone, and her write-back lands.
        alice.execute(
            "SELECT postroom.complete_jobs_archived('alice', %s, %s, ARRAY['7'::jsonb])",
            [[job_id], [token]],
        )
    assert client.job_handle(job.id).result(timeout=5) == 7


def test_a_job_claimed_again_gets_a_new_token(
    client: postroom.Client, workers: tuple[str, str]
) -> None:
    """A rescued job claimed again under the same worker name and the next attempt: the first
    claim's token no longer fences anything."""
    alice_url, _ = workers
    client.enqueue("ok")
    with psycopg.connect(alice_url, autocommit=True) as alice:
        job_id, _, first = claim(alice, "alice")
        query(
            client.conninfo,
            "UPDATE postroom.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s"
            " RETURNING id",
            (job_id,),
        )
        alice.execute("SELECT postroom.rescue_expired_jobs(10)")
        again, attempt, second = claim(alice, "alice")
        assert (again, attempt) == (job_id, 2) and second != first
        beat = alice.execute(
            "SELECT id FROM postroom.heartbeat_jobs('alice', %s, %s, '1 hour')",
            [[job_id], [first]],
        ).fetchall()
        assert beat == []
        beat = alice.execute(
            "SELECT id FROM postroom.heartbeat_jobs('alice', %s, %s, '1 hour')",
            [[job_id], [second]],
        ).fetchall()
        assert beat == [(job_id,)]


def test_every_claim_gets_its_own_token(client: postroom.Client, workers: tuple[str, str]) -> None:
    """One token per claim statement (its jobs share it), a fresh one for the next claim, by
    the limited claim path too."""
    alice_url, _ = workers
    for n in range(6):
        client.enqueue("ok", {"n": n})
    with psycopg.connect(alice_url, autocommit=True) as alice:
        claim_three = "SELECT claim_token FROM postroom.claim_jobs(ARRAY['default'], 3, 'a', '1 h')"
        first = {row[0] for row in alice.execute(claim_three).fetchall()}
        client.set_job_limit("ok", max_concurrency=100)  # the limited path (_claim_some)
        second = {row[0] for row in alice.execute(claim_three).fetchall()}
    assert len(first) == 1 and len(second) == 1 and first != second
    assert None not in first | second
