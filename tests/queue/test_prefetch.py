"""The automatic prefetch (``prefetch=None``, the default): a worker claims ahead as many jobs
as its slots run in about 50 ms, measured as it runs; none before its first jobs ran and none
for long jobs, so a worker of long jobs holds no more leases than it has slots."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import postroom
from postroom.errors import InvalidArgument
from postroom.queue.claiming import low_water
from postroom.queue.fetcher import AUTO_PREFETCH_MAX, Fetcher
from postroom.queue.outcomes import Claimed, HeldJobs


def fetcher(prefetch: int | None, concurrency: int = 10) -> Fetcher:
    db: Any = None  # the sizing does no I/O
    return Fetcher(
        db,
        worker="w",
        queues=["default"],
        lease=30.0,
        concurrency=concurrency,
        prefetch=prefetch,
        poll_interval=1.0,
        held=HeldJobs(100),
    )


def settle(unit: Fetcher, seconds: float) -> None:
    for _ in range(50):
        unit.job_ran(seconds)


def test_auto_prefetch_starts_at_zero() -> None:
    assert fetcher(None)._auto_prefetch() == 0


def test_auto_prefetch_is_capped_for_tiny_jobs() -> None:
    unit = fetcher(None)
    settle(unit, 0.00001)
    assert unit._auto_prefetch() == AUTO_PREFETCH_MAX


def test_auto_prefetch_follows_the_run_time() -> None:
    unit = fetcher(None, concurrency=10)
    settle(unit, 0.010)  # 10 slots x 50 ms / 10 ms
    assert unit._auto_prefetch() == pytest.approx(50, abs=1)
    settle(unit, 1.0)  # long jobs: nothing claimed ahead
    assert unit._auto_prefetch() == 0


def test_one_slow_job_among_tiny_ones_keeps_the_prefetch() -> None:
    """A no-op job whose thread waited for the interpreter lock takes milliseconds once in a
    while: such a spike must not cut the prefetch (the next claim then came only once the
    buffer ran dry), while jobs that really got slower still bring it down."""
    unit = fetcher(None)
    settle(unit, 0.00001)
    unit.job_ran(0.006)
    assert unit._auto_prefetch() == AUTO_PREFETCH_MAX
    for _ in range(60):
        unit.job_ran(0.4)
    assert unit._auto_prefetch() == 1  # 10 slots x 50 ms / 0.4 s


def test_the_next_claim_begins_at_three_quarters_of_the_prefetch() -> None:
    assert [low_water(p) for p in (0, 1, 2, 4, 10, 1000)] == [0, 0, 1, 3, 7, 750]


def test_explicit_prefetch_is_kept() -> None:
    unit = fetcher(7)
    settle(unit, 0.00001)
    assert unit._prefetch == 7
    assert unit._auto == False  # noqa: E712


def test_prefetch_none_is_the_default_and_a_negative_one_is_refused(
    any_client: postroom.Client,
) -> None:
    @any_client.job("noop")
    def noop() -> None:
        pass

    assert any_client.worker()._prefetch is None
    with pytest.raises(InvalidArgument, match="prefetch"):
        any_client.worker(prefetch=-1)


def test_async_default_worker_runs_a_backlog_in_order_and_writes_every_outcome(dsn: str) -> None:
    """The async worker's lock-free paths (a slot takes a job above the buffer's low-water
    mark, an outcome is queued while the completer writes) lose and repeat nothing."""

    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            seen: list[int] = []

            @client.job("collect")
            async def collect(n: int) -> None:
                seen.append(n)

            await client.enqueue_batch(collect.prepare(n=n) for n in range(2_000))
            worker = client.worker(concurrency=1)
            await worker.run(burst=True, handle_signals=False)
            assert seen == list(range(2_000))  # one slot: claim order, each job once
            assert worker.processed == 2_000
            stats = await client.job_stats()
            assert [(c.state, c.count) for c in stats.counts] == [("done", 2_000)]

    asyncio.run(main())


class ScriptedFetcher(Fetcher):
    """Claims without a database: each claim takes ``latency`` seconds and returns what it was
    asked for; records the buffer's length when each claim began."""

    def __init__(self, prefetch: int, latency: float) -> None:
        super().__init__(
            None,  # type: ignore[arg-type]
            worker="w",
            queues=["default"],
            lease=30.0,
            concurrency=1,
            prefetch=prefetch,
            poll_interval=1.0,
            held=HeldJobs(1_000_000),
        )
        self.latency = latency
        self.buffered_at_claim: list[int] = []
        self.next_id = 1

    def _claim(self, want: int) -> list[Claimed]:
        self.buffered_at_claim.append(len(self._buffer))
        time.sleep(self.latency)
        jobs = [
            Claimed(i, "default", "k", "{}", 1, 25)
            for i in range(self.next_id, self.next_id + want)
        ]
        self.next_id += want
        return jobs


def test_the_next_claim_begins_early_enough_to_return_before_the_buffer_runs_dry() -> None:
    """Slots that empty the buffer faster than a claim returns get the next claim at once,
    above the low-water mark (they would otherwise wait for every claim in turn)."""
    unit = ScriptedFetcher(prefetch=100, latency=0.02)
    thread = threading.Thread(target=unit.run)
    thread.start()
    taken: list[int] = []
    try:
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            job = unit.next_job()
            assert job is not None
            taken.append(job.id)
            time.sleep(0.0001)  # ~10,000 jobs/s: 100 jobs go in ~10 ms, a claim takes 20
    finally:
        unit.stop()
        thread.join(10)
    assert len(taken) == len(set(taken))
    assert max(unit.buffered_at_claim) > low_water(100), unit.buffered_at_claim
