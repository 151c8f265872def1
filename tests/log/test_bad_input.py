"""Bad input gets a clear error naming what was wrong, and changes nothing already stored."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import psycopg
import pytest

import postroom
from postroom import TopicPartition
from postroom.errors import (
    GroupNotFound,
    InvalidArgument,
    InvalidName,
    InvalidType,
    MessageTooLarge,
    OffsetOutOfRange,
    SchemaNotReady,
    TopicExists,
    TopicNotFound,
)
from postroom.log.records import MAX_HEADER_BYTES, MAX_KEY_BYTES

INJECTIONS = [
    "orders; DROP TABLE postroom.messages; --",
    "orders' OR '1'='1",
    'orders"; DROP SCHEMA postroom CASCADE; --',
    "",
    " orders",
    "-orders",
    "o" * 201,
]


def snapshot(any_client: postroom.Client) -> tuple[object, ...]:
    """Everything stored: topics, messages, cursors."""
    with psycopg.connect(any_client.conninfo) as conn:
        return tuple(
            conn.execute(query).fetchall()
            for query in (
                "SELECT id, name, partitions FROM postroom.topics ORDER BY id",
                'SELECT topic_id, partition, "offset", key, value, headers '
                "FROM postroom.messages ORDER BY 1, 2, 3",
                "SELECT group_name, topic_id, partition, next_offset FROM postroom.cursors "
                "ORDER BY 1, 2, 3",
                "SELECT topic_id, partition, next_offset FROM postroom.partitions ORDER BY 1, 2",
            )
        )


@pytest.fixture
def stored(any_client: postroom.Client) -> Iterator[postroom.Client]:
    """A client with some data, checked unchanged after the test."""
    any_client.create_topic("orders", partitions=2)
    any_client.publish_batch("orders", [{"value": i, "key": str(i)} for i in range(10)])
    with any_client.consumer("billing", "orders") as consumer:
        consumer.poll(timeout=1, max_messages=4)
        consumer.commit()
    before = snapshot(any_client)
    yield any_client
    assert snapshot(any_client) == before


@pytest.mark.parametrize("name", INJECTIONS)
def test_invalid_topic_names(stored: postroom.Client, name: str) -> None:
    for call in (
        lambda: stored.create_topic(name),
        lambda: stored.publish(name, "x"),
        lambda: stored.describe_topic(name),
        lambda: stored.delete_topic(name),
        lambda: stored.consumer("g", name),
    ):
        with pytest.raises(InvalidName, match="invalid topic name"):
            call()


def test_invalid_names_are_refused_by_the_sql_api_too(stored: postroom.Client) -> None:
    with psycopg.connect(stored.conninfo) as conn:
        with pytest.raises(psycopg.errors.CheckViolation, match="topics_name_check"):
            conn.execute("SELECT postroom.create_topic(%s, 1)", [INJECTIONS[0]])


def test_invalid_group_names(stored: postroom.Client) -> None:
    with pytest.raises(InvalidName, match="invalid group name 'a b'"):
        stored.consumer("a b", "orders")
    with pytest.raises(InvalidName, match="invalid group name"):
        stored.describe_group("x'; DELETE FROM postroom.cursors; --")


def test_wrong_value_types(stored: postroom.Client) -> None:
    with pytest.raises(InvalidType, match="cannot encode value of type set"):
        stored.publish("orders", {1, 2})  # type: ignore[arg-type]
    # One bad item fails the whole batch before anything is written.
    with pytest.raises(InvalidType, match="cannot encode value of type object"):
        stored.publish_batch("orders", ["ok", object(), "ok"])
    with pytest.raises(InvalidType, match="invalid key of type int"):
        stored.publish("orders", "x", key=7)  # type: ignore[arg-type]
    with pytest.raises(InvalidType, match="invalid value for header 'n' of type int"):
        stored.publish("orders", "x", headers={"n": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgument, match="unknown message fields"):
        stored.publish_batch("orders", [{"value": 1, "kye": "typo"}])


def test_oversized_keys_and_headers(stored: postroom.Client) -> None:
    with pytest.raises(MessageTooLarge, match=f"limit is {MAX_KEY_BYTES} bytes"):
        stored.publish("orders", "x", key=b"k" * (MAX_KEY_BYTES + 1))
    with pytest.raises(MessageTooLarge, match=f"limit is {MAX_HEADER_BYTES} bytes"):
        stored.publish("orders", "x", headers={"big": "h" * MAX_HEADER_BYTES})
    with pytest.raises(MessageTooLarge, match="limit is 64 per message"):
        stored.publish("orders", "x", headers={f"h{i}": "v" for i in range(65)})
    with pytest.raises(MessageTooLarge, match="value is"):
        stored.publish_batch("orders", ["ok", b"v" * (1024 * 1024 + 1)])


def test_unknown_topic(stored: postroom.Client) -> None:
    for call in (
        lambda: stored.publish("nope", "x"),
        lambda: stored.describe_topic("nope"),
        lambda: stored.delete_topic("nope"),
        lambda: stored.add_partitions("nope", 3),
        lambda: stored.reset_group("billing", "nope", to="earliest"),
        lambda: stored.consumer("g", "nope").poll(timeout=0),
    ):
        with pytest.raises(TopicNotFound, match="unknown topic 'nope'"):
            call()
    with psycopg.connect(stored.conninfo) as conn:
        with pytest.raises(psycopg.errors.NoDataFound, match="unknown topic 'nope'"):
            conn.execute("SELECT * FROM postroom.publish('nope', 'x'::bytea)")


def test_unknown_group(stored: postroom.Client) -> None:
    with pytest.raises(GroupNotFound, match="unknown consumer group 'ghost'"):
        stored.describe_group("ghost")
    with pytest.raises(GroupNotFound, match="unknown consumer group 'ghost'"):
        stored.delete_group("ghost")


def test_negative_and_out_of_range_offsets(stored: postroom.Client) -> None:
    tp = TopicPartition("orders", 0)
    high_water = stored.describe_topic("orders").partition_info[0].high_water
    with stored.consumer("billing", "orders") as consumer:
        with pytest.raises(InvalidArgument, match="invalid offset -1: must be an integer >= 0"):
            consumer.seek(tp, -1)
        with pytest.raises(OffsetOutOfRange, match=f"allowed 0..{high_water}"):
            consumer.seek(tp, high_water + 1)
        with pytest.raises(InvalidArgument, match="invalid offset -3"):
            consumer.commit({tp: -3})
        with pytest.raises(InvalidArgument, match="not assigned to this consumer"):
            consumer.seek(TopicPartition("orders", 9), 0)
    with pytest.raises(InvalidArgument, match="invalid offset -5"):
        stored.reset_group("billing", "orders", to=-5)
    with pytest.raises(OffsetOutOfRange, match="beyond the high-water mark of orders/"):
        stored.reset_group("billing", "orders", to=10_000)
    with pytest.raises(InvalidArgument, match="needs a timezone"):
        stored.reset_group("billing", "orders", to=datetime(2026, 1, 1))  # noqa: DTZ001
    with pytest.raises(InvalidArgument, match="invalid reset target 'start'"):
        stored.reset_group("billing", "orders", to="start")


def test_partition_counts(stored: postroom.Client) -> None:
    for bad in (0, -1, 1001, 2.5, True):
        with pytest.raises(InvalidArgument, match="invalid partition count"):
            stored.create_topic("fresh", partitions=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="has 2 partitions: the new total must be more"):
        stored.add_partitions("orders", 1)
    with pytest.raises(InvalidArgument, match=r"partition 2 does not exist.*partitions 0\.\.1"):
        stored.publish("orders", "x", partition=2)
    with pytest.raises(InvalidArgument, match="invalid partition -1"):
        stored.publish("orders", "x", partition=-1)
    with pytest.raises(TopicExists, match="topic 'orders' already exists"):
        stored.create_topic("orders")


def test_missing_schema_is_named(pg_server: object, dsn: str) -> None:
    with postroom.connect(dsn, schema="not_installed") as client:
        assert client.pending_migrations()[0] == "0001_log"
        with pytest.raises(SchemaNotReady, match="postroom init"):
            client.list_topics()
        with pytest.raises(SchemaNotReady, match="postroom init"):
            client.publish("orders", "x")
    with pytest.raises(InvalidName, match="invalid schema name"):
        postroom.connect(dsn, schema="bad-schema; drop")


def test_unreachable_database_fails_fast_and_names_the_target() -> None:
    import time

    from postroom.errors import DatabaseUnavailable

    started = time.monotonic()
    target = r"cannot connect to .*host=127\.0\.0\.1 port=1"
    with pytest.raises(DatabaseUnavailable, match=target) as e:
        postroom.connect("postgresql://someone:secret@127.0.0.1:1/nowhere")
    assert "secret" not in str(e.value)
    assert time.monotonic() - started < 10


def test_headers_written_through_sql_in_other_json_forms_stay_readable(
    any_client: postroom.Client,
) -> None:
    any_client.create_topic("t")
    with psycopg.connect(any_client.conninfo) as conn:
        conn.execute(
            "SELECT * FROM postroom.publish('t', 'v'::bytea, NULL, %s::jsonb)",
            ['{"n": 1, "s": "x", "o": {"a": true}}'],
        )
    with any_client.consumer("g", "t") as consumer:
        (message,) = consumer.poll(timeout=1)
    assert message.headers == {"n": "1", "s": "x", "o": '{"a":true}'}
