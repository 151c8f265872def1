"""The history checker: pure Python, one pass over a time-ordered history (docs/guarantees.md).

``check(history)`` returns a :class:`Report`: the anomalies found, each named as in
docs/guarantees.md with a minimal excerpt of the history that shows it, and the counts of what
the docs allow (redeliveries to a poll/commit group after a fault, reruns of jobs after a
crash or pause). The history vocabulary (``f`` and ``value`` of each operation) is the one
``tests/history/clients.py`` records; see docs/guarantees.md for it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.history.recorder import Op

# Every anomaly name, in the order docs/guarantees.md lists them.
LOG_ANOMALIES = (
    "inconsistent-offsets",
    "offset-gap",
    "duplicate",
    "lost-write",
    "aborted-read",
    "duplicate-effect",
    "duplicate-delivery",
    "poll-skip",
    "nonmonotonic-poll",
    "commit-regression",
    "unseen",
    "key-order",
)
QUEUE_ANOMALIES = (
    "lost",
    "unexpected",
    "completed-twice",
    "lease-overlap",
    "attempts-over-limit",
)


@dataclass
class Anomaly:
    name: str
    detail: str
    excerpt: list[Op]

    def render(self) -> str:
        lines = [f"{self.name}: {self.detail}"]
        lines += [f"    {short(op)}" for op in self.excerpt]
        return "\n".join(lines)


@dataclass
class Report:
    anomalies: list[Anomaly] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def add(self, name: str, detail: str, *excerpt: Op) -> None:
        self.anomalies.append(Anomaly(name, detail, list(excerpt)))

    @property
    def valid(self) -> bool:
        return not self.anomalies

    def names(self) -> set[str]:
        return {anomaly.name for anomaly in self.anomalies}

    def render(self, per_name: int = 3) -> str:
        """Counts, then up to ``per_name`` anomalies of each name with their excerpts."""
        by_name = Counter(anomaly.name for anomaly in self.anomalies)
        lines = ["valid" if self.valid else f"INVALID: {dict(by_name)}"]
        lines.append("allowed: " + ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items())))
        shown: Counter[str] = Counter()
        for anomaly in self.anomalies:
            shown[anomaly.name] += 1
            if shown[anomaly.name] <= per_name:
                lines.append(anomaly.render())
        return "\n".join(lines)


def short(op: Op) -> str:
    """One line per operation: time (ms of the run's clock), process, type, f, value."""
    return f"{op['time'] // 1_000_000} {op['process']} {op['type']} {op['f']} {op['value']}"


def cut(op: Op, **value: Any) -> Op:
    """``op`` with its value narrowed to what an excerpt needs (one message of a poll)."""
    return {**op, "value": {**(op["value"] or {}), **value}}


def check(history: list[Op], lease: float = 3.0, batch: int = 20) -> Report:
    """Every anomaly of docs/guarantees.md in ``history`` (time-ordered, as ``merge`` gives);
    ``lease``: the workers' lease in seconds, ``batch`` the members' ``max_messages``
    (tests/history/clients.py's ``LEASE`` and ``BATCH``)."""
    from tests.history.checker_log import LogChecker
    from tests.history.checker_queue import QueueChecker

    report = Report()
    log, queue = LogChecker(report, batch), QueueChecker(report, lease)
    for op in history:
        log.step(op)
        queue.step(op)
    log.finish()
    queue.finish()
    return report
