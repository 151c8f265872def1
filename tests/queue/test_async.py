"""The queue through AsyncClient: coroutine jobs on the event loop, plain functions in the
worker's threads, timeouts, cancellation and results."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest

import postroom
from postroom.errors import JobInterrupted


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_async_and_sync_jobs_on_the_async_worker(dsn: str) -> None:
    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            loop_thread = threading.get_ident()
            threads: dict[str, int] = {}

            @client.job("double")
            async def double(x: int) -> int:
                threads["double"] = threading.get_ident()
                await asyncio.sleep(0)
                return 2 * x

            @client.job("blocking")
            def blocking(x: int) -> int:
                threads["blocking"] = threading.get_ident()
                time.sleep(0.05)  # would block the loop if it ran there
                return x + 1

            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                a = await double.enqueue(x=21, conn=conn)
                b = await blocking.enqueue(x=1, conn=conn)
            worker = client.worker(concurrency=4, poll_interval=0.05)
            task = asyncio.create_task(worker.run(handle_signals=False))
            assert await a.result(timeout=10) == 42
            assert await b.result(timeout=10) == 2
            worker.stop()
            await task
            assert threads["double"] == loop_thread
            assert threads["blocking"] != loop_thread

    run(main())


def test_async_timeout_and_cancellation(dsn: str) -> None:
    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            started = asyncio.Event()
            reasons: list[str] = []

            @client.job("sleepy", timeout=0.2, max_attempts=1)
            async def sleepy() -> None:
                await asyncio.sleep(60)

            @client.job("waiter")
            async def waiter() -> None:
                started.set()
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    reasons.append("cancelled")
                    raise

            timed = await sleepy.enqueue()
            cancelled = await waiter.enqueue()
            worker = client.worker(concurrency=2, poll_interval=0.05, heartbeat=0.3, lease=2)
            task = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.wait_for(started.wait(), 10)
            assert await cancelled.cancel() == "running"
            with pytest.raises(postroom.errors.JobCancelled):
                await cancelled.result(timeout=10)
            with pytest.raises(postroom.errors.JobFailed, match=r"timed out after 0\.2 s"):
                await timed.result(timeout=10)
            worker.stop()
            await task
            assert reasons == ["cancelled"]

    run(main())


def test_async_burst_batch_and_admin(dsn: str) -> None:
    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            seen: list[int] = []

            @client.job("collect", queue="bulk")
            async def collect(n: int) -> None:
                seen.append(n)

            jobs = await client.enqueue_batch(collect.prepare(n=n) for n in range(50))
            assert len(jobs) == 50
            await client.worker(concurrency=3, prefetch=10).run(burst=True, handle_signals=False)
            assert sorted(seen) == list(range(50))
            stats = await client.job_stats()
            assert [(c.queue, c.state, c.count) for c in stats.counts] == [("bulk", "done", 50)]
            assert len(await client.list_jobs(state="done", limit=10)) == 10
            info = await client.get_job(jobs[0].id)
            assert info.state == "done"

    run(main())


def test_interrupted_is_not_swallowed_by_except_exception() -> None:
    assert not issubclass(JobInterrupted, Exception)
