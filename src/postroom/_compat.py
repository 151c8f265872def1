"""Concurrency primitives for the sync code: the thread twins of ``_acompat.py``'s names."""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, TypeVar

from ._futures import LazyFuture
from .errors import JobInterrupted

T = TypeVar("T")

IS_ASYNC = False
"""Whether this is the asyncio flavour (coroutine job functions are allowed)."""

Lock = threading.Lock
sleep = time.sleep
__all__ = [
    "IS_ASYNC",
    "Condition",
    "Event",
    "Future",
    "JobCall",
    "JobThreads",
    "Lock",
    "callback",
    "gather",
    "install_stop_handler",
    "join_all",
    "new_future",
    "sleep",
    "spawn",
]


class Condition(threading.Condition):
    def wait_timeout(self, timeout: float) -> bool:
        """Wait for a notification at most ``timeout`` seconds; the lock must be held."""
        return self.wait(timeout)


class Event(threading.Event):
    def wait_timeout(self, timeout: float) -> bool:
        return self.wait(timeout)


def spawn(func: Callable[..., None], *args: Any, name: str) -> threading.Thread:
    """Run ``func(*args)`` in a daemon thread."""
    thread = threading.Thread(target=func, args=args, name=name, daemon=True)
    thread.start()
    return thread


def gather(worker: threading.Thread, timeout: float | None = None) -> None:
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError(f"{worker.name} did not stop within {timeout} s")


def callback(func: Callable[..., Any], *args: Any) -> Any:
    """Call a user callback (``_acompat.callback_async`` awaits a coroutine's result)."""
    return func(*args)


def new_future() -> Future[Any]:
    return LazyFuture()  # one per producer send: see _futures.py


def to_thread(func: Callable[..., T], *args: Any) -> T:
    return func(*args)


def join_all(workers: Iterable[threading.Thread], timeout: float | None = None) -> bool:
    """Wait up to ``timeout`` seconds for all ``workers`` to end; whether they all did.
    Unlike ``gather`` it never stops them."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for worker in workers:
        worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return not any(w.is_alive() for w in workers)


def install_stop_handler(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` on SIGTERM and SIGINT; returns a function restoring the old handlers.
    Does nothing outside the main thread (Python delivers signals to the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {
        sig: signal.signal(sig, lambda signum, frame: callback())
        for sig in (signal.SIGTERM, signal.SIGINT)
    }

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = [ctypes.c_ulong, ctypes.py_object]


class JobCall:
    """One call of a job function in the calling thread, with a timeout and ``interrupt()``.

    A thread cannot be killed, so both raise :class:`JobInterrupted` inside it
    (``PyThreadState_SetAsyncExc``): the function sees it at its next Python bytecode. Code
    blocked in C (a long ``time.sleep``, a socket read) sees it when that call returns.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        kwargs: dict[str, Any],
        timeout: float | None,
        threads: JobThreads | None = None,
    ) -> None:
        self._func = func
        self._kwargs = kwargs
        self._timeout = timeout
        self._lock = threading.Lock()
        self._thread_id: int | None = None
        self._reason: JobInterrupted | None = None
        self._injected = False
        self._finished = False

    def run(self) -> Any:
        """Call the function; raises :class:`JobInterrupted` with the reason if interrupted."""
        timer = None
        with self._lock:
            if self._reason is not None:
                raise self._reason
            self._thread_id = threading.get_ident()
        if self._timeout is not None:
            timer = threading.Timer(
                self._timeout,
                self.interrupt,
                [JobInterrupted(f"timed out after {self._timeout:g} s")],
            )
            timer.daemon = True
            timer.start()
        try:
            return self._func(**self._kwargs)
        except JobInterrupted:
            raise self._reason or JobInterrupted() from None
        finally:
            self._disarm(timer)

    def _disarm(self, timer: threading.Timer | None) -> None:
        if timer is not None:
            timer.cancel()
        with self._lock:
            self._finished = True
            if self._injected and self._thread_id is not None:
                # Clear an exception injected but not yet raised: the call is over.
                _set_async_exc(self._thread_id, ctypes.py_object())

    def interrupt(self, reason: JobInterrupted) -> None:
        """Make the running call raise ``reason`` (once; later calls do nothing)."""
        with self._lock:
            if self._finished or self._reason is not None:
                return
            self._reason = reason
            if self._thread_id is not None:
                self._injected = True
                _set_async_exc(self._thread_id, ctypes.py_object(_with_reason(reason.reason)))


class JobThreads:
    """Sync workers run jobs in their slot threads: nothing to set up (see ``_acompat``)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def close(self) -> None:
        pass


def _with_reason(reason: str) -> type[JobInterrupted]:
    """A JobInterrupted subclass whose no-argument constructor carries ``reason``: an
    exception raised asynchronously in a thread is given as a class, not an instance."""

    def __init__(self: JobInterrupted) -> None:
        JobInterrupted.__init__(self, reason)

    return type("JobInterrupted", (JobInterrupted,), {"__init__": __init__})
