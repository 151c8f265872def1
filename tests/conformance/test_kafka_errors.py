"""Bad input on ``kafka://``: one clear ``postroom.errors`` error each."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

import postroom
from postroom.benchmarks.tansu import free_port
from postroom.errors import BrokerUnavailable, InvalidArgument, NotSupported, TopicNotFound


def test_an_unreachable_broker_is_refused_at_connect() -> None:
    url = f"kafka://127.0.0.1:{free_port()}?timeout=1"
    with pytest.raises(BrokerUnavailable, match=r"kafka at 127\.0\.0\.1:\d+"):
        postroom.connect(url)


def test_a_bad_kafka_url_names_what_is_wrong() -> None:
    with pytest.raises(InvalidArgument, match="brokers"):
        postroom.connect("kafka://")
    with pytest.raises(InvalidArgument, match="set by postroom"):
        postroom.connect("kafka://127.0.0.1:9092?partitioner=random")
    with pytest.raises(InvalidArgument, match="timeout"):
        postroom.connect("kafka://127.0.0.1:9092?timeout=soon")


def test_the_password_stays_out_of_errors() -> None:
    url = f"kafka://user:s3cret@127.0.0.1:{free_port()}?timeout=1"
    with pytest.raises(BrokerUnavailable) as caught:
        postroom.connect(url)
    assert "s3cret" not in str(caught.value)


def test_a_missing_topic(kafka_broker: str, names: Callable[[str], str]) -> None:
    with postroom.connect(f"kafka://{kafka_broker}") as client:
        missing = names("missing")
        with pytest.raises(TopicNotFound, match=missing):
            client.publish(missing, b"x")
        with pytest.raises(TopicNotFound, match=missing):
            client.describe_topic(missing)
        with client.consumer(names("g"), missing) as consumer, pytest.raises(TopicNotFound):
            consumer.poll(timeout=0.1)
        client.create_topic(names("t"), partitions=2)
        with pytest.raises(InvalidArgument, match="2 partitions"):
            client.publish(names("t"), b"x", partition=5)


def test_the_queue_is_refused_naming_postgresql(kafka_broker: str) -> None:
    with postroom.connect(f"kafka://{kafka_broker}") as client:
        with pytest.raises(NotSupported, match="PostgreSQL"):
            client.enqueue("email", {})
        with pytest.raises(NotSupported, match="PostgreSQL"):
            client.publish_event(None, "order", 1, "Created", {})


def test_the_cli_on_an_unreachable_broker_prints_one_line(dsn: str) -> None:
    """librdkafka's own log lines go to Python logging (served by the client's poll), not to
    stderr from its threads: they printed raw ``%3|...|FAIL|`` lines around the one clear
    error (``postroom topic move`` to a broker that is down printed two)."""
    with postroom.connect(dsn) as client:
        client.create_topic("moving", partitions=1)
    broker = f"127.0.0.1:{free_port()}"
    cli = "import sys; from postroom.cli.main import main; sys.exit(main())"
    for args in (
        ["--url", dsn, "topic", "move", "moving", "--to", f"kafka://{broker}?timeout=2"],
        ["--url", f"kafka://{broker}?timeout=2", "produce", "moving", "hello"],
        ["--url", f"kafka://{broker}?timeout=2", "consume", "moving", "--group", "g"],
    ):
        result = subprocess.run(
            [sys.executable, "-c", cli, *args], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.splitlines() == [result.stderr.strip()], (args, result.stderr)
        assert result.stderr.startswith(f"error: kafka at {broker}"), (args, result.stderr)
