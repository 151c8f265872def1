"""The sync producer's futures (``SendFuture``, reading their outcome from their batch's
``Sends``) behave as concurrent.futures.Future, and the batch keeps no future nobody waits on."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import FIRST_COMPLETED, InvalidStateError, wait
from typing import Any

import pytest

from postroom._futures import ASends, SendFuture, Sends


def position(partition: int, offset: int) -> tuple[int, int]:
    return (partition, offset)


def test_result_recorded_before_anyone_waits() -> None:
    sends = Sends()
    future = sends.new()
    assert not future.done()
    sends.set_result(0, 7)
    assert future.done()
    assert future.result(timeout=0) == 7
    assert future.exception(timeout=0) is None
    with pytest.raises(InvalidStateError):
        future.set_result(8)


def test_exception_recorded_before_anyone_waits() -> None:
    sends = Sends()
    future = sends.new()
    sends.set_exception(0, ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        future.result(timeout=0)
    with pytest.raises(InvalidStateError):
        future.set_exception(ValueError("again"))


def test_waiter_in_another_thread_is_woken() -> None:
    for _ in range(200):  # the waiter and the writer race for the condition's creation
        sends = Sends()
        future = sends.new()
        got: list[Any] = []
        waiter = threading.Thread(target=lambda f=future, g=got: g.append(f.result(timeout=5)))
        waiter.start()
        sends.resolve_positions(position, 2, 40)
        waiter.join(5)
        assert got == [(2, 40)]


def test_callbacks_and_wait() -> None:
    sends = Sends()
    future, other = sends.new(), sends.new()
    seen: list[Any] = []
    future.add_done_callback(lambda f: seen.append(f.result()))
    done, _ = wait([future, other], timeout=0)
    assert not done
    sends.set_result(0, 3)
    assert seen == [3]
    done, _ = wait([future, other], timeout=1, return_when=FIRST_COMPLETED)
    assert done == {future}
    later = Sends()
    finished = later.new()
    later.set_result(0, 4)
    finished.add_done_callback(lambda f: seen.append(f.result()))
    assert seen == [3, 4]


def test_a_cancelled_future_stays_cancelled() -> None:
    sends = Sends()
    future = sends.new()
    assert future.cancel()
    assert future.cancelled()
    sends.resolve_positions(position, 0, 0)
    assert future.cancelled()
    with pytest.raises(InvalidStateError):
        future.set_result(1)


def test_outcomes_in_their_order_of_precedence() -> None:
    """A send's own outcome (a refused record, a per-record result) wins over the batch's
    position, which wins over the batch's failure."""
    sends = Sends()
    refused, placed, waited, positioned = (sends.new() for _ in range(4))
    called: list[Any] = []
    waited.add_done_callback(lambda f: called.append(f.result()))
    woken: list[Any] = []
    waiter = threading.Thread(target=lambda: woken.append(positioned.result(timeout=5)))
    waiter.start()
    sends.set_exception(0, ValueError("refused"))
    sends.set_results([1], ["own"])
    sends.resolve_positions(position, 4, 10)
    sends.fail(RuntimeError("too late"))
    waiter.join(5)
    with pytest.raises(ValueError, match="refused"):
        refused.result(timeout=0)
    assert placed.result(timeout=0) == "own"
    assert waited.result(timeout=0) == (4, 12) and called == [(4, 12)]
    assert woken == [(4, 13)]
    failing = Sends()
    ok, bad = failing.new(), failing.new()
    failing.set_result(0, "kept")
    failing.fail(RuntimeError("connection lost"))
    assert ok.result(timeout=0) == "kept"
    with pytest.raises(RuntimeError, match="connection lost"):
        bad.result(timeout=0)


def test_the_batch_keeps_no_future_nobody_waits_on() -> None:
    """The point of SendFuture: a dropped future is freed at once (no garbage collector pass
    needed), so pending sends cost the collector nothing; one waited on is kept until done."""
    gc.disable()
    try:
        sends = Sends()
        dropped = weakref.ref(sends.new())
        assert dropped() is None  # freed by reference counting alone
        waited = sends.new()
        result: list[Any] = []
        waited.add_done_callback(lambda f: result.append(f.result()))
        kept = weakref.ref(waited)
        del waited
        assert kept() is not None  # the batch holds it: its callback must still run
        sends.resolve_positions(position, 0, 5)
        assert result == [(0, 6)]
        assert kept() is None
    finally:
        gc.enable()
    assert isinstance(Sends().new(), SendFuture)


# -- the async producer's futures ----------------------------------------------------------


def test_an_async_send_future_is_a_future_to_asyncio() -> None:
    import asyncio

    from postroom._futures import ASends

    async def scenario() -> None:
        sends = ASends()
        awaited, gathered, dropped, failed, cancelled = (sends.new() for _ in range(5))
        assert asyncio.isfuture(awaited) and not awaited.done()
        with pytest.raises(asyncio.InvalidStateError):
            awaited.result()
        seen: list[Any] = []
        gathered.add_done_callback(seen.append)
        waiting = asyncio.ensure_future(asyncio.gather(awaited, gathered))
        assert cancelled.cancel()
        await asyncio.sleep(0)
        sends.set_exception(3, ValueError("refused"))
        sends.resolve_positions(position, 1, 20)
        assert await waiting == [(1, 20), (1, 21)]
        assert seen == [gathered]  # the callback gets the future it was added to
        assert dropped.done() and dropped.result() == (1, 22)  # never awaited: no asyncio future
        assert dropped._future is None
        with pytest.raises(ValueError, match="refused"):
            await failed
        assert isinstance(failed.exception(), ValueError)
        assert cancelled.cancelled()
        with pytest.raises(asyncio.CancelledError):
            await cancelled

    asyncio.run(scenario())


def test_async_send_futures_with_wait_and_as_completed() -> None:
    import asyncio

    from postroom._futures import ASends

    async def scenario() -> None:
        sends = ASends()
        futures = [sends.new() for _ in range(3)]
        # asyncio.wait's stubs want asyncio.Future instances: at run time any future will do.
        done, pending = await asyncio.wait(futures, timeout=0)  # type: ignore[type-var]
        assert not done and len(pending) == 3
        asyncio.get_running_loop().call_soon(sends.resolve_positions, position, 0, 0)
        ordered = [await f for f in asyncio.as_completed(futures, timeout=5)]
        assert sorted(ordered) == [(0, 0), (0, 1), (0, 2)]
        done, pending = await asyncio.wait(futures)  # type: ignore[type-var]
        assert done == set(futures) and not pending
        removed: list[Any] = []
        late = ASends()
        future = late.new()
        future.add_done_callback(removed.append)
        assert future.remove_done_callback(removed.append) == 1
        late.fail(RuntimeError("connection lost"))
        with pytest.raises(RuntimeError, match="connection lost"):
            await future
        assert removed == []

    asyncio.run(scenario())


def test_the_async_batch_keeps_no_future_nobody_waits_on() -> None:
    import asyncio

    from postroom._futures import ASends

    async def scenario() -> None:
        sends = ASends()
        dropped = weakref.ref(sends.new())
        assert dropped() is None
        waited = sends.new()
        task = asyncio.ensure_future(_await(waited))
        await asyncio.sleep(0)
        assert len(sends._waited) == 1  # the asyncio future behind the awaited one
        sends.resolve_positions(position, 2, 0)
        assert await task == (2, 1)
        assert not sends._waited

    gc.disable()
    try:
        asyncio.run(scenario())
    finally:
        gc.enable()


async def _await(future: Any) -> Any:
    return await future


def test_an_async_future_is_finished_on_its_loop_from_another_thread() -> None:
    """A batch of async sends told its outcome in another thread (the Kafka producer's
    delivery reports) finishes the asyncio futures awaited on their loop, never off it."""
    import asyncio

    from postroom._futures import ASends

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        sends = ASends()
        future = sends.new()
        real = future._waitable()  # what awaiting it makes: a real asyncio future, registered
        finished_on_loop: list[bool] = []
        real.add_done_callback(
            lambda _: finished_on_loop.append(asyncio.get_running_loop() is loop)
        )
        thread = threading.Thread(target=sends.set_results, args=([0], ["ok"]))
        thread.start()
        thread.join()
        assert not real.done()  # not set off its loop: handed to the loop, which finishes it
        assert await asyncio.wait_for(future, 10) == "ok"
        assert finished_on_loop == [True]

    asyncio.run(scenario())


def test_threads_sharing_a_batch_get_distinct_indexes() -> None:
    # The Kafka producer takes no lock a send: Sends.new must hand each thread its own index.
    sends: Sends = Sends()
    indexes: list[list[int]] = [[], [], [], []]
    start = threading.Barrier(len(indexes))

    def take(into: list[int]) -> None:
        start.wait()
        for _ in range(20_000):
            into.append(sends.new()._index)

    threads = [threading.Thread(target=take, args=(into,)) for into in indexes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [index for into in indexes for index in into]
    assert sorted(every) == list(range(len(every)))


def test_a_result_delivered_without_the_lock_wakes_every_waiter() -> None:
    """``Sends.deliver`` (the Kafka producer's report callback) records a result without the
    lock: a waiter registering at the same moment is still woken, sync and async alike."""
    import asyncio

    for _ in range(300):
        sends = Sends()
        future = sends.new()
        start = threading.Barrier(2)
        got: list[Any] = []

        def wait_on(
            f: SendFuture[Any] = future, g: list[Any] = got, b: threading.Barrier = start
        ) -> None:
            b.wait()
            g.append(f.result(timeout=5))

        waiter = threading.Thread(target=wait_on)
        waiter.start()
        start.wait()
        sends.deliver(0, (1, 9))
        waiter.join(5)
        assert got == [(1, 9)]
        assert not sends._waited

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(300):
            sends = ASends()
            future = sends.new()
            start = threading.Barrier(2)

            def deliver(s: ASends = sends, b: threading.Barrier = start) -> None:
                b.wait()
                s.deliver(0, (0, 3))

            writer = loop.run_in_executor(None, deliver)
            await loop.run_in_executor(None, start.wait)
            assert await asyncio.wait_for(future, 5) == (0, 3)
            await writer
            assert not sends._waited

    asyncio.run(scenario())
