"""Concurrency primitives for the sync code: the thread twins of ``_acompat.py``'s names."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from ._futures import LazyFuture

T = TypeVar("T")

Lock = threading.Lock
sleep = time.sleep
__all__ = ["Condition", "Event", "Future", "Lock", "gather", "new_future", "sleep", "spawn"]


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


def new_future() -> Future[Any]:
    return LazyFuture()  # one per producer send: see _futures.py


def to_thread(func: Callable[..., T], *args: Any) -> T:
    return func(*args)
