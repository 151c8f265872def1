"""The ``postroom`` command on ``kafka://``: topic, produce, consume, lag, group and dlq."""

from __future__ import annotations

from collections.abc import Callable

from typer.testing import CliRunner

from postroom.cli.main import app


def test_the_log_commands_run_on_kafka(kafka_broker: str, names: Callable[[str], str]) -> None:
    runner = CliRunner()
    url = f"kafka://{kafka_broker}"
    topic, group = names("cli"), names("g")

    def ok(*args: str) -> str:
        result = runner.invoke(app, ["--url", url, *args])
        assert result.exit_code == 0, result.output
        return result.output

    ok("topic", "create", topic, "-p", "2")
    assert topic in ok("topic", "list")
    key = "k1"
    ok("produce", topic, "hello", "--key", key)
    ok("produce", topic, "world", "--key", key)
    printed = ok(
        "consume", topic, "--group", group, "--from-beginning", "--max-messages", "2",
        "--timeout", "30",
    )  # fmt: skip
    assert "hello" in printed and "world" in printed
    assert group in ok("lag", "--json")
    assert group in ok("group", "list", "--json")
    ok("group", "reset", group, "--topic", topic, "--to", "earliest")
    assert "no dead letters" in ok("dlq", "list", topic)
    refused = runner.invoke(app, ["--url", url, "job", "list"])
    assert refused.exit_code == 1 and "need PostgreSQL" in refused.output
