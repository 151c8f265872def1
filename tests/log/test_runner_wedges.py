"""Poisons that used to wedge the runner for good (issue 23, item 8): a handler calling
``sys.exit()``, an exception whose ``__str__`` raises, a message with too many headers to
dead-letter, a stop during a retry backoff, and a dead letter whose topic is gone."""

from __future__ import annotations

import sys
import threading

import postroom

from .test_runner import Seen, running


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken too")


def test_a_handler_calling_sys_exit_is_a_failure_dead_lettered_not_the_runner_exit(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    seen = Seen(2)

    def handle(message: postroom.Message) -> None:
        if message.text() == "bad":
            sys.exit(3)
        seen.add(message)

    client.subscribe("t", group="g", max_attempts=2, retry_delay=0)(handle)
    client.publish_batch("t", ["a", "bad", "c"])
    with running(client) as runner:
        seen.wait()
        assert runner.dead_lettered == 1
    [letter] = client.list_dead_letters("t")
    assert (letter.text(), letter.headers["postroom-dlq-error"]) == ("bad", "SystemExit: 3")


def test_an_exception_whose_str_raises_is_dead_lettered_by_its_type(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    seen = Seen(2)

    def handle(message: postroom.Message) -> None:
        if message.text() == "bad":
            raise Unprintable
        seen.add(message)

    client.subscribe("t", group="g", max_attempts=2, retry_delay=0)(handle)
    client.publish_batch("t", ["a", "bad", "c"])
    with running(client):
        seen.wait()
    [letter] = client.list_dead_letters("t")
    assert str(letter.headers["postroom-dlq-error"]).startswith("Unprintable")


def test_a_poison_with_62_headers_is_dead_lettered_with_the_headers_that_fit(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    seen = Seen(1)
    headers = {f"h{i:02d}": f"v{i}" for i in range(62)}
    client.publish("t", "bad", headers=headers)
    client.publish("t", "after")

    def handle(message: postroom.Message) -> None:
        if message.text() == "bad":
            raise ValueError("poison")
        seen.add(message)

    client.subscribe("t", group="g", max_attempts=1)(handle)
    with running(client) as runner:
        seen.wait()
        assert runner.dead_lettered == 1
    [letter] = client.list_dead_letters("t")
    kept = {k: v for k, v in letter.headers.items() if not k.startswith("postroom-dlq-")}
    assert list(kept) == list(headers)[: len(kept)]  # the first ones, as they were
    assert len(letter.headers) <= 64
    assert letter.headers["postroom-dlq-error"] == "ValueError: poison"
    assert str(letter.headers["postroom-dlq-trimmed"]).startswith(f"{62 - len(kept)} of 62 ")


def test_a_stop_during_a_retry_backoff_leaves_the_message_for_the_next_owner(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    failed = threading.Event()
    calls: list[str] = []

    def flaky(message: postroom.Message) -> None:
        calls.append(message.text())
        if message.text() == "flaky":
            failed.set()
            raise ConnectionError("a transient failure")

    client.subscribe("t", group="g", max_attempts=5, retry_delay=60)(flaky)
    client.publish_batch("t", ["a", "flaky", "c"])
    with running(client) as runner:
        assert failed.wait(30)
        runner.stop()  # during the 60 s backoff: running() joins within its 30 s
    assert calls == ["a", "flaky"]  # no attempt run back to back after the stop
    assert client.list_dead_letters("t") == []
    [part] = client.describe_group("g").partitions
    assert part.committed == 1  # "a" committed, "flaky" left for the next owner

    seen = Seen(2)
    with postroom.connect(client.conninfo) as again:
        again.subscribe("t", group="g")(seen.add)
        with running(again):
            seen.wait()
    assert [v for _, v in seen.values] == ["flaky", "c"]


def test_a_replay_passes_over_a_dead_letter_whose_topic_is_gone(client: postroom.Client) -> None:
    client.create_topic("t")
    client.create_topic("t.dlq")
    for value, source in [("one", "t"), ("lost", "gone"), ("two", "t")]:
        client.publish("t.dlq", value, headers={"postroom-dlq-topic": source})
    assert client.replay_dead_letters("t") == 2
    assert client.replay_dead_letters("t") == 0
    with client.consumer(None, "t") as peek:
        assert [m.text() for m in peek.poll(timeout=0)] == ["one", "two"]
