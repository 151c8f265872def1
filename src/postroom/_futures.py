"""A ``concurrent.futures.Future`` that builds its condition only when someone waits on it.

The sync producer returns one future per ``send()``. ``Future.__init__`` builds a
``threading.Condition`` (about 2 us), and ``set_result`` takes it and notifies: together more
than the rest of a send, for futures that are mostly never waited on one by one (callers
``flush()``). This subclass creates the condition on first use; ``set_result`` on a future no
one has touched yet just stores the result.

Every waiting path of ``Future`` (``result``, ``exception``, ``add_done_callback``, ``cancel``,
``concurrent.futures.wait``/``as_completed``) goes through ``_condition`` first, which creates it
under ``_CREATION_LOCK``; the fast path of ``set_result``/``set_exception`` runs under the same
lock and only while no condition exists, so a waiter either sees the finished state or gets
notified. It relies on ``Future``'s private attributes, stable since Python 3.2; the tests in
tests/test_futures.py pin the behaviour.

:func:`finish_positions` finishes a whole producer batch at once: one lock acquisition for the
batch, and each untouched future stores its position as two ints, its result object (say a
``Published``) built only when someone reads it. Every object made per send and kept until its
batch commits costs the garbage collector again at each of its passes, so a send that is never
waited on one by one makes one object (its future) and no more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures._base import (
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    PENDING,
)
from typing import Any, TypeVar

T = TypeVar("T")

_CREATION_LOCK = threading.Lock()
_DONE_STATES = frozenset((CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED))


class LazyFuture(Future[T]):
    # Until someone waits, the waiter and callback lists are these empty tuples: nothing but the
    # condition's owner appends to them, and fewer objects per send means less garbage
    # collector work (the collector's passes over many live futures cost more than making them).
    _waiters: Any = ()
    _done_callbacks: Any = ()
    # A class attribute read through the instance: never touching ``self.__dict__`` keeps
    # CPython from building a dict object per future.
    _lazy_condition: threading.Condition | None = None
    # Slots: a future finished by ``finish_positions`` keeps its position here (no object).
    __slots__ = ("_lazy_make", "_lazy_offset", "_lazy_partition", "_stored")
    _lazy_make: Callable[[int, int], Any]
    _lazy_offset: int

    def __init__(self) -> None:  # Future.__init__ minus the condition and the lists
        self._state = PENDING
        self._stored: Any = None
        self._lazy_partition: int | None = None
        self._exception: BaseException | None = None

    @property
    def _result(self) -> Any:  # what ``Future`` reads and writes: built on demand if lazy
        partition = self._lazy_partition
        if partition is not None:
            return self._lazy_make(partition, self._lazy_offset)
        return self._stored

    @_result.setter
    def _result(self, value: Any) -> None:
        self._stored = value

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        condition = self._lazy_condition
        if condition is None:
            with _CREATION_LOCK:
                condition = self._lazy_condition
                if condition is None:
                    self._waiters = []
                    self._done_callbacks = []
                    condition = self._lazy_condition = threading.Condition()
        return condition

    def done(self) -> bool:
        return self._state in _DONE_STATES  # one attribute read: atomic, no lock needed

    def set_result(self, result: T) -> None:
        if not self._finish_untouched(result, None):
            super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        if not self._finish_untouched(None, exception):
            super().set_exception(exception)

    def _finish_untouched(self, result: Any, exception: BaseException | None) -> bool:
        """Finish without a condition if nobody has waited yet; whether it did."""
        with _CREATION_LOCK:
            if self._lazy_condition is not None or self._state in _DONE_STATES:
                return False  # the Future code path notifies waiters or raises InvalidStateError
            self._stored = result
            self._exception = exception
            self._state = FINISHED
            return True


def finish_positions(
    futures: Sequence[LazyFuture[Any]],
    make: Callable[[int, int], Any],
    partition: int,
    first_offset: int,
) -> None:
    """Resolve ``futures[i]`` to ``make(partition, first_offset + i)``, skipping done ones.

    Untouched futures (nobody waits on them yet) keep the two ints and build the result when
    read; the others are finished the ``Future`` way, notifying their waiters."""
    touched = []
    with _CREATION_LOCK:
        for offset, future in enumerate(futures, first_offset):
            if future._lazy_condition is None and future._state not in _DONE_STATES:
                future._lazy_make = make
                future._lazy_offset = offset
                future._lazy_partition = partition
                future._state = FINISHED
            else:
                touched.append((future, offset))
    for future, offset in touched:
        if not future.done():
            Future.set_result(future, make(partition, offset))
