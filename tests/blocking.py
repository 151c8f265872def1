"""A blocking adapter over the real asyncio API, so one test body exercises both clients.

``Blocking(obj, loop)`` wraps an object of the async API (``AsyncClient``, ``AsyncProducer``,
``AsyncConsumer``, ``AsyncWorker``, ``AsyncJob``, ``AsyncJobFunction``, psycopg's
``AsyncConnection``, ...). Every method call is run *on the event loop's thread* and, when it
returns an awaitable, awaited there; so the test thread blocks while the real coroutine runs,
exactly as it would on the sync client. What comes back is wrapped again when it belongs to the
async side:

- an object with async methods, ``__aenter__`` or ``__aiter__``, or of an ``Async*`` class
  -> another ``Blocking``;
- a future (``AsyncProducer.send``'s, which ``asyncio.isfuture`` takes for one) -> a
  ``concurrent.futures.Future``, like the sync producer's;
- a plain function (the decorator ``client.job("kind")`` returns) -> a blocking function;
- plain values (records, ints, lists of records) -> unchanged.

``with`` runs ``__aenter__``/``__aexit__``; ``for`` runs ``__anext__`` (or the object's own sync
``__iter__`` when it has no ``__aiter__``, e.g. ``AsyncBatch``). A ``Blocking`` passed as an
argument (a caller's connection, ``conn=``) is unwrapped, so the async client gets the real
``AsyncConnection``; a generator argument is consumed in the caller's thread first (its items
may call blocking methods, which the loop's own thread cannot). Nothing is routed to the sync
code: only the loop and this glue are shared.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import types
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, cast

import postroom

_SENTINEL = object()


class EventLoopThread:
    """An asyncio event loop running in a daemon thread until ``close()``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="async-client-loop", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the loop and wait for its result (raises what it raises)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a blocking call from the event loop's thread would deadlock")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        async def cancel_rest() -> None:
            current = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not current]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
            await self.loop.shutdown_asyncgens()

        self.run(cancel_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def unwrap(value: Any) -> Any:
    return object.__getattribute__(value, "_target") if isinstance(value, Blocking) else value


_ASYNC_CLASSES: dict[type, bool] = {}


def _is_async_object(value: Any) -> bool:
    """Whether ``value`` belongs to the async side: it has async methods or protocols."""
    cls = type(value)
    known = _ASYNC_CLASSES.get(cls)
    if known is None:
        known = _ASYNC_CLASSES[cls] = not issubclass(cls, type | types.ModuleType) and (
            cls.__name__.startswith("Async")  # e.g. AsyncBatch, whose connection is async
            or hasattr(cls, "__aenter__")
            or hasattr(cls, "__aiter__")
            or any(
                inspect.iscoroutinefunction(getattr(cls, name, None))
                or inspect.isasyncgenfunction(getattr(cls, name, None))
                for name in dir(cls)
                if not name.startswith("__")
            )
        )
    return known


class Blocking:
    """A blocking view of one async object; see the module docstring."""

    def __init__(self, target: Any, loop: EventLoopThread) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)

    # -- plumbing -----------------------------------------------------------------------

    def _wrap(self, value: Any) -> Any:
        loop: EventLoopThread = object.__getattribute__(self, "_loop")
        if isinstance(value, Blocking):
            return value
        if asyncio.isfuture(value):  # an asyncio.Future, or what asyncio takes as one
            return asyncio.run_coroutine_threadsafe(_await(value), loop.loop)
        if isinstance(value, types.FunctionType | types.MethodType | functools.partial):
            return _blocking_function(value, loop, self._wrap)
        if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
            wrapped = [self._wrap(item) for item in value]
            return wrapped if isinstance(value, list) else tuple(wrapped)
        if _is_async_object(value):
            return Blocking(value, loop)
        return value

    def _call(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop: EventLoopThread = object.__getattribute__(self, "_loop")
        return _blocking_function(func, loop, self._wrap)(*args, **kwargs)

    # -- attribute access ---------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        target = object.__getattribute__(self, "_target")
        value = getattr(target, name)
        if callable(value) and not isinstance(value, type):
            loop: EventLoopThread = object.__getattribute__(self, "_loop")
            return _blocking_function(value, loop, self._wrap)
        return self._wrap(value)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_target"), name, unwrap(value))

    def __repr__(self) -> str:
        return f"Blocking({object.__getattribute__(self, '_target')!r})"

    # -- protocols ----------------------------------------------------------------------

    def __enter__(self) -> Any:
        target = object.__getattribute__(self, "_target")
        if hasattr(target, "__aenter__"):
            return self._call(target.__aenter__)
        return self._wrap(target.__enter__())

    def __exit__(self, *exc: Any) -> Any:
        target = object.__getattribute__(self, "_target")
        if hasattr(target, "__aexit__"):
            return self._call(target.__aexit__, *exc)
        return target.__exit__(*exc)

    def __iter__(self) -> Iterator[Any]:
        target = object.__getattribute__(self, "_target")
        if not hasattr(target, "__aiter__"):
            yield from (self._wrap(item) for item in target)
            return
        iterator = self._call(lambda: target.__aiter__())
        anext = object.__getattribute__(iterator, "_target").__anext__
        while True:
            item = self._call(_next_or_sentinel, anext)
            if item is _SENTINEL:
                return
            yield item

    def __len__(self) -> int:
        return len(object.__getattribute__(self, "_target"))

    def __bool__(self) -> bool:
        return bool(object.__getattribute__(self, "_target"))

    def __getitem__(self, key: Any) -> Any:
        return self._wrap(object.__getattribute__(self, "_target")[key])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(object.__getattribute__(self, "_target"), *args, **kwargs)

    def __eq__(self, other: object) -> bool:
        return bool(object.__getattribute__(self, "_target") == unwrap(other))

    def __hash__(self) -> int:
        return hash(object.__getattribute__(self, "_target"))


async def _await(future: Any) -> Any:
    return await future


async def _next_or_sentinel(anext: Callable[[], Any]) -> Any:
    try:
        return await anext()
    except StopAsyncIteration:
        return _SENTINEL


def _argument(value: Any) -> Any:
    if isinstance(value, types.GeneratorType):
        return [unwrap(item) for item in value]
    return unwrap(value)


def _blocking_function(
    func: Callable[..., Any], loop: EventLoopThread, wrap: Callable[[Any], Any]
) -> Callable[..., Any]:
    """``func`` called on the loop's thread (awaited there if it returns an awaitable)."""

    async def call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        result = func(*args, **kwargs)
        if inspect.isawaitable(result) and not asyncio.isfuture(result):
            result = await result
        return result

    def blocking(*args: Any, **kwargs: Any) -> Any:
        # A generator argument (``enqueue_batch(f.prepare() for ...)``) is consumed here, in the
        # caller's thread: its items may call blocking methods, which the loop cannot.
        args = tuple(_argument(a) for a in args)
        kwargs = {k: _argument(v) for k, v in kwargs.items()}
        return wrap(loop.run(call(args, kwargs)))

    blocking.__name__ = getattr(func, "__name__", "blocking")
    blocking.__doc__ = getattr(func, "__doc__", None)
    return blocking


__all__ = ["Blocking", "EventLoopThread"]


@contextmanager
def client_on(conninfo: str, loop: EventLoopThread | None) -> Iterator[postroom.Client]:
    """A sync client on ``conninfo`` or, with ``loop``, a blocking async one."""
    if loop is None:
        with postroom.connect(conninfo) as c:
            yield c
        return
    real = loop.run(postroom.connect_async(conninfo))
    try:
        yield cast(postroom.Client, Blocking(real, loop))
    finally:
        loop.run(real.close())
