"""/metrics parsed by prometheus-client's own parser and checked against the database, and the
Grafana board in the repository reads only series /metrics has."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import postroom
import postroom.web._store
from postroom.relay.sink_errors import record_sink_error
from postroom.web._metrics import SERIES

from ..signals import wait_for
from .conftest import DashboardServer
from .seed import Seeded

BOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "postroom.json"


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: DashboardServer) -> Samples:
    response = httpx.get(server.url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_metrics_match_the_database(
    serve: Callable[..., DashboardServer], seeded: Seeded, client: postroom.Client
) -> None:
    server = serve()
    samples = scrape(server)
    topic = client.describe_topic("orders")
    for p in topic.partition_info:
        labels = {"topic": "orders", "partition": str(p.partition)}
        assert value(samples, "postroom_partition_latest_offset", **labels) == p.high_water
        assert value(samples, "postroom_partition_earliest_offset", **labels) == p.low_water
    group = client.describe_group("billing")
    for lag in group.partitions:
        labels = {"group": "billing", "topic": lag.topic, "partition": str(lag.partition)}
        assert value(samples, "postroom_consumergroup_lag", **labels) == lag.lag
        assert value(samples, "postroom_consumergroup_lag_seconds", **labels) >= 0
    assert value(samples, "postroom_consumergroup_max_lag", group="billing") == max(
        p.lag for p in group.partitions
    )
    stats = {(c.queue, c.state): c.count for c in client.job_stats().counts}
    for (queue, state), n in stats.items():
        assert value(samples, "postroom_jobs", queue=queue, state=state) == n
    assert value(samples, "postroom_jobs", queue="default", state="failed") == 1
    assert value(samples, "postroom_queue_paused", queue="paused-q") == 1
    assert value(samples, "postroom_up") == 1


def test_finished_jobs_count_and_time_once_the_exporter_runs(
    serve: Callable[..., DashboardServer], seeded: Seeded, client: postroom.Client
) -> None:
    server = serve()
    scrape(server)  # started: from now on it counts

    client.enqueue("fine")
    client.enqueue("fine")
    client.worker(["default"]).run(burst=True, handle_signals=False)

    def finished() -> float:
        key = ("postroom_jobs_finished_total", frozenset({("queue", "default"), ("state", "done")}))
        return scrape(server).get(key, 0)

    wait_for(lambda: finished() == 2, what="two finished jobs counted")
    samples = scrape(server)
    assert value(samples, "postroom_job_run_seconds_count", queue="default") == 2
    assert value(samples, "postroom_job_run_seconds_bucket", queue="default", le="+Inf") == 2
    assert value(samples, "postroom_job_run_seconds_sum", queue="default") >= 0


def test_counts_are_estimates_above_the_threshold(
    serve: Callable[..., DashboardServer],
    seeded: Seeded,
    dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(postroom.web._store, "EXACT_COUNT_LIMIT", 0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE postroom.jobs, postroom.finished_jobs")
    server = serve()
    html = httpx.get(server.url + "/queues").text
    assert "estimated from a sample" in html


def test_metrics_serve_has_only_metrics(dsn: str, seeded: Seeded) -> None:
    from .conftest import DashboardServer as Server

    server = Server(postroom.web.metrics_app(url=dsn, sample_interval=0.5))
    try:
        assert httpx.get(server.url + "/").status_code == 404
        assert httpx.get(server.url + "/actions/retry").status_code == 404
        assert "postroom_up 1.0" in httpx.get(server.url + "/metrics").text
    finally:
        server.stop()


def board_series() -> set[str]:
    board = json.loads(BOARD.read_text())
    names = set()
    for panel in board["panels"]:
        for target in panel["targets"]:
            names |= set(re.findall(r"\bpostroom_[a-z_]+", target["expr"]))
    return names


def test_every_series_the_grafana_board_queries_exists(
    serve: Callable[..., DashboardServer], seeded: Seeded, client: postroom.Client
) -> None:
    queried = board_series()
    assert len(queried) >= 12
    server = serve()
    scrape(server)

    client.enqueue("fine")
    client.worker(["default"]).run(burst=True, handle_signals=False)
    client.enqueue("fine", queue="paused-q")  # stays ready: an oldest ready age
    client.reset_group("relay.orders", "orders", to="earliest")  # a relay's group, behind
    relay_member = client.consumer("relay.orders", "orders")  # failing on its sink:
    relay_member.poll(timeout=0)
    assert record_sink_error(client.log.database, "relay.orders", relay_member.member_id, "x")
    wait_for(
        lambda: any(n == "postroom_jobs_finished_total" for n, _ in scrape(server)),
        what="a finished job counted",
    )
    exposed = {name for name, _labels in scrape(server)}
    relay_member.close()
    missing = sorted(q for q in queried if q not in exposed)
    assert not missing, f"the Grafana board queries series /metrics lacks: {missing}"
    declared = {s.removesuffix("_total") for s in SERIES}
    for name in queried:
        family = re.sub(r"_(bucket|count|sum|total)$", "", name)
        assert family in declared or name in SERIES, name


def test_dead_tuples_and_the_vacuum_horizon_age_are_exposed(
    serve: Callable[..., DashboardServer], dsn: str, client: postroom.Client
) -> None:
    """What a pinned horizon looks like from /metrics (docs/queue.md, 'Under a pinned
    horizon'): the horizon's age grows with every transaction after the pin, and the dead rows
    of a table show up; once the pin ends, the age falls back."""
    server = serve()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE postroom.jobs SET (autovacuum_enabled = false)")
    with psycopg.connect(dsn) as pin:
        pin.execute("SELECT txid_current()")  # an XID, then idle in transaction
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(20):  # twenty transactions after the pin, each with an XID
                conn.execute("SELECT txid_current()")
            ids = [client.enqueue("noop", {}).id for _ in range(30)]
            conn.execute("DELETE FROM postroom.jobs WHERE id = ANY(%s)", [ids])
            conn.execute("SELECT pg_stat_force_next_flush()")
        samples = scrape(server)
        assert value(samples, "postroom_vacuum_horizon_age_xids") >= 20
        assert value(samples, "postroom_table_dead_tuples", table="jobs") >= 30
    assert value(scrape(server), "postroom_vacuum_horizon_age_xids") < 20
