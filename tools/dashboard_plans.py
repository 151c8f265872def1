"""Print the plans of the dashboard's named queries (``_sql/web.sql``) on a big schema, as the
Markdown section of docs/dashboard.md.

    PYTHONPATH=$PWD/src python tools/dashboard_plans.py --url postgresql://... [--rows 1000000]

Fills a schema of its own (``postroom_bench_dashboard``, the dashboard benchmark's, dropped at
the end) with ``--rows`` messages and finished jobs, ANALYZEs it, then runs EXPLAIN (not
ANALYZE: nothing is executed) on every read query with the parameters a page passes.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import postroom
from postroom.benchmarks import _common
from postroom.benchmarks.dashboard import SCHEMA, TOPIC, Settings, fill
from postroom.web._store import SCAN_LIMIT, WebStore

FILTERS: dict[str, Any] = {"kind": None, "queue": None, "args": None, "error": None}
PARAMS: dict[str, dict[str, Any]] = {
    "web_table_estimates": {"schema": SCHEMA},
    "web_partitions": {"topic": TOPIC},
    "web_all_partitions": {},
    "web_browse": {
        "topic": TOPIC,
        "partition": 0,
        "from_offset": 0,
        "limit": 50,
        "scan": SCAN_LIMIT,
        "key": None,
        "headers": None,
        "contains": '{"n": 1}',
    },
    "web_message_time": {"topic": TOPIC, "partition": 0, "offset": 123456},
    "web_members": {},
    "web_job_counts_exact": {},
    "web_job_counts_sampled": {"percent": 2.0},
    "web_finished_counts_exact": {},
    "web_finished_counts_sampled": {"percent": 2.0},
    "web_oldest_ready": {},
    "web_paused": {},
    "web_job_list": {**FILTERS, "state": "failed", "before": None, "limit": 50},
    "web_finished_list": {
        **FILTERS,
        "state": "done",
        "before": None,
        "limit": 50,
        "scan": SCAN_LIMIT,
    },
    "web_job_ids": {**FILTERS, "state": "failed", "limit": 10_000},
    "web_job_workflow": {"id": 10000001},
    "web_schedules": {},
    "web_schedule": {"name": "x"},
    "web_limits": {},
    "web_workers": {},
    "web_workers_per_queue": {},
    "web_finished_since": {"after": datetime.now(UTC), "limit": 10_000},
    "web_group_consumed": {},
    "web_failed_count": {},
    "web_samples_since": {"after": None, "window": timedelta(hours=2)},
}


async def plans(conninfo: str) -> str:
    store = WebStore(conninfo, SCHEMA)
    await store.open()
    out = []
    try:
        for name, params in PARAMS.items():
            plan = await store.explain(name, params)
            out.append(f"#### `{name}`\n\n```\n{plan}\n```\n")
    finally:
        await store.close()
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    _common.drop_schema(args.url, SCHEMA)
    try:
        with postroom.connect(args.url, schema=SCHEMA) as client:
            client.migrate()
            fill(client, args.url, Settings(messages=args.rows, finished_jobs=args.rows))
        print(asyncio.run(plans(args.url)))
    finally:
        _common.drop_schema(args.url, SCHEMA)


if __name__ == "__main__":
    main()
