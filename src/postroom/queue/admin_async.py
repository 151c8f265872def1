"""Inspecting and administering jobs: get, list, retry, cancel, purge, stats, limits, pausing
queues and waiting for results, over one database handle (the client's, or a worker's own:
a worker's purges and limits run on its pool); ``AsyncJob`` is a handle on one job. The SQL
is in ``_sql/queue.sql``."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from typing import Any

from .._acompat import asleep
from .._checks import check_seconds
from .._db_async import AsyncDatabase
from ..errors import InvalidArgument, JobCancelled, JobFailed, JobNotFound, UniqueKeyTaken
from .records import (
    JobInfo,
    JobStats,
    QueueCount,
    check_job_id,
    check_kind,
    check_limits,
    check_purge_state,
    check_queue,
    check_row_limit,
    check_state,
)
from .serializer import Serializer, check_serializer


class AsyncJobAdmin:
    """The job administration of one postroom schema, over ``db``; ``serializer`` decodes
    results."""

    def __init__(self, db: AsyncDatabase, serializer: Serializer | None = None) -> None:
        self.db = db
        self.serializer = check_serializer(serializer)

    async def get(self, job_id: int) -> JobInfo:
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("get_job"), {"id": check_job_id(job_id)})
            row = await cur.fetchone()
            if row is None:
                raise JobNotFound(f"job {job_id} not found (never enqueued, not kept, or purged)")
            cur = await conn.execute(self.db.q("job_parents"), {"id": job_id})
            parents = tuple(parent for (parent,) in await cur.fetchall())
        return dataclasses.replace(JobInfo(*row), waiting_for=parents)

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
            "limit": check_row_limit(limit),
        }
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("list_jobs"), params)
            return [JobInfo(*row) for row in await cur.fetchall()]

    async def retry(self, job_id: int) -> None:
        check_job_id(job_id)
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
            cur = await conn.execute(self.db.q("cancel_job"), {"id": check_job_id(job_id)})
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
        check_purge_state(state)
        seconds = check_seconds("older_than", older_than)
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("db_clock"))
            row = await cur.fetchone()
        assert row is not None
        params = {
            "cutoff": row[0] - timedelta(seconds=seconds),
            "state": state,
            "kind": None if kind is None else check_kind(kind),
            "batch": check_row_limit(batch),
        }
        query = self.db.q("purge_failed" if state == "failed" else "purge_finished")
        total = 0
        while True:
            async with self.db.connection() as conn:
                cur = await conn.execute(query, params)
                row = await cur.fetchone()
            purged = int(row[0]) if row else 0
            total += purged
            if purged < batch:
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
            cur = await conn.execute(self.db.q("paused_queues"))
            paused = tuple(q for q, _ in await cur.fetchall())
        return JobStats(counts, done, paused)

    async def pause(self, queue: str) -> bool:
        """Pause ``queue``; False if it was paused already (see ``Client.pause_queue``)."""
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("pause_queue"), {"queue": check_queue(queue)})
            row = await cur.fetchone()
        return bool(row and row[0])

    async def resume(self, queue: str) -> bool:
        """Resume ``queue``; False if it was not paused."""
        async with self.db.connection() as conn:
            cur = await conn.execute(self.db.q("resume_queue"), {"queue": check_queue(queue)})
            row = await cur.fetchone()
        return bool(row and row[0])

    async def set_limit(
        self,
        scope: str,
        name: str,
        max_concurrency: int | None,
        rate_limit: float | None,
        burst: float | None,
    ) -> None:
        check_kind(name) if scope == "kind" else check_queue(name)
        max_concurrency, rate_limit, burst = check_limits(max_concurrency, rate_limit, burst)
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


class AsyncJob:
    """A handle on an enqueued job: wait for its result, inspect or cancel it."""

    def __init__(self, admin: AsyncJobAdmin, job_id: int, created: bool = True) -> None:
        self._admin = admin
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
        return await self._admin.outcome(self.id, timeout)

    async def info(self) -> JobInfo:
        return await self._admin.get(self.id)

    async def cancel(self) -> str:
        """Cancel the job; returns the state it had (see ``Client.cancel_job``)."""
        return await self._admin.cancel(self.id)
