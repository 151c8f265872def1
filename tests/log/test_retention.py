"""Retention deletes old messages only once every active group has read them."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from typer.testing import CliRunner

import postroom
from postroom.cli.main import app
from postroom.errors import InvalidArgument, TopicNotFound


def age_messages(conninfo: str, hours: int) -> None:
    with psycopg.connect(conninfo) as conn:
        conn.execute(
            "UPDATE postroom.messages SET created_at = created_at - make_interval(hours => %s)",
            [hours],
        )


def test_retention_keeps_what_an_active_group_has_not_read(any_client: postroom.Client) -> None:
    any_client.create_topic("t", retention=timedelta(hours=1))
    any_client.create_topic("forever")
    any_client.publish_batch("t", list(range(10)))
    any_client.publish_batch("forever", list(range(10)))
    with any_client.consumer("slow", "t") as consumer:
        consumer.poll(timeout=1, max_messages=4)
        consumer.commit()
    assert any_client.apply_retention() == 0  # nothing is old yet
    age_messages(any_client.conninfo, 2)
    assert any_client.apply_retention() == 4  # old, but only 0..3 were read by the slow group
    info = any_client.describe_topic("t").partition_info[0]
    assert (info.low_water, info.high_water, info.messages) == (4, 10, 6)
    assert any_client.describe_topic("forever").partition_info[0].messages == 10
    with any_client.consumer("slow", "t") as consumer:
        assert [m.offset for m in consumer.poll(timeout=1, max_messages=100)] == list(range(4, 10))
        consumer.commit()
    assert any_client.apply_retention(batch_size=2) == 2  # batches bound each call
    assert any_client.apply_retention() == 4
    assert any_client.describe_topic("t").partition_info[0].messages == 0
    # A new group starts at the earliest retained offset, which is now the high-water mark.
    any_client.publish("t", "fresh")
    with any_client.consumer("new", "t") as consumer:
        assert [m.text() for m in consumer.poll(timeout=1)] == ["fresh"]


def test_an_expired_group_does_not_pin_the_log(any_client: postroom.Client) -> None:
    any_client.create_topic("t", retention=timedelta(minutes=5))
    any_client.publish_batch("t", list(range(5)))
    with any_client.consumer("abandoned", "t") as consumer:
        consumer.poll(timeout=1, max_messages=1)
        consumer.commit()
    age_messages(any_client.conninfo, 1)
    assert any_client.apply_retention() == 1
    with psycopg.connect(any_client.conninfo) as conn:
        conn.execute("UPDATE postroom.cursors SET updated_at = now() - interval '8 days'")
        # Its member left just now: the group stays active for the group expiry from then.
        assert any_client.apply_retention() == 0
        conn.execute("UPDATE postroom.group_activity SET active_at = now() - interval '8 days'")
    assert any_client.apply_retention() == 4
    group = any_client.describe_group("abandoned")
    # Messages it will never see: lost, not lag (issue 23, item 7).
    assert (group.lag, group.partitions[0].lost) == (0, 4)


def test_alter_topic_retention(any_client: postroom.Client, dsn: str) -> None:
    any_client.create_topic("t", max_lag=5)
    any_client.alter_topic("t", retention=timedelta(hours=2))
    info = any_client.describe_topic("t")
    assert (info.retention_seconds, info.max_lag) == (7200, 5)  # the rest stays as it was
    any_client.alter_topic("t", retention=None)
    assert any_client.describe_topic("t").retention_seconds is None
    for bad in (timedelta(0), timedelta(seconds=-1), 3600, "1h"):
        with pytest.raises(InvalidArgument, match="invalid retention"):
            any_client.alter_topic("t", retention=bad)  # type: ignore[arg-type]
    with pytest.raises(TopicNotFound, match="nope"):
        any_client.alter_topic("nope", retention=timedelta(hours=1))


def test_alter_topic_retention_takes_effect_at_once(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish_batch("t", list(range(3)))
    age_messages(any_client.conninfo, 2)
    assert any_client.apply_retention() == 0  # no retention: kept forever
    any_client.alter_topic("t", retention=timedelta(hours=1))
    assert any_client.apply_retention() == 3


def test_topic_alter_retention_cli(client: postroom.Client, dsn: str) -> None:
    client.create_topic("t")
    runner = CliRunner()
    result = runner.invoke(app, ["--url", dsn, "topic", "alter", "t", "--retention", "1d12h"])
    assert result.exit_code == 0, result.output
    assert client.describe_topic("t").retention_seconds == 129600
    result = runner.invoke(app, ["--url", dsn, "topic", "alter", "t", "--retention", "none"])
    assert result.exit_code == 0, result.output
    assert client.describe_topic("t").retention_seconds is None
    for bad in ("0s", "soon"):
        result = runner.invoke(app, ["--url", dsn, "topic", "alter", "t", "--retention", bad])
        assert result.exit_code == 1 and "invalid duration" in result.output, result.output
        assert repr(bad) in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["--url", dsn, "topic", "alter", "nope", "--retention", "1d"])
    assert result.exit_code == 1 and "nope" in result.output, result.output
    assert "Traceback" not in result.output
