"""Unique keys and batch enqueue on real PostgreSQL, through the client and through SQL: concurrent
enqueues, batches mixing options and workflows, a bad item named with nothing written."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import postroom
from postroom.errors import (
    InvalidArgument,
    InvalidType,
    UniqueKeyTaken,
)

from .helpers import query, scalar
from .test_jobs import worker


def test_unique_keys_hold_under_concurrent_enqueues(any_client: postroom.Client) -> None:
    def enqueue_many(_: int) -> set[int]:
        return {
            any_client.enqueue("report", {"day": "2024-01-01"}, unique_key="report:2024-01-01").id
            for _ in range(10)
        }

    with ThreadPoolExecutor(8) as pool:
        ids = set().union(*pool.map(enqueue_many, range(8)))
    assert len(ids) == 1
    live = any_client.list_jobs(kind="report")
    assert [j.id for j in live] == list(ids)
    again = any_client.enqueue("report", unique_key="report:2024-01-01")
    assert (again.id, again.created) == (live[0].id, False)

    @any_client.job("report")
    def report(day: str = "") -> None:
        pass

    worker(any_client).run(burst=True, handle_signals=False)
    fresh = any_client.enqueue("report", unique_key="report:2024-01-01")
    assert fresh.created and fresh.id not in ids  # the key is free once the job finished


def test_unique_key_in_a_batch_and_through_sql(any_client: postroom.Client, dsn: str) -> None:
    jobs = any_client.enqueue_batch(
        [
            {"kind": "k", "unique_key": "a"},
            {"kind": "k"},
            {"kind": "k", "unique_key": "a"},
            {"kind": "k", "unique_key": "b"},
        ]
    )
    assert [j.created for j in jobs] == [True, True, False, True]
    assert jobs[0].id == jobs[2].id
    sql_id = scalar(dsn, "SELECT postroom.enqueue('k', unique_key => 'b')")
    assert sql_id == jobs[3].id


def test_a_batch_mixing_options_unique_keys_and_workflows(
    any_client: postroom.Client, dsn: str
) -> None:
    """Runs of plain jobs go in one statement with the columns every job shares sent once
    (migration 0014); each job still gets its own options, in input order."""

    @any_client.job("step", queue="steps", max_attempts=3)
    def step(n: int) -> None:
        pass

    parent = step.enqueue(n=0)
    when = datetime(2031, 1, 1, tzinfo=UTC)
    jobs = any_client.enqueue_batch(
        [
            step.prepare(n=1),
            {"kind": "step", "args": {"n": 2}, "priority": 5, "queue": "other"},
            step.prepare(n=3, unique_key="u"),
            step.prepare(n=4, after=[parent]),
            {"kind": "step", "args": {"n": 5}, "run_at": when, "max_attempts": 7},
            step.prepare(n=6, unique_key="u"),
            {"kind": "plain", "args": {"n": 7}, "delay": 3600},
            step.prepare(n=8, sequence="s"),
            step.prepare(n=9),
            step.prepare(n=10),
        ]
    )
    assert [j.created for j in jobs] == [True] * 5 + [False] + [True] * 4
    assert jobs[5].id == jobs[2].id
    new = [j.id for j in jobs if j.created]
    assert new == sorted(new)  # ids in input order
    rows = {
        row[0]: row[1:]
        for row in query(
            dsn,
            "SELECT args->>'n', queue, kind, priority, max_attempts, unique_key, state, "
            "run_at = %s, run_at > now() + interval '59 minutes' FROM postroom.jobs",
            (when,),
        )
    }
    assert rows == {
        "0": ("steps", "step", 0, 3, None, "ready", False, False),
        "1": ("steps", "step", 0, 3, None, "ready", False, False),
        "2": ("other", "step", 5, 3, None, "ready", False, False),
        "3": ("steps", "step", 0, 3, "u", "ready", False, False),
        "4": ("steps", "step", 0, 3, None, "waiting", False, False),
        "5": ("steps", "step", 0, 7, None, "ready", True, True),
        "7": ("default", "plain", 0, 25, None, "ready", False, True),
        "8": ("steps", "step", 0, 3, None, "ready", False, False),
        "9": ("steps", "step", 0, 3, None, "ready", False, False),
        "10": ("steps", "step", 0, 3, None, "ready", False, False),
    }


def test_a_bad_item_in_a_big_batch_is_named_and_nothing_is_written(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]], dsn: str
) -> None:
    items: list[dict[str, Any]] = [{"kind": "k", "args": {"n": n}} for n in range(12_000)]
    items[7_000] = {"kind": "k", "args": {"n": object()}}
    bad = r"batch item 7000: argument 'n' of job 'k' cannot be serialized"
    with pytest.raises(InvalidType, match=bad):
        any_client.enqueue_batch(items)
    with pytest.raises(InvalidArgument, match="batch item 2: unknown job fields"):
        any_client.enqueue_batch([{"kind": "k"}, {"kind": "k"}, {"kind": "k", "arg": 1}])
    assert scalar(dsn, "SELECT count(*) FROM postroom.jobs") == 0
    # In the caller's transaction: its own work stays and the transaction stays usable.
    with any_connect() as conn:
        any_client.enqueue("k", {"n": -1}, conn=conn)
        with pytest.raises(InvalidType, match=bad):
            any_client.enqueue_batch(items, conn=conn)
        items[7_000] = {"kind": "k", "args": {"n": 7_000}}
        jobs = any_client.enqueue_batch(items, conn=conn)
    assert len(jobs) == 12_000
    assert scalar(dsn, "SELECT count(*) FROM postroom.jobs") == 12_001
    # A check of the server (a parent that does not exist) after two chunks were sent: the
    # commit that went out with them does not happen.
    with pytest.raises(InvalidArgument, match="999999"):
        any_client.enqueue_batch([*items, {"kind": "k", "after": [999_999]}])
    assert scalar(dsn, "SELECT count(*) FROM postroom.jobs") == 12_001


def test_enqueue_batch_through_sql_shares_one_element_arrays(dsn: str) -> None:
    """The SQL function takes one element for a value every job shares; other lengths fail."""
    postroom.connect(dsn).close()  # installs the schema
    call = (
        "SELECT id FROM postroom.enqueue_batch(%s::text[], %s::text[], %s::text[], "
        "%s::smallint[], %s::timestamptz[], %s::float8[], %s::integer[], %s::text[])"
    )
    ids = query(
        dsn,
        call,
        (["q1"], ["k"], ['{"n": 1}', '{"n": 2}', '{"n": 3}'], [2], [None], [None], [4], None),
    )
    assert len(ids) == 3
    assert query(
        dsn, "SELECT DISTINCT queue, kind, priority, max_attempts, state FROM postroom.jobs"
    ) == [("q1", "k", 2, 4, "ready")]
    keyed = query(dsn, call, (["q1"], ["k"], ["{}", "{}"], [0], [None], [None], [4], ["a", "a"]))
    assert len(keyed) == 1  # the second "a" is taken by the first
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="one element per job"):
        query(dsn, call, (["a", "b"], ["k"], ["{}", "{}", "{}"], [0], [None], [None], [4], None))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="unique_keys"):
        query(dsn, call, (["a"], ["k"], ["{}", "{}"], [0], [None], [None], [4], ["x"]))


def test_retrying_a_failed_job_whose_unique_key_is_taken(any_client: postroom.Client) -> None:
    @any_client.job("once", max_attempts=1)
    def once() -> None:
        raise RuntimeError("no")

    first = once.enqueue(unique_key="u")
    worker(any_client).run(burst=True, handle_signals=False)
    second = once.enqueue(unique_key="u")
    assert second.created  # a failed job does not hold its key
    with pytest.raises(UniqueKeyTaken, match="holds its unique key"):
        any_client.retry_job(first.id)


def test_enqueue_batch_inserts_thousands_in_one_call(any_client: postroom.Client) -> None:
    @any_client.job("noop")
    def noop(n: int) -> None:
        pass

    jobs = any_client.enqueue_batch([noop.prepare(n=n, priority=n % 3) for n in range(12_000)])
    assert len({j.id for j in jobs}) == 12_000
    stats = any_client.job_stats()
    assert [(c.queue, c.state, c.count) for c in stats.counts] == [("default", "ready", 12_000)]
    assert stats.counts[0].oldest_ready_seconds is not None
