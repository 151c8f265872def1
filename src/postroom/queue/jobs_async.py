"""Registering, enqueueing and administering jobs; the worker lives in ``worker(_async)``."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from .._acompat import asleep
from .._db_async import AsyncDatabase
from ..errors import (
    InvalidArgument,
    InvalidType,
    JobCancelled,
    JobFailed,
    JobNotFound,
    UniqueKeyTaken,
)
from .cron import Cron, parse_cron
from .hooks_async import AsyncHooks
from .records import (
    Enqueued,
    JobDefinition,
    JobInfo,
    JobOptions,
    JobStats,
    QueueCount,
    check_kind,
    check_queue,
    check_seconds,
    check_state,
    encode_args,
    job_options,
    make_definition,
    notify_payload,
)

ENQUEUE_CHUNK = 5000
"""Jobs per INSERT statement in ``enqueue_batch``."""


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One job to enqueue, checked and encoded (see ``enqueue_batch``)."""

    kind: str
    args_json: str
    options: JobOptions


@dataclass(frozen=True, slots=True)
class Schedule:
    """A periodic job: enqueue ``kind`` with ``args`` at every tick of ``cron``."""

    name: str
    cron: Cron
    kind: str
    args_json: str
    queue: str
    priority: int
    max_attempts: int


class AsyncJobs:
    """The queue operations on one postroom schema, and the jobs registered in this process."""

    def __init__(self, db: AsyncDatabase) -> None:
        self.db = db
        self.definitions: dict[str, JobDefinition] = {}
        self.schedules: dict[str, Schedule] = {}
        self._default_options: dict[str, JobOptions] = {}
        self.hooks = AsyncHooks()

    # -- registration ---------------------------------------------------------------------

    def register(self, definition: JobDefinition) -> AsyncJobFunction:
        if definition.kind in self.definitions:
            raise InvalidArgument(f"job kind {definition.kind!r} is already registered")
        self.definitions[definition.kind] = definition
        self._default_options.pop(definition.kind, None)
        return AsyncJobFunction(self, definition)

    def job_decorator(
        self,
        kind: str | Callable[..., Any] | None,
        *,
        allow_coroutines: bool,
        **options: Any,
    ) -> Any:
        def decorate(func: Callable[..., Any]) -> AsyncJobFunction:
            is_coroutine = inspect.iscoroutinefunction(func)
            if is_coroutine and not allow_coroutines:
                raise InvalidType(
                    f"job {kind or func.__name__!r}: {func.__name__} is a coroutine function; "
                    # (split so the sync generator leaves the class name alone)
                    "register coroutine functions on postroom.Async"
                    "Client"
                )
            name = kind if isinstance(kind, str) else func.__name__
            return self.register(make_definition(name, func, is_coroutine=is_coroutine, **options))

        if callable(kind):  # bare @client.job
            func, kind = kind, None
            return decorate(func)
        return decorate

    def add_schedule(
        self,
        cron: str,
        target: AsyncJobFunction,
        *,
        name: str | None,
        args: Mapping[str, Any] | None,
        queue: str | None,
        priority: int | None,
    ) -> None:
        parsed = parse_cron(cron)
        definition = target.definition
        schedule_name = check_kind(name or definition.kind)
        if schedule_name in self.schedules:
            raise InvalidArgument(f"periodic job {schedule_name!r} is already registered")
        bound = definition.bind_args((), args or {})
        options = job_options(definition, queue=queue, priority=priority)
        self.schedules[schedule_name] = Schedule(
            schedule_name,
            parsed,
            definition.kind,
            encode_args(definition.kind, bound),
            options.queue,
            options.priority,
            options.max_attempts,
        )

    # -- enqueueing -----------------------------------------------------------------------

    def request(self, kind: str, args: Mapping[str, Any] | None, **options: Any) -> JobRequest:
        definition = self.definitions.get(kind)
        if definition is not None and args:
            definition.bind_args((), args)
        if any(value is not None for value in options.values()):
            checked = job_options(definition, **options)
            check_kind(kind)
        else:
            # Batches repeat a few kinds with default options: check those once per kind.
            cached = self._default_options.get(kind)
            if cached is None:
                check_kind(kind)
                cached = self._default_options[kind] = job_options(definition)
            checked = cached
        return JobRequest(kind, encode_args(kind, {} if args is None else args), checked)

    def request_from(self, item: object) -> JobRequest:
        """A batch item: a ``JobRequest`` (``func.prepare(...)``) or a mapping with ``kind``,
        ``args`` and any enqueue options."""
        if isinstance(item, JobRequest):
            return item
        if isinstance(item, Mapping) and "kind" in item:
            fields = dict(item)
            extra = set(fields) - {
                "kind",
                "args",
                "queue",
                "priority",
                "run_at",
                "delay",
                "max_attempts",
                "unique_key",
            }
            if extra:
                raise InvalidArgument(
                    f"unknown job fields {sorted(extra)}: use kind, args, queue, priority, "
                    "run_at, delay, max_attempts, unique_key"
                )
            kind = fields.pop("kind")
            args = fields.pop("args", None)
            return self.request(kind, args, **fields)
        raise InvalidType(
            f"invalid batch item {item!r}: pass func.prepare(...) or a dict with kind and args"
        )

    async def enqueue(self, requests: list[JobRequest], conn: object = None) -> list[AsyncJob]:
        """Insert the jobs in one transaction (the caller's with ``conn``)."""
        if self.hooks.enqueue:  # middleware registered on the client (hooks_async)
            return await self.hooks.around_enqueue(self._enqueue, requests, conn)
        return await self._enqueue(requests, conn)

    async def _enqueue(self, requests: list[JobRequest], conn: object = None) -> list[AsyncJob]:
        if not requests:
            return []
        results: list[Enqueued] = []
        queues = sorted({r.options.queue for r in requests})
        async with self.db.connection(conn) as db_conn:
            # The wake-up goes out with the first insert in one round trip (pipeline); it is
            # delivered at commit either way.
            async with db_conn.pipeline():
                await db_conn.execute(
                    self.db.q("notify_queues"),
                    {"payloads": [notify_payload(self.db.schema, q) for q in queues]},
                )
                for start in range(0, len(requests), ENQUEUE_CHUNK):
                    chunk = requests[start : start + ENQUEUE_CHUNK]
                    results.extend(await self._insert(db_conn, chunk))
        return [AsyncJob(self, e.id, e.created) for e in results]

    async def _insert(
        self, conn: psycopg.AsyncConnection[Any], chunk: list[JobRequest]
    ) -> list[Enqueued]:
        params = {
            "queues": [r.options.queue for r in chunk],
            "kinds": [r.kind for r in chunk],
            "args": [r.args_json for r in chunk],
            "priorities": [r.options.priority for r in chunk],
            "run_ats": [r.options.run_at for r in chunk],
            "delays": [r.options.delay for r in chunk],
            "max_attempts": [r.options.max_attempts for r in chunk],
        }
        keys = [r.options.unique_key for r in chunk]
        if any(key is not None for key in keys):
            params["unique_keys"] = keys
            cur = await conn.execute(self.db.q("enqueue_unique_jobs"), params)
        else:
            cur = await conn.execute(self.db.q("enqueue_jobs"), params)
        inserted = await cur.fetchall()
        if len(inserted) == len(chunk):
            return [Enqueued(job_id, True) for job_id, _ in inserted]
        # Some unique keys were taken. Rows come back in input order and only keyed rows can
        # be skipped, so walk both lists; then look up the holders of the skipped keys.
        out: list[Enqueued | str] = []
        returned = iter(inserted)
        pending = next(returned, None)
        for request in chunk:
            key = request.options.unique_key
            if pending is not None and (key is None or pending[1] == key):
                out.append(Enqueued(pending[0], True))
                pending = next(returned, None)
            else:
                assert key is not None
                out.append(key)
        missing = sorted({k for k in out if isinstance(k, str)})
        cur = await conn.execute(self.db.q("jobs_by_unique_key"), {"unique_keys": missing})
        holders = dict(await cur.fetchall())
        resolved = []
        for item in out:
            if isinstance(item, str):
                if item not in holders:
                    # The holder finished between the insert and the lookup: insert again.
                    again = [r for r in chunk if r.options.unique_key == item][:1]
                    resolved.extend(await self._insert(conn, again))
                    continue
                resolved.append(Enqueued(holders[item], False))
            else:
                resolved.append(item)
        return resolved

    # -- inspection and administration ------------------------------------------------------

    async def get(self, job_id: int) -> JobInfo:
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("get_job"), {"id": _check_id(job_id)})
            row = await cur.fetchone()
        if row is None:
            raise JobNotFound(f"job {job_id} not found (never enqueued, not kept, or purged)")
        return JobInfo(*row)

    async def list_jobs(
        self,
        state: str | None = None,
        kind: str | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[JobInfo]:
        params = {
            "state": None if state is None else check_state(state),
            "kind": None if kind is None else check_kind(kind),
            "queue": None if queue is None else check_queue(queue),
            "limit": _check_limit(limit),
        }
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("list_jobs"), params)
            return [JobInfo(*row) for row in await cur.fetchall()]

    async def retry(self, job_id: int) -> None:
        _check_id(job_id)
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("job_state"), {"id": job_id})
            row = await cur.fetchone()
            if row is None:
                raise JobNotFound(f"job {job_id} is not a live job (finished, purged or unknown)")
            state, key_taken = row
            if state != "failed":
                raise InvalidArgument(f"job {job_id} is {state}: only failed jobs are retried")
            if key_taken:
                raise UniqueKeyTaken(
                    f"job {job_id} stays failed: another ready or running job holds its unique key"
                )
            await conn.execute(
                self.db.q("retry_failed_jobs"), {"id": job_id, "kind": None, "queue": None}
            )

    async def retry_failed(self, kind: str | None = None, queue: str | None = None) -> int:
        params = {
            "id": None,
            "kind": None if kind is None else check_kind(kind),
            "queue": None if queue is None else check_queue(queue),
        }
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("retry_failed_jobs"), params)
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def cancel(self, job_id: int) -> str:
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("cancel_job"), {"id": _check_id(job_id)})
            row = await cur.fetchone()
        if row is None or row[0] is None:
            raise JobNotFound(f"job {job_id} is not a live job: it finished, or never existed")
        return str(row[0])

    async def purge(
        self,
        state: str,
        older_than: float | timedelta,
        kind: str | None = None,
        batch: int = 10000,
    ) -> int:
        """Delete finished (done/cancelled) or failed jobs older than ``older_than``, in
        batches of ``batch`` rows, each its own transaction (short locks, bounded WAL)."""
        if state not in ("done", "cancelled", "failed"):
            raise InvalidArgument(
                f"invalid state {state!r} to purge: done, cancelled or failed (live jobs are "
                "cancelled, not purged)"
            )
        seconds = check_seconds("older_than", older_than)
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("db_clock"))
            row = await cur.fetchone()
        assert row is not None
        params = {
            "cutoff": row[0] - timedelta(seconds=seconds),
            "state": state,
            "kind": None if kind is None else check_kind(kind),
            "batch": _check_limit(batch),
        }
        query = self.db.q("purge_failed" if state == "failed" else "purge_finished")
        total = 0
        while True:
            async with self.db.connection() as conn:
                cur = await conn.execute(query, params)
                total += cur.rowcount
            if cur.rowcount < batch:
                return total

    async def stats(self, window: float = 60.0) -> JobStats:
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("job_counts"))
            counts = tuple(
                QueueCount(q, s, n, None if age is None else float(age))
                for q, s, n, age in await cur.fetchall()
            )
            cur = await conn.execute(self.db.q("job_throughput"), {"seconds": window})
            done = {q: n / window for q, n in await cur.fetchall()}
        return JobStats(counts, done)

    async def set_limit(
        self,
        scope: str,
        name: str,
        max_concurrency: int | None,
        rate_limit: float | None,
        burst: float | None,
    ) -> None:
        check_kind(name) if scope == "kind" else check_queue(name)
        if max_concurrency is not None and (
            not isinstance(max_concurrency, int)
            or isinstance(max_concurrency, bool)
            or max_concurrency < 1
        ):
            raise InvalidArgument(f"invalid max_concurrency {max_concurrency!r}: an integer >= 1")
        if rate_limit is not None:
            rate_limit = check_seconds("rate_limit", rate_limit, allow_zero=False)
        if burst is not None:
            burst = check_seconds("burst", burst)
            if burst < 1:
                raise InvalidArgument(f"invalid burst {burst!r}: at least 1 job")
        elif rate_limit is not None:
            burst = max(1.0, rate_limit)
        async with self.db.connection() as conn:
            if max_concurrency is None and rate_limit is None:
                await conn.execute(self.db.q("delete_limit"), {"scope": scope, "name": name})
                return
            await conn.execute(
                self.db.q("set_limit"),
                {
                    "scope": scope,
                    "name": name,
                    "max_running": max_concurrency,
                    "rate": rate_limit,
                    "burst": burst,
                },
            )

    async def limits(self) -> list[tuple[str, str, int | None, float | None, float | None]]:
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("list_limits"))
            return [tuple(row) for row in await cur.fetchall()]

    async def outcome(self, job_id: int, timeout: float | None) -> Any:
        """Wait for the job to finish and return its result (see ``Job.result``)."""
        deadline = None if timeout is None else time.monotonic() + check_seconds("timeout", timeout)
        pause = 0.005
        while True:
            async with self.db.connection() as conn:
                cur = await conn.execute(self.db.q("job_outcome"), {"id": job_id})
                row = await cur.fetchone()
            if row is None:
                raise JobNotFound(
                    f"job {job_id} not found: never enqueued, purged, or finished with "
                    "keep_finished=0 (results are kept only while finished jobs are)"
                )
            state, result, last_error = row
            if state == "done":
                return result
            if state == "failed":
                raise JobFailed(f"job {job_id} failed: {last_error}", job_id, last_error)
            if state == "cancelled":
                raise JobCancelled(f"job {job_id} was cancelled")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {state} after {timeout} s")
            wait = pause if deadline is None else min(pause, max(0.0, deadline - time.monotonic()))
            await asleep(wait)
            pause = min(pause * 2, 0.25)


class AsyncJobFunction:
    """A registered job: call it to run the function here, ``enqueue()`` it to run it on a
    worker.

        @client.job("send_receipt", queue="email", max_attempts=8, timeout=30)
        def send_receipt(order_id: int) -> None: ...  # or async def, with AsyncClient

        send_receipt.enqueue(order_id=42, conn=conn)  # in the caller's transaction; awaited
    """

    def __init__(self, jobs: AsyncJobs, definition: JobDefinition) -> None:
        self._jobs = jobs
        self.definition = definition
        self.__name__ = getattr(definition.func, "__name__", definition.kind)
        self.__doc__ = definition.func.__doc__

    @property
    def kind(self) -> str:
        return self.definition.kind

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.definition.func(*args, **kwargs)

    def prepare(
        self,
        *args: Any,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        **kwargs: Any,
    ) -> JobRequest:
        """A checked job for ``client.enqueue_batch``: same arguments as ``enqueue``."""
        bound = self.definition.bind_args(args, kwargs)
        return JobRequest(
            self.definition.kind,
            encode_args(self.definition.kind, bound),
            job_options(
                self.definition,
                queue=queue,
                priority=priority,
                run_at=run_at,
                delay=delay,
                max_attempts=max_attempts,
                unique_key=unique_key,
            ),
        )

    async def enqueue(
        self,
        *args: Any,
        conn: object = None,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        **kwargs: Any,
    ) -> AsyncJob:
        """Store one job; a worker runs it after the transaction commits.

        With ``conn`` (your psycopg connection, or a SQLAlchemy/Django one wrapping it) the job
        is inserted in your transaction: it runs only if you commit. ``run_at`` (aware
        datetime) or ``delay`` (seconds or timedelta) schedule it later; ``priority`` (lower
        first), ``queue`` and ``max_attempts`` override the registration. With ``unique_key``,
        if a ready or running job holds the key, nothing is inserted and that job is returned
        (``job.created`` is False).
        """
        request = self.prepare(
            *args,
            run_at=run_at,
            delay=delay,
            priority=priority,
            unique_key=unique_key,
            queue=queue,
            max_attempts=max_attempts,
            **kwargs,
        )
        return (await self._jobs.enqueue([request], conn))[0]


class AsyncJob:
    """A handle on an enqueued job: wait for its result, inspect or cancel it."""

    def __init__(self, jobs: AsyncJobs, job_id: int, created: bool = True) -> None:
        self._jobs = jobs
        self.id = job_id
        self.created = created
        """False when enqueue found a ready or running job holding the unique key."""

    def __repr__(self) -> str:
        return f"<Job {self.id}{'' if self.created else ' (existing)'}>"

    async def result(self, timeout: float | None = None) -> Any:
        """The job's return value (JSON-decoded) once it is done.

        Waits up to ``timeout`` seconds (forever if None), then raises ``TimeoutError``.
        Raises :class:`JobFailed` if it ended failed, :class:`JobCancelled` if cancelled, and
        :class:`JobNotFound` if its finished row was not kept (``keep_finished``)."""
        return await self._jobs.outcome(self.id, timeout)

    async def info(self) -> JobInfo:
        return await self._jobs.get(self.id)

    async def cancel(self) -> str:
        """Cancel the job; returns the state it had (see ``Client.cancel_job``)."""
        return await self._jobs.cancel(self.id)


def _check_id(job_id: object) -> int:
    if not isinstance(job_id, int) or isinstance(job_id, bool) or job_id < 1:
        raise InvalidArgument(f"invalid job id {job_id!r}: a positive integer")
    return job_id


def _check_limit(limit: object) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1_000_000:
        raise InvalidArgument(f"invalid limit {limit!r}: an integer from 1 to 1000000")
    return limit
