"""Enqueueing jobs: the checked requests of the registry written in one transaction (the
caller's, with ``conn``), thousands per statement, with the wake-up hint for idle workers.
``AsyncJobFunction`` is a registered kind's handle (``send_receipt.enqueue(...)``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Any

import psycopg

from .. import _tracing
from .._db_async import AsyncDatabase, commit_or_unknown
from .._listener_async import send_wakeups
from .._wakeups import JOBS
from ..errors import InvalidArgument
from .admin_async import AsyncJob, AsyncJobAdmin
from .hooks_async import AsyncHooks
from .records import JobDefinition
from .registry import JobRegistry
from .requests import (
    PIPELINE_MAX_BYTES,
    JobRequest,
    args_size,
    batch_columns,
    describe_jobs,
    peek,
    statement_chunks,
)


class AsyncEnqueuer:
    """Writes the jobs of ``registry``'s requests over ``db``; ``hooks`` holds the enqueue
    middleware, ``admin`` backs the returned handles."""

    def __init__(
        self, db: AsyncDatabase, registry: JobRegistry, hooks: AsyncHooks, admin: AsyncJobAdmin
    ) -> None:
        self.db = db
        self.registry = registry
        self._hooks = hooks
        self._admin = admin

    async def enqueue_items(self, items: Iterable[object], conn: object = None) -> list[AsyncJob]:
        """``enqueue_batch``: the items checked, then stored in one transaction.

        A list or tuple in a transaction of its own (no ``conn``, no enqueue middleware) is
        sent chunk by chunk as soon as each chunk is checked, so the server inserts one chunk
        while this side checks the next; a bad item later in the batch raises and rolls back
        what was sent. Otherwise every item is checked before anything is sent: the caller's
        transaction stays usable, and a slow iterator holds no transaction open."""
        if conn is not None or self._hooks.enqueue or not isinstance(items, list | tuple):
            return await self.enqueue(self.registry.requests_from(items), conn)
        return await self._enqueue(self.registry.checked(items))

    async def enqueue(self, requests: list[JobRequest], conn: object = None) -> list[AsyncJob]:
        """Insert the jobs in one transaction (the caller's with ``conn``), in order."""
        if self._hooks.enqueue:  # middleware registered on the client (hooks_async)
            return await self._hooks.around_enqueue(self._enqueue, requests, conn)
        return await self._enqueue(requests, conn)

    async def _enqueue(self, requests: Iterable[JobRequest], conn: object = None) -> list[AsyncJob]:
        if _tracing.ENABLED:
            requests, first = peek(requests)
            span = None if first is None else _tracing.start_send(first.options.queue)
            if span is not None:
                with _tracing.ending(span):
                    jobs = await self._write(requests, conn, span)
                    _tracing.enqueued(span, first, jobs)
                    return jobs
        return await self._write(requests, conn)

    async def _write(
        self, requests: Iterable[JobRequest], conn: object = None, span: Any = None
    ) -> list[AsyncJob]:
        """Insert the jobs; ``span``: the enqueue's span, whose trace context they carry."""
        if isinstance(requests, list) and not requests:
            return []
        queues: set[str] = set()
        sent: list[tuple[list[JobRequest], psycopg.AsyncCursor[Any]]] = []

        def committing() -> str:
            return describe_jobs([r for chunk, _ in sent for r in chunk])

        async with self.db.connection(conn, committing=committing) as db_conn:
            try:
                if span is not None:
                    # The metadata of the jobs inserted next: the trace context (the jobs.meta
                    # column's default, migration 0035); _finish clears it.
                    meta = json.dumps(_tracing.trace_context(span))
                    await db_conn.execute(self.db.q("set_job_meta"), {"meta": meta})
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
                                db_conn, queues, conn is None, sent, committing, span
                            )
                if not sent:
                    return []
                if not finished:
                    await self._finish(db_conn, queues, conn is None, sent, committing, span)
                stored = [await self._stored(db_conn, chunk, cur) for chunk, cur in sent]
            except psycopg.errors.InvalidParameterValue as exc:
                # A check of the SQL function (e.g. a parent job that does not exist).
                raise InvalidArgument(exc.diag.message_primary or str(exc)) from None
        return self._handles(stored)

    def _handles(self, stored: list[tuple[list[int], list[bool] | None]]) -> list[AsyncJob]:
        """The handles of the jobs ``_stored`` read back, in order."""
        jobs: list[AsyncJob] = []
        for ids, created in stored:
            if created is None:
                jobs += [AsyncJob(self._admin, job_id) for job_id in ids]
            else:
                pairs = zip(ids, created, strict=True)
                jobs += [AsyncJob(self._admin, job_id, new) for job_id, new in pairs]
        return jobs

    async def _finish(
        self,
        conn: psycopg.AsyncConnection[Any],
        queues: set[str],
        own: bool,
        sent: list[Any],
        committing: Callable[[], str],
        span: Any = None,
    ) -> bool:
        """The wake-up hint for idle workers (delivered at commit), and the commit when the
        transaction is ours and no taken key is left to look up once the rows are in (in a
        pipeline it goes out with the inserts: one round trip in all). A traced enqueue
        clears the metadata ``_write`` set first: the rest of a caller's transaction
        enqueues without it."""
        if span is not None:
            await conn.execute(self.db.q("set_job_meta"), {"meta": ""})
        await send_wakeups(conn, self.db, JOBS, queues)
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


class AsyncJobFunction:
    """A registered job: call it to run the function here, ``enqueue()`` it to run it on a
    worker.

        @client.job("send_receipt", queue="email", max_attempts=8, timeout=30)
        def send_receipt(order_id: int) -> None: ...  # or async def, with AsyncClient

        send_receipt.enqueue(order_id=42, conn=conn)  # in the caller's transaction; awaited
    """

    def __init__(self, enqueuer: AsyncEnqueuer, definition: JobDefinition) -> None:
        self._enqueuer = enqueuer
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
        return self._enqueuer.registry.prepare(self.definition, args, kwargs)

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
        request = self._enqueuer.registry.prepare(self.definition, args, kwargs)
        return (await self._enqueuer.enqueue([request], conn))[0]
