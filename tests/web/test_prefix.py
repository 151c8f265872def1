"""``postroom dashboard --prefix /ops``: the app mounted under the prefix serves its pages,
static files, series and actions there, and every link it renders keeps the prefix."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

import postroom
import postroom.web
from postroom.cli.dashboard import mounted

from .conftest import DashboardServer
from .seed import Seeded


@pytest.fixture
def ops(dsn: str, seeded: Seeded) -> Iterator[DashboardServer]:
    server = DashboardServer(mounted(postroom.web.app(url=dsn, sample_interval=0.5), "/ops/"))
    yield server
    server.stop()


def test_the_dashboard_under_a_prefix(ops: DashboardServer, client: postroom.Client) -> None:
    page = httpx.get(ops.url + "/ops/")
    assert page.status_code == 200 and "Overview" in page.text
    links = re.findall(r'(?:href|src|action)="(/[^"]*)"', page.text)
    assert links and all(link.startswith("/ops/") for link in links), links
    assert httpx.get(ops.url + "/").status_code == 404
    assert httpx.get(ops.url + "/ops/static/dashboard.js").status_code == 200
    assert "series" in httpx.get(ops.url + "/ops/api/series?pick=rate").json()
    client.pause_queue("held")
    assert "held" in client.job_stats().paused
    with httpx.Client(base_url=ops.url) as http:
        queues = http.get("/ops/queues").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', queues)
        assert csrf, "no action form under the prefix"
        done = http.post(
            "/ops/actions/resume",
            data={"csrf": csrf[1], "queue": "held", "next": "/queues"},
        )
    assert done.status_code in (200, 303), done.text[:300]
    if done.status_code == 303:
        assert done.headers["location"].startswith("/ops/")
    assert "held" not in client.job_stats().paused
