"""The heartbeat: extends the leases of the jobs a worker holds and learns about cancellations.

Every ``interval`` seconds (or at once after ``beat_now()``, e.g. on a cancel notification) it
extends, in one statement, the lease of every held job: claimed, running, and finished but not
yet written back (a slow write-back must not let the rescuer hand a finished job to another
worker). A running job whose lease is gone was taken from this worker (it is interrupted and
forgotten), and a running job whose cancellation was requested is interrupted as cancelled.
Each beat also keeps the worker's row in the worker registry alive (``roster_async``), held
jobs or not.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from .._acompat import AEvent
from .._db_async import AsyncDatabase
from .._periodic_async import AsyncPeriodic
from ..errors import JobInterrupted
from .outcomes import Claimed, HeldJobs, token_array
from .roster_async import AsyncRoster

log = logging.getLogger("postroom.worker")


class AsyncHeartbeat(AsyncPeriodic):
    name = "heartbeat"
    what = "heartbeat"

    def __init__(
        self,
        db: AsyncDatabase,
        *,
        worker: str,
        lease: float,
        interval: float,
        cancel_grace: float,
        held: HeldJobs,
        stopping: AEvent,
        roster: AsyncRoster | None = None,
    ) -> None:
        self._now = AEvent()
        # No jitter: a beat must come well within the lease, and beats of several workers
        # in step cost nothing (each extends its own jobs).
        super().__init__(
            db, interval=interval, stopping=stopping, log=log, jitter=0, wake=self._now
        )
        self._worker = worker
        self._lease = timedelta(seconds=lease)
        self._cancel_grace = cancel_grace
        self._held = held
        self._roster = roster

    def beat_now(self) -> None:
        """Beat at once (a cancellation may be waiting), or wake up to stop."""
        self._now.set()

    async def tick(self) -> None:
        await self._beat_jobs()
        if self._roster is not None:  # after the leases: they matter more
            await self._roster.beat()

    async def _beat_jobs(self) -> None:
        held = self._held.snapshot()
        if not held:
            return
        sent = time.monotonic()
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("heartbeat_jobs"),
                {
                    "worker": self._worker,
                    "ids": [j.id for j in held],
                    "tokens": token_array([j.token for j in held]),
                    "lease": self._lease,
                },
            )
            alive = dict(await cur.fetchall())
        self._apply(held, alive, sent + self._lease.total_seconds())

    def _apply(self, held: list[Claimed], alive: dict[int, bool], deadline: float) -> None:
        """What a beat learnt: the leases extended (to ``deadline``), lost or cancelled."""
        for job in held:
            if job.reported:
                continue  # its outcome is written as it is (fenced if the lease was lost)
            if job.id not in alive:
                log.warning("lost the lease of job %s (attempt %s)", job.id, job.attempt)
                job.interrupt_kind = "lost"
                self._held.discard(job)
                if job.call is not None:
                    job.call.interrupt(JobInterrupted("the worker lost the job's lease"))
            else:
                job.lease_deadline = deadline
                if alive[job.id] and job.interrupt_kind is None:
                    job.interrupt_kind = "cancel"
                    if job.context is not None:
                        job.context.request_stop("cancelled")
                    if job.call is not None and not job.cooperative:
                        job.call.interrupt(JobInterrupted("cancelled"))
            self._escalate(job)

    def _escalate(self, job: Claimed) -> None:
        """Interrupt a cooperative job that was asked to stop and did not within the grace
        period: the last resort (an exception raised in its thread, or task cancellation)."""
        context = job.context
        if (
            job.cooperative
            and job.call is not None
            and context is not None
            and not job.reported
            and context.stop_overdue(self._cancel_grace)
        ):
            log.warning(
                "job %s did not stop within %g s of being asked (%s); interrupting it",
                job.id,
                self._cancel_grace,
                context.cancel_reason,
            )
            job.call.interrupt(JobInterrupted(context.cancel_reason or "cancelled"))
