"""The quarter of the fast paths that rest on CPython internals, each behind one seam with a
plain fallback.

Four measured fast paths (bench/RESULTS.md has the figures that justify each) lean on what
CPython does not promise:

- sync producer futures (``_futures.SendFuture``): rest on ``concurrent.futures.Future``'s
  private ``_state``, ``_condition``, ``_waiters``; fallback ``PlainSends``, one real
  ``Future`` per send; justified by ``postroom bench log`` (the producer's sends/s).
- async producer futures (``_futures.ASendFuture``): rest on asyncio's duck typing
  (``_asyncio_future_blocking``); fallback ``APlainSends``, one ``loop.create_future()`` per
  send; justified by ``postroom bench log`` (the async producer).
- interrupting a job's thread (``_acompat.JobCall``): rests on
  ``ctypes.pythonapi.PyThreadState_SetAsyncExc``; no fallback can do it: the job is asked to
  stop (its ``JobContext``) and runs on; it is what makes job timeouts and cancels bite.
- the GC paused while a poll builds messages (``gc_paused``): rests on how the collector
  treats many young objects; fallback: the collector left running; justified by
  ``postroom bench log`` (the consumer's CPU).

``FAST`` is the one seam: True on a CPython version these paths were tested on
(``TESTED``) unless ``POSTROOM_FAST_PATHS=off``; every user picks its implementation through
the names below, never by itself. tests/test_fastpaths.py checks each internal on every tested
version and fails loudly on a version not in ``TESTED`` (check the internals, then add it).
A client turns the GC pause off with ``connect(pause_gc=False)``.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from . import _futures

TESTED = ((3, 11), (3, 12), (3, 13))
"""CPython versions whose internals tests/test_fastpaths.py checked."""
ENV = "POSTROOM_FAST_PATHS"


def supported() -> bool:
    """Whether this interpreter is a CPython whose internals the fast paths were tested on."""
    return (
        sys.implementation.name == "cpython"
        and sys.version_info[:2] in TESTED
        and hasattr(ctypes, "pythonapi")
        and hasattr(ctypes.pythonapi, "PyThreadState_SetAsyncExc")
    )


FAST = supported() and os.environ.get(ENV, "").strip().lower() not in ("off", "0", "no")
"""The seam: the fast paths (True) or their plain fallbacks."""


# -- producer futures --------------------------------------------------------------------------


class PlainSends:
    """The plain twin of ``_futures.Sends``: a real ``concurrent.futures.Future`` per send,
    finished through its public API (costlier: the batch keeps every future)."""

    def __init__(self) -> None:
        self._futures: list[Any] = []

    def _future(self) -> Any:
        return Future()

    def new(self) -> Any:
        future = self._future()
        self._futures.append(future)
        return future

    def done(self, index: int) -> bool:
        return bool(self._futures[index].done())

    def set_result(self, index: int, value: Any) -> None:
        self._finish(index, value, None)

    def set_results(self, indexes: Sequence[int], values: Sequence[Any]) -> None:
        for index, value in zip(indexes, values, strict=True):
            self._finish(index, value, None)

    def set_exception(self, index: int, error: BaseException) -> None:
        self._finish(index, None, error)

    def resolve_positions(
        self, make: Callable[[int, int], Any], partition: int, first_offset: int
    ) -> None:
        for index in range(len(self._futures)):
            self._finish(index, make(partition, first_offset + index), None)

    def fail(self, error: BaseException) -> None:
        for index in range(len(self._futures)):
            self._finish(index, None, error)

    def _finish(self, index: int, value: Any, error: BaseException | None) -> None:
        future = self._futures[index]
        if future.done():  # finished already, or cancelled by its caller
            return
        try:
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)
        except (InvalidStateError, asyncio.InvalidStateError):
            pass  # cancelled meanwhile


class APlainSends(PlainSends):
    """The plain twin of ``_futures.ASends``: an asyncio future per send, made on the event
    loop (the async producer's writer finishes them there)."""

    def __init__(self) -> None:
        super().__init__()
        self._loop = asyncio.get_running_loop()

    def _future(self) -> Any:
        return self._loop.create_future()


if TYPE_CHECKING:  # the types the producers see are the fast ones; the plain ones quack alike
    Sends = _futures.Sends
    ASends = _futures.ASends
else:
    Sends = _futures.Sends if FAST else PlainSends
    ASends = _futures.ASends if FAST else APlainSends
SendFuture = _futures.SendFuture
ASendFuture = _futures.ASendFuture


# -- interrupting a thread ---------------------------------------------------------------------

if FAST:
    _set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    _set_async_exc.argtypes = [ctypes.c_ulong, ctypes.py_object]


def raise_in_thread(thread_id: int, error: type[BaseException] | BaseException | None) -> bool:
    """Make thread ``thread_id`` raise ``error`` at its next bytecode (None: clear a pending
    one); False when the fallback cannot (the thread then runs on)."""
    if not FAST:
        return False
    _set_async_exc(thread_id, ctypes.py_object() if error is None else ctypes.py_object(error))
    return True


# -- the GC paused during a poll -----------------------------------------------------------------

_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_resume = False


@contextmanager
def gc_paused(enabled: bool = True) -> Iterator[None]:
    """The cyclic garbage collector off for a loop that builds thousands of messages (when
    ``enabled``, the client's ``pause_gc``, and on the fast paths).

    Each message is a GC-tracked object that lives until the caller has handled its batch, so
    building a batch of 5,000 ran a dozen young collections and every few batches a full one
    that walked every object of the process: 20-30% of a consumer's CPU (gc.callbacks; see
    bench/RESULTS.md). The loop creates no reference cycles, so nothing is lost by collecting
    once, after it. Left off if it was off already (the caller's choice stands).

    Pauses may overlap (a sync consumer's prefetch thread makes rows while its poll builds
    messages): the collector is turned off by the first and back on by the last to end.
    """
    if not (enabled and FAST):
        yield
        return
    global _gc_pauses, _gc_resume
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_resume = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_resume:
                gc.enable()
