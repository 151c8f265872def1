"""Enqueuer and worker roles act in their own queues only (issue 23, item 5): this test reads
the queue table of docs/roles.md and checks every cell, logged in as a role granted the one
capability with queues=["mine"]; "theirs" is another service's queue."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom

from ..roles import login_role

DENIED = psycopg.errors.InsufficientPrivilege
QUEUES = ("mine", "theirs")
ROLES_DOC = Path(__file__).parents[2] / "docs" / "roles.md"
Conn = psycopg.Connection[Any]


def queue_table() -> dict[str, dict[str, str]]:
    """The queue table of docs/roles.md: {first function of a row: {role: cell}}."""
    lines = ROLES_DOC.read_text().splitlines()
    start = lines.index("| What | Function | enqueuer | worker |")
    table: dict[str, dict[str, str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        _, function, enqueuer, worker = (cell.strip() for cell in line.strip("|").split("|"))
        first = re.match(r"[^`]*`([^`]+)`", function)
        assert first is not None, line
        table[first.group(1)] = {"enqueuer": enqueuer, "worker": worker}
    return table


def ran(conn: Conn, statement: str, params: Any = None) -> bool:
    """Runs a statement whose effect the caller checks; True once it ran."""
    conn.execute(statement.encode(), params)
    return True


def one(conn: Conn, statement: str, params: Any = None) -> Any:
    row = conn.execute(statement.encode(), params).fetchone()
    return None if row is None else row[0]


class Seeds:
    """What the owner puts in each queue before a probe: a ready job due a day ago, a finished
    job, a running job whose lease expired, a due schedule."""

    def __init__(self, owner: Conn) -> None:
        self.owner = owner
        self.ready: dict[str, int] = {}
        self.finished: dict[str, int] = {}
        self.expired: dict[str, int] = {}
        self.tick: dict[str, Any] = {}
        for q in QUEUES:
            enqueue = (
                "SELECT postroom.enqueue('k', '{}'::jsonb, %s, run_at => now() - interval '1 day')"
            )
            self.ready[q] = one(owner, enqueue, [q])
            self.finished[q] = one(owner, enqueue, [q])
            one(
                owner,
                "WITH d AS (DELETE FROM postroom.jobs WHERE id = %s RETURNING *)"
                " INSERT INTO postroom.finished_jobs (id, queue, kind, args, priority, run_at,"
                " attempts, max_attempts, state, result, created_at, finished_at)"
                " SELECT id, queue, kind, args, priority, run_at, 1, max_attempts, 'done',"
                " '\"secret\"', created_at, now() - interval '1 day' FROM d RETURNING id",
                [self.finished[q]],
            )
            self.expired[q] = one(owner, enqueue, [q])
            one(
                owner,
                "UPDATE postroom.jobs SET state = 'running', attempts = 1, worker = 'gone',"
                " lease_expires_at = now() - interval '1 minute' WHERE id = %s RETURNING id",
                [self.expired[q]],
            )
            self.tick[q] = one(
                owner,
                "INSERT INTO postroom.job_schedules (name, cron, kind, queue, next_run_at)"
                " VALUES (%s, '* * * * *', 'k', %s, date_trunc('minute', now()))"
                " RETURNING next_run_at",
                [f"s_{q}", q],
            )

    def claim(self, conn: Conn, q: str, fallback: bool = False) -> tuple[int, uuid.UUID]:
        """A claim of a ready job of q by ``conn``'s role; with ``fallback``, by the owner if
        the role may claim in no queue (to probe write-backs on their own)."""
        claim = (  # the worker's claim (migration 0039), its queue's floor below every job
            "SELECT id, claim_token FROM postroom.claim_jobs(ARRAY[%s], 1, 'w', '1 hour',"
            " ARRAY[0]::smallint[], ARRAY['-infinity']::timestamptz[])"
        )
        try:
            row = conn.execute(claim.encode(), [q]).fetchone()
        except DENIED:
            if not fallback or q != "mine":
                raise
            row = self.owner.execute(claim.encode(), [q]).fetchone()
        assert row is not None
        return row[0], row[1]

    def state(self, job_id: int) -> Any:
        return one(self.owner, "SELECT state FROM postroom.all_jobs WHERE id = %s", [job_id])


WRITE_BACKS = (
    "SELECT postroom.snooze_jobs('w', %s, %s, ARRAY[0::float8])",
    "SELECT postroom.release_jobs('w', %s, %s, ARRAY[false], 'r')",
    "SELECT postroom.fail_jobs('w', %s, %s, ARRAY['e'], ARRAY[0::float8], ARRAY[false])",
    "SELECT postroom.finish_cancelled_jobs('w', %s, %s, ARRAY['c'])",
    "SELECT postroom.complete_jobs_archived('w', %s, %s, ARRAY['1'::jsonb])",
    "SELECT postroom.complete_jobs_deleted('w', %s, %s)",
)


def write_backs(conn: Conn, seeds: Seeds, q: str) -> bool:
    """Each write-back of a job the role claimed lands (the job is no longer running)."""
    landed = []
    for statement in WRITE_BACKS:
        one(seeds.owner, "SELECT postroom.enqueue('k', '{}'::jsonb, %s)", [q])
        job_id, token = seeds.claim(conn, q, fallback=True)
        conn.execute(statement.encode(), [[job_id], [token]])
        landed.append(seeds.state(job_id) != "running")
    one(seeds.owner, "SELECT postroom.enqueue('k', '{}'::jsonb, %s)", [q])
    job_id, token = seeds.claim(conn, q, fallback=True)
    beat = conn.execute(
        b"SELECT * FROM postroom.heartbeat_jobs('w', %s, %s, '1 hour')", [[job_id], [token]]
    ).fetchall()
    return all(landed) and beat == [(job_id, False)]


def limits(scope: str) -> Callable[[Conn, Seeds, str], bool]:
    def probe(conn: Conn, seeds: Seeds, q: str) -> bool:
        name = q if scope == "queue" else f"k_{q}"
        conn.execute(b"SELECT postroom.set_job_limit(%s, %s, 1, NULL, NULL)", [scope, name])
        conn.execute(b"SELECT postroom.delete_job_limit(%s, %s)", [scope, name])
        return True

    return probe


def registers(conn: Conn, queue: str) -> bool:
    """Register a worker of ``queue``, beat and unregister it: True if each worked."""
    name = f"w-{queue}-{uuid.uuid4().hex[:8]}"
    return bool(
        one(
            conn,
            "SELECT postroom.register_worker(%s, 'h', 1, ARRAY[%s], 1, '1 minute')",
            [name, queue],
        )
        and one(conn, "SELECT postroom.worker_heartbeat(%s, '1 minute')", [name])
        and one(conn, "SELECT postroom.unregister_worker(%s)", [name])
    )


def prunes(conn: Conn, s: Seeds, queue: str) -> bool:
    """Prune a worker of ``queue`` that the owner registered and that is gone for a day."""
    name = f"gone-{queue}-{uuid.uuid4().hex[:8]}"
    one(
        s.owner,
        "INSERT INTO postroom.workers (worker, role_name, host, pid, queues, concurrency,"
        " expires_at) VALUES (%s, 'owner', 'h', 1, ARRAY[%s], 1, now() - interval '1 day')"
        " RETURNING 1",
        [name, queue],
    )
    ran(conn, "SELECT postroom.prune_workers('10 minutes')")
    return bool(
        one(s.owner, "SELECT count(*) FROM postroom.workers WHERE worker = %s", [name]) == 0
    )


PROBES: dict[str, Callable[[Conn, Seeds, str], bool]] = {
    "enqueue_job": lambda c, s, q: (
        one(c, "SELECT postroom.enqueue('k', '{}'::jsonb, %s)", [q]) is not None
    ),
    "enqueue_batch": lambda c, s, q: (
        one(
            c,
            "SELECT id FROM postroom.enqueue_batch(ARRAY[%s], ARRAY['k'], ARRAY['{}'],"
            " ARRAY[0]::smallint[], ARRAY[NULL]::timestamptz[], ARRAY[0]::float8[], ARRAY[1])",
            [q],
        )
        is not None
    ),
    "job_outcome": lambda c, s, q: (
        c.execute(b"SELECT * FROM postroom.job_outcome(%s)", [s.finished[q]]).fetchall()
        == [("done", "secret", None)]
    ),
    "claim_jobs": lambda c, s, q: s.claim(c, q)[0] == s.ready[q],
    "jobs_below_floors": lambda c, s, q: (
        c.execute(
            b"SELECT queue FROM postroom.jobs_below_floors(ARRAY[%s], ARRAY[0]::smallint[],"
            b" ARRAY[now()]::timestamptz[])",
            [q],
        ).fetchall()
        == [(q,)]
    ),
    "complete_jobs_*": write_backs,
    "rescue_expired_jobs": lambda c, s, q: (
        ran(c, "SELECT postroom.rescue_expired_jobs(100)") and s.state(s.expired[q]) == "ready"
    ),
    "purge_finished_jobs": lambda c, s, q: (
        ran(c, "SELECT postroom.purge_finished_jobs(now() + '1 hour', NULL, NULL, 100)")
        and s.state(s.finished[q]) is None
    ),
    "waiting_unregistered_kinds": lambda c, s, q: (
        (q,)
        in c.execute(
            b"SELECT queue FROM postroom.waiting_unregistered_kinds('1 minute', ARRAY['other'])"
        ).fetchall()
    ),
    "set_job_limit('queue', ...)": limits("queue"),
    "set_job_limit('kind', ...)": limits("kind"),
    "upsert_schedule": lambda c, s, q: (
        c.execute(
            b"SELECT postroom.upsert_schedule(%s, '* * * * *', 'k', %s, '{}', 0, 1,"
            b" now() + interval '1 minute')",
            [f"new_{q}", q],
        )
        is not None
    ),
    "due_schedules": lambda c, s, q: (
        c.execute(b"SELECT name FROM postroom.due_schedules(ARRAY[%s])", [f"s_{q}"]).fetchall()
        == [(f"s_{q}",)]
    ),
    "advance_schedule": lambda c, s, q: one(
        c,
        "SELECT postroom.advance_schedule(%s, %s, %s + interval '1 minute')",
        [f"s_{q}", s.tick[q], s.tick[q]],
    ),
    "next_schedule_at": lambda c, s, q: (
        one(c, "SELECT postroom.next_schedule_at(ARRAY[%s])", [f"s_{q}"]) is not None
    ),
    "pause_queue": lambda c, s, q: (
        ran(c, "SELECT postroom.pause_queue(%s)", [q])
        and ran(c, "SELECT postroom.resume_queue(%s)", [q])
    ),
    "cancel_job": lambda c, s, q: (
        ran(c, "SELECT postroom.retry_failed_jobs(NULL, NULL, %s)", [q])
        and ran(c, "SELECT postroom.cancel_job(%s)", [s.ready[q]])
    ),
    "register_worker": lambda c, s, q: registers(c, q),
    "prune_workers": lambda c, s, q: prunes(c, s, q),
    "workers": lambda c, s, q: ran(c, "SELECT count(*) FROM postroom.workers"),
    "jobs": lambda c, s, q: all(
        c.execute(f"SELECT count(*) FROM postroom.{table} WHERE queue = %s".encode(), [q])
        for table in ("all_jobs", "jobs", "finished_jobs")
    ),
}


@pytest.fixture
def scoped(client: postroom.Client) -> Iterator[dict[str, str]]:
    """URLs of LOGIN roles granted one capability for queue "mine", and of a worker granted
    every queue ("worker*"), dropped after the test."""
    with (
        login_role(client.conninfo, "postroom_enq_mine") as enqueuer,
        login_role(client.conninfo, "postroom_wrk_mine") as worker,
        login_role(client.conninfo, "postroom_wrk_all") as every,
    ):
        client.grant(enqueuer, "enqueuer", queues=["mine"])
        client.grant(worker, "worker", queues=["mine"])
        client.grant(every, "worker")
        yield {
            role: make_conninfo(client.conninfo, user=name)
            for role, name in (("enqueuer", enqueuer), ("worker", worker), ("worker*", every))
        }


def test_the_queue_table_names_every_probe() -> None:
    assert set(queue_table()) == set(PROBES)


@pytest.mark.parametrize("function", sorted(PROBES))
def test_queue_roles_do_what_the_table_says(
    client: postroom.Client, scoped: dict[str, str], function: str
) -> None:
    cells = queue_table()[function]
    probe = PROBES[function]
    with psycopg.connect(client.conninfo, autocommit=True) as owner:
        seeds = Seeds(owner)
        for role, cell in cells.items():
            with psycopg.connect(scoped[role], autocommit=True) as conn:
                if cell == "no" or cell == "every-queue roles only":
                    with pytest.raises(DENIED):
                        probe(conn, seeds, "mine")
                if cell == "every-queue roles only":
                    with psycopg.connect(scoped[f"{role}*"], autocommit=True) as every:
                        assert probe(every, seeds, "theirs") is True, (role, cell)
                elif cell == "every queue":
                    assert probe(conn, seeds, "theirs") is True, (role, cell)
                    assert probe(conn, seeds, "mine") is True, (role, cell)
                elif cell == "own queues":
                    try:
                        assert not probe(conn, seeds, "theirs"), (role, cell)
                    except DENIED:
                        pass
                    assert probe(conn, seeds, "mine") is True, (role, cell)
                else:
                    assert cell == "no", f"unknown cell {cell!r} in docs/roles.md"


def test_a_job_of_another_queue_does_not_exist_for_job_outcome(
    client: postroom.Client, scoped: dict[str, str]
) -> None:
    theirs = client.enqueue("k", queue="theirs")
    with postroom.connect(scoped["enqueuer"]) as enqueuer:
        with pytest.raises(postroom.errors.JobNotFound):
            enqueuer.job_handle(theirs.id).result(timeout=1)
        with pytest.raises(postroom.errors.PermissionDenied, match="queue 'theirs'"):
            enqueuer.enqueue("k", queue="theirs")
        assert enqueuer.enqueue("k", queue="mine").id > theirs.id


def test_grant_takes_queues_for_queue_capabilities_only(client: postroom.Client) -> None:
    with login_role(client.conninfo, "postroom_qgrant") as role:
        with pytest.raises(postroom.errors.InvalidArgument, match="queues="):
            client.grant(role, "producer", queues=["mine"])
        with pytest.raises(postroom.errors.InvalidArgument, match="a list"):
            client.grant(role, "worker", queues="mine")
        with pytest.raises(postroom.errors.InvalidArgument, match="names no queue"):
            client.grant(role, "worker", queues=[])
        with pytest.raises(postroom.errors.InvalidName):
            client.grant(role, "worker", queues=["bad name"])
        # Every queue, then scoped: the scope takes "every queue" back.
        client.grant(role, "worker")
        client.grant(role, "worker", queues=["mine"])
        url = make_conninfo(client.conninfo, user=role)
        with psycopg.connect(url, autocommit=True) as conn, pytest.raises(DENIED):
            conn.execute("SELECT * FROM postroom.claim_jobs(ARRAY['theirs'], 1, 'w', '1 h')")
