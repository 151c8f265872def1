"""A producer role's binary COPY cannot poison readers nor leave gaps (issue 23, items 1 and 2).
Each test logs in AS a role granted only "producer" and writes inside its own reservation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom

from ..roles import login_role as make_login_role

REFUSED = psycopg.errors.CheckViolation


@pytest.fixture
def producer_url(client: postroom.Client) -> Iterator[str]:
    """The URL of a LOGIN role granted "producer" on every topic, dropped after the test."""
    with make_login_role(client.conninfo, "postroom_prod_role") as name:
        client.grant(name, "producer", topics=["*"])
        yield make_conninfo(client.conninfo, user=name)


def topic_id(conn: psycopg.Connection[Any], name: str = "t") -> int:
    row = conn.execute("SELECT id FROM postroom.topics WHERE name = %s", [name]).fetchone()
    assert row is not None
    return int(row[0])


def reserve(conn: psycopg.Connection[Any], tid: int, count: int, partition: int = 0) -> int:
    row = conn.execute(
        "SELECT first_offset FROM postroom.reserve_offsets(%s, %s, %s)",
        [[tid], [partition], [count]],
    ).fetchone()
    assert row is not None
    return int(row[0])


def copy_rows(conn: psycopg.Connection[Any], columns: str, rows: list[tuple[Any, ...]]) -> None:
    with conn.cursor().copy(f"COPY postroom.messages ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def high_water(client: postroom.Client) -> int:
    return client.describe_topic("t").high_water


@pytest.mark.parametrize(
    "created_at", ["infinity", "-infinity", "2400-01-01 00:00:00+00", "2000-01-01 00:00:00+00"]
)
def test_producer_role_cannot_copy_a_created_at_of_its_choosing(
    client: postroom.Client, producer_url: str, created_at: str
) -> None:
    client.create_topic("t")
    client.publish("t", "before")
    with psycopg.connect(producer_url) as conn:
        tid = topic_id(conn)
        first = reserve(conn, tid, 1)
        with pytest.raises(REFUSED, match="created_at"):
            copy_rows(
                conn,
                'topic_id, partition, "offset", value, created_at',
                [(tid, 0, first, b"poison", created_at)],
            )
    # Readers are not poisoned: what is there is delivered, and the partition goes on.
    client.publish("t", "after")
    with client.consumer("g", "t") as consumer:
        assert [m.text() for m in consumer.poll(timeout=5)] == ["before", "after"]


def test_producer_role_copy_with_the_default_created_at_is_written(
    client: postroom.Client, producer_url: str
) -> None:
    client.create_topic("t")
    with psycopg.connect(producer_url) as conn:
        tid = topic_id(conn)
        first = reserve(conn, tid, 2)
        copy_rows(conn, 'topic_id, partition, "offset", value', [(tid, 0, first, b"a")])
        # now() is the transaction's start; a later reading of the clock is the server's too.
        copy_rows(
            conn,
            'topic_id, partition, "offset", value, created_at',
            [(tid, 0, first + 1, b"b", conn.execute("SELECT clock_timestamp()").fetchone()[0])],  # type: ignore[index]
        )
    with client.consumer("g", "t") as consumer:
        assert [m.text() for m in consumer.poll(timeout=5)] == ["a", "b"]


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("key", b"k" * 4097),
        ("value", b"v" * (1024 * 1024 + 1)),
        ("headers", json.dumps({f"h{i}": "x" for i in range(65)})),
        ("headers", json.dumps({"big": "x" * 70000})),
        ("headers", json.dumps(["not", "an", "object"])),
        ("headers", json.dumps({"": "empty name"})),
    ],
)
def test_producer_role_copy_is_held_to_the_message_limits(
    client: postroom.Client, producer_url: str, column: str, value: object
) -> None:
    """Sizes and header shape are the table's CHECKs (migration 0003): COPY meets them too."""
    client.create_topic("t")
    with psycopg.connect(producer_url) as conn:
        tid = topic_id(conn)
        first = reserve(conn, tid, 1)
        row: dict[str, object] = {"value": b"v", column: value}
        with pytest.raises(REFUSED):
            copy_rows(
                conn,
                f'topic_id, partition, "offset", {", ".join(row)}',
                [(tid, 0, first, *row.values())],
            )
    assert high_water(client) == 0


@pytest.mark.parametrize("count", [1, 1_000_000])
def test_a_reservation_left_unwritten_is_refused_at_commit(
    client: postroom.Client, producer_url: str, count: int
) -> None:
    client.create_topic("t", max_lag=10)
    client.publish("t", "first")
    with psycopg.connect(producer_url) as conn:
        tid = topic_id(conn)
        reserve(conn, tid, count)
        with pytest.raises(REFUSED, match="reserved by this transaction and 0 of them written"):
            conn.commit()
    assert high_water(client) == 1
    # No gap: the next write takes the next offset, and a group reads on.
    assert client.publish("t", "second").offset == 1
    with client.consumer("g", "t") as consumer:
        assert [m.text() for m in consumer.poll(timeout=5)] == ["first", "second"]


def test_a_reservation_written_in_part_is_refused_at_commit(
    client: postroom.Client, producer_url: str
) -> None:
    client.create_topic("t", partitions=2)
    with psycopg.connect(producer_url) as conn:
        tid = topic_id(conn)
        first = reserve(conn, tid, 3)
        copy_rows(
            conn,
            'topic_id, partition, "offset", value',
            [(tid, 0, first, b"a"), (tid, 0, first + 2, b"c")],  # offset first + 1 left out
        )
        with pytest.raises(REFUSED, match="2 of them written"):
            conn.commit()
        # Filled on one partition, not on the other: refused as a whole.
        first = reserve(conn, tid, 1, partition=0)
        reserve(conn, tid, 1, partition=1)
        copy_rows(conn, 'topic_id, partition, "offset", value', [(tid, 0, first, b"a")])
        with pytest.raises(REFUSED, match="partition 1"):
            conn.commit()
    assert high_water(client) == 0


def test_reservations_filled_in_one_transaction_commit(
    client: postroom.Client, producer_url: str
) -> None:
    """Two reservations on one partition in one transaction extend one range; with a publish in
    between, every offset is written and the commit goes through. The publish in the
    transaction is staged and takes its offset at COMMIT (migration 0017), after the rows the
    transaction copied itself."""
    client.create_topic("t")
    with psycopg.connect(producer_url) as conn:
        tid = topic_id(conn)
        first = reserve(conn, tid, 2)
        copy_rows(
            conn,
            'topic_id, partition, "offset", value',
            [(tid, 0, first, b"a"), (tid, 0, first + 1, b"b")],
        )
        conn.execute("SELECT * FROM postroom.publish('t', 'c'::bytea)")
        second = reserve(conn, tid, 1)
        copy_rows(conn, 'topic_id, partition, "offset", value', [(tid, 0, second, b"d")])
    assert high_water(client) == 4
    with client.consumer("g", "t") as consumer:
        assert [m.text() for m in consumer.poll(timeout=5)] == ["a", "b", "d", "c"]
