"""Middleware around enqueue and execution, per-job log lines and the worker's warnings."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import postroom
from postroom import JobContext
from postroom.errors import InvalidType

from ..signals import wait_for
from .helpers import running

FAST: dict[str, Any] = {"poll_interval": 0.05, "lease": 2.0, "concurrency": 2}


def test_sync_middleware_around_execution_and_enqueue(client: postroom.Client) -> None:
    events: list[str] = []

    @client.around_job
    def outer(job: JobContext, call_next: Callable[[], Any]) -> Any:
        events.append(f"outer {job.kind} #{job.attempt} in {threading.current_thread().name}")
        return call_next() * 10

    @client.around_job
    def inner(job: JobContext, call_next: Callable[[], Any]) -> Any:
        events.append(f"inner {job.args}")
        return call_next() + 1

    @client.around_enqueue
    def tag(requests: list[Any], call_next: Callable[..., Any]) -> Any:
        events.append(f"enqueue {[r.kind for r in requests]}")
        jobs = call_next()
        events.append(f"enqueued {len(jobs)}")
        return jobs

    @client.job("add")
    def add(a: int, b: int) -> int:
        return a + b

    handle = add.enqueue(a=1, b=2)
    client.enqueue_batch([add.prepare(a=0, b=0), add.prepare(a=1, b=1)])
    with running(client.worker(**FAST)):
        assert handle.result(timeout=20) == 40  # ((1 + 2) + 1) * 10: outer wraps inner
    assert events[:4] == ["enqueue ['add']", "enqueued 1", "enqueue ['add', 'add']", "enqueued 2"]
    job_events = [e for e in events if e.startswith(("outer", "inner"))]
    assert any(e.startswith("outer add #1 in postroom-slot") for e in job_events)
    assert "inner {'a': 1, 'b': 2}" in job_events


def test_enqueue_middleware_may_replace_the_requests(client: postroom.Client) -> None:
    @client.job("echo")
    def echo(value: str) -> str:
        return value

    @client.around_enqueue
    def tenant(requests: list[Any], call_next: Callable[..., Any]) -> Any:
        values = [json.loads(r.args_json)["value"] for r in requests]
        return call_next([echo.prepare(value=f"tenant-7:{v}") for v in values])

    handle = echo.enqueue(value="hello")
    with running(client.worker(**FAST)):
        assert handle.result(timeout=20) == "tenant-7:hello"


def test_middleware_flavours_are_checked(client: postroom.Client) -> None:
    async def coroutine(job: JobContext, call_next: Any) -> Any:
        return await call_next()

    with pytest.raises(InvalidType, match=r"postroom\.AsyncClient"):
        client.around_job(coroutine)
    with pytest.raises(InvalidType, match="plain"):
        client.around_enqueue(coroutine)
    with pytest.raises(InvalidType):
        client.around_job("not a function")  # type: ignore[arg-type]


def test_async_middleware_around_async_jobs_and_plain_around_plain(dsn: str) -> None:
    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            seen: list[str] = []

            @client.around_job
            async def on_loop(job: JobContext, call_next: Any) -> Any:
                seen.append(f"async {job.kind}")
                return await call_next()

            @client.around_job
            def in_thread(job: JobContext, call_next: Any) -> Any:
                seen.append(f"sync {job.kind}")
                return call_next()

            @client.around_enqueue
            async def counted(requests: list[Any], call_next: Any) -> Any:
                seen.append(f"enqueue {len(requests)}")
                return await call_next()

            with pytest.raises(InvalidType, match="async def"):
                client.around_enqueue(lambda requests, call_next: call_next())

            @client.job("coro")
            async def coro() -> str:
                return "c"

            @client.job("plain")
            def plain() -> str:
                return "p"

            a, b = await coro.enqueue(), await plain.enqueue()
            worker = client.worker(**FAST)
            task = asyncio.create_task(worker.run(handle_signals=False))
            assert (await a.result(timeout=20), await b.result(timeout=20)) == ("c", "p")
            worker.stop()
            await task
            assert sorted(seen) == ["async coro", "enqueue 1", "enqueue 1", "sync plain"]

    asyncio.run(main())


def test_one_log_line_per_job_start_and_end(
    client: postroom.Client, caplog: pytest.LogCaptureFixture
) -> None:
    @client.job("logged", max_attempts=2, backoff=postroom.Backoff(base=0.01, jitter=0))
    def logged(fail: bool) -> None:
        if fail:
            raise ValueError("nope")

    ok = logged.enqueue(fail=False)
    bad = logged.enqueue(fail=True)
    caplog.set_level(logging.INFO, logger="postroom.jobs")
    with running(client.worker(**FAST)):
        ok.result(timeout=20)
        wait_for(lambda: client.get_job(bad.id).state == "failed", 20, "the failure")
        wait_for(lambda: len(caplog.records) >= 6, 20, "the log lines")
    records = [r for r in caplog.records if r.name == "postroom.jobs"]
    by_job = {(r.job_id, r.attempt, r.outcome) for r in records}  # type: ignore[attr-defined]
    assert by_job == {
        (ok.id, 1, "started"),
        (ok.id, 1, "done"),
        (bad.id, 1, "started"),
        (bad.id, 1, "retry"),
        (bad.id, 2, "started"),
        (bad.id, 2, "failed"),
    }
    done = next(r for r in records if r.outcome == "done")  # type: ignore[attr-defined]
    assert done.kind == "logged" and done.duration >= 0  # type: ignore[attr-defined]
    failed = next(r for r in records if r.outcome == "failed")  # type: ignore[attr-defined]
    assert failed.error == "ValueError: nope"  # type: ignore[attr-defined]
    assert all(r.levelno == logging.INFO for r in records)


def test_warnings_about_unused_queues_and_unregistered_kinds(
    client: postroom.Client, caplog: pytest.LogCaptureFixture
) -> None:
    @client.job("mine", queue="used")
    def mine() -> None:
        pass

    client.enqueue("theirs", {}, queue="reports")  # no worker serves it
    caplog.set_level(logging.WARNING, logger="postroom.worker")
    worker = client.worker(
        ["used", "emial"], **FAST, warn_unregistered_after=0.2, rescue_interval=0.1
    )
    with running(worker):
        wait_for(
            lambda: any("'theirs'" in r.getMessage() for r in caplog.records),
            20,
            "the unregistered-kind warning",
        )
    messages = [r.getMessage() for r in caplog.records if r.name == "postroom.worker"]
    typo = [m for m in messages if m.startswith("queue 'emial'")]
    assert typo and "a typo?" in typo[0]
    assert not any(m.startswith("queue 'used'") for m in messages)
    theirs = [m for m in messages if "job kind 'theirs'" in m]
    assert len(theirs) == 1 and "does not register" in theirs[0]
