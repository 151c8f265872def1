"""The worker: claim a batch, commit, then run; write outcomes back in batches.

A worker is the composition of small units (tasks here, threads in the sync twin), each the one
owner of its state, all on the worker's own small pool:

- ``concurrency`` slots run jobs, taking the next claimed job from the fetcher's buffer; the
  runner (``runner_async``) calls the job's function and turns how it ended into an outcome.
- the fetcher (``fetcher_async``) claims batches for idle slots (``claim_jobs``: one statement,
  FOR UPDATE SKIP LOCKED) and commits before any job starts: no transaction is open while a
  job runs.
- the listener (``listener_async``, subscribed to the client's one LISTEN connection) wakes
  the fetcher when jobs arrive; without it, or when a notification is lost, the fetcher polls
  every ``poll_interval`` seconds.
- the completer (``completer_async``) writes finished jobs back, batching whatever finished
  while its last write ran.
- the heartbeat (``heartbeat_async``) extends the leases of the jobs the worker holds and
  learns about cancellations; the rescuer (``rescuer_async``) returns jobs whose lease expired,
  the purger deletes old finished jobs, the kind watch warns about jobs nobody registers; the
  vacuum (``vacuum_async``) keeps the queue tables lean. Each periodic unit is an
  ``AsyncPeriodic`` (``_periodic_async``: one interval, jitter and error policy); the worker
  starts no log maintenance (group members run the log's retention).
- the scheduler (``scheduler_async``) enqueues the ticks of registered periodic jobs.
- the roster (``roster_async``) keeps the worker's row in the worker registry: registered at
  start, kept alive by the heartbeat, pruned by the rescuers once gone, removed at a clean stop.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

from .._acompat import (
    AEvent,
    JobThreads,
    agather,
    ajoin_all,
    asleep,
    aspawn,
    install_stop_handler,
)
from .._checks import check_int, check_interval, check_seconds
from .._db_async import AsyncDatabase, AsyncReconnectingPool, check_pooled
from .._periodic_async import AsyncPeriodic
from ..errors import (
    InvalidArgument,
    JobInterrupted,
    PermissionDenied,
    SchemaNotReady,
    WorkerAlreadyRun,
    WorkerCrashed,
)
from . import joblog
from .admin_async import AsyncJobAdmin
from .completer_async import AsyncCompleter
from .fetcher_async import AUTO_PREFETCH_MAX, AsyncFetcher, AsyncFloorWatch
from .heartbeat_async import AsyncHeartbeat
from .hooks_async import AsyncHooks
from .listener_async import AsyncListener
from .outcomes import Claimed, HeldJobs, Outcome
from .records import check_queues
from .registry import JobRegistry
from .rescuer_async import AsyncKindWatch, AsyncPurger, AsyncRescuer
from .roster_async import AsyncRoster
from .runner_async import AsyncRunner
from .scheduler_async import AsyncScheduler
from .vacuum_async import AsyncVacuum

log = logging.getLogger("postroom.worker")

SLOT_TURN = 64
"""An async slot lets the other tasks run at least once every this many jobs."""
STOP_POLL = 0.05
"""Seconds between the main loop's looks for a ``stop()`` (which only counts: it is called
from signal handlers and other threads); a burst's drain wakes it at once."""


class AsyncWorker:
    """Runs the registered jobs of ``queues`` until stopped.

        worker = client.worker(queues=["email"], concurrency=8)
        worker.run()       # until SIGTERM/SIGINT or worker.stop(); awaited when async

    ``run()`` stops on SIGTERM or SIGINT (when called in the main thread): it stops claiming,
    gives back claimed jobs that have not started, lets running jobs finish for up to
    ``shutdown_grace`` seconds, then interrupts the rest and releases them. A second signal
    skips the grace period.

    Parameters: ``concurrency`` jobs run at once; ``prefetch`` more are claimed ahead (faster
    for many short jobs; they hold a lease meanwhile). The default, ``None``, sizes it as the
    worker runs: as many jobs as the slots run in about 50 ms (at most 1,000), so short jobs
    run from big claims and long ones are not held back from other workers. A claimed job
    holds a lease of ``lease`` seconds, extended every ``heartbeat`` seconds (default
    lease/3); any worker returns jobs whose lease expired every ``rescue_interval`` seconds.
    ``listen=False`` polls only (for PgBouncer in transaction mode; also turns off prepared
    statements).
    ``keep_finished`` is how long done and cancelled jobs (and their results) are kept in
    ``finished_jobs``; 0 deletes them at completion, which is fastest but leaves nothing for
    ``job.result()``. Every ``vacuum_interval`` seconds a worker vacuums the queue tables if
    their dead rows piled up (None: leave it to autovacuum). A job that takes its
    ``JobContext`` is asked to stop on a cancellation or timeout and interrupted only if it is
    still running ``cancel_grace`` seconds later. The worker warns (logger
    ``postroom.worker``) about jobs of a kind it does not register that waited longer than
    ``warn_unregistered_after`` seconds (None: never).
    """

    def __init__(
        self,
        db: AsyncDatabase,
        registry: JobRegistry,
        hooks: AsyncHooks,
        queues: list[str] | None = None,
        *,
        concurrency: int = 10,
        prefetch: int | None = None,
        lease: float | timedelta = 30.0,
        heartbeat: float | timedelta | None = None,
        rescue_interval: float | timedelta | None = None,
        poll_interval: float | timedelta = 1.0,
        listen: bool = True,
        shutdown_grace: float | timedelta = 30.0,
        keep_finished: float | timedelta = timedelta(days=1),
        vacuum_interval: float | timedelta | None = 5.0,
        cancel_grace: float | timedelta = 10.0,
        warn_unregistered_after: float | timedelta | None = 300.0,
        name: str | None = None,
    ) -> None:
        self._client_db = db  # its conninfo and schema: the worker queries on a pool of its own
        self._registry = registry
        self._hooks = hooks
        if queues is None:
            registered = registry.queues()
            if not registered:
                raise InvalidArgument(
                    "this worker has nothing to run: register jobs with @client.job first, "
                    "or pass queues=[...]"
                )
            queues = sorted(registered)
        self.queues = check_queues(queues)
        check_int("concurrency", concurrency, 1)
        if prefetch is not None:
            check_int("prefetch", prefetch, 0, hint="or None: sized as the worker runs")
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
        self._vacuum_interval = check_interval("vacuum_interval", vacuum_interval)
        self._cancel_grace = check_seconds("cancel_grace", cancel_grace)
        self._warn_after = (
            None
            if warn_unregistered_after is None
            else check_seconds("warn_unregistered_after", warn_unregistered_after)
        )
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._limited = registry.limited()
        ahead = AUTO_PREFETCH_MAX if prefetch is None else prefetch
        # A claim in flight, the buffer and a write-back in flight can each hold about this many.
        self._held = HeldJobs(3 * (concurrency + ahead))
        self._stopping = AEvent()
        self._drained_event = AEvent()  # set by a burst's drain: the main loop stops at once
        self._fetcher: AsyncFetcher | None = None
        self._completer: AsyncCompleter | None = None
        self._heartbeat_unit: AsyncHeartbeat | None = None
        self._threads: JobThreads | None = None
        self._stop_requests = 0
        self._started = False
        self._crash: WorkerCrashed | SchemaNotReady | None = None
        self._runner: AsyncRunner | None = None

    @property
    def processed(self) -> int:
        """Jobs whose outcome this worker has written (any outcome)."""
        return 0 if self._completer is None else self._completer.processed

    # -- life cycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask ``run()`` to shut down gracefully; a second call skips the grace period.
        Safe to call from a signal handler or another thread."""
        self._stop_requests += 1

    def _drained(self) -> None:
        """A burst's queues are drained (the fetcher's call, on the worker's own loop or
        thread): stop now, not at the main loop's next look."""
        self.stop()
        self._drained_event.set()

    async def run(self, *, burst: bool = False, handle_signals: bool = True) -> None:
        """Run jobs until ``stop()``, SIGTERM or SIGINT; with ``burst``, also stop once no
        job is due (the queues are drained)."""
        if self._started:
            raise WorkerAlreadyRun("a worker runs once; create a new one with client.worker()")
        self._started = True
        pool = self._pool()
        await pool.open(wait=True)
        client_db = self._client_db
        db = AsyncDatabase(
            pool, client_db.conninfo, client_db.schema, client_db.options, client_db.wakeups
        )
        # Every query of the worker runs on its own pool, its purges and limits included.
        admin = AsyncJobAdmin(db, self._registry.serializer)
        restore = install_stop_handler(self.stop) if handle_signals else None
        self._threads = JobThreads(self.concurrency)
        self._runner = AsyncRunner(
            self._registry, self._hooks, worker=self.name, threads=self._threads, stop=self.stop
        )
        fetcher = self._fetcher = AsyncFetcher(
            db,
            worker=self.name,
            queues=self.queues,
            lease=self._lease,
            concurrency=self.concurrency,
            prefetch=self._prefetch,
            poll_interval=self._poll_interval,
            held=self._held,
            on_drained=self._drained if burst else None,
        )
        completer = self._completer = AsyncCompleter(
            db,
            worker=self.name,
            keep_finished=self._keep_finished,
            held=self._held,
            fetcher=fetcher,
            limited=self._limited,
        )
        roster = AsyncRoster(
            db,
            worker=self.name,
            queues=self.queues,
            concurrency=self.concurrency,
            ttl=self._lease,
            interval=self._heartbeat,
        )
        heartbeat = self._heartbeat_unit = AsyncHeartbeat(
            db,
            worker=self.name,
            lease=self._lease,
            interval=self._heartbeat,
            cancel_grace=self._cancel_grace,
            held=self._held,
            stopping=self._stopping,
            roster=roster,
        )
        units: list[tuple[str, Any]] = [
            ("completer", completer),
            ("heartbeat", heartbeat),
            *self._maintenance(db, admin, fetcher, roster),
        ]
        scheduler = None
        if self._registry.schedules:
            scheduler = AsyncScheduler(db, self._registry, stopping=self._stopping)
            units.append(("scheduler", scheduler))
        if self._listen:
            listener = AsyncListener(
                db,
                queues=self.queues,
                fetcher=fetcher,
                heartbeat=heartbeat,
                stopping=self._stopping,
            )
            units.append(("listener", listener))
        background = []
        try:
            await self._register_limits(admin)
            await self._warn_unused_queues(db)
            await roster.join()
            if scheduler is not None:
                await scheduler.register()
            background = [
                aspawn(self._supervised, what, unit.run, name=f"postroom-{what}")
                for what, unit in units
            ]
            fetch_task = aspawn(self._supervised, "fetcher", fetcher.run, name="postroom-fetcher")
            slots = [
                aspawn(self._supervised, "slot", self._slot_loop, name=f"postroom-slot-{i}")
                for i in range(self.concurrency)
            ]
            while not self._stop_requests:
                await self._drained_event.wait_timeout(STOP_POLL)
            await self._shutdown(slots)
            await agather(fetch_task, 30)
        finally:
            await fetcher.stop()  # slots end at their next wake-up
            self._stopping.set()
            heartbeat.beat_now()
            await completer.close()
            for task in background:
                await agather(task, 10)
            await roster.leave()
            if restore is not None:
                restore()
            self._threads.close()
            await pool.close()
        if self._crash is not None:
            raise self._crash
        if self._runner is not None and self._runner.exit is not None:
            raise self._runner.exit

    def _maintenance(
        self, db: AsyncDatabase, admin: AsyncJobAdmin, fetcher: AsyncFetcher, roster: AsyncRoster
    ) -> list[tuple[str, AsyncPeriodic]]:
        """The worker's periodic maintenance units, each on the worker's pool (``db``)."""
        stopping = self._stopping
        interval = self._rescue_interval
        units: list[AsyncPeriodic] = [
            AsyncRescuer(db, interval=interval, fetcher=fetcher, stopping=stopping, roster=roster),
            AsyncFloorWatch(db, queues=self.queues, fetcher=fetcher, stopping=stopping),
        ]
        if self._keep_finished > 0:  # 0: finished jobs are deleted at completion
            units.append(
                AsyncPurger(db, admin, keep_finished=self._keep_finished, stopping=stopping)
            )
        if self._warn_after is not None:
            units.append(
                AsyncKindWatch(db, self._registry, warn_after=self._warn_after, stopping=stopping)
            )
        if self._vacuum_interval is not None:
            units.append(AsyncVacuum(db, interval=self._vacuum_interval, stopping=stopping))
        return [(unit.name, unit) for unit in units]

    async def _supervised(self, what: str, loop: Callable[[], Any]) -> None:
        """Run one of the worker's loops; if it fails, log it and stop the worker, which
        then raises :class:`WorkerCrashed` from ``run()``: no loop dies silently while the
        process stays up (a supervisor restarts a process that exits with an error)."""
        try:
            await loop()
        except SchemaNotReady as exc:
            # Not a crash: nothing can run until `postroom init`. run() raises it as it is, so
            # the CLI prints its one line, and no loop's traceback is logged.
            if self._crash is None:
                self._crash = exc
            self.stop()
        except Exception as exc:  # reported, then turned into WorkerCrashed
            log.critical(
                "worker %s: its %s loop failed and cannot go on; stopping the worker",
                self.name,
                what,
                exc_info=True,
            )
            if self._crash is None:
                self._crash = WorkerCrashed(
                    f"worker {self.name}: its {what} loop failed: {type(exc).__name__}: {exc}"
                )
                self._crash.__cause__ = exc
            self.stop()

    def _pool(self) -> AsyncReconnectingPool:
        # Autocommit: a claim, heartbeat or rescue is one statement and one round trip;
        # multi-statement writes open a transaction explicitly.
        kwargs: dict[str, Any] = {"autocommit": True}
        if not self._listen:
            kwargs["prepare_threshold"] = None
        session = self._client_db.q("worker_session")

        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            if self._listen:  # not behind PgBouncer in transaction mode, where SET leaks
                await conn.execute(session)

        return AsyncReconnectingPool(
            self._client_db.conninfo,
            min_size=1,
            max_size=5,
            kwargs=kwargs,
            configure=configure,
            # After an outage the idle connections are dead: replaced before a claim meets one.
            check=check_pooled,
            open=False,
            name=f"postroom-worker-{self.name}",
        )

    async def _register_limits(self, admin: AsyncJobAdmin) -> None:
        """Store the registered concurrency and rate limits."""
        for definition in self._registry.definitions.values():
            if definition.max_concurrency is not None or definition.rate_limit is not None:
                try:
                    await admin.set_limit(
                        "kind",
                        definition.kind,
                        definition.max_concurrency,
                        definition.rate_limit,
                        None,
                    )
                except PermissionDenied as exc:
                    # A kind limit spans every queue: a role scoped to some queues may not
                    # change one (docs/roles.md). The worker runs on without it.
                    log.warning("the limit of job kind %r is not set: %s", definition.kind, exc)

    async def _warn_unused_queues(self, db: AsyncDatabase) -> None:
        """Warn about a queue with no registered kind that never had a job (a typo?)."""
        served = self._registry.queues()
        unserved = [q for q in self.queues if q not in served]
        if not unserved:
            return
        async with db.connection() as conn:
            cur = await conn.execute(db.q("queues_ever_used"), {"queues": unserved})
            used = {row[0] for row in await cur.fetchall()}
        for queue in unserved:
            if queue not in used:
                log.warning(
                    "queue %r: no job kind registered in this worker uses it and no job was "
                    "ever enqueued to it; a typo? (registered queues: %s)",
                    queue,
                    ", ".join(sorted(served)) or "none",
                )

    async def _shutdown(self, slots: list[Any]) -> None:
        assert self._fetcher is not None and self._completer is not None
        for job in await self._fetcher.stop():
            await self._completer.report(Outcome(job, "release"))
        grace = 0.0 if self._stop_requests > 1 else self._grace
        if not await ajoin_all(slots, grace):
            for job in self._held.snapshot():
                if job.call is not None and not job.reported:
                    job.interrupt_kind = "shutdown"
                    if job.context is not None:
                        job.context.request_stop("the worker shut down")
                    job.call.interrupt(JobInterrupted("the worker shut down"))
            if not await ajoin_all(slots, 2.0):
                stuck = [j for j in self._held.snapshot() if j.started and not j.reported]
                log.warning("releasing %d jobs that did not stop in time", len(stuck))
                for job in stuck:
                    await self._completer.report(Outcome(job, "release"))
        await self._completer.close()

    # -- running jobs -----------------------------------------------------------------------

    async def _drop_expired(self, job: Claimed) -> None:
        """A buffered job whose lease ran out before a slot took it (the worker was paused, or
        starved): another worker may run it already, so it is not started here. Its release is
        written back fenced by worker and attempt: it changes nothing if the job was taken,
        and makes it ready at once (attempt given back) if not."""
        assert self._completer is not None
        log.warning(
            "job %s (attempt %s): its lease ran out before it started; not running it",
            job.id,
            job.attempt,
        )
        await self._completer.report(Outcome(job, "release"))

    async def _slot_loop(self) -> None:
        assert self._fetcher is not None and self._completer is not None
        assert self._runner is not None
        execute = self._runner.execute
        fetcher = self._fetcher
        clock = time.monotonic
        if True:  # ASYNC
            ran_jobs = 0
        while True:
            if True:  # ASYNC
                # Taking a buffered job, running a job that does not wait and reporting it
                # never suspend this task: let the other tasks (the fetcher woken at low
                # water, the completer, the heartbeat) run every SLOT_TURN jobs.
                ran_jobs += 1
                if ran_jobs % SLOT_TURN == 0:
                    await asleep(0)
            job = await fetcher.next_job()
            if job is None:
                return
            if clock() >= job.lease_deadline:
                await self._drop_expired(job)
                continue
            logged = joblog.enabled()
            if logged:
                joblog.started(job)
            started = clock()
            outcome = await execute(job)
            ran = clock() - started
            fetcher.job_ran(ran)
            await self._completer.report(outcome)
            if logged:
                joblog.finished(outcome, ran)
