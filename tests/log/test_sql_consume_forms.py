"""The SQL consumer's text and jsonb forms, and one call over all partitions of a topic
(partition NULL), shared fairly among them (migration 0021)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom

from ..roles import login_role


def sql(conninfo: str, statement: str, params: list[object] | None = None) -> list[Any]:
    with psycopg.connect(conninfo) as conn:
        return conn.execute(statement.encode(), params).fetchall()


def test_consume_text_and_json_return_text_keys_and_decoded_values(
    client: postroom.Client,
) -> None:
    client.create_topic("orders")
    client.publish("orders", {"id": 1, "total": 9.5}, key="customer-7")
    client.publish("orders", "plain text", key="customer-8")
    [(partition, offset, key, value)] = sql(
        client.conninfo,
        "SELECT partition, \"offset\", key, value FROM postroom.consume_json('a', 'orders', 0, 1)",
    )
    assert (partition, offset, key, value) == (0, 0, "customer-7", {"id": 1, "total": 9.5})
    rows = sql(
        client.conninfo,
        "SELECT partition, \"offset\", key, value FROM postroom.consume_text('b', 'orders')",
    )
    assert rows == [
        (0, 0, "customer-7", '{"id":1,"total":9.5}'),
        (0, 1, "customer-8", "plain text"),
    ]


def test_consume_json_of_a_value_that_is_not_json_raises_and_claims_nothing(
    client: postroom.Client,
) -> None:
    client.create_topic("orders")
    client.publish("orders", b"\x00not json")
    with pytest.raises(psycopg.Error):
        sql(client.conninfo, "SELECT * FROM postroom.consume_json('g', 'orders')")
    [(offset,)] = sql(
        client.conninfo, "SELECT \"offset\" FROM postroom.consume_topic('g', 'orders')"
    )
    assert offset == 0  # still there: the failed statement rolled its claim back


def test_consume_over_all_partitions_shares_the_limit_fairly(client: postroom.Client) -> None:
    client.create_topic("orders", partitions=3)
    client.publish_batch("orders", [{"value": i, "partition": 0} for i in range(10)])
    client.publish_batch("orders", [{"value": i, "partition": 1} for i in range(10)])
    client.publish_batch("orders", [{"value": 0, "partition": 2}])
    rows = sql(
        client.conninfo,
        "SELECT partition, \"offset\" FROM postroom.consume_topic('g', 'orders', NULL, 7)",
    )
    # The short backlog is taken whole, the rest split evenly; each partition in offset order.
    assert Counter(p for p, _ in rows) == {0: 3, 1: 3, 2: 1}
    assert rows == sorted(rows)
    again = sql(
        client.conninfo, "SELECT partition, \"offset\" FROM postroom.consume_topic('g', 'orders')"
    )
    assert again == [(0, o) for o in range(3, 10)] + [(1, o) for o in range(3, 10)]
    assert sql(client.conninfo, "SELECT * FROM postroom.consume_topic('g', 'orders')") == []


def test_consume_over_all_partitions_leaves_out_those_a_live_member_holds(
    client: postroom.Client,
) -> None:
    client.create_topic("orders", partitions=2)
    client.publish_batch("orders", [{"value": i, "partition": i % 2} for i in range(4)])
    with client.consumer("g", "orders", member_id="m") as member:
        member.poll(timeout=1)  # joins: both partitions are its
        assert sql(client.conninfo, "SELECT * FROM postroom.consume_text('g', 'orders')") == []
    rows = sql(client.conninfo, "SELECT partition FROM postroom.consume_text('other', 'orders')")
    assert sorted(rows) == [(0,), (0,), (1,), (1,)]


def test_a_consumer_role_may_use_the_sql_consumer_forms(client: postroom.Client, dsn: str) -> None:
    client.create_topic("orders")
    client.publish("orders", {"id": 1})
    with login_role(dsn, "sqlconsumer") as role:
        client.grant(role, "consumer", groups=["g"])
        rows = sql(
            make_conninfo(dsn, user=role),
            "SELECT value FROM postroom.consume_json('g', 'orders')",
        )
    assert rows == [({"id": 1},)]
