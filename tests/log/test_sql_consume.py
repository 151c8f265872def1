"""Consuming from SQL (postroom.consume/commit/seek/lag), and groups deleted under running
members."""

from __future__ import annotations

import psycopg
import pytest

import postroom
from postroom import TopicPartition


def sql(client: postroom.Client, statement: str, params: list[object]) -> list[tuple[object, ...]]:
    with psycopg.connect(client.conninfo) as conn:
        cur = conn.execute(statement.encode(), params)
        return cur.fetchall() if cur.description else []


def test_consume_in_sql_claims_in_the_callers_transaction(client: postroom.Client) -> None:
    client.create_topic("orders", partitions=2)
    client.publish_batch("orders", [{"value": f"m{i}", "partition": 0} for i in range(5)])
    sql(client, "CREATE TABLE effects (value text)", [])
    with psycopg.connect(client.conninfo) as conn:
        rows = conn.execute(
            "SELECT \"offset\", convert_from(value, 'UTF8') "
            "FROM postroom.consume('billing', 'orders', 0, 3)"
        ).fetchall()
        assert rows == [(0, "m0"), (1, "m1"), (2, "m2")]
        conn.rollback()  # nothing claimed: the same messages come again
        rows = conn.execute(
            "SELECT \"offset\" FROM postroom.consume('billing', 'orders', 0, 3)"
        ).fetchall()
        assert rows == [(0,), (1,), (2,)]
        conn.execute("INSERT INTO effects VALUES ('done')")
    assert sql(client, "SELECT * FROM postroom.lag('billing', 'orders')", []) == [
        (0, 3, 5, 2),
        (1, None, 0, 0),
    ]
    sql(client, "SELECT postroom.seek('billing', 'orders', 0, 1)", [])
    sql(client, "SELECT postroom.commit('billing', 'orders', 0, 4)", [])
    assert client.describe_group("billing").partitions[0].committed == 4
    with pytest.raises(psycopg.Error, match="out of range"):
        sql(client, "SELECT postroom.commit('billing', 'orders', 0, 9)", [])
    with pytest.raises(psycopg.errors.NoDataFound, match="unknown topic 'nope'"):
        sql(client, "SELECT * FROM postroom.consume('billing', 'nope', 0)", [])


def test_sql_consumers_are_refused_on_a_partition_a_member_holds(client: postroom.Client) -> None:
    client.create_topic("orders")
    client.publish("orders", "x")
    with client.consumer("billing", "orders") as member:
        member.assignment()
        with pytest.raises(psycopg.Error, match="held by member"):
            sql(client, "SELECT * FROM postroom.consume('billing', 'orders', 0)", [])
    assert sql(client, "SELECT \"offset\" FROM postroom.consume('billing', 'orders', 0)", []) == [
        (0,)
    ]


@pytest.mark.parametrize("transactional", [False, True])
def test_members_go_on_after_their_group_is_deleted(
    client: postroom.Client, transactional: bool
) -> None:
    client.create_topic("t")
    client.publish("t", "before")
    tp = TopicPartition("t", 0)
    with client.consumer("g", "t") as consumer:
        if transactional:
            with consumer.transaction() as batch:
                assert [m.text() for m in batch] == ["before"]
        else:
            assert [m.text() for m in consumer.poll(timeout=1)] == ["before"]
            consumer.commit()
        client.delete_group("g")
        client.publish("t", "after")
        if transactional:
            with consumer.transaction(timeout=5) as batch:
                # The cursor starts anew, at the earliest retained message.
                assert [m.text() for m in batch] == ["before", "after"]
        else:
            assert [m.text() for m in consumer.poll(timeout=5)] == ["after"]
            consumer.commit()
        assert consumer.committed(tp) == 2  # commits are stored again
