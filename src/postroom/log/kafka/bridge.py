"""Both flavours of the two primitives the Kafka engine's generated twins differ in: a
delivery future for the caller, and a user callback run from librdkafka's calling thread.

Hand-written, not generated: ``*_async`` names here become their plain twins in the sync
modules (``future_async`` -> ``future``, ``new_sends_async`` -> ``new_sends``, ``AsyncHooks``
-> ``Hooks``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

from ..._acompat import acall_hook, call_hook
from ..._futures import ASends, Sends

T = TypeVar("T")


def new_sends_async(make: Callable[[Any], Any] | None = None) -> ASends:
    """The outcomes of a group of async sends: their futures are ``ASendFuture`` (a real
    asyncio future made only when one is awaited; the delivery reports, in the producer's
    thread, finish it on its loop). On the event loop. ``make``: see ``Sends``."""
    return ASends(make)


def new_sends(make: Callable[[Any], Any] | None = None) -> Sends:
    return Sends(make)


def future_async(done: Any) -> Any:
    """The future ``send()`` returns: ``done`` itself, an ``ASendFuture`` (asyncio takes it
    for a future; ``asyncio.wrap_future`` per send was 75% of a send's time, cProfile)."""
    return done


def future(done: concurrent.futures.Future[T]) -> concurrent.futures.Future[T]:
    return done


class AsyncHooks:
    """Runs ``on_assign``/``on_revoke`` (plain or ``async def``) on the consumer's event loop
    while librdkafka's rebalance callback waits in the worker thread that runs ``consume``:
    the partitions are still held until the hook returns, so a commit in ``on_revoke`` lands
    (as in Kafka's Java client). ``bind()`` from the loop first."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    async def bind(self) -> None:
        self._loop = asyncio.get_running_loop()

    def call(self, hook: Callable[..., Any], *args: Any) -> None:
        loop = self._loop
        if loop is None:
            raise RuntimeError("AsyncHooks.call before bind()")
        asyncio.run_coroutine_threadsafe(acall_hook(hook, *args), loop).result()


class Hooks:
    """The sync twin: librdkafka calls back in the caller's own thread, which runs the hook."""

    def bind(self) -> None:
        pass

    def call(self, hook: Callable[..., Any], *args: Any) -> None:
        call_hook(hook, *args)
