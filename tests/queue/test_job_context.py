"""Job context and cooperative cancellation, snooze, Cancel, retry_on/no_retry_on (issue 9)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

import postroom
from postroom import Cancel, JobContext, Snooze
from postroom.errors import InvalidArgument, JobCancelled, JobFailed, JobInterrupted

from .helpers import running

FAST: dict[str, Any] = {"poll_interval": 0.05, "lease": 2.0, "heartbeat": 0.2, "concurrency": 2}


def test_cooperative_cancellation_stops_a_long_job_within_a_second(
    client: postroom.Client,
) -> None:
    started = threading.Event()
    seen: dict[str, Any] = {}

    @client.job("long")
    def long(steps: int, *, job: JobContext) -> str:
        seen["thread"] = threading.get_ident()
        started.set()
        try:
            for _ in range(steps):
                if job.sleep(0.05):  # wakes at once when cancelled
                    seen["reason"] = job.cancel_reason
                    seen["stopped"] = time.monotonic()
                    return "stopped early"
            return "finished"
        except JobInterrupted:  # the last resort, from outside: must not happen here
            seen["interrupted"] = True
            raise

    handle = long.enqueue(steps=100_000)
    with running(client.worker(**FAST, cancel_grace=30)):
        assert started.wait(10)
        asked = time.monotonic()
        assert client.cancel_job(handle.id) == "running"
        with pytest.raises(JobCancelled):
            handle.result(timeout=10)
        assert seen["stopped"] - asked < 1.0  # the job itself stopped within a second
    assert seen["reason"] == "cancelled"
    assert "interrupted" not in seen  # it stopped itself: nothing was raised in its thread


def test_the_context_describes_the_attempt(client: postroom.Client) -> None:
    contexts: list[JobContext] = []

    @client.job("described", queue="ctx", timeout=30, max_attempts=3)
    def described(n: int, *, job: JobContext) -> int:
        contexts.append(job)
        if job.attempt == 1:
            raise RuntimeError("again")
        return n

    before = datetime.now(UTC)
    handle = described.enqueue(n=5)
    with running(client.worker(**FAST)):
        assert handle.result(timeout=20) == 5
    first, second = contexts
    assert (second.id, second.kind, second.queue) == (handle.id, "described", "ctx")
    assert (first.attempt, second.attempt, second.max_attempts) == (1, 2, 3)
    assert second.args == {"n": 5}
    assert second.enqueued_at is not None and second.enqueued_at >= before.replace(microsecond=0)
    assert second.scheduled_at is not None and second.scheduled_at > first.scheduled_at  # type: ignore[operator]
    assert second.deadline is not None and second.deadline > datetime.now(UTC)
    assert not second.cancelled()


def test_the_context_is_not_a_job_argument(client: postroom.Client) -> None:
    @client.job("no_arg")
    def no_arg(*, job: JobContext) -> int:
        return job.attempt

    with pytest.raises(InvalidArgument):
        no_arg.enqueue(job=1)
    with pytest.raises(InvalidArgument, match="keyword-only"):

        @client.job("positional")
        def positional(job: JobContext) -> None:
            pass

    handle = no_arg.enqueue()
    with running(client.worker(**FAST)):
        assert handle.result(timeout=20) == 1


def test_a_cooperative_timeout_fails_the_attempt(client: postroom.Client) -> None:
    @client.job("slow", timeout=0.3, max_attempts=1)
    def slow(*, job: JobContext) -> None:
        while not job.sleep(0.05):
            pass

    handle = slow.enqueue()
    with running(client.worker(**FAST)):
        with pytest.raises(
            JobFailed, match=r"JobTimeout: timed out after 0\.3 s \(the job stopped"
        ):
            handle.result(timeout=20)


def test_a_job_that_ignores_the_request_is_interrupted_after_the_grace(
    client: postroom.Client,
) -> None:
    started = threading.Event()
    interrupted: list[str] = []

    @client.job("stubborn", max_attempts=1)
    def stubborn(*, job: JobContext) -> None:
        started.set()
        try:
            while True:
                time.sleep(0.01)  # never looks at job.cancelled()
        except JobInterrupted as exc:
            interrupted.append(exc.reason)
            raise

    handle = stubborn.enqueue()
    with running(client.worker(**FAST, cancel_grace=0.3)):
        assert started.wait(10)
        client.cancel_job(handle.id)
        with pytest.raises(JobCancelled):
            handle.result(timeout=20)
    assert interrupted == ["cancelled"]


def test_async_job_context_and_cooperative_cancellation(dsn: str) -> None:
    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            started = asyncio.Event()

            stopped: list[float] = []

            @client.job("watch")
            async def watch(*, job: JobContext) -> str:
                started.set()
                for _ in range(100_000):  # a long job, checking between its steps
                    if job.cancelled():
                        stopped.append(time.monotonic())
                        return "stopped"
                    await asyncio.sleep(0.02)
                return "finished"

            handle = await watch.enqueue()
            worker = client.worker(**FAST, cancel_grace=30)
            task = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.wait_for(started.wait(), 10)
            asked = time.monotonic()
            await handle.cancel()
            with pytest.raises(JobCancelled):
                await handle.result(timeout=10)
            assert stopped[0] - asked < 1.0
            worker.stop()
            await task

    asyncio.run(main())


def test_snooze_runs_again_later_without_spending_an_attempt(client: postroom.Client) -> None:
    runs: list[float] = []

    @client.job("patient", max_attempts=1)
    def patient() -> int:
        runs.append(time.monotonic())
        if len(runs) < 3:
            raise Snooze(0.2)
        return len(runs)

    handle = patient.enqueue()
    with running(client.worker(**FAST)):
        assert handle.result(timeout=20) == 3  # three runs on one attempt
    assert runs[1] - runs[0] >= 0.2 and runs[2] - runs[1] >= 0.2
    assert client.get_job(handle.id).attempts == 1


def test_snooze_refuses_a_bad_delay() -> None:
    for bad in (-1, float("nan"), "5", True):
        with pytest.raises(InvalidArgument, match="invalid snooze"):
            Snooze(bad)  # type: ignore[arg-type]


def test_cancel_from_inside_stops_for_good(client: postroom.Client) -> None:
    @client.job("gives_up", max_attempts=5)
    def gives_up() -> None:
        raise Cancel("the order was deleted")

    handle = gives_up.enqueue()
    with running(client.worker(**FAST)):
        with pytest.raises(JobCancelled):
            handle.result(timeout=20)
    info = client.get_job(handle.id)
    assert (info.state, info.attempts, info.last_error) == (
        "cancelled",
        1,
        "the order was deleted",
    )


def test_retry_on_and_no_retry_on(client: postroom.Client) -> None:
    calls: dict[str, int] = {}

    def flaky(exc: type[Exception]) -> Any:
        def run(name: str) -> str:
            calls[name] = calls.get(name, 0) + 1
            if calls[name] == 1:
                raise exc(name)
            return name

        return run

    fast = postroom.Backoff(base=0.01, jitter=0)
    retried = client.job("retried", retry_on=ConnectionError, backoff=fast)(flaky(ConnectionError))
    not_listed = client.job("not_listed", retry_on=[ConnectionError], backoff=fast)(flaky(KeyError))
    refused = client.job("refused", no_retry_on=(ValueError,), backoff=fast)(flaky(ValueError))
    other = client.job("other", no_retry_on=(ValueError,), backoff=fast)(flaky(OSError))
    jobs = {
        "retried": retried.enqueue(name="retried"),
        "not_listed": not_listed.enqueue(name="not_listed"),
        "refused": refused.enqueue(name="refused"),
        "other": other.enqueue(name="other"),
    }
    with running(client.worker(**FAST)):
        assert jobs["retried"].result(timeout=20) == "retried"
        assert jobs["other"].result(timeout=20) == "other"
        for name in ("not_listed", "refused"):
            with pytest.raises(JobFailed):
                jobs[name].result(timeout=20)
    assert calls == {"retried": 2, "other": 2, "not_listed": 1, "refused": 1}
    with pytest.raises(postroom.errors.InvalidType, match="retry_on"):
        client.job("bad_policy", retry_on=["ConnectionError"])(lambda: None)  # type: ignore[list-item]


def test_snooze_cancel_and_retry_policy_on_the_async_worker(dsn: str) -> None:
    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            runs: list[str] = []

            @client.job("later", max_attempts=1)
            async def later() -> int:
                runs.append("later")
                if runs.count("later") == 1:
                    raise Snooze(0.1)
                return 1

            @client.job("stop", max_attempts=3)
            def stop() -> None:  # a plain function, in the worker's threads
                raise Cancel("no longer needed")

            @client.job("strict", max_attempts=3, no_retry_on=KeyError)
            async def strict() -> None:
                runs.append("strict")
                raise KeyError("missing")

            a, b, c = await later.enqueue(), await stop.enqueue(), await strict.enqueue()
            worker = client.worker(**FAST)
            task = asyncio.create_task(worker.run(handle_signals=False))
            assert await a.result(timeout=20) == 1
            with pytest.raises(JobCancelled):
                await b.result(timeout=20)
            with pytest.raises(JobFailed):
                await c.result(timeout=20)
            worker.stop()
            await task
            assert (await client.get_job(a.id)).attempts == 1
            assert (await client.get_job(b.id)).last_error == "no longer needed"
            assert runs.count("strict") == 1

    asyncio.run(main())
