"""The ``postroom consume`` command against a real database: what it prints, what it commits,
its live mode and its errors (the rest of the commands: tests/test_cli.py)."""

from __future__ import annotations

import signal
import subprocess
import sys

import postroom

from .test_cli import fails, ok


def test_consume_prints_and_commits_what_it_printed(client: postroom.Client, dsn: str) -> None:
    client.create_topic("orders", partitions=1)
    for n in range(5):
        client.publish("orders", f"order {n}", key=f"k{n}")
    first = ok(dsn, "consume", "orders", "-g", "g", "--from-beginning", "-n", "3")
    assert first.stdout.splitlines() == ["0:0 k0 order 0", "0:1 k1 order 1", "0:2 k2 order 2"]
    assert "consumed 3 message(s)" in first.stderr
    assert client.describe_group("g").partitions[0].committed == 3
    rest = ok(dsn, "consume", "orders", "-g", "g", "--timeout", "0.3")
    assert rest.stdout.splitlines() == ["0:3 k3 order 3", "0:4 k4 order 4"]
    assert client.describe_group("g").lag == 0
    assert ok(dsn, "consume", "orders", "-g", "g", "--timeout", "0.3").stdout == ""


def test_consume_new_group_starts_at_latest_without_from_beginning(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("orders")
    client.publish("orders", "old")
    assert ok(dsn, "consume", "orders", "-g", "late", "--timeout", "0.3").stdout == ""
    client.publish("orders", "new")
    assert ok(dsn, "consume", "orders", "-g", "late", "--timeout", "0.3").stdout == "0:1 null new\n"
    hint = ok(dsn, "consume", "orders", "-g", "late", "--from-beginning", "--timeout", "0.1")
    assert "only applies to a new group" in hint.stderr


def test_consume_payload_only_escapes_bytes(client: postroom.Client, dsn: str) -> None:
    client.create_topic("raw")
    client.publish("raw", b"line1\nline2\xff")
    client.publish("raw", {"id": 7})
    result = ok(dsn, "consume", "raw", "-g", "g", "--from-beginning", "--payload-only", "-n", "2")
    assert result.stdout.splitlines() == ["line1\\nline2\\xff", '{"id":7}']


def test_consume_live_stops_at_max_messages(client: postroom.Client, dsn: str) -> None:
    client.create_topic("t", partitions=2)
    client.publish_batch("t", [{"value": f"m{n}", "partition": n % 2} for n in range(4)])
    result = ok(dsn, "consume", "t", "-g", "g", "--from-beginning", "--live", "-n", "4")
    assert sorted(line.split(" ", 2)[2] for line in result.stdout.splitlines()) == [
        "m0",
        "m1",
        "m2",
        "m3",
    ]


def test_consume_live_commits_on_ctrl_c(client: postroom.Client, dsn: str) -> None:
    client.create_topic("t")
    client.publish_batch("t", [f"m{n}" for n in range(5)])
    command = [sys.executable, "-c", "from postroom.cli.main import main; main()"]
    with subprocess.Popen(
        [*command, "--url", dsn, "consume", "t", "-g", "g", "--from-beginning", "--live"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(5)]  # flushed after each batch
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert [line.split()[-1] for line in lines] == ["m0", "m1", "m2", "m3", "m4"]
    assert process.returncode == 0
    assert "consumed 5 message(s)" in stderr
    assert client.describe_group("g").partitions[0].committed == 5


def test_consume_one_partition(client: postroom.Client, dsn: str) -> None:
    client.create_topic("t", partitions=3)
    for p in range(3):
        client.publish("t", f"in {p}", partition=p)
    result = ok(dsn, "consume", "t", "-g", "g", "--from-beginning", "-p", "1", "--timeout", "0.3")
    assert result.stdout == "1:0 null in 1\n"
    assert [(p.partition, p.committed) for p in client.describe_group("g").partitions] == [(1, 1)]


def test_consume_errors(client: postroom.Client, dsn: str) -> None:
    client.create_topic("t")
    fails(dsn, "consume", "missing", "-g", "g", message="unknown topic 'missing'")
    fails(dsn, "consume", "t", "-g", "bad group!", message="invalid group name")
    fails(dsn, "consume", "t", "-g", "g", "-p", "3", message="partition 3 does not exist")
    # Without --group: a peek (tests/test_cli_groups.py), not a usage error.


# -- groups and lag ------------------------------------------------------------------------
