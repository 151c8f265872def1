"""A queue worker across faults (issue 16): connections cut under it (the test proxy) and its
server restarted (a server of the test's own). It neither crashes nor loses a job: every job
runs, at least once, and jobs enqueued after the fault run too."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

import postroom

from ..log.test_faults import own_server, pg_ctl
from ..proxy import Proxy
from ..signals import wait_for
from .helpers import running, scalar

__all__ = ["own_server"]  # the fixture, used by name below

JOBS = 200


def _register(client: postroom.Client) -> tuple[Counter[int], postroom.JobFunction]:
    ran: Counter[int] = Counter()
    lock = threading.Lock()

    @client.job("work", max_attempts=100)
    def work(n: int) -> None:
        with lock:
            ran[n] += 1

    return ran, work


def test_a_worker_through_cut_connections_runs_every_job(dsn: str) -> None:
    with Proxy(dsn) as proxy, postroom.connect(proxy.dsn) as client:
        ran, work = _register(client)
        client.enqueue_batch([work.prepare(n=n) for n in range(JOBS)])
        cuts: list[int] = []
        worker = client.worker(concurrency=4, poll_interval=0.05, lease=5, prefetch=5)
        with running(worker):
            for stage in range(1, 5):  # cut every connection each time a quarter has run
                wanted = stage * JOBS // 5
                wait_for(lambda: len(ran) >= wanted, 60, f"{wanted} jobs to run")  # noqa: B023
                cuts.append(proxy.cut())
            wait_for(
                lambda: scalar(dsn, "SELECT count(*) FROM postroom.finished_jobs") == JOBS,
                120,
                "every job to finish across the cuts",
            )
            late = work.enqueue(n=JOBS)  # after the cuts: the worker still claims
            assert late.result(timeout=60) is None
    assert sum(cuts) >= 4  # the worker's connections (and the listener's) really were cut
    assert set(ran) == set(range(JOBS + 1))


@pytest.mark.slow
def test_a_worker_survives_a_server_restart(own_server: tuple[str, Path]) -> None:
    url, pgdata = own_server
    with postroom.connect(url) as client:
        ran, work = _register(client)
        client.enqueue_batch([work.prepare(n=n) for n in range(JOBS)])
        with running(client.worker(concurrency=4, poll_interval=0.05, lease=5, prefetch=5)):
            wait_for(lambda: len(ran) >= JOBS // 4, 60, "a quarter of the jobs to run")
            # -m immediate: no shutdown checkpoint, crash recovery on start, like a power cut.
            pg_ctl(pgdata, "stop", "-m", "immediate")
            pg_ctl(pgdata, "start", "-l", str(pgdata / "log"), "-o", f'-h "" -k {pgdata}')
            wait_for(lambda: len(ran) == JOBS, 120, "every job to run after the restart")
            late = work.enqueue(n=JOBS)
            assert late.result(timeout=60) is None
    assert set(ran) == set(range(JOBS + 1))
