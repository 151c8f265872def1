"""The outcomes of a sync producer batch, and the futures ``send()`` returns that read them.

A send's future must not be kept by the producer while its batch is pending: each object made
per send and kept until its batch commits costs again at every pass of the garbage collector,
and those passes over many pending futures cost more than the sends (bench/RESULTS.md). So
:class:`Sends` stores a batch's outcomes (for the common case, one partition and a first
offset for all of them) and a :class:`SendFuture` holds its batch and its index and reads its
outcome from there. A future the caller drops is freed at once; a batch of pending sends is a
few objects whatever its size.

``SendFuture`` is a ``concurrent.futures.Future``. It builds its condition, waiter list and
callback list only when someone first uses one, through ``_condition``, which every waiting
path of ``Future`` (``result``, ``exception``, ``add_done_callback``, ``cancel``,
``concurrent.futures.wait``/``as_completed``) takes first. At that moment, under ``_LOCK``, it
copies its outcome if the batch has one, or else registers with the batch, which then
finishes it the ``Future`` way (notifying waiters, calling callbacks). The batch records
outcomes under the same lock, so a waiter either sees the outcome or is notified. It relies
on ``Future``'s private attributes, stable since Python 3.2; tests/test_futures.py pins the
behaviour.

The async producer's batches are :class:`ASends` and its futures :class:`ASendFuture`: asyncio
takes one for a future (``await``, ``gather``, ``wait``, ``as_completed``, done-callbacks). It
makes a real asyncio future only when someone awaits it or adds a callback, and the batch then
finishes that one, on the event loop (the async producer's writer runs there).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures._base import (
    CANCELLED,
    CANCELLED_AND_NOTIFIED,
    FINISHED,
    PENDING,
)
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_LOCK = threading.Lock()
_DONE_STATES = frozenset((CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED))
_Outcome = tuple[bool, Any, BaseException | None]  # done, result, exception


class Sends:
    """The outcomes of one batch of sends, by index (send order). Outcomes are recorded by
    the producer's writer; a send's outcome is, in this order: its own (``set_result``,
    ``set_exception``), the batch's position (``resolve_positions``), the batch's failure
    (``fail``)."""

    __slots__ = ("_errors", "_failure", "_make", "_next", "_positions", "_results", "_waited")

    def __init__(self, make: Callable[[Any], Any] | None = None) -> None:
        self._make = make
        """What a stored result becomes when read (None: itself): the Kafka producer stores a
        plain ``(partition, offset)`` tuple, which the collector stops tracking, and its
        ``Published`` is made only for a reader."""
        # The next send's index: ``next`` on a count is one C call, so two threads sharing a
        # producer never get the same index (no lock a send).
        self._next = itertools.count().__next__
        self._results: dict[int, Any] = {}
        self._errors: dict[int, BaseException] = {}
        self._positions: tuple[Callable[[int, int], Any], int, int] | None = None
        self._failure: BaseException | None = None
        # What to finish when a send someone waits on is done: its SendFuture, or the asyncio
        # future an ASendFuture made.
        self._waited: dict[int, Future[Any] | asyncio.Future[Any]] = {}

    def new(self) -> SendFuture[Any]:
        """The future of the next send (thread-safe)."""
        future: SendFuture[Any] = SendFuture()
        future._sends = self
        future._index = self._next()
        return future

    def done(self, index: int) -> bool:
        return (
            index in self._results
            or index in self._errors
            or self._positions is not None
            or self._failure is not None
        )

    def outcome(self, index: int) -> _Outcome:
        """The outcome of send ``index`` so far (``_LOCK`` held)."""
        if index in self._results:
            value = self._results[index]
            return True, (value if self._make is None else self._make(value)), None
        error = self._errors.get(index)
        if error is not None:
            return True, None, error
        if self._positions is not None:
            make, partition, first = self._positions
            return True, make(partition, first + index), None
        if self._failure is not None:
            return True, None, self._failure
        return False, None, None

    def set_result(self, index: int, value: Any) -> None:
        self.set_results([index], [value])

    def set_results(self, indexes: Sequence[int], values: Sequence[Any]) -> None:
        with _LOCK:
            if self._positions is None and self._failure is None and not self._errors:
                keep = self._results.setdefault  # done() is only a result of its own here
                for index, value in zip(indexes, values, strict=True):
                    keep(index, value)
            else:
                for index, value in zip(indexes, values, strict=True):
                    if not self.done(index):
                        self._results[index] = value
            waiting = self._take_waited(indexes)
        _finish(waiting)

    def deliver(self, index: int, value: Any) -> None:
        """Send ``index``'s result, recorded without ``_LOCK`` (the Kafka producer's report
        callback: a lock a report was most of a send's cost there). Only for a group whose
        sends are given outcomes one by one (never ``resolve_positions`` or ``fail``).

        A waiter registers under ``_LOCK`` and then looks at the outcome again
        (``_register``); this records the result and then looks for a waiter. Under the GIL
        one of the two sees the other's write, so the waiter is finished (maybe by both:
        ``_take_waited`` hands it out once)."""
        self._results[index] = value
        if self._waited:
            with _LOCK:
                waiting = self._take_waited([index])
            _finish(waiting)

    def _register(self, index: int, future: Future[Any] | asyncio.Future[Any]) -> _Outcome:
        """Wait on send ``index`` with ``future`` (``_LOCK`` held): the outcome, looked at
        again after registering (see ``deliver``); if done, ``future`` is not registered."""
        self._waited[index] = future
        outcome = self.outcome(index)
        if outcome[0]:
            del self._waited[index]
        return outcome

    def set_exception(self, index: int, error: BaseException) -> None:
        with _LOCK:
            if not self.done(index):
                self._errors[index] = error
            waiting = self._take_waited([index])
        _finish(waiting)

    def resolve_positions(
        self, make: Callable[[int, int], Any], partition: int, first_offset: int
    ) -> None:
        """Every send not yet done resolves to ``make(partition, first_offset + index)``: two
        ints for the whole batch, each result built when read."""
        with _LOCK:
            self._positions = (make, partition, first_offset)
            waiting = self._take_waited(list(self._waited))
        _finish(waiting)

    def fail(self, error: BaseException) -> None:
        """Every send not yet done fails with ``error``."""
        with _LOCK:
            if self._positions is None:
                self._failure = error
            waiting = self._take_waited(list(self._waited))
        _finish(waiting)

    def _take_waited(
        self, indexes: Sequence[int]
    ) -> list[tuple[Future[Any] | asyncio.Future[Any], _Outcome]]:
        """The waited-on futures among ``indexes`` that are now done, with their outcomes,
        taken off the list (``_LOCK`` held)."""
        if not self._waited:
            return []
        taken = []
        for index in indexes:
            future = self._waited.get(index)
            if future is not None and self.done(index):
                del self._waited[index]
                taken.append((future, self.outcome(index)))
        return taken


def _finish(waiting: list[tuple[Future[Any] | asyncio.Future[Any], _Outcome]]) -> None:
    """Finish the futures someone waits on (outside ``_LOCK``: it notifies waiters and calls
    callbacks). A future cancelled meanwhile stays cancelled."""
    for future, (_, result, error) in waiting:
        if isinstance(future, Future):
            try:
                if error is None:
                    Future.set_result(future, result)
                else:
                    Future.set_exception(future, error)
            except InvalidStateError:
                pass
        else:
            settle_asyncio(future, result, error)


def settle_asyncio(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Finish ``future`` on its own loop: at once from the loop's thread, else through
    ``call_soon_threadsafe`` (the Kafka producer's delivery reports come in a thread of its
    own). A future done meanwhile (cancelled by its caller) stays as it is."""
    loop = future.get_loop()
    if asyncio._get_running_loop() is not loop:
        if not loop.is_closed():
            loop.call_soon_threadsafe(settle_asyncio, future, result, error)
        return
    if not future.done():
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


class SendFuture(Future[T]):
    """The future of one send: its batch and index until someone waits on it (see the module
    docstring)."""

    # Until someone waits, the waiter and callback lists are these empty tuples and there is no
    # condition: class attributes read through the instance (no dict object per future).
    _waiters: Any = ()
    _done_callbacks: Any = ()
    _lazy_condition: threading.Condition | None = None
    __slots__ = ("_exception", "_index", "_result", "_sends", "_state")

    _sends: Sends
    _index: int
    # ``SendFuture()`` makes an empty one in C (``Sends.new`` fills it): no ``Future.__init__``
    # (see above), and no Python-level ``__init__``, whose call frame cost a tenth of a send.
    __init__ = object.__init__

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        condition = self._lazy_condition
        if condition is None:
            with _LOCK:
                condition = self._lazy_condition
                if condition is None:
                    done, self._result, self._exception = self._sends.outcome(self._index)
                    if not done:
                        done, self._result, self._exception = self._sends._register(
                            self._index, self
                        )
                    self._state = FINISHED if done else PENDING
                    self._waiters = []
                    self._done_callbacks = []
                    condition = self._lazy_condition = threading.Condition()
        return condition

    def done(self) -> bool:
        if self._lazy_condition is None:
            return self._sends.done(self._index)
        return self._state in _DONE_STATES


class ASends(Sends):
    """The async twin of :class:`Sends`: made on the event loop, its futures are
    :class:`ASendFuture`."""

    __slots__ = ("_loop",)

    def __init__(self, make: Callable[[Any], Any] | None = None) -> None:
        super().__init__(make)
        self._loop = asyncio.get_running_loop()

    def new(self) -> ASendFuture[Any]:  # type: ignore[override]
        """The future of the next send (made as ``Sends.new`` makes one)."""
        future: ASendFuture[Any] = ASendFuture()
        future._sends = self
        future._index = self._next()
        future._loop = self._loop
        future._future = None
        return future


class ASendFuture(Generic[T]):
    """The future of one async send: its batch and index, and a real asyncio future only once
    someone awaits it or adds a callback (see the module docstring). ``asyncio.isfuture`` is
    true of it (``_asyncio_future_blocking``), so asyncio's functions take it as it is."""

    _asyncio_future_blocking = False
    __slots__ = ("__weakref__", "_future", "_index", "_loop", "_sends")

    _sends: Sends
    _index: int
    _loop: asyncio.AbstractEventLoop
    _future: asyncio.Future[T] | None
    __init__ = object.__init__  # made empty, then filled: see SendFuture

    def _waitable(self) -> asyncio.Future[T]:
        """The asyncio future that carries the outcome: made now if need be, finished at once
        if the outcome is known, else registered with the batch, which finishes it."""
        future = self._future
        if future is None:
            future = self._future = self._loop.create_future()
            with _LOCK:
                outcome = self._sends.outcome(self._index)
                if not outcome[0]:
                    outcome = self._sends._register(self._index, future)
            if outcome[0]:
                _finish([(future, outcome)])
        return future

    def _outcome(self) -> _Outcome:
        with _LOCK:
            return self._sends.outcome(self._index)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def done(self) -> bool:
        if self._future is not None:
            return self._future.done()
        return self._sends.done(self._index)

    def cancelled(self) -> bool:
        return self._future is not None and self._future.cancelled()

    def cancel(self, msg: Any = None) -> bool:
        return self._waitable().cancel(msg)

    def result(self) -> T:
        if self._future is not None:
            return self._future.result()
        done, result, error = self._outcome()
        if not done:
            raise asyncio.InvalidStateError("Result is not set.")
        if error is not None:
            raise error
        return result  # type: ignore[no-any-return]

    def exception(self) -> BaseException | None:
        if self._future is not None:
            return self._future.exception()
        done, _, error = self._outcome()
        if not done:
            raise asyncio.InvalidStateError("Exception is not set.")
        return error

    def add_done_callback(self, fn: Callable[[Any], object], *, context: Any = None) -> None:
        self._waitable().add_done_callback(_Callback(fn, self), context=context)

    def remove_done_callback(self, fn: Callable[[Any], object]) -> int:
        if self._future is None:
            return 0
        return self._future.remove_done_callback(_Callback(fn, self))

    def __await__(self) -> Generator[Any, None, T]:
        return self._waitable().__await__()

    __iter__ = __await__

    def __repr__(self) -> str:
        state = "finished" if self.done() else "pending"
        return f"<ASendFuture {state} send {self._index} of its batch>"


class _Callback:
    """A done-callback of an :class:`ASendFuture`, called with that future (not with the
    asyncio future behind it: ``asyncio.as_completed`` looks futures up by identity); equal to
    another for the same function and future, so ``remove_done_callback`` finds it."""

    __slots__ = ("fn", "owner")

    def __init__(self, fn: Callable[[Any], object], owner: ASendFuture[Any]) -> None:
        self.fn = fn
        self.owner = owner

    def __call__(self, _: object) -> None:
        self.fn(self.owner)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Callback) and other.fn == self.fn and other.owner is self.owner

    def __hash__(self) -> int:
        return hash((self.fn, id(self.owner)))
