"""Concurrency primitives in two flavours, side by side: asyncio and threads.

The async modules use the asyncio names (``ALock``, ``aspawn``, ...); tools/async_to_sync.py
turns each into its thread twin, defined next to it here, when it generates the sync modules.
The rule: an ``A``/``a``-prefixed name whose unprefixed twin is defined in this module maps to
that twin (``ALock`` -> ``Lock``, ``agather`` -> ``gather``). Two asyncio names predate the
rule and keep their names; their thread twins carry a ``sync`` mark instead (``JobThreads`` ->
``SyncJobThreads``, ``install_stop_handler`` -> ``install_sync_stop_handler``), and
``IS_ASYNC`` becomes the constant ``False``.
Keep both flavours of each primitive behaving alike: tests/test_acompat.py runs them side by side.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import queue
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Generator, Iterable
from concurrent.futures import Future as _ThreadFuture
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from . import _fastpaths
from .errors import JobInterrupted

T = TypeVar("T")

IS_ASYNC = True
"""Whether this is the asyncio flavour (the generator writes ``False`` in the sync modules)."""

ALock = asyncio.Lock
Lock = threading.Lock
AFuture = asyncio.Future
Future = _ThreadFuture
AQueue = asyncio.Queue
Queue = queue.Queue
asleep = asyncio.sleep
sleep = time.sleep


class ACondition(asyncio.Condition):
    async def wait_timeout(self, timeout: float) -> bool:
        """Wait for a notification at most ``timeout`` seconds; the lock must be held."""
        try:
            await asyncio.wait_for(self.wait(), timeout)
        except TimeoutError:
            return False
        return True


class Condition(threading.Condition):
    def wait_timeout(self, timeout: float) -> bool:
        """Wait for a notification at most ``timeout`` seconds; the lock must be held."""
        return self.wait(timeout)


class AEvent(asyncio.Event):
    async def wait_timeout(self, timeout: float) -> bool:
        """Wait until the event is set, at most ``timeout`` seconds; whether it is set."""
        try:
            await asyncio.wait_for(self.wait(), timeout)
        except TimeoutError:
            return False
        return True


class Event(threading.Event):
    def wait_timeout(self, timeout: float) -> bool:
        """Wait until the event is set, at most ``timeout`` seconds; whether it is set."""
        return self.wait(timeout)


def aspawn(
    func: Callable[..., Coroutine[Any, Any, None]], *args: Any, name: str
) -> asyncio.Task[None]:
    """Run ``func(*args)`` in the background, as a task."""
    return asyncio.get_running_loop().create_task(func(*args), name=name)


class _Thread(threading.Thread):
    """A daemon thread that keeps the exception its function ended with, for ``gather``."""

    error: BaseException | None = None

    def run(self) -> None:
        try:
            super().run()
        except BaseException as exc:
            self.error = exc
            raise


def spawn(func: Callable[..., None], *args: Any, name: str) -> threading.Thread:
    """Run ``func(*args)`` in the background, in a daemon thread."""
    thread = _Thread(target=func, args=args, name=name, daemon=True)
    thread.start()
    return thread


async def agather(worker: asyncio.Task[None], timeout: float | None = None) -> None:
    """Wait up to ``timeout`` seconds for a background worker to end.

    Raises ``TimeoutError`` if it is still running, and leaves it running (a thread cannot be
    stopped, so neither flavour stops it); raises the exception the worker ended with, if any.
    """
    done, _ = await asyncio.wait({worker}, timeout=timeout)
    if not done:
        raise TimeoutError(f"{worker.get_name()} did not stop within {timeout} s")
    worker.result()


def gather(worker: threading.Thread, timeout: float | None = None) -> None:
    """Wait up to ``timeout`` seconds for a background worker to end (see ``agather``)."""
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError(f"{worker.name} did not stop within {timeout} s")
    error = getattr(worker, "error", None)
    if error is not None:
        raise error


class ABackground:
    """Runs calls in the background, one at a time: a task per call."""

    def __init__(self, name: str) -> None:
        self.name = name

    def submit(self, func: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> asyncio.Task[T]:
        return asyncio.get_running_loop().create_task(func(*args), name=self.name)

    def close(self) -> None:
        pass


class Background:
    """Runs calls in the background, one at a time, in a thread kept for the next call:
    ``Thread.start()`` waits until the new thread runs, a cost per call that showed in a
    consumer's profile (5% of its thread's time, bench/RESULTS.md). ``close()`` lets the
    thread end once its call is done."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, func: Callable[..., T], *args: Any) -> _ThreadFuture[T]:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
        return self._executor.submit(func, *args)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None


async def aoutcome(task: asyncio.Task[T]) -> T:
    """Wait for a call ``ABackground.submit`` started; its result, or what it raised."""
    return await task


def outcome(future: _ThreadFuture[T]) -> T:
    """Wait for a call ``Background.submit`` started; its result, or what it raised."""
    return future.result()


async def acall_hook(func: Callable[..., Any], *args: Any) -> Any:
    """Call a user callback (``on_assign``...): a coroutine function's result is awaited."""
    result = func(*args)
    if inspect.isawaitable(result):
        return await result
    return result


def call_hook(func: Callable[..., Any], *args: Any) -> Any:
    """Call a user callback (the thread twin of ``acall_hook``)."""
    return func(*args)


ASends = _fastpaths.ASends  # the fast paths' seam picks these (or their plain fallbacks)
ASendFuture = _fastpaths.ASendFuture
SendFuture = _fastpaths.SendFuture
Sends = _fastpaths.Sends


def ais_current(worker: asyncio.Task[None] | None) -> bool:
    """Whether the caller runs in ``worker``."""
    return worker is not None and asyncio.current_task() is worker


def is_current(worker: threading.Thread | None) -> bool:
    """Whether the caller runs in ``worker``."""
    return worker is not None and threading.current_thread() is worker


async def ato_thread(func: Callable[..., T], *args: Any) -> T:
    """Run blocking ``func`` off the event loop."""
    return await asyncio.to_thread(func, *args)


def to_thread(func: Callable[..., T], *args: Any) -> T:
    """Run blocking ``func``: in the calling thread, as nothing else waits on it."""
    return func(*args)


async def ajoin_all(workers: Iterable[asyncio.Task[None]], timeout: float | None = None) -> bool:
    """Wait up to ``timeout`` seconds for all ``workers`` to end; whether they all did.
    Like ``agather`` it never stops them; unlike it, it raises nothing."""
    pending = [w for w in workers if not w.done()]
    if not pending:
        return True
    _, still = await asyncio.wait(pending, timeout=timeout)
    return not still


def join_all(workers: Iterable[threading.Thread], timeout: float | None = None) -> bool:
    """Wait up to ``timeout`` seconds for all ``workers`` to end; whether they all did."""
    workers = list(workers)
    deadline = None if timeout is None else time.monotonic() + timeout
    for worker in workers:
        worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return not any(w.is_alive() for w in workers)


def install_stop_handler(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` on SIGTERM and SIGINT; returns a function restoring the defaults.
    Does nothing where the loop cannot handle signals (not the main thread, Windows)."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, callback)
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        installed.append(sig)

    def restore() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return restore


def install_sync_stop_handler(callback: Callable[[], None]) -> Callable[[], None]:
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


class JobCall:
    """One call of a job function in the calling thread, with a timeout and ``interrupt()``.

    A thread cannot be killed, so both raise :class:`JobInterrupted` inside it
    (``PyThreadState_SetAsyncExc``, fenced in ``_fastpaths``): the function sees it at its next
    Python bytecode. Code blocked in C (a long ``time.sleep``, a socket read) sees it when
    that call returns. On the fast paths' plain fallback nothing is raised: the job is asked
    to stop through its ``JobContext`` and runs on until it returns.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        kwargs: dict[str, Any],
        timeout: float | None,
        threads: SyncJobThreads | None = None,
        coroutine: bool | None = None,
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
                _fastpaths.raise_in_thread(self._thread_id, None)

    def interrupt(self, reason: JobInterrupted) -> None:
        """Make the running call raise ``reason`` (once; later calls do nothing)."""
        with self._lock:
            if self._finished or self._reason is not None:
                return
            self._reason = reason
            if self._thread_id is not None:
                # On the plain fallback nothing can be raised in the thread: the job was asked
                # to stop (its JobContext) and runs on until it returns.
                self._injected = _fastpaths.raise_in_thread(
                    self._thread_id, _with_reason(reason.reason)
                )


class AJobCall:
    """One call of a job function with a timeout and ``interrupt()``.

    A coroutine function runs in the calling task (in a context of its own) and is cancelled
    on interrupt; with a timeout, as a task of its own, cancelled on timeout or interrupt. A
    plain function runs in a thread (as a ``JobCall``), so it cannot block the loop.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        kwargs: dict[str, Any],
        timeout: float | None,
        threads: JobThreads | None = None,
        coroutine: bool | None = None,
    ) -> None:
        self._func = func
        self._kwargs = kwargs
        self._timeout = timeout
        self._threads = threads
        # Whether func is a coroutine function, when the caller knows (None: looked up).
        self._coroutine = coroutine
        self._task: asyncio.Future[Any] | None = None
        self._thread_call: JobCall | None = None
        self._reason: JobInterrupted | None = None
        self._slot: asyncio.Task[Any] | None = None  # the task a job without timeout runs in
        self._slot_cancelled = False
        self._finished = False

    async def run(self) -> Any:
        """Call the function; raises :class:`JobInterrupted` with the reason if interrupted."""
        if self._reason is not None:
            raise self._reason
        coroutine = self._coroutine
        if coroutine is None:
            coroutine = inspect.iscoroutinefunction(self._func)
        if not coroutine:
            self._thread_call = JobCall(self._func, self._kwargs, self._timeout)
            executor = None if self._threads is None else self._threads.executor
            # In a copy of this context, as asyncio.to_thread: the job sees the slot's context
            # variables (the span of its run, _tracing.py), as a job of the sync twin does.
            return await asyncio.get_running_loop().run_in_executor(
                executor, contextvars.copy_context().run, self._thread_call.run
            )
        if self._timeout is None:
            return await self._run_inline()
        task = self._task = asyncio.get_running_loop().create_task(self._func(**self._kwargs))
        done, _ = await asyncio.wait({task}, timeout=self._timeout)
        if not done:
            self.interrupt(JobInterrupted(f"timed out after {self._timeout:g} s"))
            await asyncio.wait({self._task})
        if self._task.cancelled():
            raise self._reason or JobInterrupted("cancelled")
        return self._task.result()

    async def _run_inline(self) -> Any:
        """Run the coroutine in the calling task (the slot's), each of its steps in a context
        of its own, as a task of its own would: a task per job (its creation, a loop turn
        to start it, another to wake the slot) costs more than a no-op job. ``interrupt()``
        cancels the calling task, which the job sees at the await it waits on."""
        slot = self._slot = asyncio.current_task()
        try:
            return await _InContext(self._func(**self._kwargs), contextvars.copy_context())
        except asyncio.CancelledError:
            if self._reason is None:
                if slot is not None and slot.cancelling():
                    raise  # the slot itself is cancelled (the worker never does that)
                raise JobInterrupted("cancelled") from None
            raise self._reason from None
        finally:
            self._finished = True
            if self._slot_cancelled and slot is not None:
                slot.uncancel()  # the cancellation was the job's, not the slot's

    def interrupt(self, reason: JobInterrupted) -> None:
        """Stop the running call with ``reason`` (once; later calls do nothing)."""
        if self._reason is not None:
            return
        self._reason = reason
        if self._thread_call is not None:
            self._thread_call.interrupt(reason)
        elif self._task is not None:
            self._task.cancel()
        elif self._slot is not None and not self._finished:
            self._slot_cancelled = True
            self._slot.cancel()


class _InContext:
    """Awaits a coroutine in the awaiting task, running each of its steps in ``context``
    (what ``yield from`` does, plus the context a task of its own would give it)."""

    __slots__ = ("_context", "_coro")

    def __init__(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> None:
        self._coro = coro
        self._context = context

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, run = self._coro, self._context.run
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                if error is None:
                    step = run(coro.send, value)
                else:
                    step = run(coro.throw, error)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = yield step
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown in by the task: the job's
                error = exc


class JobThreads:
    """The threads that run a worker's plain (non-async) job functions, one per slot, so they
    never queue behind the loop's small default executor."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="postroom-job")

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class SyncJobThreads:
    """Sync workers run jobs in their own slot threads: nothing to set up (see ``JobThreads``)."""

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
