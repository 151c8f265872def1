"""How a worker calls the function of each job kind, prepared once per kind (not per job): the
plain function when nothing wraps it, so a job that uses no hook pays nothing for them.

No I/O; shared by the async worker and its sync twin.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .context import JobContext
from .records import JobDefinition


class JobExit(Exception):
    """Carries a ``SystemExit`` or ``KeyboardInterrupt`` raised by an ``async def`` job out of
    its task: asyncio would otherwise re-raise it out of the event loop, stopping everything
    with the job's slot and lease lost."""

    def __init__(self, exc: SystemExit | KeyboardInterrupt) -> None:
        super().__init__(repr(exc))
        self.exc = exc


def _guard_coroutine(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    async def guarded(**kwargs: Any) -> Any:
        try:
            return await func(**kwargs)
        except (SystemExit, KeyboardInterrupt) as exc:
            raise JobExit(exc) from exc

    return guarded


@dataclass(frozen=True, slots=True)
class PreparedKind:
    """A job kind as the worker calls it: ``func(**args)`` when nothing needs the job's
    context, else ``runner(context, **args)`` (middleware, then the function)."""

    definition: JobDefinition
    func: Callable[..., Any]
    runner: Callable[..., Any] | None = None
    coroutine: bool = False
    """``func`` and ``runner`` are coroutine functions (looked up once, not per job)."""


def prepare(definition: JobDefinition, middleware: Sequence[Callable[..., Any]]) -> PreparedKind:
    """Build the call chain of a kind once: its execution middleware of the same flavour as
    the function (``async def`` middleware around ``async def`` jobs, plain around plain,
    run in the job's own thread or task), then the function, given its context if it asks."""
    func = definition.func
    is_coroutine = inspect.iscoroutinefunction(func)
    chain = tuple(m for m in middleware if inspect.iscoroutinefunction(m) == is_coroutine)
    if not chain and not definition.takes_context:
        if is_coroutine:
            return PreparedKind(definition, _guard_coroutine(func), coroutine=True)
        return PreparedKind(definition, func)
    if is_coroutine:
        runner = _async_runner(func, chain, definition.takes_context)
        return PreparedKind(definition, func, runner, coroutine=True)
    return PreparedKind(definition, func, _sync_runner(func, chain, definition.takes_context))


def _sync_runner(
    func: Callable[..., Any], chain: tuple[Callable[..., Any], ...], takes_context: bool
) -> Callable[..., Any]:
    last = len(chain)

    def runner(context: JobContext, /, **kwargs: Any) -> Any:
        def call_at(index: int) -> Any:
            if index == last:
                return func(**kwargs, job=context) if takes_context else func(**kwargs)
            return chain[index](context, lambda: call_at(index + 1))

        return call_at(0)

    return runner


def _async_runner(
    func: Callable[..., Any], chain: tuple[Callable[..., Any], ...], takes_context: bool
) -> Callable[..., Any]:
    last = len(chain)

    async def runner(context: JobContext, /, **kwargs: Any) -> Any:
        async def call_at(index: int) -> Any:
            if index == last:
                if takes_context:
                    return await func(**kwargs, job=context)
                return await func(**kwargs)
            return await chain[index](context, lambda: call_at(index + 1))

        try:
            return await call_at(0)
        except (SystemExit, KeyboardInterrupt) as exc:
            raise JobExit(exc) from exc

    return runner
