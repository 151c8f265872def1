"""The relay across a real PostgreSQL restart (a throwaway embedded server, never the shared
one): events are published while the server goes down and comes back; the relay reconnects by
itself, every committed event reaches Redis (after dedup by id), per-key order is kept, and the
only duplicates are the batch that was in flight."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest

import postroom
from postroom import Backoff
from tests.log.test_faults import own_server, pg_ctl

from ..signals import wait_for
from .helpers import check_delivery, running_relay
from .test_redis import URL, read_stream, redis, stream_prefix

__all__ = ["own_server", "stream_prefix"]  # the fixtures, imported for use here

KEYS = 11
BATCH = 100


def committed_events(url: str, topic: str) -> list[dict[str, int]]:
    """The events the database holds for ``topic``: the committed ones, and only those."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT m.value FROM postroom.messages m JOIN postroom.topics t "
            "ON t.id = m.topic_id WHERE t.name = %s",
            [topic],
        ).fetchall()
    return [json.loads(bytes(value)) for (value,) in rows]


class Publisher(threading.Thread):
    """Publishes keyed events {"seq", "key"} in transactions of 20 (every fourth rolled back)
    until ``stop`` is set, reconnecting while the server is down. ``acknowledged`` holds the
    seqs whose commit returned; a commit cut by the restart is not retried (its events may or
    may not be in the log: the database says which)."""

    def __init__(self, client: postroom.Client, url: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.client, self.url, self.topic = client, url, topic
        self.stop = threading.Event()
        self.acknowledged: set[int] = set()
        self.failures = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._publish()
        except BaseException as exc:  # noqa: BLE001  # reported by the test
            self.error = exc

    def _publish(self) -> None:
        seq = 0
        tx = 0
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.url, connect_timeout=2) as conn:
                    while not self.stop.is_set():
                        events = [{"seq": s, "key": s % KEYS} for s in range(seq, seq + 20)]
                        seq += 20
                        tx += 1
                        self.client.publish_batch(
                            self.topic,
                            [{"key": f"k{e['key']}", "value": e} for e in events],
                            conn=conn,
                        )
                        if tx % 4 == 0:
                            conn.rollback()
                        else:
                            conn.commit()
                            self.acknowledged.update(e["seq"] for e in events)
            except (psycopg.OperationalError, postroom.errors.DatabaseUnavailable):
                self.failures += 1
                self.stop.wait(0.1)  # the server is restarting: try to reconnect shortly


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_the_relay_goes_on_after_a_database_restart(
    own_server: tuple[str, Path], stream_prefix: str, mode: str
) -> None:
    url, pgdata = own_server
    stream = stream_prefix + "orders"
    r = redis.Redis.from_url(URL)
    fast = Backoff(base=0.05, max_delay=0.5)
    with postroom.connect(url) as client:
        client.create_topic("orders", partitions=3)
        publisher = Publisher(client, url, "orders")
        try:
            with running_relay(
                client,
                "orders",
                f"{URL}?prefix={stream_prefix}",
                batch_size=BATCH,
                backoff=fast,
                session_timeout=2,
            ) as relay:
                publisher.start()
                wait_for(lambda: r.xlen(stream) >= 500, timeout=60)
                # The relay is busy (events keep coming) when the server goes away.
                pg_ctl(pgdata, "stop", "-m", mode)
                acknowledged_before = len(publisher.acknowledged)
                pg_ctl(pgdata, "start", "-l", str(pgdata / "log"), "-o", f'-h "" -k {pgdata}')
                # Publishing goes on after the restart, and the relay carries that too.
                wait_for(
                    lambda: len(publisher.acknowledged) >= acknowledged_before + 400, timeout=60
                )
                publisher.stop.set()
                publisher.join(60)
                assert publisher.error is None, publisher.error
                assert publisher.failures >= 1  # the publisher really met the restart
                committed = committed_events(url, "orders")
                wait_for(lambda: client.describe_group("relay.redis").lag == 0, timeout=90)
                wait_for(lambda: r.xlen(stream) >= len(committed), timeout=30)
                # One relay, the same one all along, carried everything: it reconnected by
                # itself (running_relay raises, after the block, anything it died of).
                assert relay.counters.delivered >= len(committed)
        finally:
            publisher.stop.set()
            r.close()
    assert publisher.acknowledged <= {e["seq"] for e in committed}  # durable commits
    duplicates = check_delivery(read_stream(stream), committed)
    # Only the batch in flight when the server went away is sent twice.
    assert duplicates <= BATCH
    # The fixture stops the server it started, not the one pg_ctl started again.
    pg_ctl(pgdata, "stop", "-m", "fast")
