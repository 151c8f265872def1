"""``postroom job`` additions: purge reports its age, enqueue takes workflow options, and
``job show`` shows what a job waits for."""

from __future__ import annotations

from typer.testing import CliRunner

import postroom
from postroom.cli.main import app

runner = CliRunner()


def cli(dsn: str, *args: str) -> str:
    result = runner.invoke(app, ["--url", dsn, *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_purge_prints_the_age_it_was_given(client: postroom.Client, dsn: str) -> None:
    assert "older than 1w" in cli(dsn, "job", "purge", "--state", "done", "--older", "7d")
    assert "older than 1h30m" in cli(dsn, "job", "purge", "--state", "failed", "--older", "90m")


def test_enqueue_after_and_show_what_a_job_waits_for(client: postroom.Client, dsn: str) -> None:
    first = client.enqueue("a")
    second = client.enqueue("b")
    out = cli(dsn, "job", "enqueue", "c", "--after", str(first.id), "--after", str(second.id))
    job_id = int(out.split()[2])
    shown = cli(dsn, "job", "show", str(job_id))
    assert "state: waiting" in shown
    assert f"waiting_for: [{first.id}, {second.id}]" in shown
    cli(dsn, "job", "enqueue", "d", "--sequence", "order-7")
    assert client.list_jobs(kind="d")[0].state == "ready"
