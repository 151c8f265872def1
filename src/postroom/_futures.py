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
"""

from __future__ import annotations

import threading
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

    def __init__(self) -> None:  # Future.__init__ minus the condition and the lists
        self._state = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None

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
            self._result = result
            self._exception = exception
            self._state = FINISHED
            return True
