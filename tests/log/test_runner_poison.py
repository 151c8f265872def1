"""Poison messages in the runner's transactional and batch modes: only the poison goes to the
dead-letter topic, a failed attempt's database writes are undone, the rest commits in order."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

import postroom

from .test_runner import running


def eventually(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def effects(client: postroom.Client) -> list[str]:
    with psycopg.connect(client.conninfo) as conn:
        return [row[0] for row in conn.execute("SELECT value FROM effects ORDER BY id")]


def drained(client: postroom.Client, group: str, letters: int) -> Callable[[], bool]:
    def check() -> bool:
        groups = {g.name: g for g in client.list_groups()}
        return (
            group in groups
            and groups[group].lag == 0
            and len(client.list_dead_letters("t")) == letters
        )

    return check


VALUES = ["a", "bad-raise", "c", "bad-sql", "e"]


@pytest.fixture
def topic(client: postroom.Client) -> postroom.Client:
    client.create_topic("t")
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE effects (id bigserial PRIMARY KEY, value text NOT NULL)")
    client.publish_batch("t", VALUES)
    return client


def misbehave(value: str, conn: psycopg.Connection) -> None:
    """Raise for the poison values: a Python error, or a database error that aborts the
    transaction (the savepoint of the attempt must undo both kinds)."""
    if value == "bad-raise":
        raise ValueError("poison")
    if value == "bad-sql":
        conn.execute("SELECT 1 / 0")


def test_a_transactional_poison_is_dead_lettered_and_its_attempts_leave_no_writes(
    topic: postroom.Client,
) -> None:
    client = topic
    calls: list[str] = []

    def handle(message: postroom.Message, conn: psycopg.Connection) -> None:
        calls.append(message.text())
        conn.execute("INSERT INTO effects (value) VALUES (%s)", [message.text()])
        misbehave(message.text(), conn)

    client.subscribe("t", group="g", transactional=True, max_attempts=3, retry_delay=0)(handle)
    with running(client) as runner:
        eventually(drained(client, "g", 2))
        assert runner.dead_lettered == 2
    assert effects(client) == ["a", "c", "e"]  # failed attempts' inserts were rolled back
    assert calls.count("bad-raise") == calls.count("bad-sql") == 3
    letters = client.list_dead_letters("t")
    assert [(m.text(), m.headers["postroom-dlq-offset"]) for m in letters] == [
        ("bad-raise", "1"),
        ("bad-sql", "3"),
    ]
    assert str(letters[1].headers["postroom-dlq-error"]).startswith("DivisionByZero")


def test_a_poison_in_a_batch_handler_dead_letters_only_that_message(
    topic: postroom.Client,
) -> None:
    client = topic
    handled: list[str] = []

    def handle(messages: list[postroom.Message]) -> None:
        if any(m.text().startswith("bad") for m in messages):
            raise ValueError("a poison in the batch")
        handled.extend(m.text() for m in messages)

    client.subscribe("t", group="g", batch=True, max_attempts=2, retry_delay=0)(handle)
    with running(client):
        eventually(drained(client, "g", 2))
    assert handled == ["a", "c", "e"]  # in order, each once
    assert [m.text() for m in client.list_dead_letters("t")] == ["bad-raise", "bad-sql"]


def test_a_poison_in_a_transactional_batch_handler_dead_letters_only_that_message(
    topic: postroom.Client,
) -> None:
    client = topic

    def handle(batch: postroom.Batch) -> None:
        for message in batch:
            batch.connection.execute("INSERT INTO effects (value) VALUES (%s)", [message.text()])
        for message in batch:
            misbehave(message.text(), batch.connection)

    client.subscribe("t", group="g", batch=True, transactional=True, max_attempts=2, retry_delay=0)(
        handle
    )
    with running(client):
        eventually(drained(client, "g", 2))
    assert effects(client) == ["a", "c", "e"]
    assert [m.text() for m in client.list_dead_letters("t")] == ["bad-raise", "bad-sql"]
