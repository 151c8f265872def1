"""Consumer groups: membership, sticky even assignment, cooperative hand-over, fencing, static
membership and callbacks, in one process (tests/log/test_group_processes.py kills processes)."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

import postroom
from postroom import TopicPartition
from postroom.errors import Fenced, InstanceFenced, InvalidArgument, InvalidName, OffsetOutOfRange

SESSION = 1.0


def settle(consumers: list[postroom.Consumer], done: Callable[[], bool], limit: float = 15) -> None:
    """Poll every consumer (assignment changes apply in poll) until ``done()`` or the limit."""
    deadline = time.monotonic() + limit
    while not done():
        assert time.monotonic() < deadline, [sorted(c.assignment()) for c in consumers]
        for consumer in consumers:
            consumer.poll(timeout=0.02, max_messages=1)
            consumer.commit()


def sizes(consumers: list[postroom.Consumer]) -> list[int]:
    return [len(c.assignment()) for c in consumers]


def disjoint_cover(consumers: list[postroom.Consumer], count: int) -> bool:
    parts = [p for c in consumers for p in c.assignment()]
    return len(parts) == len(set(parts)) == count


def test_members_split_the_partitions_evenly_and_a_close_moves_them_at_once(
    client: postroom.Client,
) -> None:
    client.create_topic("orders", partitions=12)
    first = client.consumer("billing", "orders", session_timeout=30)
    assert len(first.assignment()) == 12
    second = client.consumer("billing", "orders", session_timeout=30)
    third = client.consumer("billing", "orders", session_timeout=30)
    members = [first, second, third]
    second.assignment()
    third.assignment()
    settle(members, lambda: sizes(members) == [4, 4, 4] and disjoint_cover(members, 12))
    kept = second.assignment() | third.assignment()
    started = time.monotonic()
    first.close()  # a clean leave: no waiting for the 30 s session timeout
    settle(members[1:], lambda: sizes(members[1:]) == [6, 6])
    assert time.monotonic() - started < 10
    assert kept <= second.assignment() | third.assignment()  # sticky: nobody else moved
    second.close()
    third.close()


def test_a_member_that_stops_heartbeating_is_fenced_and_the_cursor_stays(
    client: postroom.Client,
) -> None:
    client.create_topic("t", partitions=2)
    client.publish_batch("t", [{"value": f"m{i}", "partition": i % 2} for i in range(10)])
    paused = client.consumer("g", "t", session_timeout=SESSION)
    assert len(paused.poll(timeout=1, max_messages=100)) == 10
    paused._assignment.membership._stop.set()  # type: ignore[union-attr]  # as if the process froze
    other = client.consumer("g", "t", session_timeout=SESSION)
    settle([other], lambda: len(other.assignment()) == 2)
    other.seek(TopicPartition("t", 0), 3)
    other.commit({TopicPartition("t", 0): 3})
    with pytest.raises(Fenced, match="no longer holds partition"):
        paused.commit()
    assert other.committed(TopicPartition("t", 0)) == 3
    assert other.committed(TopicPartition("t", 1)) == 0
    paused.close()
    other.close()


def test_static_member_keeps_its_partitions_across_a_restart_and_fences_the_old_one(
    client: postroom.Client,
) -> None:
    client.create_topic("t", partitions=4)
    a = client.consumer("g", "t", member_id="pod-1", session_timeout=5)
    b = client.consumer("g", "t", member_id="pod-2", session_timeout=5)
    settle([a, b], lambda: sizes([a, b]) == [2, 2])
    before = a.assignment()
    a._assignment.membership._stop.set()  # type: ignore[union-attr]  # killed without leaving
    restarted = client.consumer("g", "t", member_id="pod-1", session_timeout=5)
    assert restarted.assignment() == before
    with pytest.raises(InstanceFenced, match="newer instance"):
        a.commit({next(iter(before)): 0})
    a.close()  # the old instance's leave does not take the new one's partitions
    assert restarted.assignment() == before
    restarted.commit()
    restarted.close()
    b.close()


def test_callbacks_see_partitions_come_and_go(client: postroom.Client) -> None:
    client.create_topic("t", partitions=2)
    events: list[tuple[str, set[TopicPartition]]] = []
    first = client.consumer(
        "g",
        "t",
        on_assign=lambda tps: events.append(("assign", tps)),
        on_revoke=lambda tps: events.append(("revoke", tps)),
    )
    assert first.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert events == [("assign", {TopicPartition("t", 0), TopicPartition("t", 1)})]
    second = client.consumer("g", "t")
    second.assignment()
    settle([first, second], lambda: sizes([first, second]) == [1, 1])
    assert events[1][0] == "revoke" and len(events[1][1]) == 1
    first.close()
    assert events[-1] == ("revoke", first.assignment() or events[-1][1])
    second.close()


def test_manual_partitions_cannot_commit_over_a_live_member(client: postroom.Client) -> None:
    client.create_topic("t")
    client.publish("t", "x")
    member = client.consumer("g", "t")
    member.assignment()
    manual = client.consumer("g", "t", partitions=[TopicPartition("t", 0)])
    manual.poll(timeout=1)
    with pytest.raises(Fenced, match="held by member"):
        manual.commit()
    member.close()
    manual.commit()
    assert manual.committed(TopicPartition("t", 0)) == 1
    manual.close()


def test_commit_past_the_high_water_mark_is_refused(client: postroom.Client) -> None:
    client.create_topic("t")
    client.publish_batch("t", ["a", "b"])
    with client.consumer("g", "t") as consumer:
        with pytest.raises(OffsetOutOfRange, match=r"allowed 0\.\.2"):
            consumer.commit({TopicPartition("t", 0): 3})
        consumer.commit({TopicPartition("t", 0): 2})
        assert consumer.committed(TopicPartition("t", 0)) == 2


def test_a_handler_that_swallows_a_database_error_makes_the_block_raise(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    client.publish("t", "x")
    with client.consumer("g", "t") as consumer:
        with pytest.raises(postroom.errors.TransactionAborted):
            with consumer.transaction() as batch:
                try:
                    batch.connection.execute("SELECT 1/0")
                except psycopg.errors.DivisionByZero:
                    pass
        with consumer.transaction() as batch:
            assert [m.text() for m in batch] == ["x"]  # delivered again, then committed
        assert consumer.committed(TopicPartition("t", 0)) == 1


def test_poll_is_bounded_overall_and_by_bytes(client: postroom.Client) -> None:
    client.create_topic("t", partitions=8)
    client.publish_batch("t", [{"value": "x" * 1000, "partition": i % 8} for i in range(8 * 30)])
    with client.consumer("g", "t", partitions=[TopicPartition("t", p) for p in range(8)]) as c:
        assert len(c.poll(timeout=1, max_messages=20)) == 20
        assert len(c.poll(timeout=1, max_messages=500, max_bytes=5000)) == 5
        assert len(c.poll(timeout=1, max_messages=500, max_bytes=1)) == 1  # one always comes
        seen = 26
        while batch := c.poll(timeout=0.2, max_messages=50):
            seen += len(batch)
        assert seen == 240


def test_new_partitions_of_a_group_start_at_the_earliest_offset(client: postroom.Client) -> None:
    client.create_topic("t", partitions=1)
    client.publish("t", "old")
    with client.consumer("g", "t", auto_offset_reset="latest", session_timeout=SESSION) as c:
        assert c.poll(timeout=0.2) == []
        client.add_partitions("t", 2)
        client.publish("t", "new", partition=1)
        deadline = time.monotonic() + 15
        got: list[str] = []
        while not got and time.monotonic() < deadline:
            got = [m.text() for m in c.poll(timeout=0.5)]
        assert got == ["new"]


def test_a_recreated_topic_is_noticed(client: postroom.Client) -> None:
    client.create_topic("t", partitions=2)
    with client.consumer("g", "t", session_timeout=SESSION) as c:
        assert c.poll(timeout=0.1) == []
        client.delete_topic("t")
        client.create_topic("t", partitions=3)
        client.publish_batch("t", [{"value": str(i), "partition": i % 3} for i in range(9)])
        deadline = time.monotonic() + 20
        got: list[str] = []
        while len(got) < 9 and time.monotonic() < deadline:
            got += [m.text() for m in c.poll(timeout=0.5)]
        assert sorted(got) == [str(i) for i in range(9)]


def test_bad_membership_input_is_refused(client: postroom.Client) -> None:
    client.create_topic("t")
    with pytest.raises(InvalidName, match="invalid member_id 'a b'"):
        client.consumer("g", "t", member_id="a b")
    with pytest.raises(InvalidArgument, match="invalid session_timeout -1"):
        client.consumer("g", "t", session_timeout=-1)


def test_group_list_shows_members_and_state(client: postroom.Client) -> None:
    client.create_topic("t")
    with client.consumer("live", "t") as member:
        member.commit()
        with client.consumer("gone", "t") as other:
            other.commit()
        states = {g.name: (g.members, g.state) for g in client.list_groups()}
        assert states == {"live": (1, "active"), "gone": (0, "idle")}
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        conn.execute("UPDATE postroom.cursors SET updated_at = now() - interval '8 days'")
        # Their members left just now: that is activity too (docs/log.md, "Group hygiene").
        assert {g.state for g in client.list_groups()} == {"idle"}
        conn.execute("UPDATE postroom.group_activity SET active_at = now() - interval '8 days'")
    assert {g.name: g.state for g in client.list_groups()} == {"live": "expired", "gone": "expired"}
