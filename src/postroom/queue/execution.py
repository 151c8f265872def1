"""How a worker calls the function of each job kind, prepared once per kind (not per job): the
plain function when nothing wraps it, so a job that uses no hook pays nothing for them.

No I/O; shared by the async worker and its sync twin.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    """A job kind as the worker calls it."""

    definition: JobDefinition
    func: Callable[..., Any]


def prepare(definition: JobDefinition) -> PreparedKind:
    func = definition.func
    if inspect.iscoroutinefunction(func):
        func = _guard_coroutine(func)
    return PreparedKind(definition, func)
