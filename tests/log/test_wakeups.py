"""LISTEN/NOTIFY wake-ups of waiting consumers: with the fallback poll a minute away, only the
notification of a publish can wake a consumer within seconds.

Each test waits until the consumer listens and has done its last fetch (``wait_for_listener``),
so the message can only reach it through the notification, then publishes from another
connection (the client's pool) and expects the message well before the fallback.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

import postroom
from postroom.log import claim_policy

from ..signals import wait_for_listener

FALLBACK = 60.0  # seconds between polls without a notification, in these tests
WAKE_WITHIN = 20.0  # generous for a loaded machine, and still a third of the fallback


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claim_policy, "POLL_INTERVAL", FALLBACK)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(1) as executor:
        yield executor


def test_poll_wakes_up_on_publish(
    any_client: postroom.Client, dsn: str, pool: ThreadPoolExecutor
) -> None:
    any_client.create_topic("t", partitions=2)
    with any_client.consumer("g", "t") as consumer:
        assert consumer.poll(timeout=0) == []
        started = time.monotonic()
        polled = pool.submit(consumer.poll, timeout=FALLBACK)
        wait_for_listener(dsn, "postroom")
        any_client.publish("t", "wake", partition=1)
        assert [m.text() for m in polled.result(timeout=WAKE_WITHIN)] == ["wake"]
        assert time.monotonic() - started < WAKE_WITHIN


def test_transaction_wakes_up_on_publish(
    any_client: postroom.Client, dsn: str, pool: ThreadPoolExecutor
) -> None:
    any_client.create_topic("t")
    with any_client.consumer("g", "t") as consumer:

        def claim() -> list[str]:
            with consumer.transaction(max_messages=5, timeout=FALLBACK) as batch:
                return [m.text() for m in batch]

        claimed = pool.submit(claim)
        wait_for_listener(dsn, "postroom")
        any_client.publish_batch("t", ["a", "b"])
        assert claimed.result(timeout=WAKE_WITHIN) == ["a", "b"]
        assert consumer.committed(postroom.TopicPartition("t", 0)) == 2


def test_iteration_wakes_up_on_publish(
    any_client: postroom.Client, dsn: str, pool: ThreadPoolExecutor
) -> None:
    any_client.create_topic("t")
    with any_client.consumer("g", "t") as consumer:
        iterator = iter(consumer)
        first = pool.submit(next, iterator)
        wait_for_listener(dsn, "postroom")
        any_client.publish("t", "first")
        assert first.result(timeout=WAKE_WITHIN).text() == "first"
