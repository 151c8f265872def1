"""The worker: claim a batch, commit, then run; write outcomes back in batches.

Moving parts (tasks here, threads in the sync twin), all on the worker's own small pool:

- ``concurrency`` slots run jobs. An idle slot takes the next claimed job from a local buffer;
  when the buffer is empty one slot claims for all idle ones (``claim_jobs``: one statement,
  FOR UPDATE SKIP LOCKED) and commits before any job starts: no transaction is open while a
  job runs.
- a listener (LISTEN postroom_jobs) wakes idle slots when jobs arrive; without it, or when a
  notification is lost, slots poll every ``poll_interval`` seconds.
- a completer writes finished jobs back, batching whatever finished while its last write ran.
- a heartbeat extends the leases of every job the worker holds (running, buffered or awaiting
  write-back) and learns about cancellations; a rescuer returns jobs whose lease expired.
- a scheduler enqueues the ticks of registered periodic jobs.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import sysconfig
import time
import traceback
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import psycopg
from psycopg_pool import AsyncConnectionPool

from .._acompat import (
    ACondition,
    AEvent,
    AJobCall,
    ALock,
    JobThreads,
    agather,
    ajoin_all,
    asleep,
    aspawn,
    install_stop_handler,
)
from .._db_async import AsyncDatabase
from ..errors import InvalidArgument, JobInterrupted
from .backoff import Backoff
from .jobs_async import AsyncJobs
from .records import check_queues, check_seconds, encode_result, notify_payload

log = logging.getLogger("postroom.worker")

MAX_ERROR_CHARS = 8000
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Frames that lead to a job without being the job's: postroom's own and, for a sync job on the
# async worker, the thread pool's (the standard library's).
_NOT_THE_JOB = (_PACKAGE_DIR, sysconfig.get_paths()["stdlib"] + os.sep)
RESCUE_BATCH = 1000
PURGE_INTERVAL = 60.0
VACUUM_MIN_DEAD = 10_000
OutcomeKind = Literal["done", "fail", "cancelled", "release"]


@dataclass(eq=False)
class _Claimed:
    id: int
    queue: str
    kind: str
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    call: AJobCall | None = None
    started: bool = False
    reported: bool = False
    interrupt_kind: Literal["cancel", "shutdown", "lost"] | None = None


@dataclass(eq=False)
class _Outcome:
    job: _Claimed
    kind: OutcomeKind
    result: str | None = None
    error: str | None = None
    delay: float = 0.0
    final: bool = False


class AsyncWorker:
    """Runs the registered jobs of ``queues`` until stopped.

        worker = client.worker(queues=["email"], concurrency=8)
        await worker.run()       # until SIGTERM/SIGINT or worker.stop()

    ``run()`` stops on SIGTERM or SIGINT (when called in the main thread): it stops claiming,
    gives back claimed jobs that have not started, lets running jobs finish for up to
    ``shutdown_grace`` seconds, then interrupts the rest and releases them. A second signal
    skips the grace period.

    Parameters: ``concurrency`` jobs run at once; ``prefetch`` more are claimed ahead (faster
    for many short jobs; they hold a lease meanwhile). A claimed job holds a lease of
    ``lease`` seconds, extended every ``heartbeat`` seconds (default lease/3); any worker
    returns jobs whose lease expired every ``rescue_interval`` seconds. ``listen=False`` polls
    only (for PgBouncer in transaction mode; also turns off prepared statements).
    ``keep_finished`` is how long done and cancelled jobs (and their results) are kept in
    ``finished_jobs``; 0 deletes them at completion, which is fastest but leaves nothing for
    ``job.result()``. Every ``vacuum_interval`` seconds a worker vacuums the queue tables if
    their dead rows piled up (None: leave it to autovacuum).
    """

    def __init__(
        self,
        jobs: AsyncJobs,
        queues: list[str] | None = None,
        *,
        concurrency: int = 10,
        prefetch: int = 0,
        lease: float | timedelta = 30.0,
        heartbeat: float | timedelta | None = None,
        rescue_interval: float | timedelta | None = None,
        poll_interval: float | timedelta = 1.0,
        listen: bool = True,
        shutdown_grace: float | timedelta = 30.0,
        keep_finished: float | timedelta = timedelta(days=1),
        vacuum_interval: float | timedelta | None = 5.0,
        name: str | None = None,
    ) -> None:
        self._jobs = jobs
        if queues is None:
            registered = {d.queue for d in jobs.definitions.values()}
            registered |= {s.queue for s in jobs.schedules.values()}
            if not registered:
                raise InvalidArgument(
                    "this worker has nothing to run: register jobs with @client.job first, "
                    "or pass queues=[...]"
                )
            queues = sorted(registered)
        self.queues = check_queues(queues)
        for what, value in (("concurrency", concurrency), ("prefetch", prefetch)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidArgument(f"invalid {what} {value!r}: an integer >= 0")
        if concurrency < 1:
            raise InvalidArgument(f"invalid concurrency {concurrency!r}: an integer >= 1")
        self.concurrency = concurrency
        self._prefetch = prefetch
        self._lease = check_seconds("lease", lease, allow_zero=False)
        self._heartbeat = (
            self._lease / 3
            if heartbeat is None
            else check_seconds("heartbeat", heartbeat, allow_zero=False)
        )
        if self._heartbeat >= self._lease:
            raise InvalidArgument(
                f"heartbeat {self._heartbeat:g} s must be shorter than the lease {self._lease:g} s"
            )
        self._rescue_interval = (
            self._lease / 2
            if rescue_interval is None
            else check_seconds("rescue_interval", rescue_interval, allow_zero=False)
        )
        self._poll_interval = check_seconds("poll_interval", poll_interval, allow_zero=False)
        self._listen = bool(listen)
        self._grace = check_seconds("shutdown_grace", shutdown_grace)
        self._keep_finished = check_seconds("keep_finished", keep_finished)
        self._vacuum_interval = (
            None
            if vacuum_interval is None
            else check_seconds("vacuum_interval", vacuum_interval, allow_zero=False)
        )
        self._vacuum_denied = False
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._payloads = {notify_payload(jobs.db.schema, q) for q in self.queues}
        self._payloads.add(notify_payload(jobs.db.schema, "*"))
        self._cancel_payload = notify_payload(jobs.db.schema, "cancel")
        self._limited = any(
            d.max_concurrency is not None or d.rate_limit is not None
            for d in jobs.definitions.values()
        )
        self._db: AsyncDatabase | None = None
        # Claiming state, guarded by one lock: slots wait on _cond for claimed jobs, the
        # fetcher waits on _fetch_cond for room in the buffer or a wake-up.
        lock = ALock()
        self._cond = ACondition(lock)
        self._fetch_cond = ACondition(lock)
        self._buffer: deque[_Claimed] = deque()
        self._idle = 0
        self._wake = True
        self._next_poll = 0.0
        self._claiming = True
        self._burst = False
        # Jobs this worker holds a lease on, until their outcome is written.
        self._held: dict[int, _Claimed] = {}
        self._held_limit = 2 * (concurrency + prefetch)
        # Outcomes waiting for the completer, guarded by _done_cond.
        self._done_cond = ACondition()
        self._outcomes: list[_Outcome] = []
        self._closing = False
        self._closed = False
        self._heartbeat_now = AEvent()
        self._loops_stop = AEvent()
        self._threads: JobThreads | None = None
        self._stop_requests = 0
        self._started = False
        self.processed = 0
        """Jobs whose outcome this worker has written (any outcome)."""

    # -- life cycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask ``run()`` to shut down gracefully; a second call skips the grace period.
        Safe to call from a signal handler or another thread."""
        self._stop_requests += 1

    async def run(self, *, burst: bool = False, handle_signals: bool = True) -> None:
        """Run jobs until ``stop()``, SIGTERM or SIGINT; with ``burst``, also stop once no
        job is due (the queues are drained)."""
        if self._started:
            raise InvalidArgument("a worker runs once; create a new one with client.worker()")
        self._started = True
        self._burst = burst
        # Autocommit: a claim, heartbeat or rescue is one statement and one round trip;
        # multi-statement writes open a transaction explicitly.
        kwargs: dict[str, Any] = {"autocommit": True}
        if not self._listen:
            kwargs["prepare_threshold"] = None
        session = self._jobs.db.q("worker_session")

        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            if self._listen:  # not behind PgBouncer in transaction mode, where SET leaks
                await conn.execute(session)

        pool = AsyncConnectionPool(
            self._jobs.db.conninfo,
            min_size=1,
            max_size=5,
            kwargs=kwargs,
            configure=configure,
            open=False,
            name=f"postroom-worker-{self.name}",
        )
        await pool.open(wait=True)
        self._db = AsyncDatabase(pool, self._jobs.db.conninfo, self._jobs.db.schema)
        restore = install_stop_handler(self.stop) if handle_signals else None
        self._threads = JobThreads(self.concurrency)
        background = []
        try:
            await self._register()
            background = [
                aspawn(self._completer_loop, name="postroom-completer"),
                aspawn(self._heartbeat_loop, name="postroom-heartbeat"),
                aspawn(self._maintenance_loop, name="postroom-maintenance"),
            ]
            if self._jobs.schedules:
                background.append(aspawn(self._schedule_loop, name="postroom-scheduler"))
            if self._vacuum_interval is not None:
                background.append(aspawn(self._vacuum_loop, name="postroom-vacuum"))
            if self._listen:
                background.append(aspawn(self._listen_loop, name="postroom-listener"))
            fetcher = aspawn(self._fetch_loop, name="postroom-fetcher")
            slots = [
                aspawn(self._slot_loop, name=f"postroom-slot-{i}") for i in range(self.concurrency)
            ]
            while not self._stop_requests:
                await asleep(0.05)
            await self._shutdown(slots)
            await agather(fetcher, 30)
        finally:
            self._closed = True
            self._claiming = False  # slots and fetcher end at their next wake-up
            self._heartbeat_now.set()
            self._loops_stop.set()
            for task in background:
                await agather(task, 10)
            if restore is not None:
                restore()
            self._threads.close()
            await pool.close()

    async def _shutdown(self, slots: list[Any]) -> None:
        async with self._cond:
            self._claiming = False
            unstarted = list(self._buffer)
            self._buffer.clear()
            self._cond.notify_all()
            self._fetch_cond.notify()
        for job in unstarted:
            await self._report(_Outcome(job, "release"))
        grace = 0.0 if self._stop_requests > 1 else self._grace
        if not await ajoin_all(slots, grace):
            for job in list(self._held.values()):
                if job.call is not None and not job.reported:
                    job.interrupt_kind = "shutdown"
                    job.call.interrupt(JobInterrupted("the worker shut down"))
            if not await ajoin_all(slots, 2.0):
                stuck = [j for j in self._held.values() if j.started and not j.reported]
                log.warning("releasing %d jobs that did not stop in time", len(stuck))
                for job in stuck:
                    await self._report(_Outcome(job, "release"))
        async with self._done_cond:
            self._closing = True
            self._done_cond.notify_all()

    # -- claiming and running ---------------------------------------------------------------

    async def _slot_loop(self) -> None:
        while True:
            job = await self._next_job()
            if job is None:
                return
            await self._execute(job)

    async def _next_job(self) -> _Claimed | None:
        """The next claimed job for this slot; None once the worker stops claiming."""
        async with self._cond:
            self._idle += 1
            if not self._buffer:
                self._fetch_cond.notify()  # a slot waits: claim for it
            try:
                while self._claiming:
                    while self._buffer:
                        job = self._buffer.popleft()
                        if len(self._buffer) == self._prefetch // 2:
                            self._fetch_cond.notify()  # low water: claim the next batch now
                        if job.interrupt_kind != "lost":
                            return job
                    await self._cond.wait_timeout(self._poll_interval)
                return None
            finally:
                self._idle -= 1

    async def _fetch_loop(self) -> None:
        """Claim batches into the buffer while slots run jobs from it: the next claim overlaps
        the work on the current batch. Claims when the buffer is at or below half of
        ``prefetch`` (empty without prefetch) and a slot is idle or there is room ahead; on a
        wake-up (notification, a full batch last time) at once, otherwise every poll."""
        while True:
            async with self._cond:
                while True:
                    if not self._claiming:
                        return
                    room = self._idle + self._prefetch - len(self._buffer)
                    # Back-pressure: finished jobs still hold their lease until written back;
                    # if the write-back falls behind, stop claiming rather than pile up leases.
                    room = min(room, self._held_limit - len(self._held))
                    wanted = room > 0 and len(self._buffer) <= self._prefetch // 2
                    due = self._wake or time.monotonic() >= self._next_poll
                    if wanted and due:
                        break
                    wait = self._next_poll - time.monotonic() if wanted else self._poll_interval
                    await self._fetch_cond.wait_timeout(max(wait, 0.001))
                self._wake = False
            claimed = await self._claim(room)
            async with self._cond:
                self._buffer.extend(claimed)
                if len(claimed) >= room:
                    self._wake = True  # probably more due: claim again when there is room
                else:
                    self._next_poll = time.monotonic() + self._poll_interval * (
                        0.8 + 0.4 * random.random()
                    )
                    if (
                        self._burst
                        and not claimed
                        and not self._buffer
                        and self._idle == self.concurrency  # no slot is running a job
                    ):
                        self.stop()
                if len(claimed) > 1:
                    self._cond.notify_all()
                elif claimed:
                    self._cond.notify()

    async def _claim(self, want: int) -> list[_Claimed]:
        assert self._db is not None
        try:
            async with self._db.connection() as conn:
                cur = await conn.execute(
                    self._db.q("claim_jobs"),
                    {
                        "queues": self.queues,
                        "limit": want,
                        "worker": self.name,
                        "lease": timedelta(seconds=self._lease),
                    },
                )
                rows = await cur.fetchall()
        except psycopg.Error as exc:
            log.warning("claim failed, retrying in %.1f s: %s", self._poll_interval, exc)
            return []
        jobs = [_Claimed(*row) for row in rows]
        for job in jobs:
            self._held[job.id] = job
        return jobs

    async def _execute(self, job: _Claimed) -> None:
        definition = self._jobs.definitions.get(job.kind)
        job.started = True
        if job.interrupt_kind == "cancel":
            outcome = _Outcome(job, "cancelled")
        elif definition is None:
            known = ", ".join(sorted(self._jobs.definitions)) or "none"
            outcome = self._failure(
                job,
                f"UnknownJobKind: no function is registered for job kind {job.kind!r} in "
                f"worker {self.name} (registered kinds: {known}); import the module that "
                "defines it in the worker",
                Backoff(),
            )
        else:
            job.call = AJobCall(definition.func, job.args, definition.timeout, self._threads)
            try:
                value = await job.call.run()
            except JobInterrupted as exc:
                outcome = self._interrupted(job, exc, definition.backoff)
            except Exception as exc:  # noqa: BLE001 - any error of the job is its failure
                outcome = self._failure(job, _format_error(exc), definition.backoff)
            else:
                outcome = self._success(job, value)
        await self._report(outcome)

    def _success(self, job: _Claimed, value: Any) -> _Outcome:
        try:
            return _Outcome(job, "done", result=encode_result(value))
        except (TypeError, ValueError) as exc:
            # The job ran; running it again would repeat its effects. Fail it for a person to
            # look at instead.
            return _Outcome(
                job,
                "fail",
                error=f"the job ran but its result is not JSON-serializable ({exc}); return "
                "str, int, float, bool, None, or lists and dicts of them",
                final=True,
            )

    def _failure(self, job: _Claimed, error: str, backoff: Backoff) -> _Outcome:
        return _Outcome(
            job,
            "fail",
            error=error[-MAX_ERROR_CHARS:],
            delay=backoff.delay(job.attempt),
            final=job.attempt >= job.max_attempts,
        )

    def _interrupted(self, job: _Claimed, exc: JobInterrupted, backoff: Backoff) -> _Outcome:
        if job.interrupt_kind == "cancel":
            return _Outcome(job, "cancelled")
        if job.interrupt_kind == "shutdown":
            return _Outcome(job, "release")
        if job.interrupt_kind == "lost":
            return _Outcome(job, "release")  # fenced: the write-back matches nothing
        return self._failure(job, f"JobTimeout: {exc.reason}", backoff)

    async def _report(self, outcome: _Outcome) -> None:
        outcome.job.reported = True
        async with self._done_cond:
            self._outcomes.append(outcome)
            self._done_cond.notify()

    # -- write-back -------------------------------------------------------------------------

    async def _completer_loop(self) -> None:
        while True:
            async with self._done_cond:
                while not self._outcomes:
                    if self._closing:
                        return
                    await self._done_cond.wait_timeout(0.5)
                batch, self._outcomes = self._outcomes, []
            await self._write_outcomes(batch)
            async with self._cond:
                if self._limited:
                    self._wake = True  # running counts fell: limited claims may go on
                self._fetch_cond.notify()  # leases released: room under the held limit

    async def _write_outcomes(self, batch: list[_Outcome]) -> None:
        assert self._db is not None
        by_kind: dict[OutcomeKind, list[_Outcome]] = {}
        for outcome in batch:
            by_kind.setdefault(outcome.kind, []).append(outcome)
        for attempt in range(5):
            try:
                async with self._db.connection() as conn:
                    if len(by_kind) == 1 and "release" not in by_kind:
                        await self._write(conn, by_kind)  # one statement
                    else:
                        async with conn.transaction():
                            await self._write(conn, by_kind)
                break
            except psycopg.OperationalError as exc:
                log.warning("writing %d job outcomes failed (%s); retrying", len(batch), exc)
                await asleep(0.2 * 2**attempt)
        else:
            log.error(
                "dropping %d job outcomes: their leases expire and they run again", len(batch)
            )
        for outcome in batch:
            self._held.pop(outcome.job.id, None)
        self.processed += len(batch)

    async def _write(
        self, conn: psycopg.AsyncConnection[Any], by_kind: dict[OutcomeKind, list[_Outcome]]
    ) -> None:
        assert self._db is not None
        fence = {"worker": self.name}
        if "done" in by_kind:
            done = by_kind["done"]
            params: dict[str, Any] = {
                **fence,
                "ids": [o.job.id for o in done],
                "attempts": [o.job.attempt for o in done],
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
                    "ids": [o.job.id for o in failed],
                    "attempts": [o.job.attempt for o in failed],
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
                    "ids": [o.job.id for o in cancelled],
                    "attempts": [o.job.attempt for o in cancelled],
                },
            )
        if "release" in by_kind:
            released = by_kind["release"]
            await conn.execute(
                self._db.q("release_jobs"),
                {
                    **fence,
                    "ids": [o.job.id for o in released],
                    "attempts": [o.job.attempt for o in released],
                    "started": [o.job.started for o in released],
                    "reason": f"interrupted: worker {self.name} shut down",
                },
            )
            payloads = sorted({notify_payload(self._db.schema, o.job.queue) for o in released})
            await conn.execute(self._db.q("notify_queues"), {"payloads": payloads})

    # -- leases -----------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        assert self._db is not None
        while not self._closed:
            await self._heartbeat_now.wait_timeout(self._heartbeat)
            self._heartbeat_now.clear()
            held = [j for j in list(self._held.values()) if not j.reported]
            if not held or self._closed:
                continue
            try:
                async with self._db.connection() as conn:
                    cur = await conn.execute(
                        self._db.q("heartbeat_jobs"),
                        {
                            "worker": self.name,
                            "ids": [j.id for j in held],
                            "attempts": [j.attempt for j in held],
                            "lease": timedelta(seconds=self._lease),
                        },
                    )
                    alive = dict(await cur.fetchall())
            except psycopg.Error as exc:
                log.warning("heartbeat failed: %s", exc)
                continue
            for job in held:
                if job.reported:
                    continue
                if job.id not in alive:
                    log.warning("lost the lease of job %s (attempt %s)", job.id, job.attempt)
                    job.interrupt_kind = "lost"
                    self._held.pop(job.id, None)
                    if job.call is not None:
                        job.call.interrupt(JobInterrupted("the worker lost the job's lease"))
                elif alive[job.id] and job.interrupt_kind is None:
                    job.interrupt_kind = "cancel"
                    if job.call is not None:
                        job.call.interrupt(JobInterrupted("cancelled"))

    async def _maintenance_loop(self) -> None:
        assert self._db is not None
        next_purge = time.monotonic() + PURGE_INTERVAL * random.random()
        while not self._closed:
            await self._loops_stop.wait_timeout(
                self._rescue_interval * (0.8 + 0.4 * random.random())
            )
            if self._closed:
                return
            try:
                await self._rescue()
                if self._keep_finished > 0 and time.monotonic() >= next_purge:
                    next_purge = time.monotonic() + PURGE_INTERVAL
                    await self._jobs.purge("done", self._keep_finished)
                    await self._jobs.purge("cancelled", self._keep_finished)
            except psycopg.Error as exc:
                log.warning("queue maintenance failed: %s", exc)

    async def _vacuum_loop(self) -> None:
        """Vacuum the queue tables when their dead rows pile up, whatever autovacuum does.

        A queue table churns faster than autovacuum's defaults expect, and autovacuum may be
        off, or busy elsewhere, or waking once a minute per database. One worker at a time (an
        advisory lock elects it) vacuums a table once its dead rows exceed 10,000 and a fifth
        of its live rows; VACUUM takes a lock that lets claims and writes go on."""
        assert self._db is not None and self._vacuum_interval is not None
        try:
            async with self._db.connection() as conn:
                cur = await conn.execute(self._db.q("may_vacuum_jobs"))
                row = await cur.fetchone()
        except psycopg.Error as exc:
            log.warning("cannot check who may vacuum the queue tables: %s", exc)
            return
        if not (row and row[0]):
            log.info("this role does not own the queue tables: vacuum is left to autovacuum")
            return
        while not self._closed and not self._vacuum_denied:
            await self._loops_stop.wait_timeout(
                self._vacuum_interval * (0.8 + 0.4 * random.random())
            )
            if self._closed:
                return
            try:
                await self._vacuum_if_needed()
            except psycopg.errors.InsufficientPrivilege as exc:
                log.warning("cannot vacuum the queue tables (%s); leaving it to autovacuum", exc)
                self._vacuum_denied = True
            except psycopg.Error as exc:
                log.warning("vacuuming the queue tables failed: %s", exc)

    async def _vacuum_if_needed(self) -> None:
        assert self._db is not None
        async with self._db.connection() as conn:
            cur = await conn.execute(self._db.q("queue_dead_tuples"))
            wanted = [
                name
                for name, dead, live in await cur.fetchall()
                if dead > VACUUM_MIN_DEAD and dead > live / 5
            ]
            if not wanted:
                return
            lock = {"schema": self._db.schema}
            cur = await conn.execute(self._db.q("try_vacuum_lock"), lock)
            row = await cur.fetchone()
            if not (row and row[0]):
                return  # another worker is vacuuming
            try:
                for name in wanted:
                    query = "vacuum_jobs" if name == "jobs" else "vacuum_finished_jobs"
                    await conn.execute(self._db.q(query), prepare=False)
            finally:
                await conn.execute(self._db.q("vacuum_unlock"), lock)

    async def _rescue(self) -> int:
        assert self._db is not None
        total = 0
        while True:
            async with self._db.connection() as conn:
                cur = await conn.execute(self._db.q("rescue_expired_jobs"), {"batch": RESCUE_BATCH})
                row = await cur.fetchone()
            count = int(row[0]) if row else 0
            total += count
            if count < RESCUE_BATCH:
                break
        if total:
            log.info("returned %d jobs whose lease expired", total)
            async with self._cond:
                self._wake = True
                self._fetch_cond.notify()
        return total

    # -- wake-ups and schedules -------------------------------------------------------------

    async def _listen_loop(self) -> None:
        assert self._db is not None
        while not self._closed:
            try:
                conn = await psycopg.AsyncConnection.connect(self._db.conninfo, autocommit=True)
            except psycopg.Error as exc:
                log.warning("LISTEN connection failed, polling meanwhile: %s", exc)
                await self._loops_stop.wait_timeout(self._poll_interval)
                continue
            try:
                await conn.execute(self._db.q("listen_jobs"))
                async with self._cond:  # jobs may have arrived while not listening
                    self._wake = True
                    self._fetch_cond.notify()
                while not self._closed:
                    async for notify in conn.notifies(timeout=0.1):
                        if notify.payload == self._cancel_payload:
                            self._heartbeat_now.set()
                        elif notify.payload in self._payloads:
                            async with self._cond:
                                self._wake = True
                                self._fetch_cond.notify()
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost, reconnecting: %s", exc)
            finally:
                await conn.close()

    async def _register(self) -> None:
        """Store the registered limits and periodic schedules."""
        for definition in self._jobs.definitions.values():
            if definition.max_concurrency is not None or definition.rate_limit is not None:
                await self._jobs.set_limit(
                    "kind", definition.kind, definition.max_concurrency, definition.rate_limit, None
                )
        if not self._jobs.schedules:
            return
        assert self._db is not None
        async with self._db.connection() as conn, conn.transaction():
            cur = await conn.execute(self._db.q("db_clock"))
            row = await cur.fetchone()
            assert row is not None
            now = row[0]
            for schedule in self._jobs.schedules.values():
                await conn.execute(
                    self._db.q("upsert_schedule"),
                    {
                        "name": schedule.name,
                        "cron": schedule.cron.expression,
                        "kind": schedule.kind,
                        "queue": schedule.queue,
                        "args": schedule.args_json,
                        "priority": schedule.priority,
                        "max_attempts": schedule.max_attempts,
                        "next_run_at": schedule.cron.next_after(now),
                    },
                )

    async def _schedule_loop(self) -> None:
        assert self._db is not None
        names = sorted(self._jobs.schedules)
        while not self._closed:
            wait = 1.0
            try:
                async with self._db.connection() as conn:
                    async with conn.transaction():
                        await self._enqueue_due_ticks(conn, names)
                    cur = await conn.execute(self._db.q("next_schedule_at"), {"names": names})
                    row = await cur.fetchone()
                if row is not None and row[0] is not None:
                    wait = min(wait, max(row[0].total_seconds(), 0.0))
            except psycopg.Error as exc:
                log.warning("enqueueing periodic jobs failed: %s", exc)
            await self._loops_stop.wait_timeout(wait + 0.002)

    async def _enqueue_due_ticks(
        self, conn: psycopg.AsyncConnection[Any], names: list[str]
    ) -> None:
        """Enqueue each due tick once: the schedule row is locked (SKIP LOCKED, so other
        workers pass over it) and moved to its next tick in the same transaction as the job
        insert. Ticks missed while no worker ran are enqueued once, not once per tick."""
        assert self._db is not None
        cur = await conn.execute(self._db.q("due_schedules"), {"names": names})
        for (
            name,
            _cron,
            kind,
            queue,
            _args,
            priority,
            max_attempts,
            tick,
            now,
        ) in await cur.fetchall():
            schedule = self._jobs.schedules[name]
            await conn.execute(
                self._db.q("enqueue_unique_jobs"),
                {
                    "queues": [queue],
                    "kinds": [kind],
                    "args": [schedule.args_json],
                    "priorities": [priority],
                    "run_ats": [tick],
                    "delays": [None],
                    "max_attempts": [max_attempts],
                    "unique_keys": [f"cron:{name}:{tick.isoformat()}"],
                },
            )
            await conn.execute(
                self._db.q("advance_schedule"),
                {"name": name, "next_run_at": schedule.cron.next_after(now), "last_run_at": tick},
            )
            await conn.execute(
                self._db.q("notify_queues"), {"payloads": [notify_payload(self._db.schema, queue)]}
            )


def _format_error(exc: BaseException) -> str:
    """The exception with its traceback, starting at the job's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_NOT_THE_JOB):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).strip()
