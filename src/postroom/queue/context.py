"""What a running job can know about itself: :class:`JobContext`."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(eq=False)
class JobContext:
    """The context of one attempt of a job, handed to a job function that asks for it with a
    keyword-only parameter ``job`` annotated ``JobContext``, and to execution middleware:

        @client.job("export")
        def export(report_id: int, *, job: postroom.JobContext) -> None:
            for chunk in chunks(report_id):
                if job.cancelled():     # cancel_job() was called, or the timeout passed
                    return              # stop cleanly; the outcome is cancelled / timed out
                write(chunk)

    A job that takes its context stops **cooperatively**: a cancellation or its timeout sets
    ``cancelled()`` at once, and the worker interrupts it from outside (an exception raised in
    its thread, or task cancellation) only if it is still running ``cancel_grace`` seconds
    later, as a last resort. A job without the parameter is interrupted at once, as before.
    """

    id: int
    kind: str
    queue: str
    attempt: int
    """This attempt's number, from 1."""
    max_attempts: int
    args: dict[str, Any]
    worker: str
    enqueued_at: datetime | None = None
    scheduled_at: datetime | None = None
    """When the job was due (its ``run_at``)."""
    deadline: datetime | None = None
    """When its timeout passes (None without a timeout)."""
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _stop_reason: str | None = field(default=None, repr=False)
    _stop_at: float = field(default=0.0, repr=False)

    def cancelled(self) -> bool:
        """Whether the job should stop now: it was cancelled, its timeout passed, or the
        worker is shutting down past its grace period. Cheap: call it often."""
        return self._stop.is_set()

    @property
    def cancel_reason(self) -> str | None:
        """Why ``cancelled()`` is true ("cancelled", "timed out after 30 s", ...)."""
        return self._stop_reason

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` in a plain-function job, waking at once on a cancellation;
        returns whether the job was cancelled (in ``async def`` jobs, use asyncio.sleep and
        check ``cancelled()``)."""
        return self._stop.wait(seconds)

    def request_stop(self, reason: str) -> bool:
        """Ask the job to stop (the worker calls this); whether this was the first request."""
        if self._stop.is_set():
            return False
        self._stop_reason = reason
        self._stop_at = time.monotonic()
        self._stop.set()
        return True

    def stop_overdue(self, grace: float) -> bool:
        """Whether a stop was requested more than ``grace`` seconds ago."""
        return self._stop.is_set() and time.monotonic() - self._stop_at >= grace
