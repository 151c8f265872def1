"""A relay's sink error on the dashboard: the /relays page and the overview show it with its
start, /metrics exposes its start as a gauge, a recovery clears both; and /relays renders under
a consumer-only role (it failed on the leases and members tables before migration 0037)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC

import httpx
from psycopg.conninfo import make_conninfo

import postroom
import postroom.web

from ..relay.helpers import FAST, ScriptedSink, group_lag, running_relay
from ..roles import login_role
from ..signals import wait_for
from .conftest import DashboardServer
from .test_metrics import scrape

ERROR = "SinkUnavailable: scripted outage"
GAUGE = "postroom_relay_sink_error_timestamp_seconds"


def failing(client: postroom.Client) -> bool:
    return group_lag(client, "relay.s") is not None and bool(
        client.relay_status(["relay.s"])[0].sink_errors
    )


def test_the_relays_page_and_metrics_show_a_sink_error_until_it_clears(
    serve: Callable[..., DashboardServer], client: postroom.Client
) -> None:
    client.create_topic("t")
    client.publish("t", "first")
    server = serve()
    sink = ScriptedSink()
    with running_relay(client, "t", sink, group="relay.s", backoff=FAST):
        wait_for(lambda: group_lag(client, "relay.s") == 0)
        assert ERROR not in httpx.get(server.url + "/relays").text
        sink.down.set()
        client.publish("t", "during the outage")
        wait_for(lambda: failing(client), what="the outage recorded")
        [error] = client.relay_status(["relay.s"])[0].sink_errors
        page = httpx.get(server.url + "/relays").text
        assert ERROR in page and f"member {error.member}" in page
        assert "since " + error.since.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") in page
        assert "last seen " in page
        overview = httpx.get(server.url + "/").text
        assert "sink errors" in overview and 'id="health">red<' in overview  # no failed job
        labels = frozenset({"relay": "relay.s", "member": error.member}.items())
        assert scrape(server)[(GAUGE, labels)] == error.since.timestamp()
        sink.down.clear()
        wait_for(lambda: not failing(client), what="the recovery recorded")
        assert ERROR not in httpx.get(server.url + "/relays").text
        assert 'id="health">red<' not in httpx.get(server.url + "/").text
        assert not [name for name, _ in scrape(server) if name == GAUGE]


def test_the_relays_page_renders_under_a_consumer_only_role(client: postroom.Client) -> None:
    client.create_topic("t")
    client.publish("t", "first")
    with login_role(client.conninfo, "dash_consumer") as role:
        client.grant(role, "consumer", groups=["relay.s"])
        url = make_conninfo(client.conninfo, user=role)
        sink = ScriptedSink()
        with running_relay(client, "t", sink, group="relay.s", backoff=FAST):
            wait_for(lambda: group_lag(client, "relay.s") == 0)
            sink.down.set()
            client.publish("t", "during the outage")
            wait_for(lambda: failing(client), what="the outage recorded")
            server = DashboardServer(postroom.web.app(url=url, sample_interval=0.5))
            try:
                response = httpx.get(server.url + "/relays")
                assert response.status_code == 200, response.text
                assert "relay.s" in response.text and ERROR in response.text
            finally:
                server.stop()
