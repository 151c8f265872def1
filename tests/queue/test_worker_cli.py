"""``postroom worker`` output: --log-level, --log-format json, the typo warning, and a non-zero
exit when a loop of the worker fails. Each runs the CLI in a fresh interpreter (logging set-up
is process-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import postroom

MODULE = """
import os
import postroom

client = postroom.connect(os.environ["POSTROOM_URL"])

@client.job("greet")
def greet(name: str) -> str:
    return "hello " + name
"""


def postroom_worker(dsn: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "greetjobs.py").write_text(MODULE)
    env = {**os.environ, "POSTROOM_URL": dsn}
    code = "import sys; from postroom.cli.main import main; sys.argv[0] = 'postroom'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "--url", dsn, "worker", "greetjobs", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        check=False,
    )


def test_json_log_lines_per_job(dsn: str, client: postroom.Client, tmp_path: Path) -> None:
    client.enqueue("greet", {"name": "ada"})
    done = postroom_worker(dsn, tmp_path, "--burst", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    jobs = [line for line in lines if line["logger"] == "postroom.jobs"]
    assert [(j["outcome"], j["kind"], j["job_id"], j["attempt"]) for j in jobs] == [
        ("started", "greet", 1, 1),
        ("done", "greet", 1, 1),
    ]
    assert jobs[1]["level"] == "info" and jobs[1]["duration"] >= 0


def test_log_level_and_the_typo_warning(dsn: str, tmp_path: Path) -> None:
    done = postroom_worker(
        dsn, tmp_path, "--burst", "-q", "default", "-q", "defualt", "--log-level", "warning"
    )
    assert done.returncode == 0, done.stderr
    assert "queue 'defualt': no job kind registered in this worker uses it" in done.stderr
    assert "postroom.jobs" not in done.stderr  # INFO lines are off
    bad = postroom_worker(dsn, tmp_path, "--burst", "--log-level", "loud")
    assert bad.returncode != 0 and "invalid --log-level 'loud'" in bad.stderr


def test_a_failing_loop_exits_non_zero(dsn: str, client: postroom.Client, tmp_path: Path) -> None:
    # Break the write-back for good: the worker must exit with an error, not hang.
    module = MODULE + (
        "\nfrom postroom.queue import completer\n"
        "def broken(self, batch):\n"
        "    raise RuntimeError('the write-back is broken')\n"
        "completer.Completer._write_batch = broken\n"
    )
    (tmp_path / "brokenjobs.py").write_text(module)
    client.enqueue("greet", {"name": "bob"})
    env = {**os.environ, "POSTROOM_URL": dsn}
    code = "import sys; from postroom.cli.main import main; sys.argv[0] = 'postroom'; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "--url", dsn, "worker", "brokenjobs"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "its completer loop failed: RuntimeError: the write-back is broken" in done.stderr
