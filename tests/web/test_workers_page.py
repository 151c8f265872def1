"""The workers page lists every worker of the registry (migration 0038): an idle one with its
host, pid, queues, concurrency, start and last heartbeat, one holding a job with the job, a
gone one as gone, and a worker holding jobs without a registry row as unregistered; the
overview counts the workers alive and /metrics has postroom_workers per queue. Rendered by a
real dashboard on a real database, with the sync and the async worker, and in Chromium."""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx

import postroom

from ..queue.helpers import running, scalar
from ..signals import wait_for
from .conftest import DashboardServer
from .test_metrics import scrape, value

AGO_AND_TIME = re.compile(r"^\d+(\.\d)? s ago \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")


def registered(dsn: str, worker: str) -> bool:
    return bool(scalar(dsn, "SELECT count(*) FROM postroom.workers WHERE worker = %s", (worker,)))


def row_of(html: str, worker: str) -> str:
    found = re.search(
        r"<tr class=\"worker-\w+\"><td>" + re.escape(worker) + r"</td>.*?</tr>", html, re.S
    )
    assert found, f"no row of {worker} in {html}"
    return found[0]


def test_idle_busy_gone_and_unregistered_workers_on_the_page(
    serve: Callable[..., DashboardServer], any_client: postroom.Client, dsn: str
) -> None:
    scalar(
        dsn,
        "INSERT INTO postroom.workers (worker, role_name, host, pid, queues, concurrency,"
        " started_at, heartbeat_at, expires_at) VALUES ('crashed-1', 'someone', 'old-host', 4242,"
        " '{pw}', 2, now() - interval '1 hour', now() - interval '2 minutes',"
        " now() - interval '1 minute') RETURNING 1",
    )
    ghost = any_client.enqueue("pw-ghost", queue="pw-other")
    scalar(
        dsn,
        "UPDATE postroom.jobs SET state = 'running', attempts = 1, worker = 'ghost-9',"
        " started_at = now(), lease_expires_at = now() + interval '1 hour' WHERE id = %s"
        " RETURNING id",
        (ghost.id,),
    )
    release = threading.Event()

    @any_client.job("pw-hold", queue="pw-busy")
    def hold() -> None:
        release.wait(30)

    server = serve()
    idle = any_client.worker(["pw", "pw-idle"], concurrency=3)
    busy = any_client.worker(["pw-busy"], concurrency=1, poll_interval=0.05)
    with running(idle), running(busy):
        any_client.enqueue("pw-hold", queue="pw-busy")
        wait_for(lambda: registered(dsn, idle.name) and registered(dsn, busy.name))
        wait_for(
            lambda: scalar(
                dsn,
                "SELECT count(*) FROM postroom.jobs WHERE state = 'running' AND worker = %s",
                (busy.name,),
            ),
            what="the busy worker's job",
        )
        html = httpx.get(server.url + "/workers").text
        idle_row = row_of(html, idle.name)
        for shown in ("alive", socket.gethostname(), str(os.getpid()), "pw, pw-idle", ">3<"):
            assert shown in idle_row, (shown, idle_row)
        assert '<td class="num held">0</td>' in idle_row
        busy_row = row_of(html, busy.name)
        assert '<td class="num held">1</td>' in busy_row and "pw-hold" in busy_row
        gone_row = row_of(html, "crashed-1")
        assert "gone" in gone_row and "old-host" in gone_row and "4242" in gone_row
        ghost_row = row_of(html, "ghost-9")
        assert "unregistered" in ghost_row and "pw-ghost" in ghost_row
        overview = httpx.get(server.url + "/").text
        # the idle and the busy worker, and the unregistered one holding a job; not the gone one
        assert re.search(r"<h2>Workers</h2><b>3</b>", overview), overview
        samples = scrape(server)
        assert value(samples, "postroom_workers", queue="pw") == 1
        assert value(samples, "postroom_workers", queue="pw-busy") == 1
        assert value(samples, "postroom_workers", queue="pw-other") == 0  # jobs, no worker
        release.set()
    assert not registered(dsn, idle.name) and not registered(dsn, busy.name)
    html = httpx.get(server.url + "/workers").text
    assert idle.name not in html and busy.name not in html


def test_an_idle_worker_in_the_browser(
    serve: Callable[..., DashboardServer], client: postroom.Client, dsn: str, page: Any
) -> None:
    server = serve()
    worker = client.worker(["pw-browser"], concurrency=2)
    with running(worker):
        wait_for(lambda: registered(dsn, worker.name), what="the worker registered")
        page.goto(server.url + "/workers")
        row = page.locator(f"#workers tr:has-text('{worker.name}')")
        assert row.count() == 1, page.inner_text("#workers")
        assert row.locator("td.status").inner_text() == "alive"
        assert AGO_AND_TIME.match(row.locator("td.started").inner_text().strip())
        assert AGO_AND_TIME.match(row.locator("td.heartbeat").inner_text().strip())
        assert row.locator("td.held").inner_text() == "0"
