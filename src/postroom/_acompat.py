"""Concurrency primitives for the asyncio code; ``_compat.py`` has the same names for threads.

The sync modules are generated from the async ones, which rename ``ACondition`` to
``Condition`` and so on (tools/async_to_sync.py); keep the two files' interfaces identical.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

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


def new_future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


async def ato_thread(func: Callable[..., T], *args: Any) -> T:
    """Run blocking ``func`` off the event loop (called directly in the sync twin)."""
    return await asyncio.to_thread(func, *args)
