"""Work resumes within a second of PostgreSQL accepting connections again after an outage
(issue 21.2), on a throwaway embedded server of the test's own (never the shared one): a
worker's jobs, a group member's deliveries, a producer's sends. Each test stops the server
(fast shutdown) while work flows, keeps it down for OUTAGE seconds, starts it and measures from
the first connection the server accepts to the first piece of work done. psycopg_pool's own
backoff (1, 2, 4 s ...) took seconds; postroom's reconnect_delay caps at 0.5 s."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

import postroom
from postroom._reconnect import RECONNECT_CAP, ReconnectAttempt, reconnect_delay
from tests.log.test_faults import own_server, pg_ctl

from .signals import wait_for

__all__ = ["own_server"]  # the fixture, imported for use here

OUTAGE = 8.0
"""Seconds the server stays down: long enough for psycopg_pool's doubling delays to grow."""
RESUME_LIMIT = 1.5
"""Seconds from the server accepting connections to the first work done (the goal is 1 s)."""


def test_reconnect_delay_doubles_from_50_ms_to_a_half_second_cap() -> None:
    nominal = [reconnect_delay(n, rand=lambda: 0.5) for n in range(1, 8)]
    assert nominal == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.5])
    assert reconnect_delay(10**6, rand=lambda: 1.0) == pytest.approx(RECONNECT_CAP * 1.2)
    assert reconnect_delay(1, rand=lambda: 0.0) >= 0.04


def test_the_pool_attempt_never_waits_past_the_cap_or_its_timeout() -> None:
    attempt = ReconnectAttempt(timeout=3.0)
    delays = []
    for second in range(10):
        attempt.update_delay(float(second))
        delays.append(attempt.delay)
    assert max(delays) <= RECONNECT_CAP * 1.2 + 1e-9
    assert attempt.time_to_give_up(3.0)


def outage(url: str, pgdata: Path) -> float:
    """Stop the server (fast shutdown), keep it down OUTAGE seconds, start it; returns the
    monotonic time at which it first accepted a connection."""
    pg_ctl(pgdata, "stop", "-m", "fast")
    threading.Event().wait(OUTAGE)  # the outage itself: nothing to wait for but time
    # -W: do not wait in pg_ctl (it looks every 100 ms); the test sees the first accept itself.
    pg_ctl(pgdata, "start", "-W", "-l", str(pgdata / "log"), "-o", f'-h "" -k {pgdata}')
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            psycopg.connect(url, connect_timeout=1).close()
        except psycopg.OperationalError:
            threading.Event().wait(0.002)  # a bounded poll of the server's own readiness
            continue
        return time.monotonic()
    raise AssertionError("the server did not come back within 60 s")


def first_after(times: list[float], since: float, what: str) -> float:
    """Seconds from ``since`` to the first of ``times`` after it."""
    wait_for(lambda: any(t > since for t in times), timeout=30, what=what)
    return min(t for t in times if t > since) - since


def in_thread(target: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


@pytest.mark.slow
def test_a_worker_runs_jobs_within_a_second_of_the_server_coming_back(
    own_server: tuple[str, Path],
) -> None:
    url, pgdata = own_server
    ran: list[float] = []
    with postroom.connect(url) as client:

        @client.job("tick")
        def tick() -> None:
            ran.append(time.monotonic())
            time.sleep(0.002)  # the job's own work: jobs are still queued after the outage

        client.enqueue_batch([{"kind": "tick"} for _ in range(20_000)])
        # prefetch=0: no job claimed before the outage waits in a buffer to run after it.
        worker = client.worker(concurrency=2, prefetch=0, poll_interval=1.0)
        thread, errors = in_thread(lambda: worker.run(handle_signals=False))
        try:
            wait_for(lambda: len(ran) >= 50, timeout=30, what="jobs flowing")
            back = outage(url, pgdata)
            resumed = first_after(ran, back, "a job after the restart")
            written = worker.processed
            wait_for(lambda: worker.processed > written, timeout=30, what="a write-back")
            print(f"worker: first job {resumed:.3f} s after the server accepted connections")
        finally:
            worker.stop()
            thread.join(60)
    assert not errors, errors
    assert resumed < RESUME_LIMIT


@pytest.mark.slow
def test_a_group_member_delivers_within_a_second_of_the_server_coming_back(
    own_server: tuple[str, Path],
) -> None:
    url, pgdata = own_server
    delivered: dict[str, float] = {}
    with postroom.connect(url) as client:
        client.create_topic("t", partitions=2)

        @client.subscribe("t", group="g", session_timeout=30)
        def handle(message: postroom.Message) -> None:
            delivered[message.text()] = time.monotonic()

        runner = client.runner()
        thread, errors = in_thread(lambda: runner.run(handle_signals=False))
        try:
            client.publish("t", "before")
            wait_for(lambda: "before" in delivered, timeout=30, what="the first delivery")
            back = outage(url, pgdata)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SELECT postroom.publish('t', 'after'::text)")
            wait_for(lambda: "after" in delivered, timeout=30, what="the delivery after")
            resumed = delivered["after"] - back
            print(f"group member: delivered {resumed:.3f} s after the server accepted connections")
        finally:
            runner.stop()
            thread.join(60)
    assert not errors, errors
    assert resumed < RESUME_LIMIT


@pytest.mark.slow
def test_a_producer_sends_within_a_second_of_the_server_coming_back(
    own_server: tuple[str, Path],
) -> None:
    url, pgdata = own_server
    acknowledged: list[float] = []
    stop = threading.Event()
    with postroom.connect(url) as client:
        client.create_topic("t", partitions=2)

        def send_forever() -> None:
            with client.producer() as producer:
                while not stop.is_set():
                    try:
                        producer.send("t", {"at": time.monotonic()}).result()
                    except psycopg.OperationalError:
                        continue  # the server is away: send again (the pool waits for it)
                    acknowledged.append(time.monotonic())

        thread, errors = in_thread(send_forever)
        try:
            wait_for(lambda: len(acknowledged) >= 20, timeout=30, what="sends flowing")
            back = outage(url, pgdata)
            resumed = first_after(acknowledged, back, "a send after the restart")
            print(f"producer: first send {resumed:.3f} s after the server accepted connections")
        finally:
            stop.set()
            thread.join(60)
    assert not errors, errors
    assert resumed < RESUME_LIMIT
