"""The queue half of the checker (tests/history/checker.py): one ``step`` per operation.

A job's run is the operation ``run``: its invoke is the start (value ``n``, ``id``,
``attempt``, ``max_attempts``, ``worker``, ``claimed``: when the worker sent the claim that
handed it out), ok its completion, fail its failure. What excuses a second run (docs/queue.md:
at least once after a crash, a pause past the lease or a server crash) is a nemesis operation
on the first run's process (``kill``, a ``pause`` of half a lease or more) or a server restart
after that run's claim: a crash (``immediate``, counted from its start; worker sessions commit
asynchronously, so a claim or completion of the last milliseconds may be lost, and a worker
paused after it sent a lost claim reads the reply and starts the job after the crash) or any
restart that kept the server away for half a lease or more (heartbeats could not renew the
leases).
"""

from __future__ import annotations

from tests.history.checker import Report, cut
from tests.history.recorder import Op


def exposed(run: Op) -> int:
    """When a run became exposed to faults: the claim that handed its job out (the start in
    histories that do not record it)."""
    claimed: int | None = run["value"].get("claimed")
    return run["time"] if claimed is None else claimed


class QueueChecker:
    def __init__(self, report: Report, lease: float) -> None:
        self.report = report
        self.lease_ns = int(lease * 1e9)
        self.stopping = 0  # when the server restart in progress began
        self.enqueued: dict[int, Op] = {}  # n -> the settling op of its enqueue
        self.ids: dict[int, int] = {}  # job id -> n
        self.invoked: set[int] = set()  # every n an enqueue was sent for (killed ones too)
        self.running: dict[int, list[Op]] = {}  # job id -> live runs (start ops)
        self.completed: dict[int, tuple[Op, int]] = {}  # job id -> first completion, its claim
        self.faulted: dict[str, int] = {}  # process -> time of its last kill or pause
        self.restarted = 0  # time of the last server restart
        self.final: Op | None = None

    def step(self, op: Op) -> None:
        f, type_, value = op["f"], op["type"], op["value"]
        if f == "enqueue" and type_ == "invoke":
            self.invoked.add(value["n"])
        elif f == "enqueue":
            self.enqueued[value["n"]] = op
            if type_ == "ok":
                self.ids[value["id"]] = value["n"]
        elif f == "kill" or (f == "pause" and value["s"] * 1e9 >= self.lease_ns // 2):
            # A pause shorter than half a lease cannot lose a lease renewed every lease/3.
            self.faulted[value["target"]] = op["time"]
        elif f == "restart":
            self.stopping = op["time"]
            if value.get("mode") == "immediate":
                # The crash is at the start: the nemesis logs "restarted" only once the server
                # is back, and a rescue by a live worker can come before that line.
                self.restarted = op["time"]
        elif f == "restarted":
            if value["mode"] == "immediate" or op["time"] - self.stopping >= self.lease_ns // 2:
                self.restarted = op["time"]
        elif f == "run" and type_ == "invoke":
            self.start(op)
        elif f == "run":
            self.end(op)
        elif f == "final-jobs":
            self.final = op

    def end(self, op: Op) -> None:
        value = op["value"]
        runs = self.running.get(value["id"], [])
        claimed = op["time"]
        for i, run in enumerate(runs):
            if run["process"] == op["process"] and run["value"]["attempt"] == value["attempt"]:
                claimed = exposed(runs.pop(i))
                break
        if op["type"] == "ok" and value["id"] not in self.completed:
            # A fault since the run's *claim* excuses a rerun: a worker paused mid-run past its
            # lease completes a run that was already handed on (its write-back is fenced).
            self.completed[value["id"]] = (op, claimed)

    def excused(self, process: str, since: int) -> bool:
        return self.faulted.get(process, 0) >= since or self.restarted >= since

    def start(self, op: Op) -> None:
        value = op["value"]
        job, n = value["id"], value["n"]
        if value["attempt"] > value["max_attempts"]:
            self.report.add(
                "attempts-over-limit",
                f"job {job} started attempt {value['attempt']} of {value['max_attempts']}",
                op,
            )
        enqueue = self.enqueued.get(n)
        if (enqueue is not None and enqueue["type"] == "fail") or self.ids.get(job, n) != n:
            self.report.add(
                "unexpected",
                f"job {job} (n={n}) was never enqueued",
                op,
                *([enqueue] if enqueue else []),
            )
        runs = self.running.setdefault(job, [])
        for run in runs:
            if not self.excused(run["process"], exposed(run)):
                self.report.add(
                    "lease-overlap",
                    f"job {job} attempt {value['attempt']} started while attempt"
                    f" {run['value']['attempt']} ran on a live worker",
                    run,
                    op,
                )
        completion = self.completed.get(job)
        if completion is not None:
            done, claimed = completion
            if self.excused(done["process"], claimed):
                self.report.counts["reruns-after-fault"] += 1
            else:
                self.report.add(
                    "completed-twice",
                    f"job {job} started again after a completion with no fault since",
                    done,
                    op,
                )
        elif value["attempt"] > 1:
            self.report.counts["retries"] += 1
        runs.append(op)

    def finish(self) -> None:
        if self.final is None:
            return
        final = {
            job: (n, state, attempts, limit)
            for job, n, state, attempts, limit in (self.final["value"]["jobs"])
        }
        for n, op in self.enqueued.items():
            if op["type"] != "ok":
                continue
            job = op["value"]["id"]
            row = final.get(job)
            if row is None or row[1] not in ("done", "failed"):
                self.report.add("lost", f"job {job} (n={n}) ends {row[1] if row else 'absent'}", op)
            elif row[1] == "failed" and row[2] < row[3]:
                self.report.add("lost", f"job {job} failed after {row[2]} of {row[3]}", op)
            elif row[1] == "done" and job not in self.completed:
                self.report.add("lost", f"job {job} is done but no run completed it", op)
            elif row[1] == "failed":
                self.report.counts["exhausted"] += 1
        rolled = {n for n, op in self.enqueued.items() if op["type"] == "fail"}
        for job, (n, state, attempts, limit) in final.items():
            excerpt = cut(self.final, jobs=[[job, n, state, attempts, limit]])
            if n in rolled or (job not in self.ids and n not in self.invoked):
                self.report.add("unexpected", f"job {job} (n={n}) is in the table", excerpt)
            if attempts > limit:
                self.report.add(
                    "attempts-over-limit", f"job {job} ends with {attempts} of {limit}", excerpt
                )
