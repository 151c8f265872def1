"""Shared pieces of the relay tests: run a relay in a thread, wait with a deadline, check
what a sink received."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import postroom
from postroom import Backoff
from postroom.errors import MessageRejected, SinkUnavailable
from postroom.relay import Outbound, Relay, Sink


def unique(prefix: str) -> str:
    """A name no other test (or helper sharing this machine's brokers) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@contextmanager
def running_relay(
    client: postroom.Client, topics: str | list[str], sink: Any, **options: Any
) -> Iterator[Relay]:
    """A relay running in a thread for the duration of the block; stopped and joined after,
    and any error it raised is raised here."""
    relay = client.relay(topics, sink, **options)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            relay.run()
        except BaseException as exc:  # noqa: BLE001 (handed to the test thread)
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        relay.stop()
        thread.join(30)
    assert not thread.is_alive(), "the relay did not stop within 30 s"
    if failure:
        raise failure[0]


def publish_keyed(
    client: postroom.Client,
    dsn: str,
    topic: str,
    total: int,
    keys: int,
    *,
    per_tx: int = 50,
    rollback_every: int = 0,
    first: int = 0,
) -> list[dict[str, int]]:
    """Publish ``total`` events {"seq", "key"} in transactions of ``per_tx``; with
    ``rollback_every`` = n every n-th transaction is rolled back; ``seq`` counts from ``first``.
    Returns the committed events."""
    import psycopg

    committed: list[dict[str, int]] = []
    with psycopg.connect(dsn) as conn:
        for tx_index, start in enumerate(range(first, first + total, per_tx)):
            end = min(start + per_tx, first + total)
            events = [{"seq": s, "key": s % keys} for s in range(start, end)]
            client.publish_batch(
                topic,
                [{"key": f"k{e['key']}", "value": e} for e in events],
                conn=conn,
            )
            if rollback_every and tx_index % rollback_every == rollback_every - 1:
                conn.rollback()
            else:
                conn.commit()
                committed.extend(events)
    return committed


def check_delivery(
    received: list[tuple[str, dict[str, int]]], committed: list[dict[str, int]]
) -> int:
    """Every committed event exactly once after dedup by id, nothing else, per-key order kept.
    Returns the number of duplicates dropped."""
    seen: set[str] = set()
    events = []
    for message_id, event in received:
        if message_id in seen:
            continue
        seen.add(message_id)
        events.append(event)
    seqs = [e["seq"] for e in events]
    assert len(seqs) == len(set(seqs)), "two ids carried the same event"
    assert sorted(seqs) == sorted(e["seq"] for e in committed), "lost or rolled-back events"
    by_key: dict[int, list[int]] = {}
    for event in events:
        by_key.setdefault(event["key"], []).append(event["seq"])
    for key, key_seqs in by_key.items():
        assert key_seqs == sorted(key_seqs), f"key {key} reordered"
    return len(received) - len(events)


def decode(value: bytes | str) -> dict[str, int]:
    result: dict[str, int] = json.loads(value)
    return result


def group_lag(client: postroom.Client, group: str) -> int | None:
    """The group's total lag, None while it has not committed yet, or while a partition of a
    topic it reads has no cursor yet: ``describe_group`` lists the partitions with a cursor
    only, and a member makes its partitions' cursors when it takes them. A relay slower to
    take its half than the other to send its own once let a two-relay run stop at lag 0 with
    half the events sent (tests/relay/test_end_to_end.py, in a loaded CI run)."""
    from postroom.errors import GroupNotFound

    try:
        described = client.describe_group(group)
    except GroupNotFound:
        return None
    held: dict[str, int] = {}
    for part in described.partitions:
        held[part.topic] = held.get(part.topic, 0) + 1
    if any(count < client.describe_topic(topic).partitions for topic, count in held.items()):
        return None
    return described.lag


CLI = [sys.executable, "-c", "from postroom.cli.main import main; main()"]


def start_relay(dsn: str, *args: str) -> subprocess.Popen[str]:
    """``postroom relay ARGS`` in a process of its own."""
    return subprocess.Popen(
        [*CLI, "--url", dsn, "relay", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop_relays(procs: list[subprocess.Popen[str]]) -> list[str]:
    """SIGTERM each relay, wait for it, and return their stderr; each must exit 0."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    errors = [proc.communicate(timeout=60)[1] for proc in procs]
    for proc, err in zip(procs, errors, strict=True):
        # -SIGTERM: a relay stopped while still starting (before its handler was installed).
        assert proc.returncode in (0, -signal.SIGTERM), err
    return errors


FAST = Backoff(base=0.01, factor=2, max_delay=0.05)


class ScriptedSink(Sink):
    """Acknowledges everything except what ``refuse`` (ids refused for good) and ``down``
    (while set, nothing is taken) say; ``sent`` keeps the ids acknowledged, in order."""

    scheme = "scripted"

    def __init__(self) -> None:
        super().__init__("scripted://test")
        self.sent: list[str] = []
        self.refuse: set[str] = set()
        self.down = threading.Event()
        self.calls = 0
        self.opened = 0
        self.closed = 0

    async def open(self) -> None:
        self.opened += 1

    async def send(self, batch: Sequence[Outbound]) -> None:
        self.calls += 1
        if self.down.is_set():
            raise SinkUnavailable("scripted outage")
        for index, out in enumerate(batch):
            if out.id in self.refuse:
                raise MessageRejected(f"refused {out.id}", index)
            self.sent.append(out.id)

    async def close(self) -> None:
        self.closed += 1


def ids(topic: str, offsets: range | list[int], partition: int = 0) -> list[str]:
    return [f"{topic}/{partition}/{o}" for o in offsets]
