"""The ``postroom`` command against a real database: every command, its output and its errors.

Commands run in-process through typer's CliRunner with ``--url`` pointing at the test database;
one test runs the installed entry point in a subprocess to see what a shell sees.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner, Result

import postroom
from postroom.cli.common import format_duration, parse_duration, printable
from postroom.cli.groups import parse_reset_target
from postroom.cli.main import app
from postroom.cli.produce import parse_headers
from postroom.errors import InvalidArgument

runner = CliRunner()


def run(dsn: str, *args: str, input: str | None = None) -> Result:
    return runner.invoke(app, ["--url", dsn, *args], input=input)


def ok(dsn: str, *args: str, input: str | None = None) -> Result:
    result = run(dsn, *args, input=input)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def fails(dsn: str, *args: str, message: str, input: str | None = None) -> Result:
    """The command exits 1 with one red line on stderr containing ``message``, no traceback."""
    result = run(dsn, *args, input=input)
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert message in result.stderr
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    return result


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)


def read_all(client: postroom.Client, topic: str) -> list[postroom.Message]:
    with client.consumer("test-reader", topic) as consumer:
        messages = []
        while batch := consumer.poll(timeout=0.2):
            messages.extend(batch)
    return sorted(messages, key=lambda m: (m.partition, m.offset))


# -- pure helpers ------------------------------------------------------------------------------


def test_parse_duration_accepts_units_and_sums() -> None:
    assert parse_duration("30s") == timedelta(seconds=30)
    assert parse_duration("15m") == timedelta(minutes=15)
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("2w") == timedelta(weeks=2)
    assert parse_duration("1d12h") == timedelta(days=1, hours=12)
    for bad in ("", "7", "7y", "d", "-1h", "1.5h", "0s", "1h 30m"):
        with pytest.raises(InvalidArgument, match="invalid duration"):
            parse_duration(bad)


def test_format_duration_reads_back() -> None:
    for text in ("30s", "15m", "12h", "1d12h", "2w", "1w3d"):
        assert format_duration(parse_duration(text).total_seconds()) == text
    assert format_duration(None) == "-"


def test_printable_escapes_what_would_break_a_line() -> None:
    assert printable(None) == "null"
    assert printable(b'{"a": "\xc3\xa9"}') == '{"a": "é"}'
    assert printable(b"a\nb\tc\r\x00") == "a\\nb\\tc\\r\\x00"
    assert printable(b"\xff\xfeok") == "\\xff\\xfeok"


def test_parse_reset_target() -> None:
    assert parse_reset_target("earliest") == "earliest"
    assert parse_reset_target("latest") == "latest"
    assert parse_reset_target("42") == 42
    assert parse_reset_target("2026-01-31T12:00:00Z") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    with pytest.raises(InvalidArgument, match="needs a timezone"):
        parse_reset_target("2026-01-31T12:00:00")
    with pytest.raises(InvalidArgument, match="invalid --to"):
        parse_reset_target("yesterday")


def test_parse_headers() -> None:
    assert parse_headers([]) is None
    assert parse_headers(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(InvalidArgument, match="NAME=VALUE"):
        parse_headers(["novalue"])
    with pytest.raises(InvalidArgument, match="NAME=VALUE"):
        parse_headers(["=v"])


# -- init ----------------------------------------------------------------------------------


def test_init_check_before_and_after_migrate(dsn: str) -> None:
    before = run(dsn, "--schema", "fresh", "init", "--check")
    assert before.exit_code == 1
    assert "0001_log" in before.stdout
    applied = ok(dsn, "--schema", "fresh", "init")
    assert "applied 0001_log" in applied.stdout
    after = ok(dsn, "--schema", "fresh", "init", "--check")
    assert "up to date" in after.stdout
    again = ok(dsn, "--schema", "fresh", "init")
    assert "applied" not in again.stdout


def test_commands_on_an_uninstalled_schema_say_run_init(dsn: str) -> None:
    fails(dsn, "--schema", "nowhere", "topic", "list", message="run `postroom init`")


def test_unreachable_server_is_one_line_not_a_hang() -> None:
    result = runner.invoke(
        app, ["--url", "postgresql://postgres:secret@127.0.0.1:1/x", "topic", "list"]
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot connect to PostgreSQL at")
    assert "secret" not in result.stderr


# -- topics --------------------------------------------------------------------------------


def test_topic_create_list_describe(dsn: str) -> None:
    created = ok(dsn, "topic", "create", "orders", "--partitions", "3", "--retention", "12h")
    assert "3 partition(s), retention 12h" in created.stdout
    ok(dsn, "topic", "create", "audit")
    topics = as_json(ok(dsn, "topic", "list", "--json"))
    assert [(t["name"], t["partitions"], t["retention_seconds"]) for t in topics] == [
        ("audit", 1, None),
        ("orders", 3, 43200.0),
    ]
    assert "orders" in ok(dsn, "topic", "list").stdout
    described = as_json(ok(dsn, "topic", "describe", "orders", "--json"))
    assert [p["partition"] for p in described["partition_info"]] == [0, 1, 2]
    assert all(p["high_water"] == 0 for p in described["partition_info"])
    table = ok(dsn, "topic", "describe", "orders").stdout
    assert "high-water" in table and "retention 12h" in table


def test_topic_create_errors(dsn: str) -> None:
    fails(dsn, "topic", "create", "bad name", message="invalid topic name 'bad name'")
    fails(dsn, "topic", "create", "t", "--retention", "7y", message="invalid duration '7y'")
    fails(dsn, "topic", "create", "t", "--partitions", "0", message="invalid partition count")
    ok(dsn, "topic", "create", "t")
    fails(dsn, "topic", "create", "t", message="topic 't' already exists")
    assert "already exists" in ok(dsn, "topic", "create", "t", "--if-not-exists").stdout


def test_topic_delete_needs_yes(client: postroom.Client, dsn: str) -> None:
    client.create_topic("doomed")
    fails(dsn, "topic", "delete", "doomed", message="without --yes")
    assert [t.name for t in client.list_topics()] == ["doomed"]
    ok(dsn, "topic", "delete", "doomed", "--yes")
    assert client.list_topics() == []
    fails(dsn, "topic", "delete", "doomed", "--yes", message="unknown topic 'doomed'")
    fails(dsn, "topic", "describe", "doomed", message="unknown topic 'doomed'")


def test_topic_add_partitions(client: postroom.Client, dsn: str) -> None:
    client.create_topic("grow", partitions=2)
    ok(dsn, "topic", "add-partitions", "grow", "--total", "5")
    assert client.describe_topic("grow").partitions == 5
    fails(dsn, "topic", "add-partitions", "grow", "--total", "3", message="must be more")


def test_topic_retention_deletes_what_active_groups_have_read(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("short", retention=timedelta(hours=1))
    client.publish_batch("short", [f"m{n}" for n in range(6)])
    client.reset_group("reader", "short", to=2)  # an active group that has read 0 and 1
    assert ok(dsn, "topic", "retention").stdout == "deleted 0 message(s)\n"  # nothing is old
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE postroom.messages SET created_at = created_at - interval '2 hours'")
    assert ok(dsn, "topic", "retention", "--batch-size", "1").stdout == "deleted 2 message(s)\n"
    assert client.describe_topic("short").partition_info[0].low_water == 2
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE postroom.cursors SET updated_at = updated_at - interval '2 days'")
    result = ok(dsn, "topic", "retention", "--group-expiry", "1d")  # the group expired
    assert result.stdout == "deleted 4 message(s)\n"
    assert client.describe_topic("short").partition_info[0].messages == 0
    fails(dsn, "topic", "retention", "--group-expiry", "soon", message="invalid duration")


# -- produce -------------------------------------------------------------------------------


def test_produce_one_value_with_key_and_headers(client: postroom.Client, dsn: str) -> None:
    client.create_topic("orders", partitions=4)
    result = ok(dsn, "produce", "orders", '{"id": 1}', "--key", "alice", "-H", "source=cli")
    expected = postroom.partition_for_key(b"alice", 4)
    assert result.stdout == f"{expected}:0\n"
    [message] = read_all(client, "orders")
    assert (message.partition, message.key, message.headers) == (
        expected,
        b"alice",
        {"source": "cli"},
    )
    assert message.value == b'{"id": 1}'  # sent as the text given, not re-encoded


def test_produce_to_a_partition_and_quiet(client: postroom.Client, dsn: str) -> None:
    client.create_topic("orders", partitions=3)
    assert ok(dsn, "produce", "orders", "x", "--partition", "2", "--quiet").stdout == ""
    assert [m.partition for m in read_all(client, "orders")] == [2]
    fails(dsn, "produce", "orders", "x", "--partition", "7", message="partition 7 does not exist")


def test_produce_live_reads_lines(client: postroom.Client, dsn: str) -> None:
    client.create_topic("chat", partitions=2)
    result = ok(dsn, "produce", "chat", "--live", input="hello\n\n   \nworld\r\nagain\n")
    positions = result.stdout.splitlines()
    assert len(positions) == 3
    messages = read_all(client, "chat")
    assert [f"{m.partition}:{m.offset}" for m in messages] == sorted(positions)
    assert sorted(m.text() for m in messages) == ["again", "hello", "world"]


def test_produce_live_with_key_separator(client: postroom.Client, dsn: str) -> None:
    client.create_topic("chat", partitions=4)
    ok(dsn, "produce", "chat", "--live", "--key-separator", ":", input="bob:hi:there\nann:yo\n")
    messages = read_all(client, "chat")
    assert sorted((m.key, m.text()) for m in messages) == [(b"ann", "yo"), (b"bob", "hi:there")]
    for m in messages:
        assert m.key is not None and m.partition == postroom.partition_for_key(m.key, 4)
    fails(
        dsn,
        "produce",
        "chat",
        "--live",
        "--key-separator",
        ":",
        input="no separator\n",
        message="has no key separator",
    )


def test_produce_file_of_json_lines(client: postroom.Client, dsn: str, tmp_path: Path) -> None:
    client.create_topic("events", partitions=2)
    lines = [
        '{"value": {"id": 1}, "key": "k1", "headers": {"h": "v"}}',
        "",
        '"plain text"',
        "[1, 2]",
        '{"id": 2}',
        '{"value": "to p1", "partition": 1}',
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = ok(dsn, "produce", "events", "--file", str(path))
    assert len(result.stdout.splitlines()) == 5
    by_value = {m.value: m for m in read_all(client, "events")}
    assert set(by_value) == {b'{"id":1}', b"plain text", b"[1,2]", b'{"id":2}', b"to p1"}
    assert by_value[b'{"id":1}'].key == b"k1"
    assert by_value[b'{"id":1}'].headers == {"h": "v"}
    assert by_value[b"to p1"].partition == 1


def test_produce_file_errors_name_the_line(
    client: postroom.Client, dsn: str, tmp_path: Path
) -> None:
    client.create_topic("events")
    path = tmp_path / "bad.jsonl"
    path.write_text('"fine"\n{not json}\n')
    fails(dsn, "produce", "events", "--file", str(path), message="bad.jsonl line 2: not JSON")
    path.write_text('{"value": 1, "colour": "red"}\n')
    fails(dsn, "produce", "events", "-f", str(path), message="line 1: unknown fields ['colour']")
    fails(dsn, "produce", "events", "-f", str(tmp_path / "missing"), message="cannot read")


def test_produce_needs_one_source_and_a_topic(client: postroom.Client, dsn: str) -> None:
    client.create_topic("t")
    fails(dsn, "produce", "t", message="give exactly one of")
    fails(dsn, "produce", "t", "v", "--live", message="give exactly one of")
    fails(dsn, "produce", "missing", "v", message="unknown topic 'missing'")
    fails(dsn, "produce", "missing", "--live", input="v\n", message="unknown topic 'missing'")
    fails(dsn, "produce", "bad name", "v", message="invalid topic name")


# -- consume -------------------------------------------------------------------------------


def test_group_list_describe_lag(client: postroom.Client, dsn: str) -> None:
    assert "no consumer groups" in ok(dsn, "group", "list").stdout
    client.create_topic("orders", partitions=2)
    client.publish_batch("orders", [{"value": "x", "partition": p % 2} for p in range(5)])
    with client.consumer("billing", "orders") as consumer:
        consumer.poll(timeout=1, max_messages=1)
        consumer.commit()
    groups = as_json(ok(dsn, "group", "list", "--json"))
    assert [(g["name"], g["topics"], g["lag"]) for g in groups] == [("billing", ["orders"], 4)]
    described = as_json(ok(dsn, "group", "describe", "billing", "--json"))
    assert [(p["partition"], p["committed"], p["high_water"]) for p in described["partitions"]] == [
        (0, 1, 3),
        (1, 0, 2),
    ]
    assert "billing" in ok(dsn, "group", "describe", "billing").stdout
    fails(dsn, "group", "describe", "nobody", message="unknown consumer group 'nobody'")
    lag = as_json(ok(dsn, "lag", "--json"))
    assert [(r["group"], r["topic"], r["partition"], r["lag"]) for r in lag] == [
        ("billing", "orders", 0, 2),
        ("billing", "orders", 1, 2),
    ]
    assert all(r["lag_seconds"] >= 0 for r in lag)
    table = ok(dsn, "lag").stdout
    assert "lag seconds" in table and "billing" in table


def test_group_reset(client: postroom.Client, dsn: str) -> None:
    client.create_topic("orders", partitions=2)
    client.publish_batch("orders", [{"value": "x", "partition": p % 2} for p in range(6)])

    def committed() -> list[int]:
        return [p.committed for p in client.describe_group("g").partitions]

    ok(dsn, "group", "reset", "g", "--topic", "orders", "--to", "latest")
    assert committed() == [3, 3]
    ok(dsn, "group", "reset", "g", "-t", "orders", "--to", "earliest", "--partition", "1")
    assert committed() == [3, 0]
    ok(dsn, "group", "reset", "g", "-t", "orders", "--to", "2")
    assert committed() == [2, 2]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    ok(dsn, "group", "reset", "g", "-t", "orders", "--to", future)
    assert committed() == [3, 3]
    ok(dsn, "group", "reset", "g", "-t", "orders", "--to", "2000-01-01T00:00:00+00:00")
    assert committed() == [0, 0]
    fails(dsn, "group", "reset", "g", "-t", "orders", "--to", "9", message="beyond the high-water")
    fails(dsn, "group", "reset", "g", "-t", "orders", "--to", "soon", message="invalid --to")
    fails(
        dsn,
        "group",
        "reset",
        "g",
        "-t",
        "orders",
        "--to",
        "2026-01-01T00:00:00",
        message="needs a timezone",
    )
    fails(dsn, "group", "reset", "g", "-t", "nope", "--to", "0", message="unknown topic 'nope'")


def test_group_delete_needs_yes(client: postroom.Client, dsn: str) -> None:
    client.create_topic("t")
    client.reset_group("g", "t", to="earliest")
    fails(dsn, "group", "delete", "g", message="without --yes")
    assert [g.name for g in client.list_groups()] == ["g"]
    ok(dsn, "group", "delete", "g", "--yes")
    assert client.list_groups() == []
    fails(dsn, "group", "delete", "g", "--yes", message="unknown consumer group 'g'")


# -- embedded ------------------------------------------------------------------------------


def test_embedded_status_names_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSTROOM_HOME", str(tmp_path))
    monkeypatch.delenv("POSTROOM_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    result = runner.invoke(app, ["embedded", "status"])
    assert result.exit_code == 0
    assert str(tmp_path / "pgdata") in result.stdout
    assert "running: no" in result.stdout
    stopped = runner.invoke(app, ["embedded", "stop"])
    assert stopped.exit_code == 0 and "was not running" in stopped.stdout


# -- the real entry point and the demo ---------------------------------------------------------


def test_entry_point_prints_one_red_line_and_exits_1(dsn: str) -> None:
    command = [sys.executable, "-c", "from postroom.cli.main import main; main()"]
    result = subprocess.run(
        [*command, "--url", dsn, "topic", "describe", "missing"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    advice = "create it with `postroom topic create missing`"
    assert result.stderr == f"error: unknown topic 'missing': {advice}\n"
    assert result.stdout == ""


def test_bench_log_gets_the_global_url(dsn: str) -> None:
    result = ok(dsn, "bench", "log", "--quick", "--json", "--groups", "1")
    figures = json.loads(result.stdout)
    assert figures["consume_1_group"]["messages"] == figures["backlog"] > 0


def test_demo_runs_end_to_end_and_its_checks_pass(dsn: str) -> None:
    result = ok(dsn, "demo", "--orders", "200", "--customers", "12", "--writers", "3")
    assert "all checks passed" in result.stdout
    assert "✗" not in result.stdout
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM postroom_demo.orders),"
            " (SELECT count(*) FROM postroom_demo.invoices),"
            " (SELECT sum(next_offset) FROM postroom_demo.partitions)"
        ).fetchone()
    assert row == (200, 200, 200)
    again = ok(dsn, "demo", "--orders", "50")  # drops and recreates its own schema
    assert "all checks passed" in again.stdout


def test_demo_never_drops_a_schema_it_did_not_create(client: postroom.Client, dsn: str) -> None:
    client.create_topic("precious")
    fails(dsn, "demo", "--demo-schema", "postroom", message="refusing to drop it")
    assert [t.name for t in client.list_topics()] == ["precious"]
