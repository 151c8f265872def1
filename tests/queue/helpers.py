"""Helpers of the queue tests: run workers in threads or processes, wait on database events."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

import postroom

RUNS_TABLE = """
CREATE TABLE IF NOT EXISTS runs (
    seq serial PRIMARY KEY,
    n bigint NOT NULL,
    pid integer NOT NULL,
    phase text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def create_runs_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RUNS_TABLE)


def query(dsn: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    # Test-only SQL on the test's own database.
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(statement.encode(), params).fetchall()


def scalar(dsn: str, statement: str, params: Any = None) -> Any:
    return query(dsn, statement, params)[0][0]


@contextmanager
def running(worker: postroom.Worker) -> Iterator[postroom.Worker]:
    """Run a sync worker in a thread for the block, then stop it and wait for it."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run(handle_signals=False)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "the worker did not stop"
    if errors:
        raise errors[0]


class WorkerProcess:
    """``python -m tests.queue.workerapp DSN ...`` in a subprocess."""

    def __init__(self, dsn: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.queue.workerapp", dsn, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            raise AssertionError(f"worker did not start: {line}{self.proc.stderr.read()}")  # type: ignore[union-attr]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def terminate(self, timeout: float = 30.0) -> str:
        """SIGTERM, wait for the exit; returns stdout after 'ready'."""
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        return out

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
