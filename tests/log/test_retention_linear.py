"""Retention is linear in what it deletes (issue 10, item 4): its bounds are computed once per
partition, not once per deleted row, so a 200,000-message backlog goes in seconds."""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg

import postroom


def backlog(client: postroom.Client, topic: str, count: int) -> None:
    """``count`` messages on partition 0 of ``topic``, all older than its retention."""
    with psycopg.connect(client.conninfo) as conn:
        conn.execute(
            "SELECT count(*) FROM postroom.publish_batch(%s, (SELECT array_agg(i::text)"
            " FROM generate_series(1, %s) AS i))",
            [topic, count],
        )
        conn.commit()  # written at commit (publishes in a transaction are staged until then)
        conn.execute("UPDATE postroom.messages SET created_at = now() - interval '2 days'")


def test_the_retention_bounds_are_computed_once(client: postroom.Client) -> None:
    client.create_topic("t", retention=timedelta(days=1))
    backlog(client, "t", 100)
    with psycopg.connect(client.conninfo) as conn:
        # apply_retention calls expire_messages (migration 0011): explain its body, with the
        # function's parameters as the statement's.
        row = conn.execute(
            "SELECT prosrc FROM pg_proc WHERE oid = "
            "'postroom.expire_messages(interval, integer)'::regprocedure"
        ).fetchone()
        assert row is not None
        body = (
            row[0]
            .strip()
            .rstrip(";")
            .replace("p_group_expiry", "%(group_expiry)s::interval")
            .replace("p_batch", "%(batch)s::integer")
        )
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                ("EXPLAIN " + body).encode(),
                {"group_expiry": timedelta(days=7), "batch": 10000},
            )
        )
    assert "CTE bounds" in plan  # materialized: not inlined into the delete, once per partition
    assert "SubPlan" not in plan.split("CTE bounds")[0]  # nothing evaluated per deleted row


def test_a_200k_backlog_is_deleted_in_seconds(client: postroom.Client) -> None:
    client.create_topic("t", retention=timedelta(days=1))
    client.create_topic("fresh", retention=timedelta(days=1))
    backlog(client, "t", 200_000)
    client.publish("fresh", "kept")  # not expired: must stay
    started = time.monotonic()
    deleted = 0
    while batch := client.apply_retention(batch_size=100_000):
        deleted += batch
    elapsed = time.monotonic() - started
    assert deleted == 200_000
    assert client.describe_topic("t").partition_info[0].messages == 0
    assert client.describe_topic("fresh").partition_info[0].messages == 1
    # Quadratic retention did not finish in 10 minutes; linear takes a few seconds even on a
    # loaded machine. The bound is loose on purpose: it catches the regression, not noise.
    assert elapsed < 60, elapsed
