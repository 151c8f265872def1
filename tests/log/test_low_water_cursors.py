"""A group whose cursor fell below the low-water mark (retention deleted what it had not read
while it was expired) is not wedged (issue 23, item 7): its lag counts from the low-water mark
and the rest is reported lost, admission counts it from there, and the next member to take the
partition moves the cursor up, as Kafka's auto.offset.reset does for an out-of-range offset."""

from __future__ import annotations

from datetime import timedelta

import psycopg

import postroom

from .test_group_hygiene import age_all


def expired_below_low_water(client: postroom.Client, group: str, *, max_lag: int | None) -> None:
    """Topic t: ``group`` read 10 of 500 messages, expired, and retention deleted all 500."""
    client.create_topic("t", retention=timedelta(minutes=1), group_ttl=timedelta(hours=1))
    client.publish_batch("t", list(range(500)))
    with client.consumer(group, "t") as consumer:
        consumer.poll(timeout=1, max_messages=10)
        consumer.commit()
    age_all(client, "2 hours")
    assert client.apply_retention() == 500
    if max_lag is not None:
        client.alter_topic("t", max_lag=max_lag)


def test_a_group_below_the_low_water_mark_reports_its_missed_messages_as_lost_not_lag(
    client: postroom.Client,
) -> None:
    expired_below_low_water(client, "late", max_lag=None)
    [part] = client.describe_group("late").partitions
    assert (part.committed, part.high_water, part.lag, part.lost) == (10, 500, 0, 490)
    [group] = [g for g in client.list_groups() if g.name == "late"]
    assert group.lag == 0
    with psycopg.connect(client.conninfo) as conn:
        assert conn.execute("SELECT lag FROM postroom.lag('late', 't')").fetchall() == [(0,)]


def test_a_returning_group_below_the_low_water_mark_moves_up_to_it_and_goes_on(
    any_client: postroom.Client,
) -> None:
    client = any_client
    expired_below_low_water(client, "late", max_lag=100)
    with client.consumer("late", "t") as consumer:
        assert consumer.poll(timeout=0) == []
        assert consumer.position(postroom.TopicPartition("t", 0)) == 500
        client.publish("t", "new")  # admitted: the group is not 490 behind
        assert [m.text() for m in consumer.poll(timeout=5)] == ["new"]
        consumer.commit()
    [part] = client.describe_group("late").partitions
    assert (part.committed, part.lag, part.lost) == (501, 0, 0)


def test_a_transactional_group_below_the_low_water_mark_is_not_behind_by_the_deleted(
    any_client: postroom.Client,
) -> None:
    client = any_client
    expired_below_low_water(client, "late", max_lag=100)
    with client.consumer("late", "t") as consumer:
        with consumer.transaction(timeout=0) as batch:
            assert batch.messages == []
        [part] = client.describe_group("late").partitions
        assert (part.committed, part.lag, part.lost) == (500, 0, 0)
        client.publish_batch("t", ["x", "y"])
        with consumer.transaction(timeout=5) as batch:
            assert [m.offset for m in batch] == [500, 501]
    assert client.describe_group("late").lag == 0


def test_admission_counts_a_group_below_the_low_water_mark_from_the_low_water_mark(
    client: postroom.Client,
) -> None:
    expired_below_low_water(client, "late", max_lag=100)
    with psycopg.connect(client.conninfo) as conn:  # the group is active again, no member
        conn.execute("UPDATE postroom.cursors SET updated_at = now()")
    client.publish_batch("t", list(range(99)))  # 99 behind the low-water mark: admitted
    [part] = client.describe_group("late").partitions
    assert (part.lag, part.lost) == (99, 490)
    client.publish("t", "one more")
    try:
        client.publish("t", "refused")
    except postroom.errors.BacklogFull as exc:
        assert "100 messages behind" in str(exc)
    else:
        raise AssertionError("the 101st message was admitted")
