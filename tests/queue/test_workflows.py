"""Workflows: dependencies (after=), groups with a callback, sequences per key; all in the
database, transactional with the enqueue, with a clear state when a parent fails."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import psycopg
import pytest

import postroom
from postroom.errors import InvalidArgument

from .helpers import WorkerProcess, create_runs_table, query, running, scalar


def states(client: postroom.Client, *jobs: postroom.Job) -> list[str]:
    return [client.get_job(job.id).state for job in jobs]


def test_a_dependent_waits_for_all_its_parents(client: postroom.Client, dsn: str) -> None:
    order: list[str] = []

    @client.job("step")
    def step(name: str) -> str:
        order.append(name)
        return name

    a = step.enqueue(name="a")
    b = step.enqueue(name="b", priority=5)
    c = step.enqueue(name="c", after=[a, b.id], priority=-10)  # handles or ids
    assert states(client, c) == ["waiting"]
    assert client.get_job(c.id).waiting_for == tuple(sorted((a.id, b.id)))
    with psycopg.connect(dsn) as conn:  # rolled back
        claim = b"SELECT id FROM postroom.claim_jobs(ARRAY['default'], 10, 'w', '1s')"
        claimed = conn.execute(claim).fetchall()
        assert sorted(claimed) == [(a.id,), (b.id,)]  # not c: it is not in the ready set
        conn.rollback()
    with running(client.worker(["default"], poll_interval=0.05)):
        assert c.result(timeout=30) == "c"
    assert order[-1] == "c" and sorted(order[:2]) == ["a", "b"]
    assert client.get_job(c.id).waiting_for == ()
    assert scalar(dsn, "SELECT count(*) FROM postroom.job_dependencies") == 0


def test_a_group_callback_runs_after_every_member(client: postroom.Client) -> None:
    seen: list[int] = []

    @client.job("part")
    def part(n: int) -> int:
        seen.append(n)
        return n

    @client.job("total")
    def total() -> int:
        seen.append(-1)
        return len(seen)

    with psycopg.connect(client.conninfo) as conn:
        members, callback = client.enqueue_group(
            [part.prepare(n=n) for n in range(5)], then=total.prepare(), conn=conn
        )
    assert callback is not None and len(members) == 5
    with running(client.worker(["default"], poll_interval=0.05, concurrency=4)):
        assert callback.result(timeout=30) == 6
    assert seen[-1] == -1 and sorted(seen[:5]) == list(range(5))


def test_a_rolled_back_workflow_leaves_nothing(client: postroom.Client, dsn: str) -> None:
    with psycopg.connect(client.conninfo) as conn:
        a = client.enqueue("a", conn=conn)
        client.enqueue_group([{"kind": "b"}], then={"kind": "c", "sequence": "s"}, conn=conn)
        client.enqueue("d", after=[a], conn=conn)
        conn.rollback()
    for table in ("jobs", "job_dependencies", "job_sequences"):
        assert scalar(dsn, f"SELECT count(*) FROM postroom.{table}") == 0


def test_a_sequence_runs_its_jobs_one_after_another(client: postroom.Client) -> None:
    order: list[tuple[str, int]] = []

    @client.job("ship")
    def ship(key: str, n: int) -> None:
        order.append((key, n))

    jobs = [ship.enqueue(key=key, n=n, sequence=key) for n in range(4) for key in ("x", "y")]
    assert states(client, *jobs).count("ready") == 2  # the head of each sequence
    with running(client.worker(["default"], poll_interval=0.05, concurrency=8)):
        for job in jobs:
            job.result(timeout=30)
    assert [n for key, n in order if key == "x"] == [0, 1, 2, 3]
    assert [n for key, n in order if key == "y"] == [0, 1, 2, 3]
    # The sequence goes on after its last job finished: the next one is ready at once.
    assert states(client, ship.enqueue(key="x", n=4, sequence="x")) == ["ready"]


def test_a_failed_parent_holds_its_dependents_until_it_is_retried(
    client: postroom.Client,
) -> None:
    broken = {"yes": True}

    @client.job("flaky", max_attempts=1)
    def flaky() -> None:
        if broken["yes"]:
            raise RuntimeError("down")

    @client.job("after_flaky")
    def after_flaky() -> str:
        return "ran"

    parent = flaky.enqueue()
    held = after_flaky.enqueue(after=[parent])
    cancelled = after_flaky.enqueue(after=[parent], on_parent_failure="cancel")
    grandchild = after_flaky.enqueue(after=[cancelled], on_parent_failure="cancel")
    with running(client.worker(["default"], poll_interval=0.05)):
        with pytest.raises(postroom.errors.JobFailed):
            parent.result(timeout=30)
        with pytest.raises(postroom.errors.JobCancelled):
            grandchild.result(timeout=30)
        info = client.get_job(held.id)
        assert (info.state, info.last_error) == ("held", f"held: parent job {parent.id} failed")
        assert info.waiting_for == (parent.id,)
        assert client.get_job(cancelled.id).last_error == (
            f"cancelled: parent job {parent.id} failed"
        )
        # A dependent enqueued after the parent failed starts held.
        late = after_flaky.enqueue(after=[parent])
        assert states(client, late) == ["held"]
        broken["yes"] = False
        client.retry_job(parent.id)
        assert held.result(timeout=30) == "ran"
        assert late.result(timeout=30) == "ran"
    assert client.get_job(held.id).last_error is None


def test_a_cancelled_parent_cancels_or_holds_its_dependents(client: postroom.Client) -> None:
    parent = client.enqueue("p", delay=3600)
    holds = client.enqueue("h", after=[parent])
    cancels = client.enqueue("c", after=[parent], on_parent_failure="cancel")
    client.cancel_job(parent.id)
    assert states(client, holds, cancels) == ["held", "cancelled"]
    assert client.get_job(holds.id).last_error == f"held: parent job {parent.id} was cancelled"
    # Cancelling a held job is how a workflow is abandoned.
    client.cancel_job(holds.id)
    assert states(client, holds) == ["cancelled"]
    with pytest.raises(InvalidArgument, match="parent job 99999 not found"):
        client.enqueue("x", after=[99999])


def test_async_client_workflows(dsn: str, client: postroom.Client) -> None:
    async def main() -> list[str]:
        async with await postroom.connect_async(dsn) as aclient:
            seen: list[str] = []

            @aclient.job("astep")
            async def astep(name: str) -> None:
                seen.append(name)

            a = await astep.enqueue(name="a")
            _, last = await aclient.enqueue_group(
                [astep.prepare(name="b", after=[a])], then=astep.prepare(name="c")
            )
            assert last is not None
            worker = aclient.worker(["default"], poll_interval=0.05)
            task = asyncio.create_task(worker.run(handle_signals=False))
            await last.result(timeout=30)
            worker.stop()
            await task
            return seen

    assert asyncio.run(main()) == ["a", "b", "c"]


@pytest.fixture
def workers(dsn: str) -> Iterator[list[WorkerProcess]]:
    create_runs_table(dsn)
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.cleanup()


@pytest.mark.slow
def test_dependents_run_once_after_all_parents_with_two_workers_racing(
    dsn: str, client: postroom.Client, workers: list[WorkerProcess]
) -> None:
    workers.extend(WorkerProcess(dsn, "--concurrency", "4") for _ in range(2))
    groups = 30
    callbacks = []
    with psycopg.connect(dsn) as conn:
        for g in range(groups):
            parents = [{"kind": "record", "args": {"n": g * 10 + i}} for i in range(5)]
            _, callback = client.enqueue_group(
                parents, then={"kind": "record", "args": {"n": 1000 + g}}, conn=conn
            )
            callbacks.append(callback)
        failing = client.enqueue("boom", {"n": 5000}, max_attempts=1, conn=conn)
        held = client.enqueue("record", {"n": 5001}, after=[failing], conn=conn)
        dropped = client.enqueue(
            "record", {"n": 5002}, after=[failing], on_parent_failure="cancel", conn=conn
        )
    for callback in callbacks:
        assert callback is not None
        callback.result(timeout=60)
    with pytest.raises(postroom.errors.JobCancelled):
        dropped.result(timeout=30)
    runs = query(dsn, "SELECT n, seq, pid FROM runs WHERE phase = 'run'")
    count = Counter(n for n, _, _ in runs)
    assert all(c == 1 for c in count.values()), "every job ran once"
    seq = {n: s for n, s, _ in runs}
    for g in range(groups):
        assert seq[1000 + g] > max(seq[g * 10 + i] for i in range(5))
    assert len({pid for _, _, pid in runs}) == 2, "both workers took part"
    assert client.get_job(held.id).state == "held"
    assert 5001 not in count and 5002 not in count


def sequence_rows(dsn: str) -> list[tuple[str, int]]:
    return [(k, i) for k, i in query(dsn, "SELECT key, last_job_id FROM postroom.job_sequences")]


def test_a_sequence_row_goes_when_its_last_job_finishes(client: postroom.Client, dsn: str) -> None:
    """job_sequences no longer keeps a row per key ever used (issue 21 item 16): the row goes
    when the sequence's last job is done; a cancelled last job keeps it, so the next job of
    the sequence is held as before; a key used again starts afresh."""

    @client.job("ship")
    def ship(n: int) -> int:
        return n

    jobs = [ship.enqueue(n=n, sequence="order-7") for n in range(3)]
    kept = ship.enqueue(n=9, sequence="order-8")
    assert sorted(sequence_rows(dsn)) == [("order-7", jobs[-1].id), ("order-8", kept.id)]
    client.cancel_job(kept.id)
    assert client.get_job(kept.id).state == "cancelled"
    with running(client.worker(["default"], poll_interval=0.05)):
        assert [job.result(timeout=30) for job in jobs] == [0, 1, 2]
    assert sequence_rows(dsn) == [("order-8", kept.id)]
    assert states(client, ship.enqueue(n=10, sequence="order-8")) == ["held"]
    again = ship.enqueue(n=3, sequence="order-7")
    assert states(client, again) == ["ready"]
    assert ("order-7", again.id) in sequence_rows(dsn)


def test_enqueue_batch_after_a_job_was_inserted_by_hand_with_a_high_id(
    client: postroom.Client, dsn: str
) -> None:
    """A job row inserted by hand (a superuser's INSERT with an id of its choosing) ahead of
    the id sequence no longer makes later enqueues fail on a raw duplicate key."""
    first = client.enqueue("k")
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO postroom.jobs (id, kind, queue) VALUES (%s, 'k', 'default')",
            [first.id + 2],
        )
    batch = client.enqueue_batch([{"kind": "k"} for _ in range(5)])
    assert len({job.id for job in batch}) == 5
    assert first.id + 2 not in {job.id for job in batch}
    assert client.enqueue("k").id > first.id + 2
