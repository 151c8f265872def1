"""The fetcher: claims batches of jobs into a local buffer that the worker's slots run from.

It is the one owner of the buffer and of the decision when to claim. Slots take jobs with
``next_job()``; the listener, the rescuer and the completer call ``wake()`` or ``room_freed()``
when claiming may find something new. A claim is one statement (``claim_jobs``, FOR UPDATE
SKIP LOCKED) committed before any job of the batch starts: no transaction is open while a job
runs.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from collections.abc import Callable
from datetime import timedelta

import psycopg

from .._acompat import ACondition, AEvent, ALock
from .._db_async import AsyncDatabase
from .._periodic_async import AsyncPeriodic
from .._reconnect import reconnect_delay
from .claiming import FLOOR_CHECK_SECONDS, FLOOR_CHECK_SHARE, ClaimFloors, low_water
from .outcomes import Claimed, HeldJobs

log = logging.getLogger("postroom.worker")

AUTO_PREFETCH_MAX = 1000
"""The most jobs an automatic prefetch claims ahead of the worker's slots."""
AUTO_PREFETCH_WINDOW = 0.05
"""An automatic prefetch holds about as many jobs as the slots run in this many seconds."""
RUN_TIME_SPIKE = 4.0
"""One job's run time moves the automatic prefetch's average as if it took at most this many
times the average."""
SHORT_JOB = 0.0001
"""Jobs whose average run time is below this many seconds are short: one slot runs them back to
back while the other slots stay parked (waking more threads costs more than it gains)."""
STALL_SECONDS = 0.002
"""Jobs that wait in the buffer while parked slots could run them and no slot took a job for
this long (a long job after short ones) wake the parked slots."""


class AsyncFetcher:
    """Claims while slots run: the next claim overlaps the work on the current batch.

    ``prefetch`` jobs are claimed ahead of idle slots; a claim happens when the buffer, less
    what the slots will take from it while the claim runs (at the rate they took jobs during
    the last claim cycle), is at or below its low-water mark (``low_water``: three quarters of
    ``prefetch``, empty without prefetch) and a slot is idle or there is room ahead: slots
    that run short jobs faster than a claim returns get the next claim as soon as the last
    one returned. ``prefetch=None`` sizes it from the jobs' measured run time (``job_ran``): as
    many jobs as the slots run in ``AUTO_PREFETCH_WINDOW`` seconds, at most ``AUTO_PREFETCH_MAX``,
    none until the first jobs ran: a claimed-ahead job waits ~50 ms at most for a slot.
    A claim happens on a wake-up (notification, a full batch last time) at once, otherwise
    every ``poll_interval`` seconds. Slots wake lazily: short jobs (``SHORT_JOB``) wake one
    parked slot, which runs them back to back; others wake one slot per job; buffered jobs that
    no slot took for ``STALL_SECONDS`` (a long job after short ones) wake the parked slots.
    ``on_drained`` is called, in burst mode, when a claim found
    nothing, no slot is busy and every outcome is written back."""

    def __init__(
        self,
        db: AsyncDatabase,
        *,
        worker: str,
        queues: list[str],
        lease: float,
        concurrency: int,
        prefetch: int | None,
        poll_interval: float,
        held: HeldJobs,
        on_drained: Callable[[], None] | None = None,
    ) -> None:
        self._db = db
        self._worker = worker
        self._queues = queues
        self._lease = timedelta(seconds=lease)
        self._concurrency = concurrency
        self._auto = prefetch is None
        self._prefetch = 0 if prefetch is None else prefetch
        self._low = low_water(self._prefetch)
        self._run_time: float | None = None  # moving average of a job's run time, seconds
        self._poll_interval = poll_interval
        self._held = held
        self._on_drained = on_drained
        self.floors = ClaimFloors(queues)
        """Where each queue's next claim starts its scan (the floor watch lowers them)."""
        # One lock: slots wait on _cond for claimed jobs, the fetch loop waits on _fetch_cond
        # for room in the buffer or a wake-up.
        lock = ALock()
        self._cond = ACondition(lock)
        self._fetch_cond = ACondition(lock)
        self._buffer: deque[Claimed] = deque()
        self._idle = 0
        self._wake = True
        self._next_poll = 0.0
        self._claim_failures = 0  # in a row: the next claim comes after reconnect_delay
        self._claiming = True
        self._fetch_waiting = False  # the fetch loop waits on _fetch_cond
        # A claim begins when the buffer, less what the slots will take while the claim runs,
        # is at the low-water mark: jobs taken from the buffer (ever, and when the last claim
        # returned), when it returned, the rate the slots took jobs at between the last two
        # claims' returns, and how long claims take (a moving average).
        self._taken = 0
        self._taken_then = 0
        self._returned_at = time.monotonic()
        self._take_rate = 0.0
        self._claim_seconds = 0.0
        self._claim_at = self._low  # the buffer level at which slots wake the fetch loop
        # Lazy wake-ups: slots waiting on _cond, and the stall watch (jobs taken when the
        # fetch loop last saw the count move, and when).
        self._parked = 0
        self._watched = 0
        self._watched_at = time.monotonic()

    async def wake(self) -> None:
        """Claim at once: jobs may have arrived or come back."""
        async with self._cond:
            self._wake = True
            self._fetch_cond.notify()

    async def room_freed(self) -> None:
        """Leases were released: there may be room under the held limit again. In burst
        mode, once every claimed job is written back, none is buffered and no slot runs one,
        claim at once: an empty claim then ends the run, which would otherwise wait for the
        next poll."""
        async with self._cond:
            self._check_drained()
            self._fetch_cond.notify()

    def _check_drained(self) -> None:
        """In burst mode, claim at once when nothing is held, buffered or running (lock
        held): whichever comes last, the last write-back or the last slot going idle."""
        if (
            self._on_drained is not None
            and not len(self._held)
            and not self._buffer
            and self._idle == self._concurrency
        ):
            self._wake = True

    async def stop(self) -> list[Claimed]:
        """Stop claiming; wake every waiting slot (they get None) and return the claimed jobs
        that no slot took, for the caller to release."""
        async with self._cond:
            self._claiming = False
            unstarted = list(self._buffer)
            self._buffer.clear()
            self._cond.notify_all()
            self._fetch_cond.notify()
        return unstarted

    def job_ran(self, seconds: float) -> None:
        """A slot ran a job in ``seconds``: updates the average run time, from which an
        automatic prefetch sizes what it claims ahead and slots tell short jobs (no lock: one
        float, read by the fetch loop and the slots).

        One sample counts for at most ``RUN_TIME_SPIKE`` times the average: a no-op job whose
        thread waited for the interpreter lock takes milliseconds instead of microseconds
        once in a while, and each such spike used to cut the prefetch (and its low-water
        mark) for the next claim, which then began only when the buffer ran dry. Jobs that
        really got slower still raise the average ~1.6 times per job."""
        average = self._run_time
        if average is None:
            self._run_time = seconds
        else:
            seconds = min(seconds, RUN_TIME_SPIKE * average)
            self._run_time = 0.8 * average + 0.2 * seconds

    def _short(self) -> bool:
        """Jobs are known to be short (``SHORT_JOB``): one slot runs them, the others stay
        parked. Unknown (no job ran yet) counts as long."""
        average = self._run_time
        return average is not None and average < SHORT_JOB

    def _wake_slots(self) -> None:
        """Wake parked slots for the buffered jobs: one if the jobs are short (it runs them
        back to back), else one per job (lock held)."""
        if self._parked and self._buffer:
            self._cond.notify(1 if self._short() else min(self._parked, len(self._buffer)))

    def _auto_prefetch(self) -> int:
        average = self._run_time
        if average is None:
            return 0
        wanted = self._concurrency * AUTO_PREFETCH_WINDOW / max(average, 1e-6)
        return min(AUTO_PREFETCH_MAX, int(wanted))

    def _take_unlocked(self) -> Claimed | None:
        """A buffered job taken without the lock, when nothing needs notifying; None: take
        the lock path."""
        # Threads: with short jobs well above the low-water mark, a job is taken without the
        # lock (popleft is atomic; a slot that lost the race for the last jobs takes the lock
        # path). Nothing to notify: the fetch loop is not due, and with short jobs no parked
        # slot is woken for the next job. A count lost to a race only blurs the take rate and
        # the stall watch, which needs the count to move, not to be exact.
        if True:  # ASYNC
            # One thread runs every task, and nothing awaits between the check and the pop:
            # a job is taken without the lock when there is nothing to notify: it is above
            # the low-water mark, or the fetch loop is not waiting (it is claiming, or it
            # looks at the buffer when it gets the lock).
            buffer = self._buffer
            while (
                self._claiming
                and buffer
                and (len(buffer) > self._claim_at + 1 or not self._fetch_waiting)
            ):
                job = buffer.popleft()
                self._taken += 1
                if job.interrupt_kind != "lost":
                    return job
        else:
            buffer = self._buffer
            while self._claiming and len(buffer) > self._claim_at + 1 and self._short():
                try:
                    job = buffer.popleft()
                except IndexError:
                    break
                self._taken += 1
                if job.interrupt_kind != "lost":
                    return job
        return None

    async def next_job(self) -> Claimed | None:
        """The next claimed job for a slot; None once the worker stops claiming."""
        job = self._take_unlocked()
        if job is not None:
            return job
        async with self._cond:
            self._idle += 1
            if not self._buffer:
                self._check_drained()
                self._fetch_cond.notify()  # a slot waits: claim for it
            try:
                while self._claiming:
                    while self._buffer:
                        job = self._buffer.popleft()
                        self._taken += 1
                        if len(self._buffer) <= self._claim_at:
                            self._fetch_cond.notify()  # low water: claim the next batch now
                        if job.interrupt_kind != "lost":
                            if self._parked and self._buffer and not self._short():
                                self._cond.notify()  # more waiting: another slot for them
                            return job
                    self._parked += 1
                    try:
                        await self._cond.wait_timeout(self._poll_interval)
                    finally:
                        self._parked -= 1
                return None
            finally:
                self._idle -= 1

    def _watch_stall(self) -> float:
        """Jobs wait in the buffer and slots are parked: if no slot took a job for
        ``STALL_SECONDS`` (the slot that runs short jobs met a long one), wake parked slots,
        one per buffered job. Returns how long the fetch loop may wait before it looks again
        (lock held)."""
        now = time.monotonic()
        if self._taken != self._watched:
            self._watched, self._watched_at = self._taken, now
        elif now - self._watched_at >= STALL_SECONDS:
            self._cond.notify(min(self._parked, len(self._buffer)))
            self._watched_at = now
        return max(STALL_SECONDS - (now - self._watched_at), 0.0)

    def _drained_during_claim(self) -> int:
        """How many buffered jobs the slots take while a claim runs, at the rate they took
        them between the last two claims' returns (at most ``prefetch``)."""
        return min(self._prefetch, int(self._take_rate * self._claim_seconds))

    async def run(self) -> None:
        """The fetch loop; returns once ``stop()`` was called."""
        while True:
            async with self._cond:
                while True:
                    if not self._claiming:
                        return
                    if self._auto:
                        self._prefetch = self._auto_prefetch()
                        self._low = low_water(self._prefetch)
                    # The jobs still waiting when this claim returns: the slots take about as
                    # many during a claim as they took during the last one. Short jobs then
                    # get their next claim at once (it returns as the buffer runs dry), long
                    # ones when the buffer is down to the low-water mark, as without it.
                    drained = self._drained_during_claim()
                    self._claim_at = self._low + drained
                    ahead = max(0, len(self._buffer) - drained)
                    room = self._idle + self._prefetch - ahead
                    # Back-pressure: finished jobs still hold their lease until written back;
                    # if the write-back falls behind, stop claiming rather than pile up leases.
                    room = min(room, self._held.limit - len(self._held))
                    wanted = room > 0 and ahead <= self._low
                    due = self._wake or time.monotonic() >= self._next_poll
                    if wanted and due:
                        break
                    wait = self._next_poll - time.monotonic() if wanted else self._poll_interval
                    if self._parked and self._buffer:
                        wait = min(wait, self._watch_stall())
                    self._fetch_waiting = True
                    try:
                        await self._fetch_cond.wait_timeout(max(wait, 0.001))
                    finally:
                        self._fetch_waiting = False
                self._wake = False
                # Nothing in flight before this claim (every claimed job written back): then
                # and only then does an empty claim mean the queues are drained.
                quiet = not len(self._held)
            began = time.monotonic()
            claimed = await self._claim(room)
            async with self._cond:
                now = time.monotonic()
                cycle = now - self._returned_at
                self._take_rate = (self._taken - self._taken_then) / cycle if cycle > 0 else 0.0
                self._returned_at, self._taken_then = now, self._taken
                self._claim_seconds = 0.8 * self._claim_seconds + 0.2 * (now - began)
                self._buffer.extend(claimed)
                self._watched_at = now  # the stall watch starts with the new jobs
                if self._claim_failures:
                    # The database is away: try again soon (it may be back in a moment),
                    # but not in a busy loop.
                    self._next_poll = now + reconnect_delay(self._claim_failures)
                elif len(claimed) >= room:
                    self._wake = True  # probably more due: claim again when there is room
                else:
                    self._next_poll = time.monotonic() + self._poll_interval * (
                        0.8 + 0.4 * random.random()
                    )
                    if (
                        self._on_drained is not None
                        and not claimed
                        and not self._buffer
                        and self._idle == self._concurrency  # no slot is running a job
                        # and no outcome awaited its write-back when the claim began: until
                        # then its job counts as running, so a limit may have held one back
                        and quiet
                    ):
                        self._on_drained()
                self._wake_slots()

    async def _claim(self, want: int) -> list[Claimed]:
        sent = time.monotonic()
        try:
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    self._db.q("claim_jobs"),
                    {
                        "queues": self._queues,
                        "limit": want,
                        "worker": self._worker,
                        "lease": self._lease,
                        **self.floors.arguments(),
                    },
                )
                rows = await cur.fetchall()
        except psycopg.Error as exc:
            self._claim_failures += 1
            if self._claim_failures == 1:  # not twice a second while the server is down
                log.warning("claim failed, retrying: %s", exc)
            return []
        self._claim_failures = 0
        self.floors.claimed(rows)
        jobs = [Claimed(*row[:-1]) for row in rows]  # the last column is the job's priority
        deadline = sent + self._lease.total_seconds()
        for job in jobs:
            job.lease_deadline = deadline
            self._held.add(job)
        return jobs


class AsyncFloorWatch(AsyncPeriodic):
    """Looks for due ready jobs below the fetcher's claim floors (``jobs_below_floors``) and
    lowers those floors, then wakes the fetcher: every ``FLOOR_CHECK_SECONDS``, or less often
    when a look takes longer than ``FLOOR_CHECK_SHARE`` of that (behind a pinned vacuum
    horizon it walks the dead entries the claims skip). Off the claim's path: a slow look
    delays no claim."""

    name = "floor watch"
    what = "looking for jobs below the claim floors"

    def __init__(
        self, db: AsyncDatabase, *, queues: list[str], fetcher: AsyncFetcher, stopping: AEvent
    ) -> None:
        super().__init__(db, interval=FLOOR_CHECK_SECONDS, stopping=stopping, log=log)
        self._queues = queues
        self._fetcher = fetcher

    async def tick(self) -> float | None:
        floors = self._fetcher.floors
        if not floors.any():
            return None
        arguments = floors.arguments()
        began = time.monotonic()
        async with self._db.connection() as conn:
            cur = await conn.execute(
                self._db.q("jobs_below_floors"), {"queues": self._queues, **arguments}
            )
            rows = await cur.fetchall()
        took = time.monotonic() - began
        priorities = dict(zip(self._queues, arguments["floor_priorities"], strict=True))
        for queue, run_at in rows:
            floors.lower(queue, priorities[queue], run_at)
        if rows:
            await self._fetcher.wake()
        return max(FLOOR_CHECK_SECONDS, took / FLOOR_CHECK_SHARE)
