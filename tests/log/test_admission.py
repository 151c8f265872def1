"""Admission control: a topic's ``max_lag`` refuses writes (``BacklogFull``) while the slowest
active group of the partition written is that far behind, through every write path."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

import postroom
from postroom.cli.main import app
from postroom.errors import BacklogFull, InvalidArgument


def sql(client: postroom.Client, statement: str, params: list[object] | None = None) -> None:
    with psycopg.connect(client.conninfo) as conn:
        conn.execute(statement.encode(), params or [])


def high_water(client: postroom.Client, topic: str, partition: int = 0) -> int:
    return client.describe_topic(topic).partition_info[partition].high_water


def test_writes_are_refused_while_the_slowest_active_group_lags_max_lag(
    any_client: postroom.Client,
) -> None:
    any_client.create_topic("t", max_lag=5)
    any_client.publish_batch("t", list(range(5)))  # no group reads it: nothing to wait for
    any_client.reset_group("slow", "t", to="earliest")  # 5 behind
    any_client.reset_group("fast", "t", to="latest")
    with pytest.raises(BacklogFull, match=r"'t' partition 0: group 'slow' is 5 messages behind"):
        any_client.publish("t", "refused")
    with pytest.raises(BacklogFull):
        any_client.publish_batch("t", ["a", "b"])
    assert high_water(any_client, "t") == 5  # nothing of a refused write is stored
    any_client.reset_group("slow", "t", to=1)  # 4 behind: one write may pass
    any_client.publish_batch("t", ["a", "b", "c"])
    with pytest.raises(BacklogFull):
        any_client.publish("t", "refused")
    with any_client.producer(linger_ms=0) as producer:
        future = producer.send("t", "refused")
        with pytest.raises(BacklogFull):
            future.result()
    any_client.alter_topic("t", max_lag=None)  # off again
    any_client.publish("t", "accepted")
    assert high_water(any_client, "t") == 9


def test_off_by_default_and_new_partitions_inherit_it(any_client: postroom.Client) -> None:
    any_client.create_topic("free")
    any_client.reset_group("slow", "free", to="earliest")
    any_client.publish_batch("free", list(range(50)))  # no max_lag: any lag is fine
    any_client.create_topic("t", partitions=1, max_lag=2)
    any_client.add_partitions("t", 2)
    any_client.publish_batch("t", [{"value": "x", "partition": 1}] * 2)
    any_client.reset_group("slow", "t", to="earliest")
    with pytest.raises(BacklogFull, match="partition 1"):
        any_client.publish("t", "x", partition=1)
    any_client.publish("t", "x", partition=0)  # lag is per partition


def test_expired_groups_do_not_hold_writes_back(any_client: postroom.Client) -> None:
    any_client.create_topic("t", max_lag=3)
    any_client.reset_group("gone", "t", to="earliest")
    any_client.publish_batch("t", [1, 2, 3])
    with pytest.raises(BacklogFull):
        any_client.publish("t", 4)
    sql(any_client, "UPDATE postroom.cursors SET updated_at = now() - interval '2 hours'")
    with pytest.raises(BacklogFull):  # still active within the default 7 days
        any_client.publish("t", 4)
    any_client.alter_topic("t", group_ttl=timedelta(hours=1))
    any_client.publish("t", 4)  # expired under the topic's group_ttl


def test_a_group_with_a_live_member_holds_writes_back_however_old_its_commit(
    client: postroom.Client,
) -> None:
    client.create_topic("t", max_lag=2, group_ttl=timedelta(minutes=1))
    client.publish_batch("t", [1, 2])
    with client.consumer("members", "t") as consumer:
        consumer.assignment()
        consumer.commit({postroom.TopicPartition("t", 0): 0})
        sql(client, "UPDATE postroom.cursors SET updated_at = now() - interval '1 hour'")
        with pytest.raises(BacklogFull):
            client.publish("t", 3)


def test_publish_waits_up_to_its_timeout_for_the_group_to_catch_up(
    client: postroom.Client,
) -> None:
    client.create_topic("t", max_lag=1)
    client.publish("t", 0)
    client.reset_group("slow", "t", to="earliest")
    started = time.monotonic()
    with pytest.raises(BacklogFull):
        client.publish("t", 1, timeout=0.3)
    assert time.monotonic() - started >= 0.3
    result: list[Any] = []
    waiting = threading.Thread(target=lambda: result.append(client.publish("t", 1, timeout=30)))
    waiting.start()
    client.reset_group("slow", "t", to="latest")  # caught up: the waiting publish goes through
    waiting.join(timeout=30)
    assert not waiting.is_alive()
    assert [r.offset for r in result] == [1]
    with client.producer(linger_ms=0, backlog_timeout=30) as producer:
        client.reset_group("slow", "t", to=1)
        future = producer.send("t", 2)
        client.reset_group("slow", "t", to="latest")
        assert future.result(timeout=30).offset == 2


def test_a_refusal_in_the_callers_transaction_is_raised_at_once(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    any_client.create_topic("t", max_lag=1)
    any_client.publish("t", 0)
    any_client.reset_group("slow", "t", to="earliest")
    with any_connect() as conn:
        with pytest.raises(BacklogFull):
            any_client.publish("t", 1, conn=conn, timeout=30)
        conn.rollback()


def test_sql_publish_is_refused_too(client: postroom.Client) -> None:
    client.create_topic("t", max_lag=2)
    sql(client, "SELECT * FROM postroom.publish('t', 'a')")
    sql(client, "SELECT * FROM postroom.publish('t', 'b')")
    client.reset_group("slow", "t", to="earliest")
    with pytest.raises(psycopg.Error, match="backlog full on topic 't'") as caught:
        sql(client, "SELECT * FROM postroom.publish_batch('t', ARRAY['c', 'd'])")
    assert caught.value.sqlstate == "PRB01"
    sql(client, "SELECT postroom.commit('slow', 't', 0, 1)")
    sql(client, "SELECT * FROM postroom.publish('t', 'c')")
    assert high_water(client, "t") == 3


def test_bad_limits_are_one_line_errors(client: postroom.Client, dsn: str) -> None:
    for bad in (0, -3, 1.5, True):
        with pytest.raises(InvalidArgument, match=r"invalid max_lag .*: an integer >= 1"):
            client.create_topic("t", max_lag=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="invalid group_ttl"):
        client.create_topic("t", group_ttl=timedelta(0))
    assert client.list_topics() == []
    client.create_topic("t")
    with pytest.raises(InvalidArgument, match="invalid max_lag 0"):
        client.alter_topic("t", max_lag=0)
    with pytest.raises(InvalidArgument, match="invalid timeout -1"):
        client.publish("t", "x", timeout=-1)
    runner = CliRunner()
    result = runner.invoke(app, ["--url", dsn, "topic", "alter", "t", "--max-lag", "0"])
    assert result.exit_code == 1
    assert "invalid max_lag 0" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["--url", dsn, "topic", "alter", "t", "--max-lag", "lots"])
    assert result.exit_code != 0 and "invalid --max-lag 'lots'" in result.output
    result = runner.invoke(
        app, ["--url", dsn, "topic", "alter", "t", "--max-lag", "10", "--group-ttl", "1d"]
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["--url", dsn, "topic", "create", "u", "--max-lag", "1"])
    assert result.exit_code == 0, result.output
    info = client.describe_topic("t")
    assert (info.max_lag, info.group_ttl_seconds) == (10, 86400)
    result = runner.invoke(app, ["--url", dsn, "topic", "describe", "t"])
    assert "max lag 10, group ttl 1d" in result.output
    client.reset_group("g", "t", to="earliest")
    client.publish_batch("t", list(range(10)))
    with pytest.raises(BacklogFull):
        client.publish("t", "x")
