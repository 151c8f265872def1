"""The consumer runner (@client.subscribe, client.runner()): order per partition, retries, the
dead-letter topic and its replay, transactional handlers, asyncio, reconnects."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

import postroom
from postroom.errors import InvalidArgument

from ..proxy import Proxy


@contextmanager
def running(client: postroom.Client) -> Iterator[postroom.Runner]:
    runner = client.runner()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            runner.run(handle_signals=False)
        except BaseException as exc:  # noqa: BLE001  # reported by the assert below
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    try:
        yield runner
    finally:
        runner.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert not errors, errors


class Seen:
    """Handled values, and an event set once ``expected`` of them arrived."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.values: list[tuple[int, str]] = []
        self.done = threading.Event()
        self._lock = threading.Lock()

    def add(self, message: postroom.Message) -> None:
        with self._lock:
            self.values.append((message.partition, message.text()))
            if len(self.values) >= self.expected:
                self.done.set()

    def wait(self, timeout: float = 30) -> None:
        assert self.done.wait(timeout), f"handled {len(self.values)} of {self.expected}"


def test_the_runner_handles_every_message_in_order_per_partition(client: postroom.Client) -> None:
    client.create_topic("orders", partitions=4)
    seen = Seen(40)
    client.subscribe("orders", group="billing", concurrency=2)(seen.add)
    client.publish_batch("orders", [{"value": f"{i}", "key": f"k{i % 7}"} for i in range(40)])
    with running(client) as runner:
        seen.wait()
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, value in seen.values:
        by_partition[partition].append(int(value))
    assert all(values == sorted(values) for values in by_partition.values())
    assert sorted(int(v) for _, v in seen.values) == list(range(40))
    assert runner.processed == 40
    assert client.describe_group("billing").lag == 0


def test_a_poison_message_goes_to_the_dead_letter_topic_and_replays(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    fixed = threading.Event()
    seen = Seen(3)
    attempts: list[str] = []

    def handle(message: postroom.Message) -> None:
        if message.text() == "bad" and not fixed.is_set():
            attempts.append(message.text())
            raise ValueError("cannot handle bad\x00")
        seen.add(message)

    client.subscribe("t", group="g", max_attempts=3, retry_delay=0.01)(handle)
    client.publish_batch("t", ["a", "bad", "c"])
    seen.expected = 2
    with running(client) as runner:
        seen.wait()
        assert [v for _, v in seen.values] == ["a", "c"]
        assert attempts == ["bad"] * 3
        assert runner.dead_lettered == 1
        [letter] = client.list_dead_letters("t")
        assert letter.text() == "bad"
        assert {k: v for k, v in letter.headers.items() if k != "postroom-dlq-error"} == {
            "postroom-dlq-topic": "t",
            "postroom-dlq-partition": "0",
            "postroom-dlq-offset": "1",
            "postroom-dlq-id": "t/0/1",
            "postroom-dlq-group": "g",
            "postroom-dlq-attempts": "3",
        }
        assert letter.headers["postroom-dlq-error"] == "ValueError: cannot handle bad\\x00"
        fixed.set()
        seen.expected, seen.done = 3, threading.Event()
        assert client.replay_dead_letters("t") == 1
        assert client.replay_dead_letters("t") == 0  # each dead letter is replayed once
        seen.wait()
    assert [v for _, v in seen.values] == ["a", "c", "bad"]


def test_transactional_handlers_write_exactly_once_and_retry_in_a_savepoint(
    client: postroom.Client,
) -> None:
    client.create_topic("t", partitions=2)
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        conn.execute("CREATE TABLE effects (value text PRIMARY KEY)")
    failed_once: set[str] = set()
    succeeded: list[str] = []
    done = threading.Event()

    def handle(message: postroom.Message, conn: psycopg.Connection) -> None:
        conn.execute("INSERT INTO effects VALUES (%s)", [message.text()])
        if message.text() not in failed_once:
            failed_once.add(message.text())
            raise RuntimeError("transient")  # the insert above is rolled back with it
        succeeded.append(message.text())
        if len(succeeded) == 10:
            done.set()

    client.subscribe("t", group="g", transactional=True, retry_delay=0)(handle)
    client.publish_batch("t", [{"value": str(i), "partition": i % 2} for i in range(10)])
    with running(client):
        assert done.wait(30)
    # stop() let the batch in flight commit before the runner returned.
    assert client.describe_group("g").lag == 0
    with psycopg.connect(client.conninfo) as conn:
        assert conn.execute("SELECT count(*) FROM effects").fetchone() == (10,)


def test_an_async_runner_runs_coroutine_handlers(dsn: str) -> None:
    async def main() -> list[str]:
        async with await postroom.connect_async(dsn) as client:
            await client.create_topic("t", partitions=2)
            got: list[str] = []
            done = asyncio.Event()

            @client.subscribe("t", group="g", batch=True)
            async def handle(messages: list[postroom.Message]) -> None:
                got.extend(m.text() for m in messages)
                if len(got) == 6:
                    done.set()

            batch = [{"value": str(i), "partition": i % 2} for i in range(6)]
            await client.publish_batch("t", batch)
            runner = client.runner()
            task = asyncio.create_task(runner.run(handle_signals=False))
            await asyncio.wait_for(done.wait(), 30)
            runner.stop()
            await asyncio.wait_for(task, 30)
            return got

    assert sorted(asyncio.run(main())) == [str(i) for i in range(6)]


def test_the_runner_goes_on_after_its_connections_are_cut(dsn: str) -> None:
    with Proxy(dsn) as proxy, postroom.connect(proxy.dsn) as client:
        client.create_topic("t")
        seen = Seen(2)
        client.subscribe("t", group="g", session_timeout=3)(seen.add)
        client.publish("t", "before")
        with running(client):
            seen.expected = 1
            seen.wait()
            proxy.cut()
            seen.expected, seen.done = 2, threading.Event()
            client.publish("t", "after")
            seen.wait()
        assert [v for _, v in seen.values] == ["before", "after"]


def test_bad_subscriptions_are_refused(client: postroom.Client) -> None:
    with pytest.raises(InvalidArgument, match="invalid max_attempts 0"):
        client.subscribe("t", group="g", max_attempts=0)(print)
    with pytest.raises(InvalidArgument, match="unknown subscribe"):
        client.subscribe("t", group="g", retries=3)(print)
    with pytest.raises(postroom.errors.PostroomError, match="nothing to run"):
        client.runner().run(handle_signals=False)
