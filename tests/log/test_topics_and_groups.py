"""Topic administration, consumer positions, group admin and lag."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import postroom
from postroom import TopicPartition


def test_topic_lifecycle(any_client: postroom.Client) -> None:
    any_client.create_topic("b.events", partitions=3, retention=timedelta(days=7))
    any_client.create_topic("a_events")
    assert [t.name for t in any_client.list_topics()] == ["a_events", "b.events"]
    any_client.publish_batch("b.events", [{"value": b"12345", "partition": 1}] * 4)
    info = any_client.describe_topic("b.events")
    assert info.partitions == 3
    assert info.retention_seconds == 7 * 86400
    assert info.high_water == 4
    assert [
        (p.partition, p.low_water, p.high_water, p.messages, p.bytes) for p in info.partition_info
    ] == [(0, 0, 0, 0, 0), (1, 0, 4, 4, 20), (2, 0, 0, 0, 0)]
    any_client.add_partitions("b.events", 5)
    assert len(any_client.describe_topic("b.events").partition_info) == 5
    assert any_client.publish("b.events", "x", partition=4) == postroom.Published(4, 0)
    with any_client.consumer("g", "b.events") as consumer:
        assert len(consumer.poll(timeout=1, max_messages=100)) == 5
        consumer.commit()
    any_client.delete_topic("b.events")
    assert [t.name for t in any_client.list_topics()] == ["a_events"]
    with psycopg.connect(any_client.conninfo) as conn:
        assert conn.execute("SELECT count(*) FROM postroom.messages").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM postroom.cursors").fetchone() == (0,)
    # The name can be used again, with offsets from 0.
    any_client.create_topic("b.events")
    assert any_client.publish("b.events", "again") == postroom.Published(0, 0)


def test_unkeyed_batches_stick_to_one_partition(any_client: postroom.Client) -> None:
    any_client.create_topic("t", partitions=4)
    for _ in range(5):
        published = any_client.publish_batch("t", list(range(20)))
        assert len({p.partition for p in published}) == 1
        offsets = [p.offset for p in published]
        assert offsets[0] is not None
        assert offsets == list(range(offsets[0], offsets[0] + 20))


def test_poll_commit_seek_position(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish_batch(
        "t",
        [f"m{i}" for i in range(10)],
    )
    tp = TopicPartition("t", 0)
    with any_client.consumer("g", "t") as consumer:
        assert consumer.assignment() == {tp}
        first = consumer.poll(timeout=1, max_messages=4)
        assert [m.offset for m in first] == [0, 1, 2, 3]
        assert consumer.position(tp) == 4
        assert consumer.committed(tp) == 0
        consumer.commit()
        assert consumer.committed(tp) == 4
        consumer.seek(tp, 8)
        assert [m.text() for m in consumer.poll(timeout=1)] == ["m8", "m9"]
        consumer.seek(tp, 1)
        assert consumer.poll(timeout=1, max_messages=1)[0].offset == 1
        consumer.commit()  # going back is not a commit: cursors only move forward
        assert consumer.committed(tp) == 4
        assert consumer.poll(timeout=0.05, max_messages=100)[-1].offset == 9
        assert consumer.poll(timeout=0.05) == []
    # A new member of the group resumes from the committed cursor.
    with any_client.consumer("g", "t") as consumer:
        assert consumer.poll(timeout=1, max_messages=1)[0].offset == 4


def test_new_group_latest_starts_at_the_end(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish_batch("t", ["old", "old"])
    with any_client.consumer("late", "t", auto_offset_reset="latest") as consumer:
        assert consumer.poll(timeout=0.05) == []
        any_client.publish("t", "new")
        assert [m.text() for m in consumer.poll(timeout=2)] == ["new"]


def test_explicit_partitions_and_iteration(any_client: postroom.Client) -> None:
    any_client.create_topic("t", partitions=3)
    for p in range(3):
        any_client.publish("t", f"p{p}", partition=p)
    consumer = any_client.consumer("g", "t", partitions=[TopicPartition("t", 2)])
    messages = []
    for message in consumer:
        messages.append(message)
        break
    consumer.close()
    assert [(m.partition, m.text()) for m in messages] == [(2, "p2")]


def test_group_describe_lag_and_reset(any_client: postroom.Client) -> None:
    any_client.create_topic("t", partitions=2)
    any_client.publish_batch("t", [{"value": i, "partition": i % 2} for i in range(10)])
    with any_client.consumer("g", "t") as consumer:
        consumer.poll(timeout=1, max_messages=3)
        consumer.commit()
    group = any_client.describe_group("g")
    assert group.topics == ("t",)
    assert group.lag == 7
    assert sum(p.committed for p in group.partitions) == 3
    assert all(p.high_water == 5 for p in group.partitions)
    assert all(p.lag_seconds >= 0 for p in group.partitions)
    assert [(g.name, g.lag) for g in any_client.list_groups()] == [("g", 7)]

    assert any_client.reset_group("g", "t", to="latest") == {0: 5, 1: 5}
    assert any_client.describe_group("g").lag == 0
    assert any_client.reset_group("g", "t", to=2, partition=1) == {1: 2}
    assert any_client.reset_group("g", "t", to="earliest") == {0: 0, 1: 0}
    cutoff = datetime.now(UTC) + timedelta(seconds=1)
    assert any_client.reset_group("g", "t", to=cutoff) == {0: 5, 1: 5}
    assert any_client.reset_group("g", "t", to=datetime.now(UTC) - timedelta(hours=1)) == {
        0: 0,
        1: 0,
    }
    assert any_client.reset_group("new-group", "t", to="latest") == {0: 5, 1: 5}
    any_client.delete_group("g")
    assert [g.name for g in any_client.list_groups()] == ["new-group"]


def test_migrate_is_idempotent(any_client: postroom.Client) -> None:
    assert any_client.migrate() == []
    assert any_client.pending_migrations() == []


def test_async_api_mirrors_the_sync_one(dsn: str) -> None:
    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            await client.create_topic("t", partitions=2)
            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                await client.publish("t", {"n": 0}, key="k", conn=conn)
                await conn.rollback()
            async with client.producer(linger_ms=1) as producer:
                futures = [await producer.send("t", {"n": i}, key="k") for i in range(50)]
            offsets = [(await f).offset for f in futures]
            assert offsets == list(range(50))
            async with client.consumer("g", "t") as consumer:
                seen: list[postroom.Message] = []
                while len(seen) < 50:
                    seen += await consumer.poll(timeout=1)
                await consumer.commit()
                assert [m.json()["n"] for m in seen] == list(range(50))
            await client.reset_group("g", "t", to="earliest")
            async with client.consumer("g", "t") as consumer:
                async with consumer.transaction(max_messages=10) as batch:
                    assert len(batch) == 10
                    await batch.connection.execute("SELECT 1")
            assert (await client.describe_group("g")).lag == 40

    asyncio.run(main())


def test_consumed_messages_are_ordinary_frozen_messages(any_client: postroom.Client) -> None:
    """poll() and transaction() build messages on a fast path (records.MessageBuilder, the
    cyclic GC paused): they must compare, pickle and repr as ``Message(...)`` does, and
    leave the collector as they found it."""
    import dataclasses
    import gc
    import pickle

    from postroom import Message

    any_client.create_topic("t", partitions=2)
    any_client.publish("t", b'{"n": 1}', key="k", headers={"h": "v", "b": b"\x00"}, partition=0)
    any_client.publish("t", "plain", partition=1)
    for transactional in (False, True):
        group = f"g-{transactional}"
        with any_client.consumer(group, "t") as consumer:
            if transactional:
                got = []
                for _ in range(2):  # one partition per transaction
                    with consumer.transaction(timeout=5) as batch:
                        got += list(batch)
            else:
                got = consumer.poll(timeout=5, max_messages=10)
        assert gc.isenabled()
        assert sorted((m.partition, m.offset) for m in got) == [(0, 0), (1, 0)]
        for message in got:
            assert type(message) is Message
            rebuilt = Message(
                **{f.name: getattr(message, f.name) for f in dataclasses.fields(Message)}
            )
            assert message == rebuilt
            assert repr(message) == repr(rebuilt)
            assert pickle.loads(pickle.dumps(message)) == message
            with pytest.raises(dataclasses.FrozenInstanceError):
                message.offset = 9  # type: ignore[misc]
        first = next(m for m in got if m.partition == 0)
        assert (first.key, first.json(), first.headers) == (
            b"k",
            {"n": 1},
            {"h": "v", "b": b"\x00"},
        )
        assert next(m for m in got if m.partition == 1).text() == "plain"


def test_polls_continue_after_a_transactional_claim(any_client: postroom.Client) -> None:
    """poll() takes whole runs of its fetched buffer (no step per message): positions still
    follow the messages taken, a transactional claim between polls, and a seek back."""
    any_client.create_topic("t")
    any_client.publish_batch("t", [f"m{i}" for i in range(10)])
    with any_client.consumer("g", "t") as consumer:
        assert [m.offset for m in consumer.poll(timeout=5, max_messages=2)] == [0, 1]
        consumer.commit()
        with consumer.transaction(max_messages=3, timeout=5) as batch:
            assert [m.offset for m in batch] == [2, 3, 4]
        assert [m.offset for m in consumer.poll(timeout=5, max_messages=2)] == [5, 6]
        assert [m.offset for m in consumer.poll(timeout=5, max_messages=10)] == [7, 8, 9]
        consumer.seek(TopicPartition("t", 0), 3)
        assert [m.offset for m in consumer.poll(timeout=5, max_messages=10)] == list(range(3, 10))


@pytest.mark.parametrize("asyncio_client", [False, True], ids=["sync", "async"])
def test_a_poll_hands_its_connection_back_out_of_autocommit(dsn: str, asyncio_client: bool) -> None:
    """The fetch runs in autocommit (one round trip); the pooled connection goes back as it
    came, so the next user of the pool (here a transactional publish) gets a transaction."""

    async def check_async() -> None:
        async with await postroom.connect_async(dsn, min_size=1, max_size=2) as client:
            await client.create_topic("t")
            await client.publish("t", "a")
            async with client.consumer("g", "t") as consumer:
                assert [m.text() for m in await consumer.poll(timeout=5)] == ["a"]
            idle = list(client._db.pool._pool)  # the pool's idle connections
            assert idle and not any(conn.autocommit for conn in idle)

    if asyncio_client:
        asyncio.run(check_async())
        return
    with postroom.connect(dsn, min_size=1, max_size=2) as client:
        client.create_topic("t")
        client.publish("t", "a")
        with client.consumer("g", "t") as consumer:
            assert [m.text() for m in consumer.poll(timeout=5)] == ["a"]
        idle = list(client._db.pool._pool)
        assert idle and not any(conn.autocommit for conn in idle)
