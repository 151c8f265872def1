"""Lazy slot wake-ups: short jobs run back to back on one slot while the others stay parked,
and parked slots are woken as soon as jobs are not short (or stall in the buffer), so slow
jobs still run on every slot at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import postroom
from postroom.queue.fetcher import SHORT_JOB, STALL_SECONDS, Fetcher
from postroom.queue.outcomes import Claimed, HeldJobs

from ..signals import wait_for
from .helpers import running

SLEEP = 0.5


class ScriptedFetcher(Fetcher):
    """Claims without a database: each claim returns what it was asked for."""

    def __init__(self, concurrency: int) -> None:
        super().__init__(
            None,  # type: ignore[arg-type]
            worker="w",
            queues=["default"],
            lease=30.0,
            concurrency=concurrency,
            prefetch=0,
            poll_interval=1.0,
            held=HeldJobs(1_000_000),
        )
        self.next_id = 1

    def _claim(self, want: int) -> list[Claimed]:
        jobs = [
            Claimed(i, "default", "k", "{}", 1, 25)
            for i in range(self.next_id, self.next_id + want)
        ]
        self.next_id += want
        return jobs


class Notifications:
    def __init__(self) -> None:
        self.counts: list[int] = []

    def __call__(self, n: int = 1) -> None:
        self.counts.append(n)


def test_a_claim_of_short_jobs_wakes_one_slot_and_of_others_one_per_job() -> None:
    unit = ScriptedFetcher(concurrency=10)
    recorded = Notifications()
    unit._cond.notify = recorded  # type: ignore[method-assign]
    unit._parked = 10
    unit._buffer.extend(unit._claim(6))
    unit._wake_slots()  # no job ran yet: unknown counts as long
    for _ in range(50):
        unit.job_ran(SHORT_JOB / 10)
    unit._wake_slots()
    for _ in range(50):
        unit.job_ran(SHORT_JOB * 10)
    unit._wake_slots()
    assert recorded.counts == [6, 1, 6]


def test_a_long_job_after_short_ones_does_not_hold_back_the_parked_slots() -> None:
    """The one slot running short jobs meets a long one: the fetch loop sees no job taken for
    STALL_SECONDS and wakes the parked slots for the waiting jobs (without it they waited for
    their poll timeout, a second)."""
    unit = ScriptedFetcher(concurrency=4)
    for _ in range(50):
        unit.job_ran(SHORT_JOB / 10)  # the jobs so far were short
    started: list[float] = []
    lock = threading.Lock()

    def slot() -> None:
        job = unit.next_job()
        if job is None:
            return
        with lock:
            started.append(time.monotonic())
        time.sleep(SLEEP)  # no job_ran before the end: they still look short

    slots = [threading.Thread(target=slot) for _ in range(4)]
    for thread in slots:
        thread.start()
    wait_for(lambda: unit._parked == 4, 10, "the slots to park")
    fetch = threading.Thread(target=unit.run)
    fetch.start()
    try:
        for thread in slots:
            thread.join(10)
    finally:
        unit.stop()
        fetch.join(10)
    assert len(started) == 4
    assert max(started) - min(started) < SLEEP / 2, [t - min(started) for t in started]
    assert STALL_SECONDS < SLEEP / 10


def test_slow_jobs_after_short_ones_run_on_every_slot_at_once(
    any_client: postroom.Client,
) -> None:
    """A worker whose slots ran many no-op jobs (one slot ran them) still runs slow jobs on
    all its slots at once."""
    lock = threading.Lock()
    started: list[float] = []

    @any_client.job("noop")
    def noop() -> None:
        pass

    @any_client.job("slow")
    def slow() -> None:
        with lock:
            started.append(time.monotonic())
        time.sleep(SLEEP)

    any_client.enqueue_batch(noop.prepare() for _ in range(500))
    worker: Any = any_client.worker(concurrency=4)
    with running(worker):
        wait_for(lambda: worker.processed >= 500, 30, "the no-op jobs")
        began = time.monotonic()
        any_client.enqueue_batch(slow.prepare() for _ in range(8))
        wait_for(lambda: worker.processed >= 508, 30, "the slow jobs")
        took = time.monotonic() - began
    assert len(started) == 8
    # 8 jobs on 4 slots: two rounds of SLEEP (one slot at a time would take 8 rounds).
    assert took < 4 * SLEEP, took
    first_round = sorted(started)[:4]
    assert first_round[-1] - first_round[0] < SLEEP / 2, [t - started[0] for t in started]


def test_a_slot_takes_a_short_job_above_low_water_without_the_lock() -> None:
    unit = ScriptedFetcher(concurrency=4)
    for _ in range(50):
        unit.job_ran(SHORT_JOB / 10)
    unit._buffer.extend(unit._claim(10))  # _claim_at is 0 without prefetch
    got: list[Claimed | None] = []
    with unit._cond:  # held: only the lock-free path can hand out a job
        taker = threading.Thread(target=lambda: got.append(unit.next_job()))
        taker.start()
        taker.join(5)
        assert not taker.is_alive(), "next_job waited for the lock"
    assert got[0] is not None and got[0].id == 1


def test_slots_racing_for_short_jobs_take_each_job_once() -> None:
    """Four slots take short jobs, lock-free above the low-water mark and with the lock below
    it, while the fetch loop claims: no job is taken twice or lost (stop() returns the rest)."""
    unit = ScriptedFetcher(concurrency=4)
    unit._prefetch = 200
    for _ in range(50):
        unit.job_ran(SHORT_JOB / 10)
    taken: list[list[int]] = [[] for _ in range(4)]

    def slot(mine: list[int]) -> None:
        while True:
            job = unit.next_job()
            if job is None:
                return
            mine.append(job.id)
            unit.job_ran(SHORT_JOB / 10)

    slots = [threading.Thread(target=slot, args=(mine,)) for mine in taken]
    for thread in slots:
        thread.start()
    fetch = threading.Thread(target=unit.run)
    fetch.start()
    wait_for(lambda: sum(map(len, taken)) > 20_000, 30, "jobs to be taken")
    left = unit.stop()
    fetch.join(10)
    for thread in slots:
        thread.join(10)
    ids = sorted([i for mine in taken for i in mine] + [job.id for job in left])
    assert ids == list(range(1, unit.next_id))
