"""A group whose rows another session holds locked (an admin's ``SELECT ... FOR UPDATE``, a
rebalance in progress) makes a joining member wait for the next heartbeat, never raise a raw
``LockNotAvailable`` out of ``poll()``, ``commit()`` or ``close()`` (issue 23, item 12); once the
lock goes, the member joins and takes its partitions."""

from __future__ import annotations

import time

import psycopg

import postroom


def test_a_locked_group_row_delays_a_join_without_a_raw_lock_error(
    any_client: postroom.Client,
) -> None:
    any_client.create_topic("t", partitions=2)
    any_client.publish_batch("t", list(range(10)))
    # The first member keeps a long session: its heartbeats must not lapse on a loaded box
    # while the test holds the group row (only the join waits on it).
    first = any_client.consumer("g", "t", session_timeout=10)
    assert first.poll(timeout=5, max_messages=2)
    with psycopg.connect(any_client.conninfo) as admin:
        admin.execute("SELECT FROM postroom.groups WHERE group_name = 'g' FOR UPDATE")
        second = any_client.consumer("g", "t", session_timeout=2)
        # Before the fix: psycopg.errors.LockNotAvailable out of the join in poll().
        assert second.poll(timeout=0.1) == []
        first.commit()
        first.poll(timeout=0.1)
        first.commit()
        assert second.poll(timeout=0.1) == []
        first.close()
        admin.rollback()  # the lock goes: the next heartbeat registers the second member
    deadline = time.monotonic() + 30
    while second.assignment() != {postroom.TopicPartition("t", 0), postroom.TopicPartition("t", 1)}:
        assert time.monotonic() < deadline, second.assignment()
        second.poll(timeout=0.5)
    second.close()
