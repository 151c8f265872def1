"""The relay loop across a group hand-over and with a batch polled ahead: the batch in flight
finishes first, an outage keeps the cursor and the order, a fenced commit drops what was polled
ahead; the default batch size; sink errors that cannot be printed."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import pytest

import postroom
from postroom.errors import SinkUnavailable
from postroom.relay import Outbound

from ..signals import wait_for
from .helpers import FAST, ScriptedSink, group_lag, ids, running_relay


class GatedSink(ScriptedSink):
    """Holds its first send until ``gate`` is set (``entered`` says it is waiting); appends
    what it acknowledges to ``log``, shared by the sinks of several relays."""

    def __init__(self, log: list[str], gated: bool) -> None:
        super().__init__()
        self.sent = log
        self.gate = threading.Event()
        self.entered = threading.Event()
        if not gated:
            self.gate.set()

    async def send(self, batch: Sequence[Outbound]) -> None:
        import asyncio

        self.entered.set()
        if not self.gate.is_set():
            await asyncio.to_thread(self.gate.wait, 30)
        await super().send(batch)


def revoking_leases(dsn: str, schema: str, group: str) -> int:
    """Leases of ``group`` that their owner is asked to hand over (a target, not the owner)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {}.leases WHERE group_name = %s AND target IS NOT NULL"
                " AND target IS DISTINCT FROM owner"
            ).format(sql.Identifier(schema)),
            (group,),
        ).fetchone()
    return 0 if row is None else int(row[0])


def owners(client: postroom.Client) -> set[str]:
    return {p.member for p in client.describe_group("relay.h").partitions if p.member}


def test_a_hand_over_waits_for_the_batch_in_flight(
    client: postroom.Client, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A partition asked for while a batch of it is at the sink (and the next one polled) is
    handed over only after that batch is acknowledged and committed: the new owner starts
    after it. Nothing lost, nothing sent twice, each partition in offset order. (Handed over
    at once instead, the new owner would send the batch in flight again, before it.)"""
    caplog.set_level(logging.INFO, logger="postroom.relay")
    client.create_topic("t", partitions=2)

    def publish(first: int, count: int) -> None:
        client.publish_batch(
            "t", [{"value": i, "partition": p} for i in range(first, first + count) for p in (0, 1)]
        )

    publish(0, 4)  # batch 1 holds both partitions
    log: list[str] = []
    first, second = GatedSink(log, gated=True), GatedSink(log, gated=False)
    # A long poll_timeout: the poll that follows batch 1 waits for more meanwhile, and it is
    # that poll which applies the hand-over.
    options: dict[str, Any] = {
        "group": "relay.h",
        "batch_size": 10,
        "session_timeout": 1.0,
        "poll_timeout": 60,
    }
    with running_relay(client, "t", first, **options):
        assert first.entered.wait(30)  # batch 1 in flight
        with running_relay(client, "t", second, **options):
            # The group asks the first relay for a partition it has a batch of in flight; its
            # poll applies that, and waits for the batch
            wait_for(lambda: revoking_leases(dsn, client.schema, "relay.h") >= 1)
            wait_for(lambda: "once the batch in flight is committed" in caplog.text)
            assert log == []  # not handed over yet: the new owner has sent nothing
            assert revoking_leases(dsn, client.schema, "relay.h") >= 1
            first.gate.set()
            wait_for(lambda: len(owners(client)) == 2)  # handed over once batch 1 committed
            publish(4, 3)  # the new owner carries these
            wait_for(lambda: group_lag(client, "relay.h") == 0 and second.calls)
    expected = [f"t/{p}/{o}" for p in (0, 1) for o in range(7)]
    assert sorted(log) == sorted(expected)
    assert len(log) == len(set(log)), f"a clean hand-over sends nothing twice: {log}"
    for partition in (0, 1):
        offsets = [int(i.rsplit("/", 1)[1]) for i in log if i.startswith(f"t/{partition}/")]
        assert offsets == sorted(offsets)


def test_an_outage_with_a_batch_polled_ahead_keeps_the_cursor_and_the_order(
    client: postroom.Client,
) -> None:
    """The sink goes down after batch 1: batch 2 is retried while batch 3 (polled ahead) waits;
    the cursor stays after batch 1, and once the sink is back batch 2 then 3 go, in order."""
    client.create_topic("t")
    client.publish_batch("t", list(range(20)))

    class DownAfterFirst(ScriptedSink):
        async def send(self, batch: Sequence[Outbound]) -> None:
            await super().send(batch)
            if self.calls == 1:
                self.down.set()

    sink = DownAfterFirst()
    with running_relay(client, "t", sink, group="relay.s", batch_size=5, backoff=FAST) as relay:
        wait_for(lambda: sink.calls >= 5)
        assert sink.sent == ids("t", range(5))
        assert group_lag(client, "relay.s") == 15  # batch 1 committed, batch 2 not
        sink.down.clear()
        wait_for(lambda: group_lag(client, "relay.s") == 0)
    assert sink.sent == ids("t", range(20))
    assert relay.counters.sink_failures >= 4


class FencedOnce:
    """A consumer polled by the pipeline: batch 1 (t/0 0-1), then batch 2 (2-3) while batch 1 is
    in flight; batch 1's commit is refused as Fenced. Then it stops the relay."""

    def __init__(self, relay: Any) -> None:
        self.relay = relay
        self.polls = 0
        self.commits: list[Any] = []
        self.seeks: list[tuple[Any, int]] = []

    async def poll(self, timeout: float, max_messages: int) -> list[Any]:
        from datetime import UTC, datetime

        from postroom.log.records import build_message

        self.polls += 1
        if self.polls > 2:
            self.relay.stop()
            return []
        first = 2 * (self.polls - 1)
        return [
            build_message("t", 0, o, None, b"v", {}, datetime.now(UTC)) for o in (first, first + 1)
        ]

    async def commit(self, offsets: Any) -> None:
        self.commits.append(dict(offsets))
        raise postroom.errors.Fenced("t/0 moved")

    async def seek(self, tp: Any, offset: int) -> None:
        self.seeks.append((tp, offset))


def test_a_fenced_commit_drops_the_batch_polled_ahead() -> None:
    import asyncio
    from typing import cast

    from postroom.log.records import TopicPartition
    from postroom.relay import AsyncRelay

    sink = ScriptedSink()
    relay = AsyncRelay(cast(Any, None), "t", sink)
    consumer = FencedOnce(relay)
    asyncio.run(relay._pipeline(consumer))
    assert sink.sent == ["t/0/0", "t/0/1"]  # batch 2 was read under the lost epoch: not sent
    assert consumer.seeks == [(TopicPartition("t", 0), 2)]  # read again if still held
    assert consumer.commits == [{TopicPartition("t", 0): 2}]


def test_the_default_batch_size_is_the_sinks() -> None:
    from typing import cast

    from postroom.relay import AsyncRelay

    assert AsyncRelay(cast(Any, None), "t", ScriptedSink()).batch_size == 500
    assert AsyncRelay(cast(Any, None), "t", "redis://127.0.0.1:6379").batch_size == 2000
    assert AsyncRelay(cast(Any, None), "t", "kafka://127.0.0.1:9092").batch_size == 2000
    assert AsyncRelay(cast(Any, None), "t", ScriptedSink(), batch_size=7).batch_size == 7


class UnprintableOutage(SinkUnavailable):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken too")


def test_a_sink_error_whose_str_raises_is_reported_by_its_type_and_retried(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    client.publish_batch("t", list(range(3)))
    sink = ScriptedSink()
    failures: list[int] = []
    plain_send = sink.send

    async def send(batch: Sequence[Outbound]) -> None:
        if not failures:
            failures.append(1)
            raise UnprintableOutage
        await plain_send(batch)

    sink.send = send  # type: ignore[method-assign]
    with running_relay(client, "t", sink, group="relay.s", backoff=FAST) as relay:
        wait_for(lambda: group_lag(client, "relay.s") == 0)
    assert sink.sent == ids("t", range(3))
    assert relay.counters.sink_failures == 1
