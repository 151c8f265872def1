"""What a newcomer at the ``postroom`` command trips on: no dead letters yet is no error, errors
advise the command to run (not a Python call) and name topics (not their ids), and long
commands show progress before they end."""

from __future__ import annotations

import signal

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom
from postroom.errors import OffsetOutOfRange
from tests.relay.helpers import start_relay
from tests.roles import login_role
from tests.test_cli import fails, ok


def test_dlq_list_with_no_dead_letters_yet_says_so_and_exits_0(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("orders")
    assert "no dead letters for 'orders'" in ok(dsn, "dlq", "list", "orders").stdout
    assert ok(dsn, "dlq", "list", "orders", "--json").stdout.strip() == "[]"
    assert "replayed 0" in ok(dsn, "dlq", "replay", "orders").stdout
    assert client.list_dead_letters("orders") == []
    fails(dsn, "dlq", "list", "nope", message="unknown topic 'nope'")


def test_cli_errors_advise_the_postroom_command_not_a_python_call(dsn: str) -> None:
    result = fails(dsn, "topic", "describe", "missing", message="postroom topic create missing")
    assert "create_topic()" not in result.stderr
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP SCHEMA postroom CASCADE")
    result = fails(dsn, "topic", "list", message="run `postroom init`")
    assert "client.migrate()" not in result.stderr


def test_a_permission_error_at_the_cli_advises_postroom_grant(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("orders")
    with login_role(dsn, "nc_bare") as role:
        result = fails(make_conninfo(dsn, user=role), "topic", "list", message="postroom grant")
    assert "client.grant" not in result.stderr


def test_postroom_grant_grants_a_capability(client: postroom.Client, dsn: str) -> None:
    client.create_topic("orders")
    with login_role(dsn, "nc_producer") as role:
        ok(dsn, "grant", role, "producer", "--topic", "orders")
        ok(make_conninfo(dsn, user=role), "produce", "orders", "x")
    assert client.describe_topic("orders").high_water == 1


def test_sql_errors_name_the_topic_not_its_id(client: postroom.Client) -> None:
    client.create_topic("orders")
    with client.consumer("billing", "orders") as consumer:
        consumer.poll(timeout=0.5)  # joins: partition 0 is this member's
        with pytest.raises(OffsetOutOfRange) as raised:
            consumer.commit({postroom.TopicPartition("orders", 0): 999})
    assert "topic 'orders'" in str(raised.value) and "topic id" not in str(raised.value)


def test_relay_prints_a_status_line_on_stderr_while_it_runs(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("nc-progress")
    client.publish("nc-progress", {"n": 1})
    proc = start_relay(
        dsn,
        "nc-progress",
        "--to",
        "redis://127.0.0.1:6379/0",
        "--group",
        "nc-progress",
        "--progress",
        "0.2",
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # each line as the relay writes it: no sleep
            if line.startswith("relay: ") and "1 delivered" in line:
                break
        else:
            pytest.fail("the relay ended without a status line")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_bench_churn_prints_a_status_line_per_sample(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from postroom.benchmarks import churn

    settings = churn.Settings(
        seconds=1.0, rate=100, partitions=1, retention_seconds=1.0, sample_every=0.3, backlog=100
    )
    churn.run(dsn, settings)
    err = capsys.readouterr().err
    assert "churn 0/1 s:" in err and "produced" in err and "dead tuples" in err
    assert "expiring a backlog of 100 messages" in err
