"""A publish whose COMMIT was cut in flight raises CommitUnknown, and a producer's batch sets
it on its futures (issue 21.3): the caller learns the outcome is unknown, not that it failed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from postroom.errors import CommitUnknown

from ..blocking import EventLoopThread
from ..commit_cut import cut_client
from ..queue.helpers import scalar


def in_log(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM postroom.messages"))


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "rolled-back"])
def test_publish_cut_during_commit_raises_commit_unknown(
    dsn: str, client_loop: EventLoopThread | None, committed: bool
) -> None:
    with cut_client(dsn, client_loop) as (client, proxy):
        client.create_topic("t", partitions=2)
        client.publish("t", "first")  # the topic's metadata is cached: no other COMMIT
        expected = 1
        writes: list[tuple[str, Callable[[], object]]] = [
            ("1 message to topic 't'", lambda: client.publish("t", {"n": 1}, key="k")),
            ("3 messages to topic 't'", lambda: client.publish_batch("t", [b"a", b"b", b"c"])),
            (
                "2 messages to topic 't'",
                lambda: client.publish_batch("t", [{"value": 1, "key": "a"}, {"value": 2}]),
            ),
        ]
        for what, write in writes:
            proxy.arm(after_reply=committed)
            with pytest.raises(CommitUnknown) as info:
                write()
            assert info.value.committing == what
            expected += int(what.split()[0]) if committed else 0
            assert in_log(dsn) == expected
        client.publish("t", "after")  # the client goes on: the pool replaced the connection
    assert in_log(dsn) == expected + 1


def test_a_producer_batch_cut_during_commit_sets_commit_unknown_on_its_futures(
    dsn: str, client_loop: EventLoopThread | None
) -> None:
    with cut_client(dsn, client_loop) as (client, proxy):
        client.create_topic("t", partitions=1)
        client.publish("t", "first")  # the topic's metadata is cached: no other COMMIT
        with client.producer(linger_ms=50) as producer:
            proxy.arm(after_reply=True)
            futures = [producer.send("t", {"n": n}) for n in range(3)]
            producer.flush()
            for future in futures:
                assert isinstance(future.exception(timeout=30), CommitUnknown)
            assert producer.send("t", {"n": 3}).result(timeout=30).offset == 4
    assert in_log(dsn) == 5
