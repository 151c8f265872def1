"""The history recorder: one JSON line per client operation, in the shape Jepsen uses.

Each line is ``{"process": P, "type": T, "f": F, "value": V, "time": NS}``: ``type`` is
``invoke`` when an operation starts and ``ok`` (it happened), ``fail`` (it certainly did not)
or ``info`` (unknown: a lost COMMIT, a crash) when it ends; ``time`` is ``time.time_ns()``, one
clock for every process on the box. Every process appends to a file of its own, one
``os.write`` per line (``O_APPEND``), so a kill -9 leaves at most a torn last line, which
:func:`read_history` skips. :func:`merge` orders the files of a run by time into one history.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Op = dict[str, Any]


class Recorder:
    """Appends operations of one process (``name``) to ``path``; safe to share between threads.

    ``invoke`` writes the start of an operation and returns it; ``complete`` writes its end
    with the same ``f`` and the outcome's value::

        op = recorder.invoke("send", {"value": "p-1"})
        recorder.complete(op, "ok", {"value": "p-1", "partition": 0, "offset": 7})
    """

    def __init__(self, path: Path, name: str) -> None:
        self.name = name
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def write(self, type_: str, f: str, value: Any) -> Op:
        op: Op = {"process": self.name, "type": type_, "f": f, "value": value}
        with self._lock:  # one clock reading per line, in the order lines are written
            op["time"] = time.time_ns()
            os.write(self._fd, (json.dumps(op, separators=(",", ":")) + "\n").encode())
        return op

    def invoke(self, f: str, value: Any = None) -> Op:
        return self.write("invoke", f, value)

    def complete(self, op: Op, type_: str, value: Any = None) -> Op:
        return self.write(type_, op["f"], op["value"] if value is None else value)

    def close(self) -> None:
        os.close(self._fd)


def read_history(path: Path) -> list[Op]:
    """The operations of one file; a torn last line (the writer was killed) is skipped."""
    ops = []
    for line in path.read_text().splitlines():
        try:
            ops.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return ops


def merge(paths: Iterable[Path]) -> list[Op]:
    """One history from many files, in time order (stable: a process's own order is kept)."""
    ops = [op for path in paths for op in read_history(path)]
    ops.sort(key=lambda op: op["time"])
    return ops


def write_history(ops: Iterable[Op], path: Path) -> None:
    with path.open("w") as out:
        for op in ops:
            out.write(json.dumps(op, separators=(",", ":")) + "\n")
