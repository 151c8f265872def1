"""CLI for consumer groups: `postroom run` (SIGTERM), `postroom dlq`, `consume` without a group
(a peek) and with --json, `group describe` with members and epochs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from typer.testing import CliRunner, Result

import postroom
from postroom.cli.main import app
from postroom.errors import TopicNotFound

ROOT = Path(__file__).resolve().parent.parent


def run(dsn: str, *args: str) -> Result:
    return CliRunner().invoke(app, ["--url", dsn, *args])


def test_consume_without_a_group_peeks_and_stores_nothing(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("t", partitions=2)
    client.publish("t", "one", key="k", headers={"h": "v"}, partition=1)
    result = run(dsn, "consume", "t", "--from-beginning", "--timeout", "0.5", "--json")
    assert result.exit_code == 0, result.output
    [line] = [json.loads(x) for x in result.stdout.splitlines()]
    assert {k: line[k] for k in ("topic", "partition", "offset", "key", "headers", "value")} == {
        "topic": "t",
        "partition": 1,
        "offset": 0,
        "key": "k",
        "headers": {"h": "v"},
        "value": "one",
    }
    assert "time" in line
    assert client.list_groups() == []  # nothing created
    again = run(dsn, "consume", "t", "--timeout", "0.3")  # from the end: nothing new
    assert again.exit_code == 0 and again.stdout == ""


def test_consume_with_a_group_joins_it_and_describe_shows_the_members(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("t", partitions=2)
    client.publish_batch("t", ["a", "b"])
    result = run(dsn, "consume", "t", "-g", "cli", "--from-beginning", "--timeout", "0.5")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 2
    with client.consumer("cli", "t", member_id="m1") as member:
        member.assignment()
        described = run(dsn, "group", "describe", "cli")
        assert "m1" in described.stdout and "1 live member(s)" in described.stdout
        info = client.describe_group("cli")
        assert {p.member for p in info.partitions} == {member.member_id}
        assert all(p.epoch is not None for p in info.partitions)
    assert {p.member for p in client.describe_group("cli").partitions} == {None}  # it left


def test_postroom_run_handles_dead_letters_and_stops_cleanly_on_sigterm(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("orders", partitions=3)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE handled (value text PRIMARY KEY)")
    client.publish_batch("orders", ["a", "poison", "b", "c"])
    process = subprocess.Popen(
        [
            *(sys.executable, "-c", "from postroom.cli.main import main; main()"),
            *("--url", dsn, "run", "tests.log.runnerapp"),
        ],
        cwd=ROOT,
        env={**os.environ, "POSTROOM_URL": dsn},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while dead_letters(client) < 1 or client.describe_group("billing").lag:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the runner did not drain the topic"
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "stopped after" in err
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT value FROM handled ORDER BY value").fetchall() == [
            ("a",),
            ("b",),
            ("c",),
        ]
    assert {p.member for p in client.describe_group("billing").partitions} == {None}  # it left
    listed = run(dsn, "dlq", "list", "orders", "--json")
    [letter] = json.loads(listed.stdout)
    assert letter["value"] == "poison"
    assert letter["headers"]["postroom-dlq-attempts"] == "2"
    assert letter["headers"]["postroom-dlq-error"] == "ValueError: poison"
    replayed = run(dsn, "dlq", "replay", "orders")
    assert "replayed 1 dead letter(s)" in replayed.stdout
    assert "replayed 0" in run(dsn, "dlq", "replay", "orders").stdout
    assert client.describe_topic("orders").high_water == 5
    chosen = f"{letter['dlq_partition']}:{letter['dlq_offset']}"
    assert "replayed 1" in run(dsn, "dlq", "replay", "orders", "--letter", chosen).stdout
    assert client.describe_topic("orders").high_water == 6  # a chosen one: again when asked


def dead_letters(client: postroom.Client) -> int:
    try:
        return len(client.list_dead_letters("orders"))
    except TopicNotFound:
        return 0  # the runner has not created it yet


def test_group_and_dlq_commands_name_bad_input(client: postroom.Client, dsn: str) -> None:
    client.create_topic("t")
    unknown = run(dsn, "group", "describe", "nobody")
    assert unknown.exit_code == 1 and "unknown consumer group 'nobody'" in unknown.output
    missing = run(dsn, "dlq", "list", "nope")
    assert missing.exit_code == 1 and "unknown topic 'nope'" in missing.output
    bad = run(dsn, "dlq", "list", "bad name!")
    assert bad.exit_code == 1 and "invalid topic name" in bad.output
    letter = run(dsn, "dlq", "replay", "t", "--letter", "zero")
    assert letter.exit_code == 1 and "use PARTITION:OFFSET" in letter.output
