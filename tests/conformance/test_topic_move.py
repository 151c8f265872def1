"""Moving a topic from PostgreSQL to Kafka (Tansu) while producers write: every group resumes
on Kafka exactly where it stopped on PostgreSQL."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import postroom
from postroom.errors import InvalidArgument, TopicNotFound
from tests.conftest import Server

from .conftest import KAFKA_CONSUMER

GROUPS = ("fresh", "halfway", "done")


def _process(client: Any, group: str, topic: str, count: int, into: list[Any]) -> None:
    """Handle ``count`` more messages as ``group`` (committing exactly those), into ``into``."""
    deadline = time.monotonic() + 60
    with client.consumer(group, topic, **KAFKA_CONSUMER) as consumer:
        while count and time.monotonic() < deadline:
            batch = consumer.poll(timeout=0.5)
            handled = batch[:count]
            into.extend(handled)
            count -= len(handled)
            if handled:
                by_partition: dict[Any, int] = {}
                for message in handled:
                    by_partition[message.topic_partition] = message.offset + 1
                consumer.commit(by_partition)
    assert count == 0, f"group {group!r} is {count} messages short"


def test_a_moved_topic_keeps_every_groups_place(
    pg15: Server, kafka_broker: str, names: Callable[[str], str]
) -> None:
    database = pg15.create_database()
    topic = names("orders")
    keys = [f"customer-{i}" for i in range(12)]
    numbers = itertools.count()
    processed: dict[str, list[postroom.Message]] = {group: [] for group in GROUPS}
    try:
        with postroom.connect(pg15.url(database)) as pg:
            pg.create_topic(topic, partitions=3)

            def publish(count: int) -> None:
                for _ in range(count):
                    n = next(numbers)
                    pg.publish(topic, {"n": n}, key=keys[n % len(keys)])

            publish(60)
            pg.reset_group("fresh", topic, to="earliest")
            _process(pg, "halfway", topic, 20, processed["halfway"])
            _process(pg, "done", topic, 60, processed["done"])
            move = pg.move_topic(topic, to=f"kafka://{kafka_broker}")
            mirror = threading.Thread(target=move.run)
            mirror.start()
            try:
                publish(30)  # producers keep writing while the mirror copies
                _process(pg, "halfway", topic, 10, processed["halfway"])
                # Cut-over: producers stopped; wait for mirror lag 0.
                deadline = time.monotonic() + 60
                while any(p.lag for p in move.status()) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert [p.lag for p in move.status()] == [0, 0, 0]
            finally:
                move.stop()
                mirror.join(60)
            translated = move.translate_groups()
            move.close()
        assert set(translated) == set(GROUPS)
        with postroom.connect(f"kafka://{kafka_broker}") as kafka:
            for group in GROUPS:
                _process(kafka, group, topic, 90 - len(processed[group]), processed[group])
    finally:
        pg15.drop_database(database)
    for group, messages in processed.items():
        assert sorted(m.json()["n"] for m in messages) == list(range(90)), group
        per_key: dict[bytes | None, list[int]] = {}
        for message in messages:
            per_key.setdefault(message.key, []).append(message.json()["n"])
            assert message.key is not None
            assert message.partition == postroom.partition_for_key(message.key, 3)
        assert all(ns == sorted(ns) for ns in per_key.values()), group


def test_a_move_refuses_a_partition_count_mismatch(
    pg15: Server, kafka_broker: str, names: Callable[[str], str]
) -> None:
    database = pg15.create_database()
    topic = names("mismatch")
    try:
        with postroom.connect(pg15.url(database)) as pg:
            pg.create_topic(topic, partitions=3)
            with postroom.connect(f"kafka://{kafka_broker}") as kafka:
                kafka.create_topic(topic, partitions=2)
            with pytest.raises(InvalidArgument, match="partition-count mismatch"):
                pg.move_topic(topic, to=f"kafka://{kafka_broker}")
            with pytest.raises(TopicNotFound):
                pg.move_topic(names("missing"), to=f"kafka://{kafka_broker}")
    finally:
        pg15.drop_database(database)


def test_the_cli_moves_a_topic_and_works_on_kafka(
    pg15: Server, kafka_broker: str, names: Callable[[str], str]
) -> None:
    from typer.testing import CliRunner

    from postroom.cli.main import app

    runner = CliRunner()
    database = pg15.create_database()
    pg_url, kafka_url = pg15.url(database), f"kafka://{kafka_broker}"
    topic = names("cli")
    try:
        with postroom.connect(pg_url) as pg:
            pg.create_topic(topic, partitions=2)
            pg.publish_batch(topic, [{"value": str(i), "key": f"k{i}"} for i in range(10)])
            pg.reset_group("billing", topic, to=4, partition=0)
        moved = runner.invoke(
            app, ["--url", pg_url, "topic", "move", topic, "--to", kafka_url, "--translate"]
        )
        assert moved.exit_code == 0, moved.output
        assert "group 'billing' committed on Kafka at 0: 4" in moved.output
        status = runner.invoke(
            app, ["--url", pg_url, "topic", "move", topic, "--to", kafka_url, "--status"]
        )
        assert status.exit_code == 0, status.output
        assert "mirror lag 0" in status.output
        described = runner.invoke(app, ["--url", kafka_url, "topic", "describe", topic])
        assert described.exit_code == 0, described.output
        # (Not the message count: Tansu reports a batch's base offset + 1 as high-water mark.)
        assert f"topic {topic!r}: 2 partition(s)" in described.output
        group = runner.invoke(app, ["--url", kafka_url, "group", "describe", "billing"])
        assert group.exit_code == 0, group.output
        mismatch = runner.invoke(
            app, ["--url", pg_url, "topic", "move", names("none"), "--to", kafka_url]
        )
        assert mismatch.exit_code == 1 and "unknown topic" in mismatch.output
    finally:
        pg15.drop_database(database)
