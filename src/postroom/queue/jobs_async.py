"""Registering, enqueueing and administering jobs; the worker lives in ``worker(_async)``."""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import psycopg

from .._acompat import asleep
from .._db_async import AsyncDatabase, commit_or_unknown
from ..errors import (
    InvalidArgument,
    InvalidType,
    JobCancelled,
    JobFailed,
    JobNotFound,
)
from .admin_async import AsyncJobAdmin
from .cron import Schedule, parse_cron
from .hooks_async import AsyncHooks
from .options import ENQUEUE_OPTION_NAMES, EnqueueOptions
from .records import (
    JobDefinition,
    JobInfo,
    check_kind,
    check_seconds,
    make_definition,
    notify_payload,
)
from .requests import (
    PIPELINE_MAX_BYTES,
    JobOptions,
    JobRequest,
    args_size,
    batch_columns,
    describe_jobs,
    encode_args,
    job_options,
    split_options,
    statement_chunks,
)
from .serializer import Serializer, check_serializer

_KIND_AND_ARGS = frozenset({"kind", "args"})


class AsyncJobs(AsyncJobAdmin):
    """The queue operations on one postroom schema, and the jobs registered in this process."""

    def __init__(self, db: AsyncDatabase, serializer: Serializer | None = None) -> None:
        self.db = db
        self.serializer = check_serializer(serializer)
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
                    "register coroutine functions on postroom.AsyncClient"
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
        time_zone: str | None = None,
    ) -> None:
        parsed = parse_cron(cron, time_zone)
        definition = target.definition
        schedule_name = check_kind(name or definition.kind)
        if schedule_name in self.schedules:
            raise InvalidArgument(f"periodic job {schedule_name!r} is already registered")
        bound = definition.bind_args((), args or {})
        options = job_options(definition, {"queue": queue, "priority": priority})
        self.schedules[schedule_name] = Schedule(
            schedule_name,
            parsed,
            definition.kind,
            encode_args(definition.kind, bound, self.serializer),
            options.queue,
            options.priority,
            options.max_attempts,
        )

    # -- enqueueing -----------------------------------------------------------------------

    def request(
        self, kind: str, args: Mapping[str, Any] | None, options: EnqueueOptions
    ) -> JobRequest:
        """A checked request: ``args`` fit the registered function (if any), ``options`` are
        checked against its defaults."""
        definition = self.definitions.get(kind)
        if args is None:
            args = {}
        elif type(args) is not dict and not isinstance(args, Mapping):
            raise InvalidType(
                f"args of job {kind!r} must be a mapping of argument names to values, "
                f"got {type(args).__name__}"
            )
        if definition is not None and args:
            definition.bind_args((), args)
        if options and any(value is not None for value in options.values()):
            checked = job_options(definition, options)
            check_kind(kind)
        else:
            # Batches repeat a few kinds with default options: check those once per kind.
            cached = self._default_options.get(kind)
            if cached is None:
                check_kind(kind)
                cached = self._default_options[kind] = job_options(definition, {})
            checked = cached
        return JobRequest(kind, encode_args(kind, args, self.serializer), checked)

    def prepare(
        self, definition: JobDefinition, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> JobRequest:
        """``func.prepare(*args, **kwargs)``: the job's arguments and enqueue options mixed."""
        job_kwargs, options = split_options(kwargs)
        bound = definition.bind_args(args, job_kwargs)
        return JobRequest(
            definition.kind,
            encode_args(definition.kind, bound, self.serializer),
            job_options(definition, options),
        )

    def request_from(self, item: object) -> JobRequest:
        """A batch item: a ``JobRequest`` (``func.prepare(...)``, from any client) or a mapping
        with ``kind``, ``args`` and any enqueue options."""
        if type(item) is dict and item.keys() <= _KIND_AND_ARGS and "kind" in item:
            # The usual item (kind and args, the kind's default options), checked with less.
            return self.request(item["kind"], item.get("args"), {})
        if isinstance(item, JobRequest):
            return item
        if isinstance(item, Mapping) and "kind" in item:
            fields = dict(item)
            kind = fields.pop("kind")
            args = fields.pop("args", None)
            extra = set(fields) - ENQUEUE_OPTION_NAMES
            if extra:
                raise InvalidArgument(
                    f"unknown job fields {sorted(extra)}: use kind, args, "
                    f"{', '.join(sorted(ENQUEUE_OPTION_NAMES))}"
                )
            return self.request(kind, args, fields)  # type: ignore[arg-type]
        raise InvalidType(
            f"invalid batch item {item!r}: pass func.prepare(...) or a dict with kind and args"
        )

    def requests_from(self, items: Iterable[object]) -> list[JobRequest]:
        """Every batch item checked (``request_from``), before anything is written; bad input
        raises naming the item's position in the batch."""
        return list(self._checked(items))

    def _checked(self, items: Iterable[object]) -> Iterator[JobRequest]:
        position = 0
        request_from = self.request_from
        try:
            for item in items:
                yield request_from(item)
                position += 1
        except (InvalidArgument, InvalidType) as exc:  # InvalidName is an InvalidArgument
            raise type(exc)(f"batch item {position}: {exc}") from None

    async def enqueue_items(self, items: Iterable[object], conn: object = None) -> list[AsyncJob]:
        """``enqueue_batch``: the items checked, then stored in one transaction.

        A list or tuple in a transaction of its own (no ``conn``, no enqueue middleware) is
        sent chunk by chunk as soon as each chunk is checked, so the server inserts one chunk
        while this side checks the next; a bad item later in the batch raises and rolls back
        what was sent. Otherwise every item is checked before anything is sent: the caller's
        transaction stays usable, and a slow iterator holds no transaction open."""
        if conn is not None or self.hooks.enqueue or not isinstance(items, list | tuple):
            return await self.enqueue(self.requests_from(items), conn)
        return await self._enqueue(self._checked(items))

    async def enqueue(self, requests: list[JobRequest], conn: object = None) -> list[AsyncJob]:
        """Insert the jobs in one transaction (the caller's with ``conn``), in order."""
        if self.hooks.enqueue:  # middleware registered on the client (hooks_async)
            return await self.hooks.around_enqueue(self._enqueue, requests, conn)
        return await self._enqueue(requests, conn)

    async def _enqueue(self, requests: Iterable[JobRequest], conn: object = None) -> list[AsyncJob]:
        if isinstance(requests, list) and not requests:
            return []
        queues: set[str] = set()
        sent: list[tuple[list[JobRequest], psycopg.AsyncCursor[Any]]] = []

        def committing() -> str:
            return describe_jobs([r for chunk, _ in sent for r in chunk])

        async with self.db.connection(conn, committing=committing) as db_conn:
            try:
                chunks = statement_chunks(requests)
                chunk = next(chunks, None)
                finished = False
                while chunk is not None:
                    if args_size(chunk) > PIPELINE_MAX_BYTES:
                        # Alone and outside a pipeline: psycopg's pipeline mode can wait
                        # forever for the results of a statement of many megabytes it has
                        # not finished sending (the server waits for the rest of it).
                        sent.append((chunk, await self._send(db_conn, chunk, queues)))
                        chunk = next(chunks, None)
                        continue
                    # A pipeline of statements of PIPELINE_MAX_BYTES at most: each is sent
                    # without waiting for the one before, so the server inserts a chunk while
                    # this side prepares the next.
                    async with db_conn.pipeline():
                        budget = PIPELINE_MAX_BYTES
                        while chunk is not None and args_size(chunk) <= budget:
                            budget -= args_size(chunk)
                            sent.append((chunk, await self._send(db_conn, chunk, queues)))
                            chunk = next(chunks, None)
                        if chunk is None:
                            finished = await self._finish(
                                db_conn, queues, conn is None, sent, committing
                            )
                if not sent:
                    return []
                if not finished:
                    await self._finish(db_conn, queues, conn is None, sent, committing)
                stored = [await self._stored(db_conn, chunk, cur) for chunk, cur in sent]
            except psycopg.errors.InvalidParameterValue as exc:
                # A check of the SQL function (e.g. a parent job that does not exist).
                raise InvalidArgument(exc.diag.message_primary or str(exc)) from None
        jobs: list[AsyncJob] = []
        for ids, created in stored:
            if created is None:
                jobs += [AsyncJob(self, job_id) for job_id in ids]
            else:
                pairs = zip(ids, created, strict=True)
                jobs += [AsyncJob(self, job_id, new) for job_id, new in pairs]
        return jobs

    async def _finish(
        self,
        conn: psycopg.AsyncConnection[Any],
        queues: set[str],
        own: bool,
        sent: list[Any],
        committing: Callable[[], str],
    ) -> bool:
        """The wake-up hint for idle workers (delivered at commit), and the commit when the
        transaction is ours and no taken key is left to look up once the rows are in (in a
        pipeline it goes out with the inserts: one round trip in all)."""
        await conn.execute(
            self.db.q("notify_queues"),
            {"payloads": [notify_payload(self.db.schema, q) for q in sorted(queues)]},
        )
        if own and not any(r.options.unique_key is not None for c, _ in sent for r in c):
            await commit_or_unknown(conn, committing)
        return True

    async def enqueue_group(
        self, requests: list[JobRequest], then: JobRequest | None, conn: object
    ) -> tuple[list[AsyncJob], AsyncJob | None]:
        """The group's jobs, then ``then`` depending on all of them, in one transaction."""
        async with self.db.connection(conn) as db_conn:
            members = await self.enqueue(requests, db_conn)
            if then is None:
                return members, None
            parents = tuple(sorted({*then.options.after, *(job.id for job in members)}))
            callback = JobRequest(
                then.kind, then.args_json, dataclasses.replace(then.options, after=parents)
            )
            return members, (await self.enqueue([callback], db_conn))[0]

    async def _send(
        self, conn: psycopg.AsyncConnection[Any], chunk: list[JobRequest], queues: set[str]
    ) -> psycopg.AsyncCursor[Any]:
        """Send the insert of one chunk (in pipeline mode: its rows are read by ``_stored``),
        adding its queues to ``queues``."""
        queues.update([r.options.queue for r in chunk])
        if chunk[0].options.is_workflow:
            (request,) = chunk
            options = request.options
            return await conn.execute(
                self.db.q("enqueue_workflow_job"),
                {
                    "kind": request.kind,
                    "args": request.args_json,
                    "queue": options.queue,
                    "priority": options.priority,
                    "run_at": options.run_at,
                    "delay": options.delay,
                    "max_attempts": options.max_attempts,
                    "unique_key": options.unique_key,
                    "after": list(options.after),
                    "sequence": options.sequence,
                    "on_parent_failure": options.on_parent_failure,
                },
            )
        params = batch_columns(chunk)
        if "unique_keys" in params:
            return await conn.execute(self.db.q("enqueue_unique_jobs"), params, binary=True)
        return await conn.execute(self.db.q("enqueue_jobs"), params, binary=True)

    async def _stored(
        self,
        conn: psycopg.AsyncConnection[Any],
        chunk: list[JobRequest],
        cur: psycopg.AsyncCursor[Any],
    ) -> tuple[list[int], list[bool] | None]:
        """The ids of a sent chunk's jobs, in order, and whether each is new (None: all are);
        a job whose unique key was taken gets the holder's id."""
        row = await cur.fetchone()
        assert row is not None
        if chunk[0].options.is_workflow:
            return [row[0]], [row[1]]
        ids: list[int] = row[0] or []
        if len(ids) == len(chunk):
            return ids, None
        # Some unique keys were taken. Ids come back in input order and only keyed jobs can
        # be skipped, so walk both lists; then look up the holders of the skipped keys.
        out: list[int | str] = []
        returned = zip(ids, row[1] or [], strict=True)
        pending = next(returned, None)
        for request in chunk:
            key = request.options.unique_key
            if pending is not None and (key is None or pending[1] == key):
                out.append(pending[0])
                pending = next(returned, None)
            else:
                assert key is not None
                out.append(key)
        missing = sorted({k for k in out if isinstance(k, str)})
        cur = await conn.execute(self.db.q("jobs_by_unique_key"), {"unique_keys": missing})
        holders = dict(await cur.fetchall())
        resolved: list[int] = []
        created: list[bool] = []
        for item in out:
            if isinstance(item, str):
                if item not in holders:
                    # The holder finished between the insert and the lookup: insert again.
                    again = [r for r in chunk if r.options.unique_key == item][:1]
                    again_ids, again_created = await self._stored(
                        conn, again, await self._send(conn, again, set())
                    )
                    resolved.append(again_ids[0])
                    created.append(again_created is None or again_created[0])
                    continue
                resolved.append(holders[item])
                created.append(False)
            else:
                resolved.append(item)
                created.append(True)
        return resolved, created

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
                return self.serializer.decode(result)
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

    def prepare(self, *args: Any, **kwargs: Any) -> JobRequest:
        """A checked job for ``client.enqueue_batch`` (of any client, sync or async): the
        same arguments as ``enqueue``."""
        return self._jobs.prepare(self.definition, args, kwargs)

    async def enqueue(self, *args: Any, conn: object = None, **kwargs: Any) -> AsyncJob:
        """Store one job; a worker runs it after the transaction commits.

        ``args`` and ``kwargs`` are the function's arguments, plus the enqueue options
        (:class:`postroom.EnqueueOptions`: ``queue``, ``priority``, ``run_at``, ``delay``,
        ``max_attempts``, ``unique_key``, ``after``, ``sequence``, ``on_parent_failure``),
        which override the registration. With ``conn`` (your psycopg connection, or a
        SQLAlchemy/Django one wrapping it) the job is inserted in your transaction: it runs
        only if you commit. With ``unique_key``, if a ready or running job holds the key,
        nothing is inserted and that job is returned (``job.created`` is False). With
        ``after=[job_a, job_b]`` it runs only once both succeeded.
        """
        request = self._jobs.prepare(self.definition, args, kwargs)
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
