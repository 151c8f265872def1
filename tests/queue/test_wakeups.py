"""LISTEN/NOTIFY wake-ups of a waiting queue worker: with polling and heartbeats a minute away,
only a notification can make the worker claim a new job, or interrupt a cancelled one, within
seconds.

Each test waits until the worker listens and has claimed once since (``wait_for_listener``),
so the new job can only reach it through the enqueue's notification.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import postroom
from postroom.errors import JobCancelled, JobInterrupted

from ..signals import wait_for_listener
from .helpers import running

FALLBACK = 60.0  # poll interval and heartbeat in these tests: far longer than any wait below
WAKE_WITHIN = 20.0


def idle_worker(client: postroom.Client, **options: Any) -> postroom.Worker:
    return client.worker(poll_interval=FALLBACK, heartbeat=FALLBACK, lease=2 * FALLBACK, **options)


def test_an_enqueue_wakes_an_idle_worker(any_client: postroom.Client, dsn: str) -> None:
    ran = threading.Event()

    @any_client.job("ping")
    def ping() -> str:
        ran.set()
        return "pong"

    with running(idle_worker(any_client)):
        wait_for_listener(dsn, "postroom_jobs", then=r"claim_jobs\(")
        started = time.monotonic()
        job = ping.enqueue()
        assert ran.wait(WAKE_WITHIN), "the enqueue's notification did not wake the worker"
        assert job.result(timeout=WAKE_WITHIN) == "pong"
    assert time.monotonic() - started < WAKE_WITHIN


def test_an_enqueue_wakes_the_worker_of_its_queue(any_client: postroom.Client, dsn: str) -> None:
    """A worker of queue ``b`` only (not the default queue) is woken by an enqueue to ``b``."""
    ran = threading.Event()

    @any_client.job("in_b", queue="b")
    def in_b() -> None:
        ran.set()

    with running(idle_worker(any_client, queues=["b"])):
        wait_for_listener(dsn, "postroom_jobs", then=r"claim_jobs\(")
        in_b.enqueue()
        assert ran.wait(WAKE_WITHIN)


def test_a_cancel_reaches_the_running_job_at_once(any_client: postroom.Client, dsn: str) -> None:
    """The worker hears the cancel notification and checks at once, not at its next heartbeat."""
    started = threading.Event()
    interrupted: list[str] = []

    @any_client.job("endless")
    def endless() -> None:
        started.set()
        try:
            while True:
                time.sleep(0.01)
        except JobInterrupted as exc:
            interrupted.append(exc.reason)
            raise

    job = endless.enqueue()
    with running(idle_worker(any_client)):
        assert started.wait(WAKE_WITHIN)
        wait_for_listener(dsn, "postroom_jobs")
        assert job.cancel() == "running"
        with pytest.raises(JobCancelled):
            job.result(timeout=WAKE_WITHIN)
    assert interrupted == ["cancelled"]
