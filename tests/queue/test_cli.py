"""``postroom job ...`` and ``postroom worker`` against a real database."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import postroom
from postroom.cli.main import app

runner = CliRunner()


def run(dsn: str, *args: str) -> Result:
    return runner.invoke(app, ["--url", dsn, *args])


def ok(dsn: str, *args: str) -> Result:
    result = run(dsn, *args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def fails(dsn: str, *args: str, message: str) -> None:
    result = run(dsn, *args)
    assert result.exit_code != 0
    assert message in result.stderr, result.stderr


MODULE = """
import os
import postroom

client = postroom.connect(os.environ["POSTROOM_URL"])

@client.job("shout")
def shout(text: str) -> str:
    if text == "boom":
        raise RuntimeError("cannot shout boom")
    return text.upper()
"""


def test_job_commands_tour(
    dsn: str, client: postroom.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (
        "enqueued job 1 (shout)"
        in ok(dsn, "job", "enqueue", "shout", "--args", '{"text": "hi"}').stdout
    )
    ok(dsn, "job", "enqueue", "shout", "--args", '{"text": "boom"}', "--max-attempts", "1")
    later = ["--args", '{"text": "later"}', "--delay", "1h", "-q", "slow"]
    ok(dsn, "job", "enqueue", "shout", *later)
    listed = json.loads(ok(dsn, "job", "list", "--state", "ready", "--json").stdout)
    assert sorted(j["id"] for j in listed) == [1, 2, 3]

    module = "shoutjobs_" + re.sub(r"\W", "_", tmp_path.name)  # fresh per test: no import cache
    (tmp_path / f"{module}.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POSTROOM_URL", dsn)
    ok(dsn, "worker", module, "--burst", "--concurrency", "2")
    assert client.job_handle(1).result(timeout=1) == "HI"

    assert "failed" in ok(dsn, "job", "list", "--state", "failed").stdout
    failed = json.loads(ok(dsn, "job", "list", "--state", "failed", "--json").stdout)
    assert [j["id"] for j in failed] == [2]
    assert "RuntimeError: cannot shout boom" in failed[0]["last_error"]
    shown = ok(dsn, "job", "show", "2").stdout
    assert "state: failed" in shown and "RuntimeError: cannot shout boom" in shown
    assert "1 failed job(s) ready again" in ok(dsn, "job", "retry", "--all-failed").stdout
    assert "job 3 cancelled (was ready)" in ok(dsn, "job", "cancel", "3").stdout
    stats = ok(dsn, "job", "stats").stdout
    assert "default" in stats and "done" in stats and "ready" in stats
    as_json = json.loads(ok(dsn, "job", "stats", "--json").stdout)
    assert {
        "queue": "default",
        "state": "done",
        "count": 1,
        "oldest_ready_seconds": None,
    } in as_json["counts"]
    assert (
        "purged 0 done job(s)" in ok(dsn, "job", "purge", "--state", "done", "--older", "7d").stdout
    )


def test_job_command_errors(dsn: str) -> None:
    fails(dsn, "job", "enqueue", "k", "--args", "{nope", message="--args is not valid JSON")
    fails(dsn, "job", "enqueue", "k", "--args", "[1]", message="must be a JSON object")
    fails(dsn, "job", "enqueue", "k", "--delay", "-5", message="invalid delay '-5'")
    fails(dsn, "job", "enqueue", "k", "-q", "bad queue", message="invalid queue name")
    fails(dsn, "job", "show", "99", message="job 99 not found")
    fails(dsn, "job", "retry", message="pass a job ID or --all-failed")
    fails(dsn, "job", "list", "--state", "lost", message="invalid job state 'lost'")
    fails(dsn, "job", "purge", "--state", "ready", "--older", "1d", message="invalid state")
    fails(dsn, "worker", "no_such_module_here", message="cannot import 'no_such_module_here'")
    fails(dsn, "worker", "json", message="module 'json' has 0 postroom clients")
