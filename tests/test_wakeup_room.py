"""The wake-up room (issue 16): one listener per client, shared by its workers, consumers and
group members; every channel's payload scoped by schema, so two postroom schemas in one
database never wake each other."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import psycopg
import pytest

import postroom
from postroom._wakeups import GROUPS, JOBS, LOG, parse, payload

from .queue.helpers import running
from .signals import wait_for


@pytest.fixture
def other(dsn: str) -> Iterator[postroom.Client]:
    """A client of a second postroom schema in the test's database."""
    with postroom.connect(dsn, schema="other_room") as client:
        client.migrate()
        yield client


def test_payloads_carry_the_quoted_schema() -> None:
    assert payload("postroom", "email") == '"postroom":email'
    assert parse("postroom", '"postroom":7') == "7"
    assert parse("postroom", '"other_room":7') is None
    assert parse("post", '"postroom":7') is None  # a prefix of another schema's name


def test_two_schemas_in_one_database_never_wake_each_other(
    client: postroom.Client, other: postroom.Client
) -> None:
    heard: dict[str, queue.Queue[str | None]] = {c: queue.Queue() for c in (JOBS, LOG, GROUPS)}
    subscriptions = [client._db.wakeups.subscribe(channel, heard[channel].put) for channel in heard]
    for channel in heard:  # each channel is listened to before anything is sent
        assert heard[channel].get(timeout=10) is None
    for writer in (other, client):  # the other schema's first; then this one's, as a fence
        writer.enqueue("ping", queue=f"q_{writer.schema}")
        writer.create_topic(f"t_{writer.schema}")
        writer.publish(f"t_{writer.schema}", b"x")
        with writer.consumer(f"g_{writer.schema}", f"t_{writer.schema}") as consumer:
            consumer.poll(timeout=5)
    # Notifications arrive in commit order on the one connection: once this schema's arrived,
    # any of the other schema's would have arrived before them.
    assert heard[JOBS].get(timeout=10) == "q_postroom"
    with psycopg.connect(client.conninfo) as conn:
        row = conn.execute(b"SELECT id FROM postroom.topics WHERE name = 't_postroom'").fetchone()
    assert row is not None
    topic_id = str(row[0])
    assert heard[LOG].get(timeout=10) == topic_id
    assert heard[GROUPS].get(timeout=10) == "g_postroom"
    for channel, got in heard.items():
        rest = []
        while not got.empty():
            rest.append(got.get())
        assert set(rest) <= {"g_postroom", topic_id, None}, (channel, rest)
    for subscription in subscriptions:
        subscription.close()


def test_one_listener_connection_serves_every_worker_and_consumer(
    client: postroom.Client,
) -> None:
    client.create_topic("t")

    @client.job("noop")
    def noop() -> None: ...

    wakeups = client._db.wakeups
    with running(client.worker(concurrency=1)), running(client.worker(concurrency=1)):
        with client.consumer("g", "t") as consumer:
            client.publish("t", b"x")
            wait_for(lambda: consumer.poll(timeout=1), 30, "the consumer's message")
            job = client.enqueue("noop")
            job.result(timeout=30)
    assert wakeups.connections == 1
