"""Claim floors (issue 19, a pinned vacuum horizon; docs/queue.md "Claim floors"): a worker's
claim starts each queue's scan where its last claim left off, so the ready index's entries of
jobs claimed since the horizon was pinned are not walked; a job below the floor is still
claimed (the floor watch lowers the floor), and a more urgent one never waits for it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import postroom
from postroom.queue.claiming import FLOOR_MARGIN, ClaimFloors

from .helpers import query, running

CLAIM = (
    "SELECT id FROM postroom.claim_jobs(ARRAY['default'], %(n)s, 'w', '1 hour',"
    " ARRAY[%(fp)s]::smallint[], ARRAY[%(ft)s]::timestamptz[])"
)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
WAIT = 20.0


def enqueue_at(dsn: str, priority: int, run_at: datetime, n: int = 1) -> list[int]:
    rows = query(
        dsn,
        "SELECT postroom.enqueue('k', '{}'::jsonb, 'default', %s, %s) FROM generate_series(1, %s)",
        [priority, run_at, n],
    )
    return [row[0] for row in rows]


def claim(dsn: str, floor: tuple[int | None, datetime | None], n: int = 10) -> list[int]:
    return [r[0] for r in query(dsn, CLAIM, {"n": n, "fp": floor[0], "ft": floor[1]})]


def test_a_floor_skips_what_sorts_below_it_but_never_a_more_urgent_job(
    client: postroom.Client, dsn: str
) -> None:
    below = enqueue_at(dsn, 5, T0)
    urgent = enqueue_at(dsn, 1, T0 + timedelta(hours=2))
    at_floor = enqueue_at(dsn, 5, T0 + timedelta(hours=1))
    later_priority = enqueue_at(dsn, 9, T0)
    # Claim order: more urgent priorities first (never held back by a floor), then from the
    # floor on; the job below the floor of its own priority is left.
    assert claim(dsn, (5, T0 + timedelta(hours=1))) == urgent + at_floor + later_priority
    assert query(dsn, "SELECT id, state FROM postroom.jobs WHERE id = %s", below) == [
        (below[0], "ready")
    ]
    assert query(
        dsn,
        "SELECT queue, run_at FROM postroom.jobs_below_floors(ARRAY['default', 'other'],"
        " ARRAY[5, 5]::smallint[], ARRAY[%s, %s]::timestamptz[])",
        [T0 + timedelta(hours=1), T0 + timedelta(hours=1)],
    ) == [("default", T0)]
    assert claim(dsn, (None, None)) == below  # no floor: the whole queue, as before


def test_a_floor_claim_honours_pauses_and_limits_on_both_paths(
    client: postroom.Client, dsn: str
) -> None:
    first = enqueue_at(dsn, 0, T0, 3)
    client.jobs.pause_queue("default")
    assert claim(dsn, (0, T0)) == []
    client.jobs.resume_queue("default")
    # With a limit (migration 0020's limited path), the floor and the limit both hold.
    client.jobs.admin.set_limit("queue", "default", 2, None, None)
    assert claim(dsn, (0, T0 + timedelta(days=1))) == []
    urgent = enqueue_at(dsn, -1, T0 + timedelta(days=2))
    assert claim(dsn, (0, T0 + timedelta(days=1))) == urgent  # more urgent: never held back
    assert claim(dsn, (0, T0)) == first[:1]  # the limit: two running
    assert claim(dsn, (None, None)) == []


def test_a_released_child_is_due_from_its_release_above_any_floor(
    client: postroom.Client, dsn: str
) -> None:
    """A workflow child becomes ready when its parent succeeds, due from then: the claim of a
    worker whose floor passed the child's run_at (an hour before, here) takes it at once (it
    kept that run_at before, and waited for the floor watch at each step of a workflow)."""
    (parent,) = enqueue_at(dsn, 0, T0)
    (child,) = [
        row[0]
        for row in query(
            dsn,
            "SELECT postroom.enqueue('k', '{}'::jsonb, run_at => now() - interval '1 hour',"
            " after => ARRAY[%s]::bigint[])",
            [parent],
        )
    ]
    ((claimed, token),) = query(
        dsn, "SELECT id, claim_token FROM postroom.claim_jobs(ARRAY['default'], 1, 'w', '1 h')"
    )
    assert claimed == parent
    query(dsn, "SELECT postroom.complete_jobs_deleted('w', ARRAY[%s], ARRAY[%s])", [parent, token])
    (now,) = query(dsn, "SELECT now()")[0]
    assert claim(dsn, (0, now - FLOOR_MARGIN)) == [child]


@pytest.mark.parametrize(
    ("floors", "error"),
    [
        ("ARRAY[0, 1]::smallint[], ARRAY[now()]", "1 queues but 2 floor priorities"),
        ("NULL, ARRAY[now()]", "no argument may be NULL"),
    ],
)
def test_floors_that_do_not_match_the_queues_are_refused(
    client: postroom.Client, dsn: str, floors: str, error: str
) -> None:
    with pytest.raises(psycopg.Error, match=error):
        query(dsn, f"SELECT * FROM postroom.claim_jobs(ARRAY['default'], 1, 'w', '1 h', {floors})")
    with pytest.raises(psycopg.Error, match=error.replace("floor priorities", "floor")):
        query(dsn, f"SELECT * FROM postroom.jobs_below_floors(ARRAY['default'], {floors})")


def buffers(conn: psycopg.Connection[Any], floor: tuple[int | None, datetime | None]) -> int:
    """Shared buffers one claim of 10 jobs touches (rolled back)."""
    with conn.transaction(force_rollback=True):
        plan = conn.execute(
            b"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) " + CLAIM.encode(),
            {"n": 10, "fp": floor[0], "ft": floor[1]},
        ).fetchall()
    line = next(row[0] for row in plan if "Buffers: shared hit=" in row[0])
    return int(line.split("hit=")[1].split()[0])


@pytest.mark.parametrize("limited", [False, True], ids=["unlimited", "limited"])
def test_behind_a_pinned_horizon_a_floor_claim_does_not_walk_the_claimed_jobs(
    client: postroom.Client, dsn: str, limited: bool
) -> None:
    """Every claim of the whole queue visits the ready index's entry of every job claimed since
    the horizon was pinned; from a floor it does not: 5,000 jobs claimed and deleted behind an
    open transaction, then the buffers of one claim of the next 10. Both claim paths: without
    job limits, and with one (a queue limit that holds nothing back)."""
    if limited:
        client.jobs.admin.set_limit("queue", "default", 100_000, None, None)
    with (
        psycopg.connect(dsn) as pin,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        pin.execute("SELECT txid_current()")  # idle in transaction with an XID: the pin
        enqueue_at(dsn, 0, T0, 5_000)
        for _ in range(10):
            ids = claim(dsn, (None, None), 500)
            conn.execute("DELETE FROM postroom.jobs WHERE id = ANY(%s)", [ids])
        enqueue_at(dsn, 0, T0 + timedelta(hours=1), 10)
        whole, floored = buffers(conn, (None, None)), buffers(conn, (0, T0 + timedelta(hours=1)))
        assert whole > 5_000 / 10  # the dead entries' heap pages
        assert floored < whole / 4, (whole, floored)
        pin.rollback()


def test_claim_floors_follow_the_last_claim_and_only_fall_when_lowered() -> None:
    floors = ClaimFloors(["a", "b"])
    assert not floors.any()
    assert floors.arguments() == {"floor_priorities": [None, None], "floor_run_ats": [None, None]}
    row: list[Any] = [1, "a", "k", "{}", 1, 1, None, T0, "t", None, 3]
    later = [2, "a", "k", "{}", 1, 1, None, T0 + timedelta(hours=1), "t", None, 3]
    floors.claimed([row, later])
    assert floors.arguments() == {
        "floor_priorities": [3, None],
        "floor_run_ats": [T0 + timedelta(hours=1) - FLOOR_MARGIN, None],
    }
    floors.lower("a", 3, T0 + timedelta(hours=2))  # above the floor: no change
    floors.lower("b", 0, T0)  # no floor to lower
    assert floors.arguments()["floor_run_ats"] == [T0 + timedelta(hours=1) - FLOOR_MARGIN, None]
    floors.lower("a", 3, T0)
    assert floors.arguments() == {"floor_priorities": [3, None], "floor_run_ats": [T0, None]}
    floors.reset()
    assert not floors.any()


def test_a_job_enqueued_below_a_running_workers_floor_still_runs(
    any_client: postroom.Client,
) -> None:
    """The worker's floor is past the first job; a job enqueued then with a run_at an hour in
    the past sorts below it: the floor watch finds it and the worker runs it."""
    ran: dict[str, threading.Event] = {"first": threading.Event(), "late": threading.Event()}

    @any_client.job("mark")
    def mark(name: str) -> None:
        ran[name].set()

    with running(any_client.worker(poll_interval=60.0)):
        mark.enqueue(name="first")
        assert ran["first"].wait(WAIT)
        mark.enqueue(name="late", run_at=datetime.now(UTC) - timedelta(hours=1))
        assert ran["late"].wait(WAIT), "a job below the worker's claim floor never ran"
