"""A member's ``close()`` leaves its group at once: the heartbeat loop's wait for a group
change ends when the member leaves, not at the end of its slice."""

from __future__ import annotations

import threading

import pytest

import postroom


def test_a_close_does_not_wait_out_the_heartbeat_loops_wait(
    any_client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found timing a consumer's close: 190-200 ms, the heartbeat loop's 0.2 s wait slice
    (now 6-10 ms). With the slice made 60 s and heartbeats 20 s apart, the old loop kept
    ``close()`` waiting up to 20 s, past this test's 10 s deadline."""
    from postroom.log import membership, membership_async

    monkeypatch.setattr(membership, "WAIT_SLICE", 60.0)
    monkeypatch.setattr(membership_async, "WAIT_SLICE", 60.0)
    any_client.create_topic("t", partitions=2)
    any_client.publish_batch("t", [1, 2, 3])
    consumer = any_client.consumer("g", "t", session_timeout=60)
    assert len(consumer.poll(timeout=10, max_messages=10)) == 3  # joined, heartbeating
    consumer.commit()
    closing = threading.Thread(target=consumer.close)
    closing.start()
    closing.join(10)
    assert not closing.is_alive(), "close() waited for the heartbeat loop's wait to end"
    [group] = [g for g in any_client.list_groups() if g.name == "g"]
    assert (group.members, group.state) == (0, "idle")  # left: its partitions move now
