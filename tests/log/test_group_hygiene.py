"""Group hygiene: a group's last activity, ``group_ttl``, one notion of an active group for
retention and ``group list``, and expiry that is logged, never silent."""

from __future__ import annotations

import logging
from datetime import timedelta

import psycopg
import pytest

import postroom


def sql(client: postroom.Client, statement: str) -> None:
    with psycopg.connect(client.conninfo) as conn:
        conn.execute(statement.encode())


def age_all(client: postroom.Client, interval: str) -> None:
    sql(client, f"UPDATE postroom.messages SET created_at = created_at - interval '{interval}'")
    sql(client, f"UPDATE postroom.cursors SET updated_at = updated_at - interval '{interval}'")
    sql(client, f"UPDATE postroom.group_activity SET active_at = active_at - interval '{interval}'")


def state(client: postroom.Client, group: str) -> str:
    [info] = [g for g in client.list_groups() if g.name == group]
    return info.state


def test_a_left_group_expires_after_its_ttl_and_the_expiry_is_logged(
    client: postroom.Client, caplog: pytest.LogCaptureFixture
) -> None:
    client.create_topic("t", retention=timedelta(minutes=1), group_ttl=timedelta(hours=1))
    client.publish_batch("t", list(range(6)))
    with client.consumer("abandoned", "t") as consumer:
        consumer.poll(timeout=1, max_messages=2)
        consumer.commit()
        assert state(client, "abandoned") == "active"
    assert state(client, "abandoned") == "idle"
    sql(client, "UPDATE postroom.messages SET created_at = created_at - interval '10 minutes'")
    sql(client, "UPDATE postroom.cursors SET updated_at = updated_at - interval '2 hours'")
    # Its commit is old, but its member left just now: the group is still active.
    with caplog.at_level(logging.WARNING, logger="postroom.groups"):
        assert client.apply_retention() == 2
    assert not caplog.records
    sql(client, "UPDATE postroom.group_activity SET active_at = active_at - interval '2 hours'")
    assert state(client, "abandoned") == "expired"
    with caplog.at_level(logging.WARNING, logger="postroom.groups"):
        assert client.apply_retention() == 4  # it no longer holds the log back
    [record] = caplog.records
    assert "consumer group 'abandoned' expired on topic 't'" in record.getMessage()
    # Only ignored, never deleted: the cursor is still there.
    assert client.describe_group("abandoned").partitions[0].committed == 2


def test_a_live_member_keeps_its_group_active_whatever_its_last_commit(
    client: postroom.Client,
) -> None:
    client.create_topic("t", retention=timedelta(minutes=1), group_ttl=timedelta(hours=1))
    client.publish_batch("t", list(range(4)))
    with client.consumer("slow", "t") as consumer:
        consumer.assignment()
        consumer.commit({postroom.TopicPartition("t", 0): 1})
        age_all(client, "1 day")
        assert state(client, "slow") == "active"
        assert client.apply_retention() == 1  # only what the live member's group read
    age_all(client, "1 day")  # its leave is now a day old too
    assert state(client, "slow") == "expired"
    assert client.apply_retention() == 3


def test_the_default_ttl_is_seven_days_or_the_retention_runs_group_expiry(
    client: postroom.Client,
) -> None:
    client.create_topic("t", retention=timedelta(minutes=1))
    client.publish_batch("t", list(range(3)))
    client.reset_group("cursor-only", "t", to="earliest")  # no member ever: cursor only
    age_all(client, "6 days")
    assert state(client, "cursor-only") == "idle"
    assert client.apply_retention() == 0
    assert client.apply_retention(group_expiry=timedelta(days=5)) == 3
    client.publish("t", "new")
    age_all(client, "2 days")  # 8 days without activity
    assert state(client, "cursor-only") == "expired"
    assert client.apply_retention() == 1
