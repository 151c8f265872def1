"""The log's application-level behaviour, the same on PostgreSQL and on Kafka (Tansu).

Each test runs on ``postgresql``, ``kafka`` and ``kafka-async`` (conftest.py). What cannot
run on Tansu is said where it is left out (docs/kafka.md, "Conformance").
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import postroom
from postroom import TopicPartition, _fastpaths
from postroom.errors import Fenced, InvalidArgument, NotSupported

from .conftest import KAFKA_CONSUMER, another_client, drain


def test_order_per_partition(log_client: postroom.Client, names: Callable[[str], str]) -> None:
    topic, group = names("orders"), names("g")
    log_client.create_topic(topic, partitions=3)
    for i in range(30):
        log_client.publish(topic, {"key": f"k{i % 5}", "n": i}, key=f"k{i % 5}")
    with log_client.consumer(group, topic, **KAFKA_CONSUMER) as consumer:
        got = drain(consumer, 30)
    assert len(got) == 30
    by_partition: dict[int, list[int]] = {}
    by_key: dict[bytes | None, list[int]] = {}
    for message in got:
        by_partition.setdefault(message.partition, []).append(message.offset)
        by_key.setdefault(message.key, []).append(message.json()["n"])
    for offsets in by_partition.values():
        assert offsets == sorted(offsets) == list(range(len(offsets)))
    for numbers in by_key.values():
        assert numbers == sorted(numbers)


def test_keys_land_on_postrooms_partition_numbers(
    log_client: postroom.Client, names: Callable[[str], str]
) -> None:
    topic = names("keys")
    log_client.create_topic(topic, partitions=6)
    keys = [f"customer-{i}" for i in range(40)] + ["", "ü-ñ", "x" * 300]
    placed = {key: log_client.publish(topic, b"v", key=key).partition for key in keys}
    expected = {key: postroom.partition_for_key(key.encode(), 6) for key in keys}
    assert placed == expected
    batch = log_client.publish_batch(topic, [{"value": b"w", "key": key} for key in keys])
    assert [p.partition for p in batch] == [expected[key] for key in keys]


def test_commit_seek_and_reset(log_client: postroom.Client, names: Callable[[str], str]) -> None:
    topic, group = names("pos"), names("g")
    tp = TopicPartition(topic, 0)
    log_client.create_topic(topic, partitions=1)
    for i in range(10):
        log_client.publish(topic, str(i))
    with log_client.consumer(group, topic, **KAFKA_CONSUMER) as consumer:
        got: list[postroom.Message] = []
        while len(got) < 10:
            got += consumer.poll(timeout=1)
        consumer.commit(got[4])  # this one and those before are done: next offset 5
        assert consumer.committed(tp) == 5
        consumer.seek(tp, 2)
        assert consumer.position(tp) == 2
        again = consumer.poll(timeout=5)
        assert again and again[0].offset == 2
    with log_client.consumer(group, topic, **KAFKA_CONSUMER) as consumer:
        assert consumer.position(tp) == 5
        resumed = consumer.poll(timeout=10)
        assert resumed[0].offset == 5
    assert log_client.reset_group(group, topic, to="earliest") == {0: 0}
    assert log_client.describe_group(group).partitions[0].committed == 0
    assert log_client.reset_group(group, topic, to=7) == {0: 7}
    assert log_client.reset_group(group, topic, to="latest") == {0: 10}
    assert log_client.describe_group(group).lag == 0


def test_rewind_returns_the_unhandled_messages(
    log_client: postroom.Client, names: Callable[[str], str]
) -> None:
    topic, group = names("rewind"), names("g")
    log_client.create_topic(topic)
    for i in range(5):
        log_client.publish(topic, str(i))
    with log_client.consumer(group, topic, **KAFKA_CONSUMER) as consumer:
        got: list[postroom.Message] = []
        while len(got) < 5:
            got += consumer.poll(timeout=1)
        consumer.rewind(got[2:])
        consumer.commit()
        assert consumer.committed(TopicPartition(topic, 0)) == 2
        assert [m.offset for m in consumer.poll(timeout=5)][:1] == [2]


def test_a_commit_after_the_partition_moved_is_fenced(
    log_client: postroom.Client, names: Callable[[str], str]
) -> None:
    topic, group = names("fence"), names("g")
    log_client.create_topic(topic, partitions=2)
    log_client.publish(topic, b"a", partition=0)
    log_client.publish(topic, b"b", partition=1)
    first = log_client.consumer(group, topic, **KAFKA_CONSUMER)
    second = log_client.consumer(group, topic, **KAFKA_CONSUMER)
    try:
        got: list[postroom.Message] = []
        while len(got) < 2:
            got += first.poll(timeout=1)
        held = _settle([first, second], total=2)
        moved = next(iter(held[1]))
        with pytest.raises(Fenced):
            first.commit({moved: 1})
        with pytest.raises(InvalidArgument):  # never held by the first: a caller's mistake
            second.commit({next(iter(held[0])): 1})
        assert second.committed(moved) in (None, 0)  # Kafka: None; PostgreSQL: earliest
    finally:
        first.close()
        second.close()


def _settle(members: list[Any], total: int, timeout: float = 60) -> list[set[TopicPartition]]:
    """Poll every member in turn until their assignments split ``total`` partitions."""
    held: list[set[TopicPartition]] = [set() for _ in members]
    polling = [threading.Thread(target=m.poll, kwargs={"timeout": 0.2}) for m in members]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        polling = [threading.Thread(target=m.poll, kwargs={"timeout": 0.2}) for m in members]
        for thread in polling:
            thread.start()
        for thread in polling:
            thread.join()
        held = [m.assignment() for m in members]
        if all(held) and sum(map(len, held)) == total == len(set().union(*held)):
            return held
    raise AssertionError(f"the group did not settle: {held}")


def test_rebalance_callbacks(log_client: postroom.Client, names: Callable[[str], str]) -> None:
    topic, group = names("rebalance"), names("g")
    log_client.create_topic(topic, partitions=4)
    events: list[tuple[str, str, frozenset[TopicPartition]]] = []

    def hooks(name: str) -> dict[str, Any]:
        return {
            "on_assign": lambda tps: events.append((name, "assign", frozenset(tps))),
            "on_revoke": lambda tps: events.append((name, "revoke", frozenset(tps))),
        }

    first = log_client.consumer(group, topic, **KAFKA_CONSUMER, **hooks("first"))
    all_four = frozenset(TopicPartition(topic, p) for p in range(4))
    assert first.assignment() == all_four
    assert events == [("first", "assign", all_four)]
    second = log_client.consumer(group, topic, **KAFKA_CONSUMER, **hooks("second"))
    try:
        held = _settle([first, second], total=4)
        revoked = frozenset().union(*(e[2] for e in events if e[:2] == ("first", "revoke")))
        gained = frozenset().union(*(e[2] for e in events if e[:2] == ("second", "assign")))
        assert gained == held[1] and held[1] <= revoked
    finally:
        second.close()
    assert any(e[:2] == ("second", "revoke") for e in events)  # closing revokes
    deadline = time.monotonic() + 60
    while first.assignment() != all_four and time.monotonic() < deadline:
        first.poll(timeout=0.2)
    assert first.assignment() == all_four
    first.close()


def test_runner_retries_then_dead_letters(
    log_client: postroom.Client, names: Callable[[str], str]
) -> None:
    topic, group = names("jobs"), names("g")
    log_client.create_topic(topic)
    attempts: dict[str, int] = {}
    done = threading.Event()

    @log_client.subscribe(topic, group=group, max_attempts=3, retry_delay=0, **KAFKA_CONSUMER)
    def handle(message: postroom.Message) -> None:
        attempts[message.text()] = attempts.get(message.text(), 0) + 1
        if message.text() == "poison":
            raise ValueError("cannot handle poison")
        if message.text() == "last":
            done.set()

    for value in ("a", "poison", "b", "last"):
        log_client.publish(topic, value)
    runner = log_client.runner()
    thread = threading.Thread(target=runner.run, kwargs={"handle_signals": False})
    thread.start()
    try:
        assert done.wait(60)
    finally:
        runner.stop()
        thread.join(60)
    assert attempts == {"a": 1, "poison": 3, "b": 1, "last": 1}
    letters = log_client.list_dead_letters(topic)
    assert [m.text() for m in letters] == ["poison"]
    headers = letters[0].headers
    assert headers["postroom-dlq-topic"] == topic
    assert headers["postroom-dlq-attempts"] == "3"
    assert headers["postroom-dlq-group"] == group
    assert "cannot handle poison" in str(headers["postroom-dlq-error"])
    assert log_client.describe_group(group).lag == 0


def test_lag(log_client: postroom.Client, names: Callable[[str], str]) -> None:
    topic, group = names("lag"), names("g")
    log_client.create_topic(topic, partitions=2)
    for i in range(6):
        log_client.publish(topic, str(i), partition=i % 2)
    with log_client.consumer(group, topic, **KAFKA_CONSUMER) as consumer:
        got: list[postroom.Message] = []
        while len(got) < 6:
            got += consumer.poll(timeout=1)
        first_of_0 = next(m for m in got if m.partition == 0)
        consumer.commit(first_of_0)  # partition 0: 1 of 3 committed; partition 1: nothing
    info = log_client.describe_group(group)
    lag = {p.partition: (p.committed, p.high_water, p.lag) for p in info.partitions}
    assert lag[0] == (1, 3, 2)
    assert info.lag == lag[0][2] + lag.get(1, (0, 3, 3))[2]
    assert log_client.log.lag(group) == info.lag


def test_the_postgresql_only_features_refuse_clearly(
    log_client: postroom.Client, backend: str, names: Callable[[str], str]
) -> None:
    if backend == "postgresql":
        pytest.skip("PostgreSQL gives them all")
    topic = names("pg-only")
    log_client.create_topic(topic)
    with pytest.raises(NotSupported, match="PostgreSQL"):
        log_client.publish(topic, b"x", conn=object())
    with pytest.raises(NotSupported, match="PostgreSQL"):
        log_client.create_topic(names("other"), max_lag=10)
    with pytest.raises(NotSupported, match="PostgreSQL"):
        log_client.consumer(names("g"), topic).transaction()
    with pytest.raises(NotSupported, match="PostgreSQL"):
        log_client.enqueue("email", {"to": "a@example.com"})
    with pytest.raises(NotSupported, match="PostgreSQL"):
        log_client.migrate()


@pytest.mark.parametrize("pause_gc", [True, False])
def test_a_client_turns_the_gc_pause_off(
    log_client: postroom.Client,
    log_url: str,
    backend: str,
    names: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    pause_gc: bool,
) -> None:
    """``connect(pause_gc=...)`` holds on both backends: a poll pauses the collector while it
    builds its messages (on the fast paths), or leaves it running when told to."""
    topic = names("gc")
    log_client.create_topic(topic)
    log_client.publish_batch(topic, [b"x"] * 10)
    disabled: list[str] = []
    real_disable = gc.disable

    def counting_disable() -> None:
        disabled.append(threading.current_thread().name)
        real_disable()

    with another_client(backend, log_url, pause_gc=pause_gc) as client:
        tp = TopicPartition(topic, 0)
        with client.consumer(None, topic, partitions=[tp], **KAFKA_CONSUMER) as consumer:
            monkeypatch.setattr(gc, "disable", counting_disable)
            got: list[postroom.Message] = []
            deadline = time.monotonic() + 30
            while len(got) < 10 and time.monotonic() < deadline:
                got += consumer.poll(timeout=1)
            monkeypatch.undo()
    assert len(got) == 10
    assert bool(disabled) == (pause_gc and _fastpaths.FAST), (backend, disabled)
    assert gc.isenabled()


def test_pause_gc_must_be_a_bool_on_kafka() -> None:
    with pytest.raises(InvalidArgument, match="invalid pause_gc"):
        postroom.connect("kafka://127.0.0.1:1", pause_gc="no")  # type: ignore[arg-type]
