"""Relay processes: the CLI end to end, SIGTERM, kill -9 mid-batch, two relays in one group,
and the status they leave behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator

import pytest

import postroom

from ..signals import wait_for
from .helpers import (
    CLI,
    check_delivery,
    decode,
    group_lag,
    publish_keyed,
    start_relay,
    stop_relays,
    unique,
)

redis = pytest.importorskip("redis")
REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture
def prefix() -> Iterator[str]:
    value = unique("pt-relay") + "."
    yield value
    r = redis.Redis.from_url(REDIS)
    for key in r.scan_iter(match=value + "*"):
        r.delete(key)
    r.close()


def stream(name: str) -> list[tuple[str, dict[str, int]]]:
    r = redis.Redis.from_url(REDIS)
    try:
        return [(f[b"id"].decode(), decode(f[b"value"])) for _, f in r.xrange(name)]
    finally:
        r.close()


def stream_length(name: str) -> int:
    r = redis.Redis.from_url(REDIS)
    try:
        return int(r.xlen(name))
    finally:
        r.close()


def postroom_cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "--url", dsn, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_cli_relay_stops_on_sigterm_and_reports_status(
    client: postroom.Client, dsn: str, prefix: str
) -> None:
    client.create_topic("orders", partitions=2)
    committed = publish_keyed(client, dsn, "orders", 200, keys=5)
    proc = start_relay(dsn, "orders", "--to", f"{REDIS}?prefix={prefix}", "--group", "relay.cli")
    try:
        wait_for(lambda: stream_length(prefix + "orders") >= len(committed), timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "200 delivered" in err
    assert check_delivery(stream(prefix + "orders"), committed) == 0

    client.publish("orders", {"seq": 999, "key": 0})
    shown = postroom_cli(dsn, "relay", "status", "--json")
    assert shown.returncode == 0, shown.stderr
    [status] = json.loads(shown.stdout)
    assert status["group"] == "relay.cli"
    assert status["pending"] == 1
    assert status["oldest_pending_seconds"] >= 0
    table = postroom_cli(dsn, "relay", "status")
    assert "relay.cli" in table.stdout


def test_cli_relay_opens_no_client_of_its_own(
    client: postroom.Client, dsn: str, prefix: str
) -> None:
    """``postroom relay`` opens only the relay's pool: a client's sync pool, opened and closed
    unused, cost a connection and a round trip at every start (bench/RESULTS.md)."""
    client.create_topic("orders")
    client.publish("orders", {"seq": 0, "key": 0})
    no_client = (
        "import postroom; postroom.connect = None; from postroom.cli.main import main; main()"
    )
    proc = subprocess.Popen(
        [
            CLI[0],
            "-c",
            no_client,
            "--url",
            dsn,
            "relay",
            "orders",
            "--to",
            f"{REDIS}?prefix={prefix}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: stream_length(prefix + "orders") >= 1 or proc.poll() is not None)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "1 delivered" in err


def test_cli_bad_input_is_one_line(client: postroom.Client, dsn: str) -> None:
    client.create_topic("orders")
    for args, expected in [
        (["orders", "--to", "foo://x"], "unknown sink scheme 'foo'"),
        (["orders"], "missing --to"),
        (["nope", "--to", REDIS], "unknown topic 'nope'"),
        (["orders", "--to", REDIS, "--profile", "kafka"], "invalid route profile"),
        (["orders", "--to", REDIS, "--template", "{colour}"], "unknown field {colour}"),
        (["status", "--group", "relay.none"], "unknown relay 'relay.none'"),
        (["orders", "--to", REDIS, "--payload", "xml"], "invalid payload format 'xml'"),
        (["orders", "--to", REDIS, "--key-format", "avro"], "invalid key format 'avro'"),
    ]:
        result = postroom_cli(dsn, "relay", *args)
        assert result.returncode == 1, (args, result.stderr)
        assert expected in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_kill_9_mid_batch_loses_nothing(client: postroom.Client, dsn: str, prefix: str) -> None:
    client.create_topic("orders", partitions=4)
    committed = publish_keyed(client, dsn, "orders", 3000, keys=11, rollback_every=6)
    url = f"{REDIS}?prefix={prefix}"
    proc = start_relay(dsn, "orders", "--to", url, "--batch-size", "50")
    wait_for(lambda: stream_length(prefix + "orders") >= 300, timeout=60, interval=0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert stream_length(prefix + "orders") < len(committed), "the relay finished too early"
    proc = start_relay(dsn, "orders", "--to", url, "--batch-size", "50")
    try:
        wait_for(lambda: group_lag(client, "relay.redis") == 0, timeout=90)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    duplicates = check_delivery(stream(prefix + "orders"), committed)
    assert duplicates <= 50 * 4  # at most the batch in flight (a batch spans partitions)


def owners(client: postroom.Client, group: str) -> int:
    """How many members hold partitions of ``group``."""
    try:
        return len({p.member for p in client.describe_group(group).partitions if p.member})
    except postroom.errors.GroupNotFound:
        return 0


@pytest.mark.slow
def test_two_relays_in_one_group_split_the_partitions(
    client: postroom.Client, dsn: str, prefix: str
) -> None:
    client.create_topic("orders", partitions=6)
    url = f"{REDIS}?prefix={prefix}"
    argv = ("orders", "--to", url, "--group", "relay.pair", "--batch-size", "500")
    procs = [start_relay(dsn, *argv)]
    try:
        # The first relay takes every partition and carries a backlog while the second one
        # joins: the group hands partitions over, then both carry the second half. (Started
        # together, the first one to join could drain the whole backlog alone.)
        committed = publish_keyed(client, dsn, "orders", 5_000, keys=50, per_tx=200)
        procs.append(start_relay(dsn, *argv))
        wait_for(lambda: owners(client, "relay.pair") == 2, timeout=60)
        committed += publish_keyed(
            client, dsn, "orders", 5_000, keys=50, per_tx=200, rollback_every=7, first=5_000
        )
        wait_for(lambda: group_lag(client, "relay.pair") == 0, timeout=120)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        outputs = [proc.communicate(timeout=30)[1] for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), outputs
    # Each relay owns its own partitions, and a partition is handed over after its batch in
    # flight is committed: both took part, and at most one batch (500) came twice, should a
    # hand-over have abandoned one (without membership, all 10,000 would come twice).
    duplicates = check_delivery(stream(prefix + "orders"), committed)
    assert duplicates <= 500
    delivered = [int(err.rsplit("stopped: ", 1)[1].split()[0]) for err in outputs]
    assert all(n > 0 for n in delivered), delivered
    assert sum(delivered) == len(committed) + duplicates


def test_cli_debezium_flags_set_payload_key_and_event_type_header(
    client: postroom.Client, dsn: str, prefix: str
) -> None:
    client.create_topic("outbox")
    client.publish_event(None, "Order", 1, "OrderCreated", {"total": 1.50, "id": 1})
    args = ("--profile", "debezium", "--payload", "jsonb-string", "--key-format", "json")
    url = f"{REDIS}?prefix={prefix}"
    proc = start_relay(dsn, "outbox", "--to", url, *args, "--event-type-header", "eventType")
    try:
        wait_for(lambda: stream_length(prefix + "outbox.event.Order") == 1, timeout=60)
    finally:
        stop_relays([proc])
    r = redis.Redis.from_url(REDIS)
    try:
        [(_, fields)] = r.xrange(prefix + "outbox.event.Order")
    finally:
        r.close()
    assert fields[b"key"] == b'"1"'
    assert fields[b"value"] == b'"{\\"id\\": 1, \\"total\\": 1.5}"'
    assert json.loads(fields[b"headers"])["eventType"] == "OrderCreated"
