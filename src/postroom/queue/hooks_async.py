"""Middleware registered on a client: around enqueue and around execution.

    @client.around_job
    def timed(job: postroom.JobContext, call_next):
        started = time.monotonic()
        try:
            return call_next()
        finally:
            metrics.observe(job.kind, time.monotonic() - started)

    @client.around_enqueue
    def traced(requests, call_next):
        with tracer.start_span("enqueue"):
            return call_next()

Execution middleware runs where the job runs, in the flavour of the job's function: plain
middleware around plain-function jobs (in the job's thread), ``async def`` middleware around
``async def`` jobs (on the loop); register both flavours to cover both kinds of job. Each
kind's chain is built once, at its first job in a worker: a job kind no middleware wraps
pays nothing. Enqueue middleware has the client's flavour (``async def`` on AsyncClient) and
may pass a replaced list of requests to ``call_next(requests)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .._acompat import IS_ASYNC
from ..errors import InvalidType


class AsyncHooks:
    def __init__(self) -> None:
        self._coroutines = IS_ASYNC  # this flavour's enqueue middleware are coroutines
        self.execution: list[Callable[..., Any]] = []
        self.enqueue: list[Callable[..., Any]] = []

    def add_execution(self, func: Callable[..., Any]) -> None:
        if not callable(func):
            raise InvalidType(f"invalid middleware {func!r}: pass a function (job, call_next)")
        if inspect.iscoroutinefunction(func) and not self._coroutines:
            raise InvalidType(
                f"middleware {func.__name__}: a coroutine function; register it on a "
                "postroom.AsyncClient, whose workers run coroutine jobs on an event loop"
            )
        self.execution.append(func)

    def add_enqueue(self, func: Callable[..., Any]) -> None:
        if not callable(func) or inspect.iscoroutinefunction(func) is not self._coroutines:
            flavour = "an async def" if self._coroutines else "a plain (not async) function"
            raise InvalidType(
                f"invalid enqueue middleware {func!r}: pass {flavour} (requests, call_next)"
            )
        self.enqueue.append(func)

    async def around_enqueue(
        self,
        final: Callable[..., Any],
        requests: list[Any],
        conn: object,
    ) -> list[Any]:
        """Call ``final(requests, conn)`` through the enqueue middleware, outermost first."""
        chain = tuple(self.enqueue)

        async def call_at(index: int, current: list[Any]) -> list[Any]:
            if index == len(chain):
                done: list[Any] = await final(current, conn)
                return done

            def call_next(replaced: list[Any] | None = None) -> Any:
                return call_at(index + 1, current if replaced is None else list(replaced))

            result: list[Any] = await chain[index](current, call_next)
            return result

        return await call_at(0, requests)
