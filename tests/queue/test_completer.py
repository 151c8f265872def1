"""The completer gathers outcomes into batches: a small batch waits a few milliseconds for more
while other held jobs may still finish, and nothing is ever left unwritten: every outcome
reaches a write, closing writes at once, and an idle worker's lone outcome is not held up."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from postroom.queue import completer as sync_completer
from postroom.queue import completer_async
from postroom.queue.completer import Completer
from postroom.queue.completer_async import AsyncCompleter
from postroom.queue.outcomes import Claimed, HeldJobs, Outcome


class FakeDatabase:
    """Records the ids of each completion statement instead of running it."""

    def __init__(self) -> None:
        self.writes: list[list[int]] = []

    def q(self, name: str) -> str:
        return name

    @contextmanager
    def connection(self) -> Iterator[FakeDatabase]:
        yield self

    def execute(self, query: str, params: dict[str, Any]) -> None:
        assert query == "complete_jobs_archived", query
        self.writes.append([int(i) for i in params["ids"].strip("{}").split(",")])


class AsyncFakeDatabase(FakeDatabase):
    def connection(self) -> Any:
        db = self

        class Context:
            async def __aenter__(self) -> AsyncFakeDatabase:
                return db

            async def __aexit__(self, *exc: object) -> None:
                return None

        return Context()

    async def execute(self, query: str, params: dict[str, Any]) -> None:  # type: ignore[override]
        FakeDatabase.execute(self, query, params)


class FakeFetcher:
    def room_freed(self) -> None:
        pass

    def wake(self) -> None:
        pass


class AsyncFakeFetcher:
    async def room_freed(self) -> None:
        pass

    async def wake(self) -> None:
        pass


def sync_unit(db: FakeDatabase, held: HeldJobs) -> Completer:
    """A sync completer archiving through ``db`` (no database)."""
    return Completer(
        db,  # type: ignore[arg-type]
        worker="w",
        keep_finished=60,
        held=held,
        fetcher=FakeFetcher(),  # type: ignore[arg-type]
        limited=False,
    )


def async_unit(db: AsyncFakeDatabase, held: HeldJobs) -> AsyncCompleter:
    """The async twin of ``sync_unit``."""
    return AsyncCompleter(
        db,  # type: ignore[arg-type]
        worker="w",
        keep_finished=60,
        held=held,
        fetcher=AsyncFakeFetcher(),  # type: ignore[arg-type]
        limited=False,
    )


def held_jobs(count: int) -> tuple[HeldJobs, list[Claimed]]:
    held = HeldJobs(10_000)
    jobs = [Claimed(n, "default", "k", "{}", 1, 25) for n in range(1, count + 1)]
    for job in jobs:
        held.add(job)
    return held, jobs


def test_outcomes_finishing_a_moment_apart_are_written_in_one_batch() -> None:
    db = FakeDatabase()
    held, jobs = held_jobs(10)
    unit = sync_unit(db, held)
    thread = threading.Thread(target=unit.run)
    thread.start()
    try:
        for job in jobs:
            unit.report(Outcome(job, "done"))
            time.sleep(0.0001)
        deadline = time.monotonic() + 10
        while unit.processed < 10 and time.monotonic() < deadline:
            time.sleep(0.001)
    finally:
        unit.close()
        thread.join(10)
    assert sorted(i for w in db.writes for i in w) == list(range(1, 11))  # each once
    assert len(db.writes) <= 3, db.writes  # not one write per outcome
    assert len(held) == 0


def test_a_lone_outcome_is_written_without_waiting_and_close_writes_what_is_pending() -> None:
    db = FakeDatabase()
    held, jobs = held_jobs(2)
    unit = sync_unit(db, held)
    thread = threading.Thread(target=unit.run)
    thread.start()
    try:
        held.discard(jobs[1])  # only jobs[0] is held: nothing else can finish
        started = time.monotonic()
        unit.report(Outcome(jobs[0], "done"))
        while unit.processed < 1 and time.monotonic() - started < 10:
            time.sleep(0.0005)
        assert db.writes == [[1]]
        held.add(jobs[1])
        held.add(Claimed(99, "default", "k", "{}", 1, 25))  # still running at close
        unit.report(Outcome(jobs[1], "done"))
        unit.close()  # ends the gathering wait: written now, not GATHER_SECONDS later
    finally:
        thread.join(10)
    assert not thread.is_alive()
    assert db.writes == [[1], [2]]


def test_gathering_is_a_few_milliseconds_at_most() -> None:
    for module in (sync_completer, completer_async):
        assert module.GATHER_SECONDS <= 0.005
        assert module.GATHER_JOBS >= 100


def test_the_async_completer_gathers_and_writes_every_outcome() -> None:
    async def main() -> None:
        db = AsyncFakeDatabase()
        held, jobs = held_jobs(300)
        unit = async_unit(db, held)
        task = asyncio.ensure_future(unit.run())
        for job in jobs:
            await unit.report(Outcome(job, "done"))
            if job.id % 10 == 0:
                await asyncio.sleep(0)  # the completer gets to run now and then
        await unit.close()  # writes what is pending, then run() returns
        await task
        assert sorted(i for w in db.writes for i in w) == list(range(1, 301))
        assert len(db.writes) <= 5, [len(w) for w in db.writes]
        assert len(held) == 0

    asyncio.run(main())
