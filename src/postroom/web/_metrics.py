"""``/metrics`` in Prometheus text format, named as the Kafka lag exporters name theirs.

Gauges are read at scrape time (counter rows, index probes, bounded samples); the job totals
and the run-time histogram count the finished jobs the dashboard's sampler has seen since this
process started (Prometheus handles a counter that restarts from zero)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response

from ._live import RUN_TIME_BUCKETS
from ._security import Access

if TYPE_CHECKING:
    from ._app import Dashboard

# Every series /metrics exposes (tests/web checks the Grafana board queries only these).
SERIES = (
    "postroom_consumergroup_lag",
    "postroom_consumergroup_lag_seconds",
    "postroom_consumergroup_max_lag",
    "postroom_consumergroup_max_lag_seconds",
    "postroom_consumergroup_members",
    "postroom_partition_latest_offset",
    "postroom_partition_earliest_offset",
    "postroom_jobs",
    "postroom_jobs_oldest_ready_seconds",
    "postroom_queue_paused",
    "postroom_workers",
    "postroom_jobs_finished_total",
    "postroom_jobs_failed_total",
    "postroom_jobs_retried_total",
    "postroom_job_run_seconds",
    "postroom_relay_pending",
    "postroom_relay_oldest_pending_seconds",
    "postroom_relay_sink_error_timestamp_seconds",
    "postroom_table_dead_tuples",
    "postroom_vacuum_horizon_age_xids",
    "postroom_up",
)


class _Snapshot:
    """A collector over metric families read before the scrape renders them."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self.families


async def families(d: Dashboard) -> list[Metric]:
    """Every family, read now."""
    out: list[Metric] = []
    up = GaugeMetricFamily("postroom_up", "1 while the dashboard reads its schema", labels=[])
    up.add_metric([], 1)
    out.append(up)
    lag = GaugeMetricFamily(
        "postroom_consumergroup_lag",
        "Messages a group has yet to read, per partition",
        labels=["group", "topic", "partition"],
    )
    lag_s = GaugeMetricFamily(
        "postroom_consumergroup_lag_seconds",
        "Age of the oldest unread message, per partition",
        labels=["group", "topic", "partition"],
    )
    max_lag = GaugeMetricFamily(
        "postroom_consumergroup_max_lag", "Largest partition lag of a group", labels=["group"]
    )
    max_lag_s = GaugeMetricFamily(
        "postroom_consumergroup_max_lag_seconds",
        "Largest partition lag in seconds of a group",
        labels=["group"],
    )
    members = GaugeMetricFamily(
        "postroom_consumergroup_members", "Live members of a group", labels=["group"]
    )
    for group in await d.client.list_groups():
        info = await d.client.describe_group(group.name)
        for p in info.partitions:
            labels = [group.name, p.topic, str(p.partition)]
            lag.add_metric(labels, p.lag)
            lag_s.add_metric(labels, p.lag_seconds)
        max_lag.add_metric([group.name], max((p.lag for p in info.partitions), default=0))
        max_lag_s.add_metric(
            [group.name], max((p.lag_seconds for p in info.partitions), default=0.0)
        )
        members.add_metric([group.name], group.members)
    out += [lag, lag_s, max_lag, max_lag_s, members]

    latest = GaugeMetricFamily(
        "postroom_partition_latest_offset",
        "High-water mark: the next offset to be written",
        labels=["topic", "partition"],
    )
    earliest = GaugeMetricFamily(
        "postroom_partition_earliest_offset",
        "Low-water mark: the first retained offset",
        labels=["topic", "partition"],
    )
    for topic, partition, low, high in await d.store.all_partitions():
        latest.add_metric([topic, str(partition)], high)
        earliest.add_metric([topic, str(partition)], low)
    out += [latest, earliest]
    out += await _queue_families(d)

    pending = GaugeMetricFamily(
        "postroom_relay_pending", "Messages a relay has yet to deliver", labels=["relay"]
    )
    oldest = GaugeMetricFamily(
        "postroom_relay_oldest_pending_seconds",
        "Age of the oldest message a relay has yet to deliver",
        labels=["relay"],
    )
    sink_error = GaugeMetricFamily(
        "postroom_relay_sink_error_timestamp_seconds",
        "Unix time a relay member's current sink error began (no sample while sends succeed)",
        labels=["relay", "member"],
    )
    for relay in await d.client.relay_status():
        pending.add_metric([relay.group], relay.pending)
        oldest.add_metric([relay.group], relay.oldest_pending_seconds)
        for error in relay.sink_errors:
            sink_error.add_metric([relay.group, error.member], error.since.timestamp())
    out += [pending, oldest, sink_error]
    return out


async def _queue_families(d: Dashboard) -> list[Metric]:
    jobs = GaugeMetricFamily(
        "postroom_jobs",
        "Jobs per queue and state (kept finished jobs included; estimated on big tables)",
        labels=["queue", "state"],
    )
    counts, _estimated = await d.store.job_counts()
    for queue, state, n in counts:
        jobs.add_metric([queue, state], n)
    oldest = GaugeMetricFamily(
        "postroom_jobs_oldest_ready_seconds",
        "Age of the oldest due ready job",
        labels=["queue"],
    )
    for queue, seconds in await d.store.rows("web_oldest_ready"):
        oldest.add_metric([queue], seconds)
    dead = GaugeMetricFamily(
        "postroom_table_dead_tuples",
        "Dead row versions per table of the schema (the statistics' estimate)",
        labels=["table"],
    )
    for table, n in await d.store.rows("web_dead_tuples", {"schema": d.store.schema}):
        dead.add_metric([table], n)
    horizon = GaugeMetricFamily(
        "postroom_vacuum_horizon_age_xids",
        "Transaction IDs since the oldest horizon of the database (a transaction, snapshot, "
        "prepared transaction or replication slot): VACUUM removes no row deleted since",
        labels=[],
    )
    holder = await d.store.rows("vacuum_horizon_holder", {"began": None})
    horizon.add_metric([], holder[0][1] if holder and holder[0][1] is not None else 0)
    paused = GaugeMetricFamily("postroom_queue_paused", "1 if a queue is paused", labels=["queue"])
    for queue, _at in await d.store.rows("web_paused"):
        paused.add_metric([queue], 1)
    workers = GaugeMetricFamily(
        "postroom_workers",
        "Workers alive per queue they serve (the worker registry); 0 for a queue with jobs and "
        "no worker",
        labels=["queue"],
    )
    alive = {str(q): int(n) for q, n in await d.store.rows("web_workers_per_queue")}
    for queue in sorted(alive.keys() | {q for q, _state, _n in counts}):
        workers.add_metric([queue], alive.get(queue, 0))
    totals = d.sampler.totals
    finished = CounterMetricFamily(
        "postroom_jobs_finished",
        "Jobs finished (done or cancelled) since the exporter started",
        labels=["queue", "state"],
    )
    for (queue, state), n in sorted(totals.finished.items()):
        finished.add_metric([queue, state], n)
    failed = CounterMetricFamily(
        "postroom_jobs_failed",
        "Jobs that became failed since the exporter started",
        labels=["queue"],
    )
    for queue in sorted({q for q, _state in totals.finished} | set(totals.failed)):
        failed.add_metric([queue], totals.failed.get(queue, 0))
    retried = CounterMetricFamily(
        "postroom_jobs_retried",
        "Retries (attempts after the first) of the jobs finished since the exporter started",
        labels=["queue"],
    )
    # Every queue seen finishing has a retried series, zero until a retried job finishes.
    for queue in sorted({q for q, _state in totals.finished} | set(totals.retried)):
        retried.add_metric([queue], totals.retried.get(queue, 0))
    run = HistogramMetricFamily(
        "postroom_job_run_seconds",
        "Run time of finished jobs (start of the last attempt to finish)",
        labels=["queue"],
    )
    for queue, counts_per_bucket in sorted(totals.buckets.items()):
        cumulative, buckets = 0, []
        for bound, n in zip((*RUN_TIME_BUCKETS, float("inf")), counts_per_bucket, strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else str(bound), cumulative))
        run.add_metric([queue], buckets, totals.run_sum[queue])
    return [jobs, oldest, dead, horizon, paused, workers, finished, failed, retried, run]


async def render(d: Dashboard) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(await families(d)))
    return generate_latest(registry)


async def endpoint(d: Dashboard, request: Request, access: Access) -> Response:
    return Response(await render(d), media_type=CONTENT_TYPE_LATEST)
