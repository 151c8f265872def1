"""The poll path's fetch (``fetch_messages``): the plain range-read branch and the byte-budget
branch, their order and limits, and the plan shape the plain branch's order relies on."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

import postroom
from postroom import TopicPartition


def _fetch(
    client: postroom.Client,
    topic: str,
    positions: dict[int, int],
    limit: int,
    max_bytes: int,
    *,
    explain: bool = False,
) -> list[tuple[Any, ...]]:
    """Run fetch_messages (as the consumer does: binary, autocommit) for ``positions``
    (partition -> offset, in that order)."""
    db = client._db
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT id FROM {client.schema}.topics WHERE name = %s", (topic,)
        ).fetchone()
        assert row is not None
        params = {
            "topic_ids": [row[0]] * len(positions),
            "partitions": list(positions),
            "positions": list(positions.values()),
            "limit": limit,
            "max_bytes": max_bytes,
        }
        query = db.q("fetch_messages")
        if explain:
            query = psycopg.sql.SQL("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ") + query
            return conn.execute(query, params).fetchall()
        return conn.cursor(binary=True).execute(query, params).fetchall()


def _sizes(rows: list[tuple[Any, ...]]) -> int:
    return sum(len(r[4]) + (0 if r[3] is None else len(r[3])) for r in rows)


def test_fetch_orders_and_limits_both_branches(client: postroom.Client) -> None:
    client.create_topic("t", partitions=3)
    client.publish_batch(
        "t",
        [
            {"value": b"v" * (10 + 7 * i), "key": None if i % 2 else b"k" * 5, "partition": p}
            for p in range(3)
            for i in range(40)
        ],
    )
    order = {2: 30, 0: 5, 1: 0}  # partitions in the given order, each from its position
    every = _fetch(client, "t", order, 1000, 10**9)  # fits: the plain branch
    assert [(r[1], r[2]) for r in every] == (
        [(2, o) for o in range(30, 40)]
        + [(0, o) for o in range(5, 40)]
        + [(1, o) for o in range(40)]
    )
    assert len(_fetch(client, "t", order, 17, 10**9)) == 17
    total = _sizes(every)
    for budget in (1, 50, 999, 2500, total // 2, total - 1, total):
        rows = _fetch(client, "t", order, 1000, budget)
        assert [(r[1], r[2]) for r in rows] == [(r[1], r[2]) for r in every[: len(rows)]]
        # The byte cut: within the budget (one message always comes), and no message more
        # would have fit.
        assert len(rows) == 1 or _sizes(rows) <= budget
        if len(rows) < len(every):
            assert _sizes(every[: len(rows) + 1]) > budget
    # The limit and the budget together: whichever stops first.
    rows = _fetch(client, "t", order, 12, _sizes(every[:20]))
    assert [(r[1], r[2]) for r in rows] == [(r[1], r[2]) for r in every[:12]]
    rows = _fetch(client, "t", order, 30, _sizes(every[:20]))
    assert [(r[1], r[2]) for r in rows] == [(r[1], r[2]) for r in every[:20]]
    assert _fetch(client, "t", {0: 40, 1: 40}, 10, 100) == []


def test_the_fetch_is_a_range_read_with_no_sort(client: postroom.Client) -> None:
    """The fetch returns (ord, offset) order only through its plan: a nested loop over the
    positions (a function scan WITH ORDINALITY) and one ordered index scan per partition, no
    sort and no window on the way, nothing parallel; the running sum of the byte cut is not
    run when the messages fit. If the planner ever chose otherwise this test says so."""
    client.create_topic("t", partitions=4)
    client.publish_batch("t", [{"value": b"x" * 100, "partition": i % 4} for i in range(4000)])
    for budget, cut in ((50 << 20, False), (20_000, True)):
        plan = [
            r[0] for r in _fetch(client, "t", {1: 0, 2: 0, 3: 0, 0: 0}, 1500, budget, explain=True)
        ]
        text = "\n".join(plan)
        assert "Gather" not in text and "Parallel" not in text, text
        assert plan[0].startswith("Limit"), text
        # The rows: the top Limit's own child (the InitPlan of the limit is listed first).
        top = [line for line in plan if line.startswith("  ->  ")]
        assert len(top) == 1 and top[0].startswith("  ->  Nested Loop"), text
        assert re.match(rf"Limit \(actual rows={200 if cut else 1500}(\.00)? ", plan[0]), text
        body = plan[plan.index(top[0]) :]
        assert not any("Sort" in line or "WindowAgg" in line for line in body), text
        # The byte cut's running sum runs only when the messages do not fit.
        window = [line for line in plan if "WindowAgg" in line]
        assert len(window) == 1 and ("never executed" in window[0]) != cut, text


def test_poll_keeps_the_byte_budget(any_client: postroom.Client) -> None:
    any_client.create_topic("t", partitions=2)
    values = [b"%04d" % i + b"y" * (i % 50) for i in range(200)]
    any_client.publish_batch("t", [{"value": v, "partition": i % 2} for i, v in enumerate(values)])
    got: list[bytes] = []
    with any_client.consumer("g", "t") as c:
        while len(got) < 200:
            batch = c.poll(timeout=1, max_messages=1000, max_bytes=700)
            assert batch
            assert len(batch) == 1 or sum(len(m.value) for m in batch) <= 700
            got += [m.value for m in batch]
            c.commit()
        assert c.poll(timeout=0.1) == []
    assert sorted(got) == sorted(values)
    for p in range(2):
        mine = [v for i, v in enumerate(values) if i % 2 == p]
        assert [v for v in got if v in set(mine)] == mine  # offset order within a partition


def test_utc_timestamps_keeps_the_instant_and_the_session_zone_unless_it_is_utc(
    client: postroom.Client,
) -> None:
    from postroom.log.reading import utc_timestamps

    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        query = "SELECT '2026-01-31 12:00:00+00'::timestamptz"
        seen = {}
        for zone in ("Etc/UTC", "UTC", "Europe/Paris"):
            conn.execute(psycopg.sql.SQL("SET TimeZone = {}").format(zone))
            cur = conn.cursor(binary=True)
            utc_timestamps(cur)
            row = cur.execute(query).fetchone()
            assert row is not None
            seen[zone] = row[0]
            assert row[0] == datetime(2026, 1, 31, 12, tzinfo=UTC)
        assert seen["Etc/UTC"].tzinfo is UTC  # not ZoneInfo("Etc/UTC"): no astimezone a row
        assert seen["UTC"].tzinfo is UTC
        assert seen["Europe/Paris"].tzinfo == ZoneInfo("Europe/Paris")
        assert seen["Europe/Paris"].hour == 13
        # Only that cursor: the connection's own loader is left as it was.
        conn.execute("SET TimeZone = 'Etc/UTC'")
        row = conn.cursor(binary=True).execute(query).fetchone()
        assert row is not None and row[0].tzinfo == ZoneInfo("Etc/UTC")


def test_polled_messages_keep_their_timestamps(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish_batch("t", [b"a", b"b"])
    with psycopg.connect(any_client.conninfo) as conn:
        rows = conn.execute(
            f'SELECT created_at FROM {any_client.schema}.messages ORDER BY "offset"'
        ).fetchall()
    with any_client.consumer("g", "t") as c:
        got = c.poll(timeout=1)
    assert [m.timestamp for m in got] == [r[0] for r in rows]
    assert all(m.timestamp.utcoffset() == r[0].utcoffset() for m, r in zip(got, rows, strict=True))


def test_claimed_messages_keep_their_timestamps_as_polled_ones(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish_batch("t", [b"a", b"b"])
    with any_client.consumer("g", "t") as c:
        polled = c.poll(timeout=1)
        c.seek(TopicPartition("t", 0), 0)
        with c.transaction(max_messages=10, timeout=1) as batch:
            claimed = list(batch)
    assert [m.timestamp for m in claimed] == [m.timestamp for m in polled]
    assert [m.timestamp.tzinfo for m in claimed] == [m.timestamp.tzinfo for m in polled]
