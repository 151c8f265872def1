"""Both flavours of each _acompat primitive behave alike (tools/async_to_sync.py swaps them)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from postroom import _acompat
from postroom._acompat import AJobCall
from postroom.errors import JobInterrupted


def _waiter(event: threading.Event) -> None:
    event.wait()


def test_gather_times_out_and_leaves_the_thread_running() -> None:
    release = threading.Event()
    worker = _acompat.spawn(_waiter, release, name="blocked")
    with pytest.raises(TimeoutError, match=r"blocked did not stop within 0\.05 s"):
        _acompat.gather(worker, 0.05)
    assert worker.is_alive()
    release.set()
    _acompat.gather(worker, 10)
    assert not worker.is_alive()


def test_agather_times_out_and_leaves_the_task_running() -> None:
    # Before the two flavours were merged, agather cancelled the task on timeout.
    async def scenario() -> None:
        release = asyncio.Event()

        async def blocked() -> None:
            await release.wait()

        task = _acompat.aspawn(blocked, name="blocked")
        with pytest.raises(TimeoutError, match=r"blocked did not stop within 0\.05 s"):
            await _acompat.agather(task, 0.05)
        assert not task.done()
        release.set()
        await _acompat.agather(task, 10)
        assert task.done() and not task.cancelled()

    asyncio.run(scenario())


def test_gather_raises_what_the_thread_raised() -> None:
    def fail() -> None:
        raise ValueError("boom")

    seen: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: seen.append(args.exc_value)
    try:
        worker = _acompat.spawn(fail, name="failing")
        with pytest.raises(ValueError, match="boom"):
            _acompat.gather(worker, 10)
    finally:
        threading.excepthook = previous
    assert isinstance(seen[0], ValueError)  # still reported, as asyncio logs a lost task error


def test_agather_raises_what_the_task_raised() -> None:
    async def scenario() -> None:
        async def fail() -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await _acompat.agather(_acompat.aspawn(fail, name="failing"), 10)

    asyncio.run(scenario())


def test_join_all_flavours_report_whether_all_ended() -> None:
    release = threading.Event()
    worker = _acompat.spawn(_waiter, release, name="blocked")
    assert _acompat.join_all([worker], 0.01) is False
    release.set()
    assert _acompat.join_all([worker], 10) is True

    async def scenario() -> None:
        gate = asyncio.Event()

        async def blocked() -> None:
            await gate.wait()

        task = _acompat.aspawn(blocked, name="blocked")
        assert await _acompat.ajoin_all([task], 0.01) is False
        gate.set()
        assert await _acompat.ajoin_all([task], 10) is True

    asyncio.run(scenario())


def test_both_event_flavours_wait_with_a_timeout() -> None:
    event = _acompat.Event()
    assert event.wait_timeout(0.01) is False
    event.set()
    assert event.wait_timeout(0.01) is True

    async def scenario() -> None:
        aevent = _acompat.AEvent()
        assert await aevent.wait_timeout(0.01) is False
        aevent.set()
        assert await aevent.wait_timeout(0.01) is True

    asyncio.run(scenario())


def test_both_background_flavours_run_calls_and_give_their_outcome() -> None:
    threads: set[int] = set()

    def thread_call(x: int) -> int:
        if x < 0:
            raise ValueError("negative")
        return x * 2

    def recorded(x: int) -> int:
        threads.add(threading.get_ident())
        return thread_call(x)

    background = _acompat.Background("postroom-test")
    for x in (1, 2, 3):
        assert _acompat.outcome(background.submit(recorded, x)) == 2 * x
    assert len(threads) == 1 and threading.get_ident() not in threads  # one thread, kept
    with pytest.raises(ValueError, match="negative"):
        _acompat.outcome(background.submit(thread_call, -1))
    background.close()
    background.close()
    assert _acompat.outcome(background.submit(thread_call, 4)) == 8  # a new thread after close
    background.close()

    async def scenario() -> None:
        async def task_call(x: int) -> int:
            await asyncio.sleep(0)
            return thread_call(x)

        abackground = _acompat.ABackground("postroom-test")
        assert await _acompat.aoutcome(abackground.submit(task_call, 5)) == 10
        with pytest.raises(ValueError, match="negative"):
            await _acompat.aoutcome(abackground.submit(task_call, -1))
        abackground.close()

    asyncio.run(scenario())


def test_the_async_names_other_modules_import_are_still_there() -> None:
    for name in ["ALock", "ACondition", "AEvent", "AFuture", "AQueue", "aspawn", "agather"]:
        assert hasattr(_acompat, name), name
    for name in ["asleep", "ato_thread", "ajoin_all", "AJobCall", "JobThreads", "ASends"]:
        assert hasattr(_acompat, name), name
    assert _acompat.IS_ASYNC is True


def test_an_async_job_without_timeout_runs_in_the_slot_task_as_if_in_its_own() -> None:
    """``AJobCall`` runs a coroutine without a timeout in the calling task: each job still
    gets a context of its own (a ContextVar a job sets does not leak into the next job of the
    same slot), ``interrupt()`` stops it with its reason and leaves the slot uncancelled, a
    job that swallows the cancellation returns, and a cancellation of the slot itself still
    propagates."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def sets() -> str:
        var.set("job")
        await asyncio.sleep(0)
        return var.get()

    async def sleeps() -> None:
        await asyncio.sleep(10)

    async def swallows() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "swallowed"
        return "slept"

    async def main() -> None:
        slot = asyncio.current_task()
        assert await AJobCall(sets, {}, None, coroutine=True).run() == "job"
        assert var.get() == "unset"
        assert await AJobCall(sets, {}, None).run() == "job"  # coroutine looked up

        call = AJobCall(sleeps, {}, None)
        running = asyncio.ensure_future(call.run())
        await asyncio.sleep(0.01)
        call.interrupt(JobInterrupted("stop it"))
        with pytest.raises(JobInterrupted, match="stop it"):
            await running
        assert running.cancelling() == 0

        call = AJobCall(swallows, {}, None)

        async def slot_loop() -> tuple[str, int]:
            value = await call.run()
            await asyncio.sleep(0.01)  # the slot goes on, not cancelled
            task = asyncio.current_task()
            assert task is not None
            return value, task.cancelling()

        running = asyncio.ensure_future(slot_loop())
        await asyncio.sleep(0.01)
        call.interrupt(JobInterrupted("stop"))
        assert await running == ("swallowed", 0)

        running = asyncio.ensure_future(AJobCall(sleeps, {}, None).run())
        await asyncio.sleep(0.01)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert slot is not None and slot.cancelling() == 0

    asyncio.run(main())
