"""The worker under hostile jobs and faults (issue 10): outcomes the database refuses, loops
that fail, jobs that raise SystemExit, slow write-backs, crashed workers' jobs."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

import pytest

import postroom
from postroom.errors import JobFailed, WorkerCrashed
from postroom.queue import completer as completer_sync
from postroom.queue import completer_async, heartbeat, runner_async
from postroom.queue import runner as runner_sync
from postroom.queue.outcomes import Outcome

from ..signals import wait_for
from .helpers import query, running

FAST: dict[str, Any] = {"poll_interval": 0.05, "lease": 2.0, "concurrency": 6}


def nul_result() -> str:
    return "a\x00b"


def nul_error() -> None:
    raise ValueError("bad\x00value")


def surrogate_result() -> list[str]:
    return ["ok", "\ud800"]


def surrogate_error() -> None:
    raise ValueError("half \udc80 a pair")


def fine(n: int) -> int:
    return n


def _register_hostile(client: Any) -> dict[str, Any]:
    functions = [nul_result, nul_error, surrogate_result, surrogate_error]
    jobs = {f.__name__: client.job(f.__name__, max_attempts=1)(f) for f in functions}
    jobs["fine"] = client.job("fine")(fine)
    return jobs


EXPECTED_ERRORS = {
    "nul_result": "the job ran but its result cannot be stored: it contains a NUL character",
    "nul_error": "ValueError: bad\\x00value",
    "surrogate_result": "cannot be stored: it contains a lone surrogate",
    "surrogate_error": "ValueError: half \\udc80 a pair",
}


def test_refused_outcomes_are_stored_sanitized_and_the_worker_goes_on(
    client: postroom.Client,
) -> None:
    jobs = _register_hostile(client)
    hostile = {kind: jobs[kind].enqueue() for kind in EXPECTED_ERRORS}
    fine = [jobs["fine"].enqueue(n=n) for n in range(5)]
    with running(client.worker(**FAST)):
        for kind, job in hostile.items():
            with pytest.raises(JobFailed) as failed:
                job.result(timeout=20)
            assert EXPECTED_ERRORS[kind] in (failed.value.last_error or ""), kind
        assert [job.result(timeout=20) for job in fine] == list(range(5))
        # The worker is still claiming and writing back.
        assert jobs["fine"].enqueue(n=7).result(timeout=20) == 7


def test_refused_outcomes_on_the_async_worker(dsn: str) -> None:
    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            jobs = _register_hostile(client)
            hostile = {kind: await jobs[kind].enqueue() for kind in EXPECTED_ERRORS}
            worker = client.worker(**FAST)
            task = asyncio.create_task(worker.run(handle_signals=False))
            for kind, job in hostile.items():
                with pytest.raises(JobFailed) as failed:
                    await job.result(timeout=20)
                assert EXPECTED_ERRORS[kind] in (failed.value.last_error or ""), kind
            assert await (await jobs["fine"].enqueue(n=3)).result(timeout=20) == 3
            worker.stop()
            await task

    asyncio.run(main())


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_an_outcome_the_database_refuses_fails_only_its_job(
    dsn: str, monkeypatch: pytest.MonkeyPatch, flavour: str
) -> None:
    """Past the checks (here: a result JSON text with \\u0000, which jsonb refuses), the
    write-back stores the failure with the database's reason and writes the rest."""
    module = runner_sync if flavour == "sync" else runner_async

    def unchecked(job: Any, value: Any, *_: Any) -> Outcome:
        return Outcome(job, "done", result=json.dumps(value))

    monkeypatch.setattr(module, "success", unchecked)

    def scenario(client: Any) -> tuple[Any, list[Any]]:
        jobs = _register_hostile(client)
        return jobs["nul_result"], [jobs["fine"]]

    if flavour == "sync":
        with postroom.connect(dsn) as client:
            bad_kind, (fine_kind,) = scenario(client)
            bad = bad_kind.enqueue()
            good = [fine_kind.enqueue(n=n) for n in range(5)]
            with running(client.worker(**FAST)):
                with pytest.raises(JobFailed, match="could not store this attempt's outcome"):
                    bad.result(timeout=20)
                assert [job.result(timeout=20) for job in good] == list(range(5))
        return

    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            bad_kind, (fine_kind,) = scenario(client)
            bad = await bad_kind.enqueue()
            good = [await fine_kind.enqueue(n=n) for n in range(5)]
            worker = client.worker(**FAST)
            task = asyncio.create_task(worker.run(handle_signals=False))
            with pytest.raises(JobFailed, match="could not store this attempt's outcome"):
                await bad.result(timeout=20)
            assert [await job.result(timeout=20) for job in good] == list(range(5))
            worker.stop()
            await task

    asyncio.run(main())


def test_a_failing_loop_stops_the_sync_worker_with_an_error(
    client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(heartbeat.Heartbeat, "run", broken)

    @client.job("noop")
    def noop() -> None:
        pass

    started = time.monotonic()
    with pytest.raises(WorkerCrashed, match="heartbeat loop failed: RuntimeError: boom"):
        client.worker(**FAST).run(handle_signals=False)
    assert time.monotonic() - started < 10


def test_a_failing_loop_stops_the_async_worker_with_an_error(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(completer_async.AsyncCompleter, "run", broken)

    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:

            @client.job("noop")
            async def noop() -> None:
                pass

            with pytest.raises(WorkerCrashed, match="completer loop failed: RuntimeError: boom"):
                await asyncio.wait_for(client.worker(**FAST).run(handle_signals=False), 10)

    asyncio.run(main())


def _job_row(dsn: str, job_id: int) -> tuple[Any, ...]:
    return query(
        dsn, "SELECT state, attempts, last_error FROM postroom.jobs WHERE id = %s", [job_id]
    )[0]


def test_a_job_raising_systemexit_fails_its_attempt_and_stops_the_worker(
    client: postroom.Client, dsn: str
) -> None:
    @client.job("exits", max_attempts=2)
    def exits() -> None:
        sys.exit(3)

    @client.job("after")
    def after() -> None:
        pass

    job = exits.enqueue()
    with pytest.raises(SystemExit) as stopped:
        client.worker(**FAST).run(handle_signals=False)
    assert stopped.value.code == 3
    state, attempts, last_error = _job_row(dsn, job.id)
    assert (state, attempts) == ("ready", 1)  # not left running: retried while attempts last
    assert "SystemExit raised by the job: the attempt failed" in last_error
    # The next worker runs it again; the attempts run out and it ends failed, not stuck.
    with pytest.raises(SystemExit):
        client.worker(**FAST).run(handle_signals=False)
    assert _job_row(dsn, job.id)[:2] == ("failed", 2)


async def _interrupts() -> None:
    raise KeyboardInterrupt


def _threaded_exit() -> None:
    raise SystemExit(4)


@pytest.mark.parametrize(
    ("func", "raised"), [(_interrupts, KeyboardInterrupt), (_threaded_exit, SystemExit)]
)
def test_an_exit_from_a_job_on_the_async_worker_does_not_escape_the_loop(
    dsn: str, func: Any, raised: type[BaseException]
) -> None:
    async def main() -> int:
        async with await postroom.connect_async(dsn) as client:
            kind = client.job("exits", max_attempts=1)(func)
            job = await kind.enqueue()
            with pytest.raises(raised):
                await client.worker(**FAST).run(handle_signals=False)
            return int(job.id)

    job_id = asyncio.run(main())
    state, attempts, last_error = _job_row(dsn, job_id)
    assert (state, attempts) == ("failed", 1)
    assert f"{raised.__name__} raised by the job: the attempt failed" in last_error


def test_finished_jobs_awaiting_a_slow_write_back_keep_their_lease(
    client: postroom.Client, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write-back stalls for three leases: the heartbeat keeps extending the finished
    jobs' leases, so the rescuer (every 0.2 s) never hands them out again."""
    original = completer_sync.Completer._write_batch
    stalled = threading.Event()

    def slow_write(self: Any, batch: list[Outcome]) -> None:
        if not stalled.is_set():
            stalled.set()
            time.sleep(3.0)
        original(self, batch)

    monkeypatch.setattr(completer_sync.Completer, "_write_batch", slow_write)
    runs: list[int] = []

    @client.job("counted")
    def counted(n: int) -> int:
        runs.append(n)
        return n

    jobs = [counted.enqueue(n=n) for n in range(4)]
    options = {**FAST, "lease": 1.0, "heartbeat": 0.2, "rescue_interval": 0.2}
    with running(client.worker(**options)):
        assert [job.result(timeout=20) for job in jobs] == list(range(4))
    assert stalled.is_set()
    assert sorted(runs) == list(range(4))  # each ran once


def test_a_crashed_workers_job_keeps_its_place_in_the_queue(
    client: postroom.Client, dsn: str
) -> None:
    order: list[str] = []

    @client.job("step")
    def step(name: str) -> None:
        order.append(name)

    first = step.enqueue(name="first")
    # Its worker claimed it and died: running, attempt 1, the lease already expired.
    query(
        dsn,
        "UPDATE postroom.jobs SET state = 'running', attempts = 1, worker = 'dead', "
        "lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = %s RETURNING id",
        [first.id],
    )
    for n in range(20):
        step.enqueue(name=f"later-{n}")
    # A worker of another queue rescues it (the rescuer returns every expired lease).
    rescuer = client.worker(["elsewhere"], **{**FAST, "rescue_interval": 0.1})
    with running(rescuer):
        wait_for(lambda: _job_row(dsn, first.id)[0] == "ready", 20, "the rescue")
    client.worker(concurrency=1, poll_interval=0.05).run(burst=True, handle_signals=False)
    assert order[0] == "first"
    assert len(order) == 21


def test_a_burst_worker_drains_a_limited_queue_despite_a_slow_write_back(
    client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished job counts as running until its outcome is written: a claim right after it
    finds nothing under the limit, which once made a burst worker stop with jobs left."""
    original = completer_sync.Completer._write_batch

    def slow_write(self: Any, batch: list[Outcome]) -> None:
        time.sleep(0.2)
        original(self, batch)

    monkeypatch.setattr(completer_sync.Completer, "_write_batch", slow_write)
    runs: list[int] = []

    @client.job("limited", queue="narrow")
    def limited(n: int) -> None:
        runs.append(n)

    client.set_queue_limit("narrow", max_concurrency=1)
    client.enqueue_batch(limited.prepare(n=n) for n in range(5))
    client.worker(**FAST).run(burst=True, handle_signals=False)
    assert sorted(runs) == list(range(5))


def limited(n: int) -> int:
    return n


def test_a_worker_queries_on_its_own_pool_only(any_client: postroom.Client) -> None:
    # The worker's limits (and purges, rescues) once ran on the client's pool: with that pool
    # closed, registering the kind's limit failed. Now the client only lends its conninfo.
    job = any_client.job("limited", max_concurrency=1, rate_limit=100)(limited)
    handle = job.enqueue(7)
    worker = any_client.worker(poll_interval=0.05, keep_finished=60)
    any_client.close()
    worker.run(burst=True, handle_signals=False)
    assert worker.processed == 1
    with postroom.connect(any_client.conninfo) as other:
        assert other.get_job(handle.id).state == "done"
        assert other.jobs.admin.limits() == [("kind", "limited", 1, 100.0, 100.0)]
