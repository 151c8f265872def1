"""A group of several OS processes splitting a topic's partitions, each message read once
(no crash here: the crash cases are in tests/log/test_group_processes.py).

Each member is ``python -m tests.conformance.splitmember`` (the sync client, or the async one on
``kafka-async``); the test waits on the lines its members print, never on sleeps.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import postroom

ROOT = Path(__file__).resolve().parents[2]
SOURCES = Path(postroom.__file__).resolve().parents[1]


class Members:
    """Member processes and one queue of ``(index, line)`` for everything they print."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[str]] = []
        self.lines: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue()

    def start(self, *args: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(SOURCES), str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.conformance.splitmember", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        index = len(self.processes)
        self.processes.append(process)
        threading.Thread(target=self._read, args=(index, process), daemon=True).start()

    def _read(self, index: int, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.put((index, json.loads(line)))
        self.lines.put((index, {"exited": process.wait()}))

    def until(
        self, done: Callable[[], bool], on_line: Callable[[int, Any], None], what: str
    ) -> None:
        """Hand each printed line to ``on_line`` until ``done()``, within 60 s."""
        deadline = time.monotonic() + 60
        while not done():
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out waiting for {what}"
            try:
                index, line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            assert "exited" not in line, f"member {index} exited early ({line})"
            on_line(index, line)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None and process.stdin is not None:
                try:
                    process.stdin.write("stop\n")
                    process.stdin.close()
                except BrokenPipeError:
                    pass
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


@pytest.fixture
def members() -> Iterator[Members]:
    started = Members()
    yield started
    started.stop()


def test_a_group_of_processes_splits_partitions_without_duplicates(
    log_client: postroom.Client,
    log_url: str,
    backend: str,
    members: Members,
    names: Callable[[str], str],
) -> None:
    topic, group = names("split"), names("g")
    log_client.create_topic(topic, partitions=6)
    flavour = "async" if backend == "kafka-async" else "sync"
    for _ in range(3):
        members.start(log_url, topic, group, flavour)
    held: list[set[int]] = [set() for _ in range(3)]
    received: list[list[tuple[int, str]]] = [[] for _ in range(3)]
    pids = {members.processes[i].pid for i in range(3)}
    assert len(pids) == 3  # three OS processes, not threads

    def record(index: int, line: Any) -> None:
        if "held" in line:
            held[index] = set(line["held"])
        for partition, value in line.get("got", ()):
            received[index].append((partition, value))

    def settled() -> bool:  # 2 partitions each, all 6 held
        return all(len(h) == 2 for h in held) and len(set().union(*held)) == 6

    members.until(settled, record, "the group to settle on 2 partitions each")
    log_client.publish_batch(topic, [{"value": str(i), "key": f"k{i}"} for i in range(120)])
    members.until(lambda: sum(map(len, received)) >= 120, record, "all 120 messages")
    members.stop()
    while not members.lines.empty():  # what they printed before stopping
        index, line = members.lines.get()
        if "exited" not in line:
            record(index, line)
    values = sorted(int(value) for batch in received for _, value in batch)
    assert values == list(range(120))  # each message once, no duplicate
    for index, batch in enumerate(received):
        assert {partition for partition, _ in batch} <= held[index]
