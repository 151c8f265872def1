"""An infinite or absurd run_at is refused where it enters (issue 23, item 6): SQL enqueue with
run_at => 'infinity' broke list_jobs, get_job, job_stats and `postroom job list`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

import postroom
from postroom.cli.main import app

BAD_RUN_ATS = ["infinity", "-infinity", "1800-01-01 00:00:00+00", "now() + interval '200 years'"]


def still_readable(client: postroom.Client, dsn: str) -> None:
    """Every reader of jobs works: the client's and the CLI's."""
    jobs = client.list_jobs()
    assert jobs and client.get_job(jobs[0].id).id == jobs[0].id
    client.job_stats()
    result = CliRunner().invoke(app, ["--url", dsn, "job", "list"])
    assert result.exit_code == 0, (result.output, result.exception)


def sql_time(conn: psycopg.Connection[Any], text: str) -> Any:
    expression = text if text.startswith("now()") else f"'{text}'::timestamptz"
    row = conn.execute(f"SELECT {expression}".encode()).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize("run_at", BAD_RUN_ATS)
def test_sql_enqueue_refuses_an_infinite_or_absurd_run_at(
    client: postroom.Client, dsn: str, run_at: str
) -> None:
    client.enqueue("k")
    with psycopg.connect(dsn, autocommit=True) as conn:
        when = sql_time(conn, run_at) if "infinity" not in run_at else run_at
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="invalid run_at"):
            conn.execute("SELECT postroom.enqueue('k', '{}'::jsonb, run_at => %s)", [when])
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="invalid run_at"):
            conn.execute(
                "SELECT * FROM postroom.enqueue_batch(ARRAY['default'], ARRAY['k'], ARRAY['{}'],"
                " ARRAY[0]::smallint[], ARRAY[%s]::timestamptz[], ARRAY[NULL]::float8[],"
                " ARRAY[1])",
                [when],
            )
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="invalid first run"):
            conn.execute(
                "SELECT postroom.upsert_schedule('s', '* * * * *', 'k', 'default', '{}', 0, 1, %s)",
                [when],
            )
    still_readable(client, dsn)


def test_enqueue_batch_refuses_an_infinite_delay(client: postroom.Client, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for delay in ("Infinity", "NaN", "-1"):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="invalid delay"):
                conn.execute(
                    "SELECT * FROM postroom.enqueue_batch(ARRAY['default'], ARRAY['k'],"
                    " ARRAY['{}'], ARRAY[0]::smallint[], ARRAY[NULL]::timestamptz[],"
                    " ARRAY[%s::float8], ARRAY[1])",
                    [delay],
                )


def test_no_writer_stores_an_infinite_run_at(client: postroom.Client, dsn: str) -> None:
    """The table's CHECK holds any other writer (a worker's snooze delay, a hand-written
    UPDATE) to the years readers can show."""
    job = client.enqueue("k")
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_run_at_range"):
            conn.execute("UPDATE postroom.jobs SET run_at = 'infinity' WHERE id = %s", [job.id])
    still_readable(client, dsn)


def test_client_enqueue_refuses_a_run_at_beyond_a_hundred_years(client: postroom.Client) -> None:
    for run_at in (
        datetime(9999, 12, 31, tzinfo=UTC),
        datetime.now(UTC) + timedelta(days=365 * 101),
        datetime(1899, 12, 31, tzinfo=UTC),
    ):
        with pytest.raises(postroom.errors.InvalidArgument, match="invalid run_at"):
            client.enqueue("k", run_at=run_at)
    soon = datetime.now(UTC) + timedelta(days=365 * 99)
    assert client.get_job(client.enqueue("k", run_at=soon).id).run_at == soon
