"""The long-running commands (``run``, ``worker``, ``relay``) on a database without the postroom
schema: one red line saying to run ``postroom init``, a non-zero exit, no traceback (the shell's
view: the real entry point in a subprocess, so threads' tracebacks would show)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import postroom

APP = """
import postroom
client = postroom.connect()

@client.subscribe("orders", group="billing")
def handle(message):
    pass

@client.job("ping")
def ping():
    pass
"""


@pytest.fixture
def no_schema(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        conn.execute("DROP SCHEMA postroom CASCADE")
    return dsn


def shell(dsn: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "nc_app.py").write_text(APP)
    src = str(Path(postroom.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), src]), "POSTROOM_URL": dsn}
    command = [sys.executable, "-c", "from postroom.cli.main import main; main()"]
    return subprocess.run(
        [*command, "--url", dsn, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        cwd=tmp_path,
    )


def assert_one_red_line(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert "run `postroom init`" in errors[0]
    # At most the command's own announcement precedes it: no SQL excerpt, no log records.
    assert len(result.stderr.strip().splitlines()) <= 2, result.stderr


def test_run_without_the_schema_prints_one_line_to_run_init(no_schema: str, tmp_path: Path) -> None:
    assert_one_red_line(shell(no_schema, tmp_path, "run", "nc_app"))


def test_worker_without_the_schema_prints_one_line_to_run_init(
    no_schema: str, tmp_path: Path
) -> None:
    assert_one_red_line(shell(no_schema, tmp_path, "worker", "nc_app"))


def test_relay_without_the_schema_prints_one_line_to_run_init(
    no_schema: str, tmp_path: Path
) -> None:
    assert_one_red_line(
        shell(no_schema, tmp_path, "relay", "orders", "--to", "redis://127.0.0.1:6379")
    )
