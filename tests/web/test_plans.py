"""No dashboard query reads messages or finished_jobs in full (nor jobs, for the Workers page):
with sequential scans disabled, a plan that still has one on those tables has no other way (no
index fits)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from postroom.web._store import SCAN_LIMIT, WebStore

FILTERS: dict[str, Any] = {"kind": None, "queue": None, "args": None, "error": None}
# Every read of those tables but the exact counts, which run only while a table is under the
# threshold (docs/dashboard.md).
PARAMS: dict[str, dict[str, Any]] = {
    "web_partitions": {"topic": "t"},
    "web_all_partitions": {},
    "web_browse": {
        "topic": "t",
        "partition": 0,
        "from_offset": 0,
        "limit": 50,
        "scan": SCAN_LIMIT,
        "key": b"k",
        "headers": '{"a": "b"}',
        "contains": '{"n": 1}',
    },
    "web_message_time": {"topic": "t", "partition": 0, "offset": 5},
    "web_finished_list": {
        **FILTERS,
        "kind": "k",
        "state": "done",
        "before": None,
        "limit": 50,
        "scan": SCAN_LIMIT,
    },
    "web_finished_since": {"after": datetime.now(UTC), "limit": 10_000},
    "web_job_workflow": {"id": 1},
    "web_workers": {},  # the running jobs through their partial index, the registry
    "web_workers_per_queue": {},
}
# Tables a query must not read in full beyond messages and finished_jobs.
ALSO: dict[str, tuple[str, ...]] = {"web_workers": ("jobs",)}
# Partial indexes whose rows are few by construction: walking one in full is bounded (the
# running jobs: at most the workers' concurrency plus their prefetch).
BOUNDED = ("jobs_running_idx",)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_no_full_scan_of_the_big_tables(dsn: str, name: str) -> None:
    async def plan() -> str:
        store = WebStore(dsn, "postroom", settings="-c enable_seqscan=off")
        await store.open()
        try:
            return await store.explain(name, PARAMS[name])
        finally:
            await store.close()

    text = asyncio.run(plan())
    assert not full_scans(text, ALSO.get(name, ())), text


def full_scans(plan: str, also: tuple[str, ...] = ()) -> list[str]:
    """The scan nodes on messages or finished_jobs with no index condition: a sequential scan,
    or an index walked end to end."""
    lines = plan.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not any(f" on {table} " in line for table in ("messages", "finished_jobs", *also)):
            continue
        depth = len(line) - len(line.lstrip())
        details = []
        for below in lines[i + 1 :]:
            if below.lstrip().startswith("->") and len(below) - len(below.lstrip()) <= depth + 6:
                if "Bitmap Index Scan" not in below:
                    break
            details.append(below)
        if any("Index Cond" in d or "Recheck Cond" in d for d in details):
            continue
        if any(
            f"using {index} on " in line or any(f"Scan on {index} " in d for d in details)
            for index in BOUNDED
        ):
            continue  # an Index Scan using it, or a Bitmap Index Scan on it below
        if "Index Scan" in line and _parent(lines, i).startswith("Limit"):
            continue  # an index walk a LIMIT stops: bounded (web_browse, web_finished_list)
        found.append(line.strip())
    return found


def _parent(lines: list[str], i: int) -> str:
    depth = len(lines[i]) - len(lines[i].lstrip())
    for above in reversed(lines[:i]):
        if len(above) - len(above.lstrip()) < depth and (
            above.lstrip().startswith("->") or not above.startswith(" ")
        ):
            return above.strip().removeprefix("->").strip()
    return ""


def test_full_scans_are_seen() -> None:
    assert full_scans("Seq Scan on jobs j  (cost=0.00..1.00 rows=1 width=8)", ("jobs",))
    assert not full_scans("Seq Scan on jobs j  (cost=0.00..1.00 rows=1 width=8)")
    assert not full_scans(
        "Index Scan using jobs_running_idx on jobs j  (cost=0.12..8.14 rows=1)", ("jobs",)
    )
    assert not full_scans(
        "Bitmap Heap Scan on jobs j  (cost=4.1..8.1 rows=1)\n"
        "  ->  Bitmap Index Scan on jobs_running_idx  (cost=0.00..4.1 rows=1)",
        ("jobs",),
    )
    assert full_scans("Seq Scan on messages m  (cost=0.00..1.00 rows=1 width=8)")
    assert full_scans(
        "Index Scan using finished_jobs_pkey on finished_jobs f  (cost=0.29..8.30 rows=1)\n"
        "  Filter: (kind = 'k'::text)"
    )
    assert not full_scans(
        "Limit  (cost=0.14..51.35 rows=1)\n"
        "  ->  Index Scan Backward using finished_jobs_pkey on finished_jobs f  (cost=0.14..47)"
    )
    assert not full_scans(
        "Index Scan using messages_pkey on messages m  (cost=0.29..8.30 rows=1)\n"
        "  Index Cond: ((topic_id = 1) AND (partition = 0))"
    )
