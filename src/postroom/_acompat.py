"""Concurrency primitives for the asyncio code; ``_compat.py`` has the same names for threads.

The sync modules are generated from the async ones, which rename ``ACondition`` to
``Condition`` and so on (tools/async_to_sync.py); keep the two files' interfaces identical.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ._compat import JobCall
from .errors import JobInterrupted

T = TypeVar("T")

IS_ASYNC = True
"""Whether this is the asyncio flavour (coroutine job functions are allowed)."""

ALock = asyncio.Lock
AFuture = asyncio.Future
asleep = asyncio.sleep


class ACondition(asyncio.Condition):
    async def wait_timeout(self, timeout: float) -> bool:
        """Wait for a notification at most ``timeout`` seconds; the lock must be held."""
        try:
            await asyncio.wait_for(self.wait(), timeout)
        except TimeoutError:
            return False
        return True


class AEvent(asyncio.Event):
    async def wait_timeout(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.wait(), timeout)
        except TimeoutError:
            return False
        return True


def aspawn(
    func: Callable[..., Coroutine[Any, Any, None]], *args: Any, name: str
) -> asyncio.Task[None]:
    """Run ``func(*args)`` in the background (a task here, a daemon thread in the sync twin)."""
    return asyncio.get_running_loop().create_task(func(*args), name=name)


async def agather(worker: asyncio.Task[None], timeout: float | None = None) -> None:
    """Wait for a background worker to end."""
    await asyncio.wait_for(worker, timeout)


async def callback_async(func: Callable[..., Any], *args: Any) -> Any:
    """Call a user callback: a coroutine function's result is awaited (plain in the twin)."""
    result = func(*args)
    if inspect.isawaitable(result):
        return await result
    return result


def new_future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


async def ato_thread(func: Callable[..., T], *args: Any) -> T:
    """Run blocking ``func`` off the event loop (called directly in the sync twin)."""
    return await asyncio.to_thread(func, *args)


async def ajoin_all(workers: Iterable[asyncio.Task[None]], timeout: float | None = None) -> bool:
    """Wait up to ``timeout`` seconds for all ``workers`` to end; whether they all did.
    Unlike ``agather`` it never cancels them."""
    pending = [w for w in workers if not w.done()]
    if not pending:
        return True
    _, still = await asyncio.wait(pending, timeout=timeout)
    return not still


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


class AJobCall:
    """One call of a job function with a timeout and ``interrupt()``.

    A coroutine function runs as a task of its own and is cancelled on timeout or interrupt;
    a plain function runs in a thread (see ``_compat.JobCall``), so it cannot block the loop.
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
        self._threads = threads
        self._task: asyncio.Future[Any] | None = None
        self._thread_call: JobCall | None = None
        self._reason: JobInterrupted | None = None

    async def run(self) -> Any:
        """Call the function; raises :class:`JobInterrupted` with the reason if interrupted."""
        if self._reason is not None:
            raise self._reason
        if not inspect.iscoroutinefunction(self._func):
            self._thread_call = JobCall(self._func, self._kwargs, self._timeout)
            executor = None if self._threads is None else self._threads.executor
            return await asyncio.get_running_loop().run_in_executor(executor, self._thread_call.run)
        self._task = asyncio.ensure_future(self._func(**self._kwargs))
        done, _ = await asyncio.wait({self._task}, timeout=self._timeout)
        if not done:
            self.interrupt(JobInterrupted(f"timed out after {self._timeout:g} s"))
            await asyncio.wait({self._task})
        if self._task.cancelled():
            raise self._reason or JobInterrupted("cancelled")
        return self._task.result()

    def interrupt(self, reason: JobInterrupted) -> None:
        """Stop the running call with ``reason`` (once; later calls do nothing)."""
        if self._reason is not None:
            return
        self._reason = reason
        if self._thread_call is not None:
            self._thread_call.interrupt(reason)
        elif self._task is not None:
            self._task.cancel()


class JobThreads:
    """The threads that run a worker's plain (non-async) job functions, one per slot, so they
    never queue behind the loop's small default executor."""

    def __init__(self, size: int) -> None:
        self.executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="postroom-job")

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
