# Generated from src/postroom/queue/jobs_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The queue engine: ``AsyncJobs`` composes the job registry (sans-IO, shared by both
flavours), the enqueuer and the admin over one database handle, and builds workers. The client
holds one (``client.jobs``) and delegates its job methods to it. See docs/queue.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Unpack, cast

from .._db import Database
from .admin import Job, JobAdmin
from .backoff import Backoff
from .cron import parse_cron
from .enqueue import Enqueuer, JobFunction
from .hooks import Hooks
from .options import EnqueueOptions
from .records import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, JobInfo, JobStats
from .registry import JobRegistry
from .serializer import Serializer
from .worker import Worker


class Jobs:
    """Jobs on one postroom schema: register with ``@client.job``, enqueue in your
    transaction, run with ``client.worker()``. Built by the client over its database handle
    (``client.jobs``); each part is its own object: ``registry`` (sans-IO), ``enqueuer``,
    ``admin``, ``hooks``."""

    def __init__(self, db: Database, serializer: Serializer | None = None) -> None:
        self.db = db
        self.registry = JobRegistry(serializer)
        self.hooks = Hooks()
        self.admin = JobAdmin(db, self.registry.serializer)
        self.enqueuer = Enqueuer(db, self.registry, self.hooks, self.admin)

    def job(
        self,
        kind: str | Callable[..., Any] | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: float | timedelta | None = None,
        backoff: Backoff | None = None,
        max_concurrency: int | None = None,
        rate_limit: float | None = None,
        retry_on: type[BaseException] | Iterable[type[BaseException]] | None = None,
        no_retry_on: type[BaseException] | Iterable[type[BaseException]] | None = None,
    ) -> Callable[[Callable[..., Any]], JobFunction]:
        """Register a job kind (default: the function's name) and its defaults.

            @client.job("send_receipt", queue="email", max_attempts=8, timeout=30)
            def send_receipt(order_id: int) -> None: ...  # or async def, with AsyncClient

            send_receipt.enqueue(order_id=42, conn=conn)  # await it with AsyncClient

        ``timeout`` (seconds) interrupts a run that takes longer; it counts as a failed
        attempt. ``backoff`` spaces the retries. ``max_concurrency`` and ``rate_limit`` (jobs
        started per second) hold across all workers. Coroutine functions run on the worker's
        event loop, plain functions in the worker's threads. ``retry_on`` retries only those
        exceptions (others fail the job at once); ``no_retry_on`` never retries those. A
        keyword-only parameter ``job: JobContext`` gets the job's context.
        """
        options = {
            "queue": queue,
            "priority": priority,
            "max_attempts": max_attempts,
            "timeout": timeout,
            "backoff": backoff,
            "max_concurrency": max_concurrency,
            "rate_limit": rate_limit,
            "retry_on": retry_on,
            "no_retry_on": no_retry_on,
        }

        def decorate(func: Callable[..., Any]) -> JobFunction:
            name = kind if isinstance(kind, str) else None
            definition = self.registry.define(name, func, allow_coroutines=False, **options)
            return JobFunction(self.enqueuer, definition)

        if callable(kind):  # bare @client.job
            return cast(Callable[[Callable[..., Any]], JobFunction], decorate(kind))
        return decorate

    def around_job(self, middleware: Callable[..., Any]) -> Callable[..., Any]:
        """Register execution middleware ``middleware(job: JobContext, call_next)``, called
        around every job this client's workers run (plain middleware around plain-function
        jobs, ``async def`` middleware around ``async def`` jobs); see ``postroom.queue.hooks``.
        Register before starting workers. Returns ``middleware`` (usable as a decorator)."""
        self.hooks.add_execution(middleware)
        return middleware

    def around_enqueue(self, middleware: Callable[..., Any]) -> Callable[..., Any]:
        """Register enqueue middleware ``middleware(requests, call_next)``, called around
        every enqueue of this client (an ``async def`` on AsyncClient); ``call_next()``
        inserts the jobs and returns their handles. Returns ``middleware``."""
        self.hooks.add_enqueue(middleware)
        return middleware

    def periodic(
        self,
        cron: str,
        *,
        name: str | None = None,
        args: Mapping[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        time_zone: str | None = None,
    ) -> Callable[[Any], JobFunction]:
        """Enqueue a job at every tick of ``cron`` (5 fields, or 6 with leading seconds), once
        per tick however many workers run. Put it above ``@client.job`` or use it alone. The
        fields are read in UTC, or in ``time_zone`` (an IANA name; a leading
        ``CRON_TZ=Europe/Paris`` in ``cron`` does the same), daylight-saving changes included.

            @client.periodic("*/5 * * * *")
            @client.job("refresh_rates")
            def refresh_rates() -> None: ...

            @client.periodic("0 9 * * 1-5", time_zone="America/New_York")  # 9 am in New York
            @client.job("morning_report")
            def morning_report() -> None: ...
        """
        parse_cron(cron, time_zone)  # fail at import time, not in the worker

        def decorate(target: Any) -> JobFunction:
            registered = target if isinstance(target, JobFunction) else self.job()(target)
            self.registry.add_schedule(
                cron,
                registered.definition,
                name=name,
                args=args,
                queue=queue,
                priority=priority,
                time_zone=time_zone,
            )
            return registered

        return decorate

    def enqueue(
        self,
        kind: str,
        args: Mapping[str, Any] | None = None,
        *,
        conn: object = None,
        **options: Unpack[EnqueueOptions],
    ) -> Job:
        """Enqueue a job by kind name (registered here or not: a worker elsewhere may run it);
        the options are :class:`postroom.EnqueueOptions`, as for ``JobFunction.enqueue``."""
        request = self.registry.request(kind, args, options)
        return (self.enqueuer.enqueue([request], conn))[0]

    def enqueue_batch(self, jobs: Iterable[Any], *, conn: object = None) -> list[Job]:
        """Enqueue many jobs in one transaction (the caller's with ``conn``), thousands per
        statement. Items are ``func.prepare(**args, **options)`` (from this client or its sync
        or async twin) or dicts with ``kind``, ``args`` and enqueue options. A bad item raises
        naming its position, and no job of the batch is stored (a list without ``conn`` is sent
        in chunks as it is checked, in a transaction that then rolls back)."""
        return self.enqueuer.enqueue_items(jobs, conn)

    def enqueue_group(
        self, jobs: Iterable[Any], *, then: Any = None, conn: object = None
    ) -> tuple[list[Job], Job | None]:
        """Enqueue a group of jobs and, with ``then``, a callback job that runs once every
        member succeeded (Celery's chord), in one transaction. Items are as in
        ``enqueue_batch``; returns the members and the callback.

            members, merge = client.enqueue_group(  # awaited with AsyncClient
                [fetch.prepare(url=u) for u in urls], then=merge_pages.prepare(), conn=conn
            )
        """
        requests = self.registry.requests_from(jobs)
        callback = None if then is None else self.registry.request_from(then)
        return self.enqueuer.enqueue_group(requests, callback, conn)

    def pause_queue(self, queue: str) -> bool:
        """Stop every worker claiming from ``queue`` (within a claim interval; jobs already
        running finish). Returns False if it was paused already. Paused queues survive
        restarts and show in ``job_stats()``; ``resume_queue`` undoes it."""
        return self.admin.pause(queue)

    def resume_queue(self, queue: str) -> bool:
        """Let workers claim from ``queue`` again (they are woken at once); False if it was
        not paused."""
        return self.admin.resume(queue)

    def worker(
        self,
        /,
        queues: Iterable[str] | None = None,
        *,
        concurrency: int = 10,
        **options: Any,
    ) -> Worker:
        """A worker for ``queues`` (default: the queues of the registered jobs); see
        ``Worker``/``AsyncWorker`` for the options. ``worker.run()`` (awaited with
        ``AsyncClient``) runs it."""
        return Worker(
            self.db,
            self.registry,
            self.hooks,
            None if queues is None else list(queues),
            concurrency=concurrency,
            **options,
        )

    def get_job(self, job_id: int) -> JobInfo:
        """One job, live or finished; raises :class:`JobNotFound`."""
        return self.admin.get(job_id)

    def job_handle(self, job_id: int) -> Job:
        """A handle on job ``job_id`` (to wait for its result, inspect or cancel it)."""
        return Job(self.admin, job_id)

    def list_jobs(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[JobInfo]:
        """Jobs, newest first; ``state="failed"`` lists the dead letters."""
        return self.admin.list_jobs(state, kind, queue, limit)

    def retry_job(self, job_id: int) -> None:
        """Redrive one failed job: ready now, with a fresh set of attempts."""
        self.admin.retry(job_id)

    def retry_failed_jobs(self, *, kind: str | None = None, queue: str | None = None) -> int:
        """Redrive every failed job (of a kind/queue); returns how many."""
        return self.admin.retry_failed(kind, queue)

    def cancel_job(self, job_id: int) -> str:
        """Cancel a job; returns the state it had. A ready or failed job is cancelled at once;
        a running one is interrupted by its worker (its handler sees ``JobInterrupted``)."""
        return self.admin.cancel(job_id)

    def purge_jobs(
        self, state: str, older_than: float | timedelta, *, kind: str | None = None
    ) -> int:
        """Delete done, cancelled or failed jobs older than ``older_than`` (seconds or
        timedelta), in batches; returns how many."""
        return self.admin.purge(state, older_than, kind)

    def job_stats(self) -> JobStats:
        """Jobs per queue and state, the oldest due ready job's age, jobs done per second."""
        return self.admin.stats()

    def set_job_limit(
        self,
        kind: str,
        *,
        max_concurrency: int | None = None,
        rate_limit: float | None = None,
        burst: float | None = None,
    ) -> None:
        """Limit a job kind across all workers: at most ``max_concurrency`` running, at most
        ``rate_limit`` started per second (bursts up to ``burst``, default one second's worth).
        Both None removes the limit."""
        self.admin.set_limit("kind", kind, max_concurrency, rate_limit, burst)

    def set_queue_limit(
        self,
        queue: str,
        *,
        max_concurrency: int | None = None,
        rate_limit: float | None = None,
        burst: float | None = None,
    ) -> None:
        """Limit a queue across all workers, as ``set_job_limit`` does a kind."""
        self.admin.set_limit("queue", queue, max_concurrency, rate_limit, burst)


__all__ = ["Job", "JobFunction", "Jobs"]
