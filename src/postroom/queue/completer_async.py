"""The completer: writes job outcomes back in batches.

Slots hand over outcomes with ``report()``; the completer writes whatever finished while its
last write ran in one statement per outcome kind, then releases those jobs from the held set.
It is the one owner of the pending outcomes.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg

from .._acompat import ACondition, asleep
from .._db_async import AsyncDatabase
from .._listener_async import send_wakeups
from .._reconnect import reconnect_delay
from .._wakeups import JOBS
from .fetcher_async import AsyncFetcher
from .outcomes import HeldJobs, Outcome, OutcomeKind, int_array, token_array, unstorable

log = logging.getLogger("postroom.worker")

WRITE_ATTEMPTS = 5
GATHER_JOBS = 256
"""A batch this big is written at once; a smaller one waits up to GATHER_SECONDS for more."""
GATHER_SECONDS = 0.003
# What the database (or the driver, before sending) refuses in an outcome, as opposed to a lost
# connection (OperationalError, retried): a data or constraint error, text it cannot encode.
_REFUSED = (
    psycopg.DataError,
    psycopg.IntegrityError,
    psycopg.ProgrammingError,
    psycopg.InternalError,
    UnicodeError,
    ValueError,
)


class AsyncCompleter:
    """Batches outcomes and writes them back, fenced by the worker name and claim token (a job
    whose lease this worker lost is not overwritten). ``keep_finished`` > 0 archives done
    jobs with their results; 0 deletes them."""

    def __init__(
        self,
        db: AsyncDatabase,
        *,
        worker: str,
        keep_finished: float,
        held: HeldJobs,
        fetcher: AsyncFetcher,
        limited: bool,
    ) -> None:
        self._db = db
        self._worker = worker
        self._keep_finished = keep_finished
        self._held = held
        self._fetcher = fetcher
        self._limited = limited
        self._cond = ACondition()
        self._outcomes: list[Outcome] = []
        self._closing = False
        self._waiting = False  # run() waits for outcomes (asyncio: report() must notify)
        self._wake_at = 1  # report() wakes run() once this many outcomes are pending
        self.processed = 0
        """Jobs whose outcome was written (any outcome)."""

    async def report(self, outcome: Outcome) -> None:
        """Queue an outcome for the next write."""
        outcome.job.reported = True
        if True:  # ASYNC
            if not self._waiting or len(self._outcomes) + 1 < self._wake_at:
                # One thread runs every task: a completer that is not waiting looks at the
                # outcomes again before it waits, and one that gathers a batch looks when its
                # wait ends, so no lock and no notification are needed.
                self._outcomes.append(outcome)
                return
        async with self._cond:
            self._outcomes.append(outcome)
            if len(self._outcomes) >= self._wake_at:
                self._cond.notify()

    async def close(self) -> None:
        """Write what is pending, then let ``run()`` return."""
        async with self._cond:
            self._closing = True
            self._cond.notify_all()

    async def run(self) -> None:
        while True:
            async with self._cond:
                while not self._outcomes:
                    if self._closing:
                        return
                    self._waiting = True
                    try:
                        await self._cond.wait_timeout(0.5)
                    finally:
                        self._waiting = False
                await self._gather()
                batch, self._outcomes = self._outcomes, []
            await self.write(batch)
            if self._limited:
                await self._fetcher.wake()  # running counts fell: limited claims may go on
            else:
                await self._fetcher.room_freed()  # leases released: room under the limit

    async def _gather(self) -> None:
        """Let a small batch grow for up to ``GATHER_SECONDS`` while other held jobs may still
        finish (the lock is held): a write per handful of outcomes costs a round trip and a
        statement each, more than the no-op jobs it writes back. Never when closing, nor when
        nothing else is running or buffered."""
        if self._closing or len(self._outcomes) >= GATHER_JOBS:
            return
        if len(self._held) <= len(self._outcomes):
            return  # every held job has its outcome here: nothing more to wait for
        deadline = time.monotonic() + GATHER_SECONDS
        self._wake_at = GATHER_JOBS
        try:
            while not self._closing and len(self._outcomes) < GATHER_JOBS:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._waiting = True
                try:
                    await self._cond.wait_timeout(left)
                finally:
                    self._waiting = False
        finally:
            self._wake_at = 1

    async def write(self, batch: list[Outcome]) -> None:
        """Write ``batch``, retrying connection errors; then forget those jobs.

        An outcome the database refuses (text it cannot store, a value a driver cannot send)
        must not take the batch or this loop with it: the batch is written again one outcome
        at a time, and a refused outcome is replaced by a failure naming the reason. Only an
        error that even that cannot get past escapes, and stops the worker."""
        try:
            await self._write_batch(batch)
        except _REFUSED as exc:
            log.error(
                "the database refused a batch of %d job outcomes (%s); writing them one by one",
                len(batch),
                exc,
            )
            for outcome in batch:
                try:
                    await self._write_batch([outcome])
                except _REFUSED as refused:
                    log.error("job %s: its outcome was refused: %s", outcome.job.id, refused)
                    await self._write_batch([unstorable(outcome, refused)])
        for outcome in batch:
            self._held.discard(outcome.job)
        self.processed += len(batch)

    async def _write_batch(self, batch: list[Outcome]) -> None:
        by_kind: dict[OutcomeKind, list[Outcome]] = {}
        for outcome in batch:
            by_kind.setdefault(outcome.kind, []).append(outcome)
        for attempt in range(WRITE_ATTEMPTS):
            try:
                async with self._db.connection() as conn:
                    if len(by_kind) == 1 and "release" not in by_kind:
                        await self._write(conn, by_kind)  # one statement
                    else:
                        async with conn.transaction():
                            await self._write(conn, by_kind)
                return
            except psycopg.OperationalError as exc:
                log.warning("writing %d job outcomes failed (%s); retrying", len(batch), exc)
                await asleep(reconnect_delay(attempt + 1))
        log.error("dropping %d job outcomes: their leases expire and they run again", len(batch))

    async def _write(
        self, conn: psycopg.AsyncConnection[Any], by_kind: dict[OutcomeKind, list[Outcome]]
    ) -> None:
        fence = {"worker": self._worker}
        if "done" in by_kind:
            done = by_kind["done"]
            params: dict[str, Any] = {
                **fence,
                "ids": int_array([o.job.id for o in done]),
                "tokens": token_array([o.job.token for o in done]),
            }
            if self._keep_finished > 0:
                params["results"] = [o.result for o in done]
                await conn.execute(self._db.q("complete_jobs_archived"), params)
            else:
                await conn.execute(self._db.q("complete_jobs_deleted"), params)
        if "fail" in by_kind:
            failed = by_kind["fail"]
            await conn.execute(
                self._db.q("fail_jobs"),
                {
                    **fence,
                    "ids": int_array([o.job.id for o in failed]),
                    "tokens": token_array([o.job.token for o in failed]),
                    "errors": [o.error for o in failed],
                    "delays": [o.delay for o in failed],
                    "finals": [o.final for o in failed],
                },
            )
        if "cancelled" in by_kind:
            cancelled = by_kind["cancelled"]
            await conn.execute(
                self._db.q("finish_cancelled_jobs"),
                {
                    **fence,
                    "ids": int_array([o.job.id for o in cancelled]),
                    "tokens": token_array([o.job.token for o in cancelled]),
                    "reasons": [o.error for o in cancelled],
                },
            )
        if "snooze" in by_kind:
            snoozed = by_kind["snooze"]
            await conn.execute(
                self._db.q("snooze_jobs"),
                {
                    **fence,
                    "ids": int_array([o.job.id for o in snoozed]),
                    "tokens": token_array([o.job.token for o in snoozed]),
                    "delays": [o.delay for o in snoozed],
                },
            )
        if "release" in by_kind:
            released = by_kind["release"]
            await conn.execute(
                self._db.q("release_jobs"),
                {
                    **fence,
                    "ids": int_array([o.job.id for o in released]),
                    "tokens": token_array([o.job.token for o in released]),
                    "started": [o.job.started for o in released],
                    "reason": f"interrupted: worker {self._worker} shut down",
                },
            )
            await send_wakeups(conn, self._db, JOBS, [o.job.queue for o in released])
