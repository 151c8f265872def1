"""The runner: runs one claimed job and turns how it ended into an outcome.

Each kind's call chain (middleware, context) is prepared once, at its first job
(``execution.prepare``). A plain function runs in a thread (the slot's own in the sync twin,
the worker's pool here), an ``async def`` one as a task. Timeouts and cancellations interrupt
a job from outside, except a job that takes its ``JobContext``: it is asked to stop
(``job.cancelled()``) and interrupted only as a last resort, by the heartbeat, after the
worker's ``cancel_grace``.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import _tracing
from .._acompat import AJobCall, JobThreads
from ..errors import Cancel, JobInterrupted, Snooze
from .backoff import Backoff
from .context import JobContext
from .execution import JobExit, PreparedKind, prepare
from .hooks_async import AsyncHooks
from .outcomes import (
    MAX_ERROR_CHARS,
    Claimed,
    Outcome,
    after_stop_request,
    failure,
    format_error,
    interrupted,
    retryable,
    storable_text,
    success,
)
from .records import JobDefinition
from .registry import JobRegistry

log = logging.getLogger("postroom.worker")


class AsyncRunner:
    def __init__(
        self,
        registry: JobRegistry,
        hooks: AsyncHooks,
        *,
        worker: str,
        threads: JobThreads,
        stop: Callable[[], None],
    ) -> None:
        self._registry = registry
        self._hooks = hooks
        self._worker = worker
        self._threads = threads
        self._stop = stop
        self._kinds: dict[str, PreparedKind] = {}
        self.exit: SystemExit | KeyboardInterrupt | None = None
        """The first SystemExit or KeyboardInterrupt a job raised (the worker re-raises it)."""

    def _prepared(self, kind: str) -> PreparedKind | None:
        prepared = self._kinds.get(kind)
        if prepared is None:
            definition = self._registry.definitions.get(kind)
            if definition is None:
                return None
            prepared = prepare(definition, self._hooks.execution)
            self._kinds[kind] = prepared
        return prepared

    async def execute(self, job: Claimed) -> Outcome:
        if _tracing.ENABLED and _tracing.recording():
            with _tracing.processing(
                job.queue, job.meta, **_tracing.job_attributes(job, self._worker)
            ) as span:
                outcome = await self._execute(job)
                _tracing.job_outcome(span, outcome)
                return outcome
        return await self._execute(job)

    async def _execute(self, job: Claimed) -> Outcome:
        prepared = self._prepared(job.kind)
        job.started = True
        if job.interrupt_kind == "cancel":
            return Outcome(job, "cancelled")
        if prepared is None:
            known = ", ".join(sorted(self._registry.definitions)) or "none"
            return failure(
                job,
                f"UnknownJobKind: no function is registered for job kind {job.kind!r} in "
                f"worker {self._worker} (registered kinds: {known}); import the module that "
                "defines it in the worker",
                Backoff(),
            )
        definition = prepared.definition
        try:
            args = self._registry.serializer.loads(job.args)
        except Exception as exc:  # noqa: BLE001 - a stored value the serializer refuses
            return failure(job, f"cannot decode args: {format_error(exc)}", definition.backoff)
        timeout = definition.timeout
        timer = None
        if prepared.runner is None:  # the common case: nothing needs the context
            call = AJobCall(prepared.func, args, timeout, self._threads, prepared.coroutine)
        else:
            context = job.context = self._context(job, args, timeout)
            if definition.takes_context:
                job.cooperative = True
                if timeout is not None:
                    # Ask it to stop at its deadline; the heartbeat interrupts it if it is
                    # still running cancel_grace seconds later.
                    timer = threading.Timer(
                        timeout, context.request_stop, [f"timed out after {timeout:g} s"]
                    )
                    timer.daemon = True
                    timer.start()
                    timeout = None
            runner = functools.partial(prepared.runner, context)
            call = AJobCall(runner, args, timeout, self._threads, prepared.coroutine)
        job.call = call
        try:
            outcome = await self._call(job, call, definition)
        finally:
            if timer is not None:
                timer.cancel()
        if job.cooperative and job.context is not None and job.context.cancelled():
            return after_stop_request(job, outcome, definition.backoff)
        return outcome

    async def _call(self, job: Claimed, call: AJobCall, definition: JobDefinition) -> Outcome:
        try:
            value = await call.run()
        except JobInterrupted as exc:
            return interrupted(job, exc, definition.backoff)
        except Snooze as exc:
            return Outcome(job, "snooze", delay=exc.seconds)
        except Cancel as exc:
            return Outcome(job, "cancelled", error=storable_text(exc.reason[-MAX_ERROR_CHARS:]))
        except JobExit as exc:
            return self._exiting(job, exc.exc, definition.backoff)
        except (SystemExit, KeyboardInterrupt) as exc:
            return self._exiting(job, exc, definition.backoff)
        except Exception as exc:  # noqa: BLE001 - any error of the job is its failure
            final = not retryable(exc, definition.retry_on, definition.no_retry_on)
            return failure(job, format_error(exc), definition.backoff, final=final)
        return success(job, value, self._registry.serializer)

    def _context(self, job: Claimed, args: dict[str, Any], timeout: float | None) -> JobContext:
        return JobContext(
            id=job.id,
            kind=job.kind,
            queue=job.queue,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            args=args,
            worker=self._worker,
            enqueued_at=job.enqueued_at,
            scheduled_at=job.scheduled_at,
            deadline=None if timeout is None else datetime.now(UTC) + timedelta(seconds=timeout),
        )

    def _exiting(
        self, job: Claimed, exc: SystemExit | KeyboardInterrupt, backoff: Backoff
    ) -> Outcome:
        """A job asked the process to exit: its attempt fails (retried while attempts are
        left), the worker shuts down gracefully, and ``run()`` raises ``exc`` at its end."""
        log.warning(
            "job %s (%s) raised %r: failing its attempt and shutting the worker down",
            job.id,
            job.kind,
            exc,
        )
        if self.exit is None:
            self.exit = exc
        self._stop()
        return failure(
            job,
            f"{type(exc).__name__} raised by the job: the attempt failed and worker "
            f"{self._worker} shut down\n{format_error(exc)}",
            backoff,
        )
