"""``max_poll_interval`` (Kafka's ``max.poll.interval.ms``): a member that stops polling leaves
its group, so its partitions move; its next ``commit()`` is refused and ``poll()`` rejoins."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import postroom
from postroom import TopicPartition
from postroom.errors import Fenced, InvalidArgument

BOTH = {TopicPartition("t", 0), TopicPartition("t", 1)}


def poll_until(
    consumer: postroom.Consumer, wanted: set[TopicPartition], timeout: float = 15
) -> list[postroom.Message]:
    """Poll ``consumer`` until its assignment is ``wanted``; the messages it got meanwhile."""
    got: list[postroom.Message] = []
    deadline = time.monotonic() + timeout
    while consumer.assignment() != wanted:
        assert time.monotonic() < deadline, f"assignment {consumer.assignment()} != {wanted}"
        got += consumer.poll(timeout=0.1)
    return got


def test_a_member_that_stops_polling_leaves_and_its_next_poll_rejoins(
    client: postroom.Client, caplog: pytest.LogCaptureFixture
) -> None:
    client.create_topic("t", partitions=2)
    client.publish_batch("t", [{"value": f"m{i}", "partition": i % 2} for i in range(4)])
    stuck = client.consumer("g", "t", session_timeout=1, max_poll_interval=0.6, member_id="stuck")
    with caplog.at_level(logging.WARNING, logger="postroom.groups"):
        assert stuck.assignment() == BOTH
        taken = stuck.poll(timeout=1, max_messages=10)
        assert len(taken) == 4  # handled, never committed: the member is stuck from here on
        with client.consumer("g", "t", session_timeout=1, member_id="other") as other:
            got = poll_until(other, BOTH)  # the stuck member left: both partitions moved
            assert any(
                "stuck" in r.getMessage() and "did not poll" in r.getMessage()
                for r in caplog.records
            )
            with pytest.raises(Fenced, match="max_poll_interval"):
                stuck.commit()
            got += other.poll(timeout=1, max_messages=10)
            assert sorted(m.text() for m in got) == ["m0", "m1", "m2", "m3"]  # from the cursor
            other.commit()
            # The stuck member's next poll rejoins the group; the partitions are split again.
            deadline = time.monotonic() + 15
            while len(stuck.assignment()) != 1 or len(other.assignment()) != 1:
                assert time.monotonic() < deadline, "no rebalance after the rejoin"
                stuck.poll(timeout=0.1)
                other.poll(timeout=0.1)
            stuck.commit()  # a member again: its commit is accepted
    stuck.close()
    assert client.describe_group("g").lag == 0


def test_polling_in_time_keeps_the_partitions(client: postroom.Client) -> None:
    client.create_topic("t", partitions=2)
    with client.consumer("g", "t", session_timeout=1, max_poll_interval=0.5) as consumer:
        assert consumer.assignment() == BOTH
        for _ in range(15):  # 1.5 s: three intervals, each poll within one
            consumer.poll(timeout=0.1)
            assert consumer.assignment() == BOTH
        consumer.commit()


def test_a_bad_max_poll_interval_is_refused(client: postroom.Client) -> None:
    for bad in (0, -1, "300", True):
        with pytest.raises(InvalidArgument, match="invalid max_poll_interval"):
            client.consumer("g", "t", max_poll_interval=bad)  # type: ignore[arg-type]


def test_a_runner_member_stuck_in_its_handler_leaves_and_comes_back(
    client: postroom.Client, caplog: pytest.LogCaptureFixture
) -> None:
    client.create_topic("t")
    calls: list[str] = []
    done = threading.Event()

    @client.subscribe("t", group="g", session_timeout=1, max_poll_interval=0.3)
    def handle(message: postroom.Message) -> None:
        calls.append(message.text())
        if len(calls) == 1:
            # Stuck well past max_poll_interval (the member leaves meanwhile), then returns.
            done.wait(1.5)
        elif len(calls) >= 2:
            done.set()

    with pytest.raises(InvalidArgument, match="invalid max_poll_interval 0"):
        client.subscribe("t", group="g", max_poll_interval=0)(print)
    client.publish("t", "x")
    runner = client.runner()
    thread = threading.Thread(target=runner.run, kwargs={"handle_signals": False})
    with caplog.at_level(logging.WARNING):
        thread.start()
        try:
            assert done.wait(30), calls
            deadline = time.monotonic() + 15
            while client.describe_group("g").lag != 0:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            runner.stop()
            thread.join(30)
    assert not thread.is_alive()
    assert calls[:2] == ["x", "x"]  # the stuck batch was not committed: delivered again
    messages = [r.getMessage() for r in caplog.records]
    assert any("did not poll" in m for m in messages)
    assert any("max_poll_interval" in m and "Fenced" not in m for m in messages)
