"""An enqueue whose COMMIT was cut in flight raises CommitUnknown, not a plain connection error
(issue 21.3); enqueueing again with the same unique keys stores each job exactly once."""

from __future__ import annotations

import random
import threading
from collections import Counter

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom
from postroom.errors import CommitUnknown

from ..blocking import EventLoopThread
from ..commit_cut import cut_client
from .helpers import query, scalar


def keyed_jobs(prefix: str, count: int) -> list[dict[str, object]]:
    return [{"kind": "ship", "args": {"n": i}, "unique_key": f"{prefix}-{i}"} for i in range(count)]


def stored(dsn: str, prefix: str) -> int:
    return int(
        scalar(dsn, "SELECT count(*) FROM postroom.jobs WHERE unique_key LIKE %s", [prefix + "-%"])
    )


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "rolled-back"])
def test_enqueue_batch_cut_during_commit_raises_commit_unknown_and_a_retry_with_its_unique_keys_enqueues_once(  # noqa: E501
    dsn: str, client_loop: EventLoopThread | None, committed: bool
) -> None:
    jobs = keyed_jobs("order", 5)
    with cut_client(dsn, client_loop) as (client, proxy):
        proxy.arm(after_reply=committed)
        with pytest.raises(CommitUnknown) as info:
            client.enqueue_batch(jobs)
        assert proxy.cut_done.is_set()
        assert isinstance(info.value, psycopg.OperationalError)  # code catching that still does
        assert "5 jobs (ship) with unique keys 'order-0', 'order-1'" in info.value.committing
        assert stored(dsn, "order") == (5 if committed else 0)
        again = client.enqueue_batch(jobs)  # the documented retry
        assert [job.created for job in again] == [not committed] * 5
    assert stored(dsn, "order") == 5


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "rolled-back"])
def test_enqueue_cut_during_commit_raises_commit_unknown(
    dsn: str, client_loop: EventLoopThread | None, committed: bool
) -> None:
    with cut_client(dsn, client_loop) as (client, proxy):
        # Without a unique key: the COMMIT goes out in the pipeline with the insert.
        proxy.arm(after_reply=committed)
        with pytest.raises(CommitUnknown, match=r"1 job \(ship\) without unique keys"):
            client.enqueue("ship", {"n": 1})
        assert scalar(dsn, "SELECT count(*) FROM postroom.jobs") == (1 if committed else 0)
        proxy.arm(after_reply=committed)
        with pytest.raises(CommitUnknown, match="unique keys 'invoice-7'"):
            client.enqueue("ship", {"n": 2}, unique_key="invoice-7")
        assert stored(dsn, "invoice") == (1 if committed else 0)
        client.enqueue("ship", {"n": 2}, unique_key="invoice-7")
    assert stored(dsn, "invoice") == 1


@pytest.mark.slow
def test_backends_terminated_during_enqueue_batch_never_report_a_stored_batch_as_failed(
    dsn: str,
) -> None:
    """Backends are terminated at random while batches are enqueued: every batch reported
    failed (an error other than CommitUnknown) is absent, every batch present was reported
    committed or unknown, and no batch is there in part."""
    victim = make_conninfo(dsn, application_name="postroom-fault-victim")
    stop = threading.Event()
    kills = 0

    def kill_backends() -> None:
        nonlocal kills
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                cur = conn.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
                    "FROM pg_stat_activity WHERE application_name = 'postroom-fault-victim' "
                    "AND state <> 'idle'"  # busy: inserting, committing, between the two
                )
                kills += cur.fetchone()[0]  # type: ignore[index]
                stop.wait(random.uniform(0.0, 0.02))  # the fault's own rhythm, not a wait

    outcomes: dict[int, str] = {}
    killer = threading.Thread(target=kill_backends, daemon=True)
    killer.start()
    try:
        with postroom.connect(victim) as client:
            for batch in range(300):
                try:
                    client.enqueue_batch(keyed_jobs(f"b{batch}", 5))
                except CommitUnknown:
                    outcomes[batch] = "unknown"
                except (psycopg.Error, postroom.errors.PostroomError):
                    outcomes[batch] = "failed"
                else:
                    outcomes[batch] = "committed"
    finally:
        stop.set()
        killer.join(30)
    rows = query(dsn, "SELECT unique_key FROM postroom.jobs")
    present = Counter(int(key.split("-")[0][1:]) for (key,) in rows)
    print(f"kills {kills}, outcomes {Counter(outcomes.values())}, batches stored {len(present)}")
    assert kills > 0 and Counter(outcomes.values())["committed"] < 300  # faults really hit
    assert set(present.values()) <= {5}  # all of a batch or none of it
    for batch, outcome in outcomes.items():
        if outcome == "failed":
            assert batch not in present, f"batch {batch} was reported failed but is stored"
        if outcome == "committed":
            assert batch in present, f"batch {batch} was reported committed but is absent"
