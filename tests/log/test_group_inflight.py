"""A batch in flight across a hand-over: its commit is stored under the epoch it was polled at,
before the partition moves, so the new owner starts after it; and offsets read under an
assignment lost since are never committed under the new one."""

from __future__ import annotations

import threading

import pytest

import postroom
from postroom import TopicPartition
from postroom.errors import Fenced

from ..signals import wait_for

SESSION = 1.0


def revoking(consumer: postroom.Consumer) -> bool:
    leases = consumer._assignment.membership.leases.values()  # type: ignore[union-attr]
    return any(lease.state == "revoking" for lease in leases)


def test_the_commit_of_a_batch_in_flight_lands_before_its_partition_moves(
    client: postroom.Client,
) -> None:
    client.create_topic("t", partitions=2)
    client.publish_batch("t", [{"value": f"m{i}", "partition": i % 2} for i in range(20)])
    first = client.consumer("g", "t", session_timeout=SESSION)
    batch = first.poll(timeout=1, max_messages=100)
    assert len(batch) == 20
    second = client.consumer("g", "t", session_timeout=SESSION)
    joining = threading.Thread(target=second.assignment)
    joining.start()  # joins; its partition comes once the batch in flight is committed
    wait_for(lambda: revoking(first))
    offsets = {m.topic_partition: m.offset + 1 for m in batch}
    first.commit(offsets)  # was: the hand-over applied first, then Fenced, nothing stored
    joining.join()

    def moved() -> bool:
        first.poll(timeout=0.02)  # hands the partition over
        return len(second.assignment()) == 1

    wait_for(moved)
    (tp,) = second.assignment()
    assert second.committed(tp) == 10
    assert second.poll(timeout=0.3) == []  # nothing delivered twice
    assert first.committed(next(iter(first.assignment()))) == 10
    first.close()
    second.close()


def test_offsets_read_under_a_lost_assignment_are_not_committed_under_the_new_one(
    client: postroom.Client,
) -> None:
    client.create_topic("t", partitions=1)
    client.publish_batch("t", [{"value": f"m{i}"} for i in range(10)])
    tp = TopicPartition("t", 0)
    first = client.consumer("g", "t", session_timeout=SESSION)
    assert len(first.poll(timeout=1, max_messages=100)) == 10  # epoch 1, not committed
    membership = first._assignment.membership  # type: ignore[union-attr]
    assert membership is not None
    epoch = membership.leases[next(iter(membership.leases))].epoch
    # Lost (the session ran out: another member took it, read nothing, left) and taken
    # again under a new epoch, starting at the cursor.
    membership._stop.set()  # as if the process froze
    other = client.consumer("g", "t", session_timeout=SESSION)
    wait_for(lambda: other.assignment() == {tp})
    other.close()

    def taken_again() -> bool:
        membership._beat(joining=True)  # the frozen member's heartbeat, by hand
        first.assignment()  # applies the lease change, reads nothing
        return any(lease.epoch != epoch for lease in membership.leases.values())

    wait_for(taken_again)
    assert first.position(tp) == 0  # the new assignment starts at the cursor
    with pytest.raises(Fenced, match="read under an assignment"):
        first.commit({tp: 10})
    assert first.committed(tp) == 0
    batch = first.poll(timeout=1, max_messages=100)  # read again under the new epoch
    assert [m.offset for m in batch] == list(range(10))
    first.commit({tp: 10})
    assert first.committed(tp) == 10
    first.close()


def test_a_partition_with_nothing_new_handed_over_during_a_commit_does_not_refuse_it(
    client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat loop may hand over an idle partition (nothing read past its cursor) at
    any moment, also between the moment commit() chose its partitions and the moment it
    stores them: such a partition is not part of the commit (was: committed under its old
    epoch, so the whole commit was refused as Fenced and the batch delivered again)."""
    client.create_topic("t", partitions=2)
    client.publish("t", "only", partition=0)
    first = client.consumer("g", "t", session_timeout=10)
    [message] = first.poll(timeout=5)
    assert message.partition == 0
    second = client.consumer("g", "t", session_timeout=10)
    db = first._db
    real_q = db.q

    def q(name: str) -> object:
        if name == "commit_offsets":  # commit() has chosen its partitions: hand one over now
            monkeypatch.setattr(db, "q", real_q)
            assert second.assignment() == {TopicPartition("t", 1)}
        return real_q(name)

    monkeypatch.setattr(db, "q", q)
    first.commit()
    assert first.committed(TopicPartition("t", 0)) == 1
    assert second.committed(TopicPartition("t", 1)) == 0
    first.close()
    second.close()
