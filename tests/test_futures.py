"""The producer's lazily conditioned future behaves as a concurrent.futures.Future."""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, InvalidStateError, wait

import pytest

from postroom._futures import LazyFuture


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
