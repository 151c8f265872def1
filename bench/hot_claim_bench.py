"""Can a claim be a HOT update? (issue 19: the server's work a job bounds the burn-down and the
two-worker scale.) The raw claim + delete loop of ``postroom bench queue``'s jobs-table reference
(claim 500 ``FOR UPDATE SKIP LOCKED``, commit, delete them, commit; ``synchronous_commit=off``
as postroom's workers), on three layouts of the same columns, in alternating rounds:

- ``jobs``: a copy of postroom's ``jobs`` table with its indexes and checks (fillfactor 80). The
  claim changes ``state``, which every index but the primary key names (the ready, running,
  failed and unique-key partial indexes), so it cannot be HOT: each claimed row gets a new
  primary-key entry and a running-index entry, and its checks (two regular expressions) run
  again.
- ``hot``: the same columns and checks with only the primary key (fillfactor 45, room for each
  row's one claim on its page); ready jobs are pointers in a narrow table ``ready(queue,
  priority, run_at, id)`` whose index the claim walks; the claim deletes the pointers and
  updates the jobs rows in one statement, a HOT update (no indexed column changes).
- ``hot-domains``: ``hot`` with the checks of the columns a claim never changes (kind, queue,
  args, max_attempts, unique_key) as domains, checked on input only.

Each round fills the layout's table with ``--jobs`` ready jobs (``INSERT ... SELECT``, timed:
the enqueue's server side), vacuums it, and drains it. Prints each layout's median and range
and its share of HOT updates. No triggers on any copy (postroom's would carry over).

    PYTHONPATH=src python bench/hot_claim_bench.py --url postgresql://postgres@127.0.0.1:5432/bench

The database is migrated first (the copies are made ``LIKE postroom.jobs``); the scratch
schema ``postroom_layouts`` is dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg
from psycopg import sql

import postroom
from postroom.benchmarks.queue_references import _drain

SCHEMA = "postroom_layouts"
LAYOUTS = ("jobs", "hot", "hot-domains")
CLAIMED = (
    "SET state = 'running', attempts = j.attempts + 1, worker = 'w', lease_expires_at = "
    "now() + interval '30 seconds', started_at = now(), claim_token = gen_random_uuid()"
)
DOMAINS = {  # column: (domain, the check postroom's table has on it)
    "kind": ("text", "(VALUE ~ '^[A-Za-z0-9_][A-Za-z0-9._:-]*$') AND length(VALUE) <= 200"),
    "queue": ("text", "(VALUE ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$') AND length(VALUE) <= 200"),
    "args": ("jsonb", "jsonb_typeof(VALUE) = 'object'"),
    "max_attempts": ("integer", "VALUE >= 1 AND VALUE <= 1000"),
    "unique_key": ("text", "length(VALUE) >= 1 AND length(VALUE) <= 1000"),
}
CHECKS = ("kind", "queue", "args", "max_attempts", "unique_key")


def table(layout: str) -> str:
    return f"{SCHEMA}.{layout.replace('-', '_')}"


def create(conn: psycopg.Connection[Any]) -> None:
    conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    conn.execute(f"CREATE SCHEMA {SCHEMA}")
    conn.execute(f"CREATE TABLE {table('jobs')} (LIKE postroom.jobs INCLUDING ALL)")
    conn.execute(f"ALTER TABLE {table('jobs')} SET (fillfactor = 80, autovacuum_enabled = off)")
    for layout in ("hot", "hot-domains"):
        name = table(layout)
        conn.execute(
            f"CREATE TABLE {name} (LIKE postroom.jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        conn.execute(f"ALTER TABLE {name} ADD PRIMARY KEY (id)")
        conn.execute(f"ALTER TABLE {name} SET (fillfactor = 45, autovacuum_enabled = off)")
        conn.execute(
            f"CREATE TABLE {name}_ready (queue text NOT NULL, priority smallint NOT NULL, "
            "run_at timestamptz NOT NULL, id bigint NOT NULL) WITH (autovacuum_enabled = off)"
        )
        conn.execute(f"CREATE INDEX ON {name}_ready (queue, priority, run_at, id)")
    name = table("hot-domains")
    conn.execute(
        f"ALTER TABLE {name} "
        + ", ".join(f"DROP CONSTRAINT jobs_{c}_check" for c in CHECKS)
        + ", DROP CONSTRAINT jobs_meta_check"
    )
    for column, (base, check) in DOMAINS.items():
        conn.execute(f"CREATE DOMAIN {SCHEMA}.{column} AS {base} CHECK ({check})")
        conn.execute(f"ALTER TABLE {name} ALTER COLUMN {column} TYPE {SCHEMA}.{column}")


def fill(conn: psycopg.Connection[Any], layout: str, jobs: int) -> float:
    """Empty the layout, then time the insert of ``jobs`` ready jobs; returns rows/s."""
    name = table(layout)
    if layout == "jobs":
        conn.execute(f"TRUNCATE {name}")
        insert = f"INSERT INTO {name} (id, kind) SELECT g, 'noop' FROM generate_series(1, %s) g"
    else:
        conn.execute(f"TRUNCATE {name}, {name}_ready")
        insert = (
            f"WITH j AS (INSERT INTO {name} (id, kind) SELECT g, 'noop' "
            "FROM generate_series(1, %s) g RETURNING queue, priority, run_at, id) "
            f"INSERT INTO {name}_ready SELECT * FROM j"
        )
    started = time.perf_counter()
    conn.execute(insert, (jobs,))
    elapsed = time.perf_counter() - started
    conn.execute(f"VACUUM ANALYZE {name}" + ("" if layout == "jobs" else f", {name}_ready"))
    return jobs / elapsed


def claim_sql(layout: str) -> str:
    name = table(layout)
    if layout == "jobs":
        return (
            f"UPDATE {name} j {CLAIMED} WHERE j.id = ANY(ARRAY(SELECT id FROM {name} "
            "WHERE state = 'ready' AND queue = 'default' AND run_at <= now() "
            "ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED)) RETURNING j.id, j.args"
        )
    return (
        f"WITH c AS (DELETE FROM {name}_ready r WHERE r.ctid = ANY(ARRAY("
        f"SELECT ctid FROM {name}_ready WHERE queue = 'default' AND run_at <= now() "
        "ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED)) RETURNING r.id) "
        f"UPDATE {name} j {CLAIMED} WHERE j.id = ANY(ARRAY(SELECT id FROM c)) "
        "AND j.state = 'ready' RETURNING j.id, j.args"
    )


def drain(url: str, layout: str, jobs: int, batch: int) -> float:
    """The jobs-table reference's claim + delete loop (``queue_references._drain``) until the
    claim finds nothing; returns jobs/s."""
    claim = sql.SQL(claim_sql(layout))
    delete = sql.SQL(f"DELETE FROM {table(layout)} WHERE id = ANY(%s)")
    with psycopg.connect(url) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.commit()
        drained, elapsed = _drain(conn, sql.Composed([claim]), sql.Composed([delete]), batch)
    assert drained == jobs, (layout, drained, jobs)
    return jobs / elapsed


def hot_shares(conn: psycopg.Connection[Any], updates: int) -> dict[str, float]:
    """Each layout's share of HOT updates, once the statistics count ``updates`` for each
    (the drains' backends report theirs as they exit)."""
    deadline = time.monotonic() + 10
    while True:
        rows = conn.execute(
            "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE schemaname = %s AND n_tup_upd > 0",
            (SCHEMA,),
        ).fetchall()
        if len(rows) == len(LAYOUTS) and all(n >= updates for _, n, _ in rows):
            return {name: hot / n for name, n, hot in rows}
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.1)


def run(url: str, jobs: int, batch: int, rounds: int) -> dict[str, dict[str, Any]]:
    """Each layout's drain and insert rates (jobs/s, one a round) and its share of HOT
    updates."""
    with postroom.connect(url) as client:
        client.migrate()
    drains: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    fills: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    with psycopg.connect(url, autocommit=True) as conn:
        create(conn)
        for index in range(rounds):
            for layout in LAYOUTS if index % 2 == 0 else tuple(reversed(LAYOUTS)):
                fills[layout].append(fill(conn, layout, jobs))
                drains[layout].append(drain(url, layout, jobs, batch))
        shares = hot_shares(conn, rounds * jobs)
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    return {
        layout: {
            "drain": drains[layout],
            "insert": fills[layout],
            "hot_share": shares.get(layout.replace("-", "_")),
        }
        for layout in LAYOUTS
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    result = run(args.url, args.jobs, args.batch, args.rounds)
    base_drain = statistics.median(result["jobs"]["drain"])
    base_fill = statistics.median(result["jobs"]["insert"])
    print(f"{args.rounds} alternating rounds of {args.jobs} jobs, claims of {args.batch}")
    for layout, figures in result.items():
        d, f, share = figures["drain"], figures["insert"], figures["hot_share"]
        print(
            f"{layout:12s} drain {statistics.median(d):8,.0f} jobs/s ({min(d):,.0f}-{max(d):,.0f})"
            f" {statistics.median(d) / base_drain:.2f} of jobs; HOT updates "
            f"{'unknown' if share is None else format(share, '.0%')}; insert "
            f"{statistics.median(f):,.0f} rows/s {statistics.median(f) / base_fill:.2f} of jobs"
        )


if __name__ == "__main__":
    main()
