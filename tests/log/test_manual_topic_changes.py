"""Consumers with manual ``partitions=`` (and peeks without a group) notice their topic being
deleted (a clear ``TopicNotFound``) or deleted and created again (read afresh) instead of going
silent (issue 10, item 9)."""

from __future__ import annotations

import time

import pytest

import postroom
from postroom import TopicPartition
from postroom.errors import InvalidArgument, TopicNotFound

DEADLINE = 20  # the topic metadata is re-read every 5 s


def poll_values(consumer: postroom.Consumer, wanted: int) -> list[tuple[int, str]]:
    got: list[tuple[int, str]] = []
    deadline = time.monotonic() + DEADLINE
    while len(got) < wanted:
        assert time.monotonic() < deadline, f"got {got}"
        got += [(m.offset, m.text()) for m in consumer.poll(timeout=0.2)]
    return got


@pytest.mark.parametrize("group", ["manual", None])
def test_a_topic_created_again_is_read_afresh(client: postroom.Client, group: str | None) -> None:
    client.create_topic("t", partitions=2)
    client.publish_batch("t", [{"value": f"old{i}", "partition": 1} for i in range(3)])
    tp = TopicPartition("t", 1)
    with client.consumer(group, "t", partitions=[tp], auto_offset_reset="earliest") as consumer:
        assert poll_values(consumer, 3) == [(0, "old0"), (1, "old1"), (2, "old2")]
        if group is not None:
            consumer.commit()
        client.delete_topic("t")
        client.create_topic("t", partitions=2)
        client.publish_batch("t", [{"value": f"new{i}", "partition": 1} for i in range(2)])
        assert poll_values(consumer, 2) == [(0, "new0"), (1, "new1")]
        assert consumer.assignment() == {tp}
        if group is not None:
            consumer.commit()
            assert consumer.committed(tp) == 2


def test_a_deleted_topic_is_a_clear_error(client: postroom.Client) -> None:
    client.create_topic("t")
    with client.consumer("manual", "t", partitions=[TopicPartition("t", 0)]) as consumer:
        consumer.poll(timeout=0)
        client.delete_topic("t")
        deadline = time.monotonic() + DEADLINE
        with pytest.raises(TopicNotFound, match="topic 't' was deleted while this consumer"):
            while time.monotonic() < deadline:
                consumer.poll(timeout=0.2)


def test_a_topic_created_again_without_the_partition_is_a_clear_error(
    client: postroom.Client,
) -> None:
    client.create_topic("t", partitions=3)
    with client.consumer("manual", "t", partitions=[TopicPartition("t", 2)]) as consumer:
        consumer.poll(timeout=0)
        client.delete_topic("t")
        client.create_topic("t", partitions=1)
        deadline = time.monotonic() + DEADLINE
        with pytest.raises(InvalidArgument, match="partition 2 no longer exists"):
            while time.monotonic() < deadline:
                consumer.poll(timeout=0.2)
