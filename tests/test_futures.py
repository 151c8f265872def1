"""The producer's lazily conditioned future behaves as a concurrent.futures.Future."""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, InvalidStateError, wait

import pytest

from postroom._futures import LazyFuture, finish_positions


def test_result_set_before_anyone_waits() -> None:
    future: LazyFuture[int] = LazyFuture()
    assert not future.done()
    future.set_result(7)
    assert future.done()
    assert future.result(timeout=0) == 7
    assert future.exception(timeout=0) is None
    with pytest.raises(InvalidStateError):
        future.set_result(8)


def test_exception_set_before_anyone_waits() -> None:
    future: LazyFuture[int] = LazyFuture()
    future.set_exception(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        future.result(timeout=0)
    with pytest.raises(InvalidStateError):
        future.set_exception(ValueError("again"))


def test_waiter_in_another_thread_is_woken() -> None:
    for _ in range(200):  # the waiter and the setter race for the condition's creation
        future: LazyFuture[int] = LazyFuture()
        got: list[int] = []
        waiter = threading.Thread(target=lambda f=future, g=got: g.append(f.result(timeout=5)))
        waiter.start()
        future.set_result(1)
        waiter.join(5)
        assert got == [1]


def test_callbacks_and_wait() -> None:
    future: LazyFuture[int] = LazyFuture()
    seen: list[int] = []
    future.add_done_callback(lambda f: seen.append(f.result()))
    other: LazyFuture[int] = LazyFuture()
    done, _ = wait([future, other], timeout=0)
    assert not done
    future.set_result(3)
    assert seen == [3]
    done, _ = wait([future, other], timeout=1, return_when=FIRST_COMPLETED)
    assert done == {future}
    finished: LazyFuture[int] = LazyFuture()
    finished.set_result(4)
    finished.add_done_callback(lambda f: seen.append(f.result()))
    assert seen == [3, 4]


def test_cancel() -> None:
    future: LazyFuture[int] = LazyFuture()
    assert future.cancel()
    assert future.cancelled()
    with pytest.raises(InvalidStateError):
        future.set_result(1)


def test_finish_positions_builds_results_on_demand() -> None:
    untouched: list[LazyFuture[tuple[int, int]]] = [LazyFuture() for _ in range(3)]
    waited: LazyFuture[tuple[int, int]] = LazyFuture()
    called: list[tuple[int, int]] = []
    waited.add_done_callback(lambda f: called.append(f.result()))
    cancelled: LazyFuture[tuple[int, int]] = LazyFuture()
    assert cancelled.cancel()
    woken: list[tuple[int, int]] = []
    waiter = threading.Thread(target=lambda: woken.append(untouched[2].result(timeout=5)))
    finish_positions([*untouched[:2], waited, cancelled], lambda p, o: (p, o), 4, 10)
    waiter.start()
    assert [f.result(timeout=0) for f in untouched[:2]] == [(4, 10), (4, 11)]
    assert waited.result(timeout=0) == (4, 12) and called == [(4, 12)]
    assert cancelled.cancelled()
    done, _ = wait(untouched[:2], timeout=0, return_when=FIRST_COMPLETED)
    assert done
    with pytest.raises(InvalidStateError):
        untouched[0].set_result((0, 0))
    finish_positions([untouched[2]], lambda p, o: (p, o), 1, 0)
    waiter.join(5)
    assert woken == [(1, 0)]
