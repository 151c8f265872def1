"""Pausing a queue: every worker stops claiming from it at its next claim, running jobs finish,
and a resume wakes them; from the API, the CLI and SQL, shown in job stats."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from typer.testing import CliRunner

import postroom
from postroom.cli.main import app
from postroom.errors import InvalidName

from ..signals import wait_for
from .helpers import WorkerProcess, create_runs_table, query, scalar

runner = CliRunner()


def cli(dsn: str, *args: str) -> str:
    result = runner.invoke(app, ["--url", dsn, *args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def workers(dsn: str) -> Iterator[list[WorkerProcess]]:
    create_runs_table(dsn)
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.cleanup()


def runs(dsn: str, n: int, phase: str = "run") -> list[tuple[int]]:
    return query(dsn, "SELECT pid FROM runs WHERE n = %s AND phase = %s", (n, phase))


@pytest.mark.slow
def test_paused_queue_is_skipped_by_every_worker_until_resumed(
    dsn: str, client: postroom.Client, workers: list[WorkerProcess]
) -> None:
    args = ("--queue", "default", "--queue", "other", "--lease", "5")
    workers.extend(WorkerProcess(dsn, *args) for _ in range(2))
    slow = client.enqueue("slow", {"n": 1, "seconds": 1.0})
    wait_for(lambda: runs(dsn, 1, "start"), what="the slow job to start")
    assert "queue default paused" in cli(dsn, "queue", "pause", "default")
    assert "already paused" in cli(dsn, "queue", "pause", "default")

    held = [client.enqueue("record", {"n": 100 + i}) for i in range(10)]
    # Workers claim from both queues in one statement: every claim that took a job of
    # `other`, enqueued after the paused jobs, passed them over.
    markers = [client.enqueue("record", {"n": 200 + i}, queue="other") for i in range(20)]
    for marker in markers:
        marker.result(timeout=10)
    wait_for(lambda: runs(dsn, 1, "end"), what="the running job to finish")
    slow.result(timeout=10)
    assert {client.get_job(job.id).state for job in held} == {"ready"}
    assert client.job_stats().paused == ("default",)
    assert "paused queues: default" in cli(dsn, "job", "stats")

    assert "queue default resumed" in cli(dsn, "queue", "resume", "default")
    for job in held:
        job.result(timeout=10)
    assert client.job_stats().paused == ()
    assert "was not paused" in cli(dsn, "queue", "resume", "default")


def test_pause_from_sql_and_the_api(client: postroom.Client, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute(b"SELECT postroom.pause_queue('email')").fetchone() == (True,)
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="invalid queue name"):
            conn.execute(b"SELECT postroom.pause_queue('no way')")
    assert client.job_stats().paused == ("email",)
    job = client.enqueue("send", queue="email")
    claimed = query(
        dsn, "SELECT id FROM postroom.claim_jobs(ARRAY['email', 'default'], 10, 'w', '1 min')"
    )
    assert claimed == []
    assert client.resume_queue("email") is True
    assert client.resume_queue("email") is False
    assert client.pause_queue("other") is True
    claimed = query(dsn, "SELECT id FROM postroom.claim_jobs(ARRAY['email'], 10, 'w', '1 min')")
    assert claimed == [(job.id,)]
    assert scalar(dsn, "SELECT count(*) FROM postroom.queue_pauses") == 1
    with pytest.raises(InvalidName):
        client.pause_queue("no way")
