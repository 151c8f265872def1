"""The queue through the sync client on real PostgreSQL: enqueue, run, retry, redrive, cancel,
results, unique keys, bad input. Workers run in a thread of the test process."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import postroom
from postroom import Backoff
from postroom.errors import (
    InvalidArgument,
    InvalidCron,
    InvalidName,
    InvalidType,
    JobCancelled,
    JobFailed,
    JobInterrupted,
    JobNotFound,
)

from ..signals import wait_for
from .helpers import running, scalar

NAIVE = datetime(2030, 1, 1)  # noqa: DTZ001 - a naive datetime on purpose
FAST = {"poll_interval": 0.05, "lease": 2.0}


def worker(any_client: postroom.Client, **options: Any) -> postroom.Worker:
    return any_client.worker(**{"concurrency": 2, **FAST, **options})


def test_a_burst_worker_stops_once_drained_not_at_its_next_poll(
    any_client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an hour between polls, ``run(burst=True)`` still returns once the queue is drained:
    the last write-back wakes the fetcher, whose empty claim ends the run (it used to wait
    for the next poll, a second by default, after the last job), and the drain wakes the
    main loop, whose look for a stop is made an hour apart here (it looked every 50 ms: a
    burst of one job returned after 78-87 ms, now 47)."""
    from postroom.queue import worker as sync_worker
    from postroom.queue import worker_async

    monkeypatch.setattr(sync_worker, "STOP_POLL", 3600.0)
    monkeypatch.setattr(worker_async, "STOP_POLL", 3600.0)
    ran: list[int] = []

    @any_client.job("note")
    def note(n: int) -> None:
        ran.append(n)

    any_client.jobs.enqueue_batch([note.prepare(n=n) for n in range(50)])
    burst = threading.Thread(
        target=worker(any_client, poll_interval=3600.0).run,
        kwargs={"burst": True, "handle_signals": False},
        daemon=True,
    )
    burst.start()
    burst.join(20.0)
    assert not burst.is_alive(), "the burst worker waited for its next poll"
    assert sorted(ran) == list(range(50))


def test_enqueue_in_a_rolled_back_transaction_never_runs(
    any_client: postroom.Client, dsn: str, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    ran: list[int] = []

    @any_client.job("note")
    def note(n: int) -> None:
        ran.append(n)

    with any_connect() as conn:
        conn.execute("CREATE TABLE orders (id int)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (1)")
        note.enqueue(n=1, conn=conn)
        conn.rollback()
        conn.execute("INSERT INTO orders VALUES (2)")
        note.enqueue(n=2, conn=conn)
        conn.commit()
    worker(any_client).run(burst=True, handle_signals=False)
    assert ran == [2]
    assert scalar(dsn, "SELECT count(*) FROM postroom.all_jobs") == 1


def test_results_are_stored_and_awaitable(any_client: postroom.Client) -> None:
    @any_client.job("add", queue="math")
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    job = add.enqueue(1, b=2)
    assert job.created and job.info().state == "ready"
    with pytest.raises(TimeoutError, match="still ready"):
        job.result(timeout=0.05)
    with running(worker(any_client)):
        assert job.result(timeout=10) == {"sum": 3}
    info = any_client.get_job(job.id)
    assert (info.state, info.attempts, info.result, info.queue) == ("done", 1, {"sum": 3}, "math")
    assert add(2, 3) == {"sum": 5}  # the function is still callable directly


def test_priority_then_run_at_order(any_client: postroom.Client) -> None:
    order: list[str] = []

    @any_client.job("step")
    def step(name: str) -> None:
        order.append(name)

    step.enqueue(name="late", priority=5)
    step.enqueue(name="first", priority=-5)
    step.enqueue(name="second")
    step.enqueue(name="third")
    step.enqueue(name="future", delay=3600)
    worker(any_client, concurrency=1).run(burst=True, handle_signals=False)
    assert order == ["first", "second", "third", "late"]


def test_retries_follow_the_backoff_then_fail(any_client: postroom.Client) -> None:
    attempts: list[float] = []

    @any_client.job("flaky", max_attempts=3, backoff=Backoff(base=0.2, factor=2, jitter=0))
    def flaky() -> None:
        attempts.append(time.monotonic())
        raise RuntimeError(f"attempt {len(attempts)} broke")

    job = flaky.enqueue()
    with running(worker(any_client)):
        with pytest.raises(JobFailed):
            job.result(timeout=30)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert len(attempts) == 3
    assert gaps[0] >= 0.2 - 0.01 and gaps[1] >= 0.4 - 0.01
    info = any_client.get_job(job.id)
    assert info.attempts == 3
    assert info.last_error is not None and "RuntimeError: attempt 3 broke" in info.last_error
    # The traceback starts at the job's own frame: none of postroom's, nor the thread pool's.
    # (Checked by the package's directory, not the word "postroom": a checkout's path has it.)
    first_frame = info.last_error.splitlines()[1]
    assert info.last_error.startswith("Traceback") and first_frame.endswith(", in flaky")
    assert str(Path(postroom.__file__).parent) not in info.last_error
    with pytest.raises(JobFailed, match="attempt 3 broke") as failed:
        job.result(timeout=1)
    assert failed.value.job_id == job.id


def test_failed_jobs_are_listed_and_redriven(any_client: postroom.Client, dsn: str) -> None:
    broken = True
    ran: list[int] = []

    @any_client.job("fragile", max_attempts=1)
    def fragile(n: int) -> None:
        if broken:
            raise ValueError(f"cannot handle {n}")
        ran.append(n)

    jobs = [fragile.enqueue(n=n) for n in range(3)]
    worker(any_client).run(burst=True, handle_signals=False)
    failed = any_client.list_jobs(state="failed")
    assert sorted(j.id for j in failed) == sorted(j.id for j in jobs)
    assert all("cannot handle" in (j.last_error or "") for j in failed)
    broken = False
    any_client.retry_job(jobs[0].id)
    assert any_client.get_job(jobs[0].id).state == "ready"
    # The rest through the SQL API, as another language would.
    assert scalar(dsn, "SELECT postroom.retry_failed_jobs(job_kind => 'fragile')") == 2
    worker(any_client).run(burst=True, handle_signals=False)
    assert sorted(ran) == [0, 1, 2]
    assert any_client.list_jobs(state="failed") == []
    with pytest.raises(JobNotFound):
        any_client.retry_job(jobs[0].id)  # done now: finished jobs are not live
    assert any_client.retry_failed_jobs() == 0


def test_retry_refuses_a_job_that_is_not_failed(any_client: postroom.Client) -> None:
    job = any_client.enqueue("anything")
    with pytest.raises(InvalidArgument, match="is ready: only failed jobs are retried"):
        any_client.retry_job(job.id)


def test_unknown_kind_fails_with_a_clear_error(any_client: postroom.Client) -> None:
    @any_client.job("known")
    def known() -> None:
        pass

    job = any_client.enqueue("unknown.kind", {"x": 1}, max_attempts=1)
    worker(any_client).run(burst=True, handle_signals=False)
    info = any_client.get_job(job.id)
    assert info.state == "failed"
    assert info.last_error is not None
    assert "no function is registered for job kind 'unknown.kind'" in info.last_error
    assert "registered kinds: known" in info.last_error


def test_timeout_interrupts_a_sync_job(any_client: postroom.Client) -> None:
    cleaned: list[bool] = []

    @any_client.job("stuck", timeout=0.3, max_attempts=1)
    def stuck() -> None:
        try:
            while True:
                time.sleep(0.01)
        finally:
            cleaned.append(True)

    job = stuck.enqueue()
    with running(worker(any_client)):
        with pytest.raises(JobFailed, match="timed out"):
            job.result(timeout=30)
    info = any_client.get_job(job.id)
    assert info.last_error == "JobTimeout: timed out after 0.3 s"
    assert cleaned == [True]


def test_cancel_a_ready_job(any_client: postroom.Client) -> None:
    ran: list[int] = []

    @any_client.job("later")
    def later() -> None:
        ran.append(1)

    job = later.enqueue()  # due now
    scheduled = later.enqueue(delay=3600)
    assert any_client.cancel_job(job.id) == "ready"
    assert any_client.cancel_job(scheduled.id) == "ready"
    worker(any_client).run(burst=True, handle_signals=False)
    assert ran == []
    assert any_client.get_job(scheduled.id).state == "cancelled"
    assert any_client.get_job(job.id).state == "cancelled"
    with pytest.raises(JobCancelled):
        job.result(timeout=1)
    with pytest.raises(JobNotFound):
        any_client.cancel_job(job.id)


def test_cancel_a_running_job(any_client: postroom.Client) -> None:
    started = threading.Event()
    interrupted: list[str] = []

    @any_client.job("endless")
    def endless() -> None:
        started.set()
        try:
            while True:
                time.sleep(0.01)
        except JobInterrupted as exc:
            interrupted.append(exc.reason)
            raise

    job = endless.enqueue()
    with running(worker(any_client, heartbeat=0.5)):
        assert started.wait(10)
        assert job.cancel() == "running"
        with pytest.raises(JobCancelled):
            job.result(timeout=30)
    assert interrupted == ["cancelled"]


def test_sql_enqueue_runs_on_a_python_worker(any_client: postroom.Client, dsn: str) -> None:
    @any_client.job("greet", queue="mail")
    def greet(name: str) -> str:
        return f"hello {name}"

    job_id = scalar(dsn, """SELECT postroom.enqueue('greet', '{"name": "ada"}', queue => 'mail')""")
    worker(any_client).run(burst=True, handle_signals=False)
    assert any_client.job_handle(job_id).result(timeout=1) == "hello ada"


def test_purge_and_stats(any_client: postroom.Client) -> None:
    @any_client.job("tiny")
    def tiny() -> None:
        pass

    for _ in range(5):
        tiny.enqueue()
    worker(any_client).run(burst=True, handle_signals=False)
    stats = any_client.job_stats()
    assert [(c.state, c.count) for c in stats.counts] == [("done", 5)]
    assert stats.done_per_second["default"] == pytest.approx(5 / 60)
    assert any_client.purge_jobs("done", older_than=timedelta(days=7)) == 0
    assert any_client.purge_jobs("done", older_than=0) == 5
    assert any_client.list_jobs() == []


def test_keep_finished_zero_deletes_done_jobs(any_client: postroom.Client) -> None:
    @any_client.job("gone")
    def gone() -> int:
        return 1

    job = gone.enqueue()
    worker(any_client, keep_finished=0).run(burst=True, handle_signals=False)
    with pytest.raises(JobNotFound, match="keep_finished=0"):
        job.result(timeout=1)


def test_a_result_that_is_not_json_fails_the_job_without_retry(any_client: postroom.Client) -> None:
    @any_client.job("odd")
    def odd() -> object:
        return object()

    job = odd.enqueue()
    worker(any_client).run(burst=True, handle_signals=False)
    info = any_client.get_job(job.id)
    assert (info.state, info.attempts) == ("failed", 1)
    assert "result is not JSON-serializable" in (info.last_error or "")


def test_bad_input_is_refused_before_anything_is_stored(any_client: postroom.Client) -> None:
    @any_client.job("ok")
    def ok(when: str) -> None:
        pass

    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: ok.enqueue(when=object()), InvalidType, "argument 'when' of job 'ok' cannot be"),
        (lambda: ok.enqueue(when="x", delay=-1), InvalidArgument, "invalid delay -1"),
        (lambda: ok.enqueue(when="x", queue="bad queue"), InvalidName, "invalid queue name"),
        (lambda: ok.enqueue(when="x", run_at=NAIVE), InvalidArgument, "aware"),
        (
            lambda: ok.enqueue(when="x", delay=1, run_at=datetime.now(UTC)),
            InvalidArgument,
            "not both",
        ),
        (lambda: ok.enqueue(wen="x"), InvalidArgument, "arguments do not fit job 'ok'"),
        (lambda: ok.enqueue(when="x", priority=10**6), InvalidArgument, "invalid priority"),
        (lambda: ok.enqueue(when="x", max_attempts=0), InvalidArgument, "invalid max_attempts"),
        (lambda: ok.enqueue(when="x", unique_key=""), InvalidArgument, "invalid unique_key"),
        (lambda: any_client.enqueue("bad kind!"), InvalidName, "invalid job kind"),
        (lambda: any_client.enqueue("k", args=[1]), InvalidType, "must be a mapping"),  # type: ignore[arg-type]
        (
            lambda: any_client.enqueue("k", {"x": float("nan")}),
            InvalidType,
            "'x' of job 'k' cannot",
        ),
        (lambda: any_client.periodic("61 * * * *"), InvalidCron, "minute field '61'"),
        (
            lambda: any_client.enqueue_batch([ok.prepare(when="x"), {"kind": "ok", "arg": {}}]),
            InvalidArgument,
            "unknown job fields",
        ),
        (lambda: any_client.enqueue_batch([42]), InvalidType, "invalid batch item"),
        (lambda: any_client.worker(queues=["no way"]), InvalidName, "invalid queue name"),
        (lambda: any_client.worker(concurrency=0), InvalidArgument, "invalid concurrency"),
        (
            lambda: any_client.worker(lease=1, heartbeat=2),
            InvalidArgument,
            "shorter than the lease",
        ),
        (lambda: any_client.purge_jobs("ready", 1), InvalidArgument, "invalid state 'ready'"),
        (lambda: any_client.list_jobs(state="lost"), InvalidArgument, "invalid job state 'lost'"),
        (lambda: any_client.get_job(999), JobNotFound, "job 999 not found"),
        (
            lambda: any_client.set_job_limit("ok", max_concurrency=0),
            InvalidArgument,
            "max_concurrency",
        ),
        (lambda: any_client.set_queue_limit("q", rate_limit=-1), InvalidArgument, "rate_limit"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert any_client.list_jobs() == []


def test_bad_registrations(any_client: postroom.Client, client_flavour: str) -> None:
    with pytest.raises(InvalidArgument, match="parameter 'priority' clashes"):

        @any_client.job("clash")
        def clash(priority: int) -> None:
            pass

    if client_flavour == "sync":
        with pytest.raises(
            InvalidType, match=r"register coroutine functions on postroom\.AsyncClient"
        ):

            @any_client.job("coro")
            async def coro() -> None:
                pass

    @any_client.job("twice")
    def twice() -> None:
        pass

    with pytest.raises(InvalidArgument, match="already registered"):
        any_client.job("twice")(twice)
    with pytest.raises(InvalidArgument, match="nothing to run"):
        postroom.connect(any_client.conninfo).worker()


def test_rescue_fails_a_crashed_job_without_attempts_left(
    any_client: postroom.Client, dsn: str
) -> None:
    job = any_client.enqueue("crashy", max_attempts=1)
    cancelled = any_client.enqueue("crashy")
    # A worker that claims both and dies: its leases expire and nobody extends them.
    claimed = query_ids(dsn, "SELECT id FROM postroom.claim_jobs('{default}', 10, 'ghost', '1 ms')")
    assert claimed == sorted([job.id, cancelled.id])
    assert any_client.cancel_job(cancelled.id) == "running"

    @any_client.job("crashy")
    def crashy() -> None:
        raise AssertionError("must not run")

    with running(worker(any_client, rescue_interval=0.05)):
        with pytest.raises(JobFailed, match="lease expired"):
            job.result(timeout=30)
        with pytest.raises(JobCancelled):
            cancelled.result(timeout=30)
    info = any_client.get_job(job.id)
    assert info.attempts == 1
    assert info.last_error == "lease expired: worker ghost stopped heartbeating during attempt 1"


def test_queue_limit_holds_in_one_worker(any_client: postroom.Client) -> None:
    """Deterministic both ways: jobs meet at a barrier, which breaks (and fails the job) when
    fewer than its parties can run at once; a counter proves the limit is never exceeded."""
    lock = threading.Lock()
    running_now = peak = runs = 0
    barrier = threading.Barrier(2, timeout=20)

    @any_client.job("narrow", queue="narrow", max_attempts=1)
    def narrow() -> None:
        nonlocal running_now, peak, runs
        with lock:
            running_now += 1
            runs += 1
            peak = max(peak, running_now)
        try:
            barrier.wait()  # two at once must be possible
        finally:
            with lock:
                running_now -= 1

    any_client.set_queue_limit("narrow", max_concurrency=2)
    any_client.enqueue_batch(narrow.prepare() for _ in range(12))
    worker(any_client, concurrency=6).run(burst=True, handle_signals=False)
    assert any_client.list_jobs(state="failed") == []
    assert peak == 2
    any_client.set_queue_limit("narrow")  # no limits: removed
    barrier = threading.Barrier(3, timeout=20)  # now three must run at once
    for _ in range(12):
        narrow.enqueue()
    worker(any_client, concurrency=6).run(burst=True, handle_signals=False)
    assert any_client.list_jobs(state="failed") == []
    assert runs == 24


def query_ids(dsn: str, statement: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return sorted(row[0] for row in conn.execute(statement.encode()).fetchall())


def test_workers_vacuum_the_jobs_table_when_dead_rows_pile_up(
    any_client: postroom.Client, dsn: str
) -> None:
    @any_client.job("churn")
    def churn(n: int) -> None:
        pass

    # Autovacuum off on the table (this test's own database): on the embedded pg18, where it
    # runs, it may vacuum the dead rows first, and a worker then has none to vacuum (seen once
    # in a loaded CI run: the wait below timed out).
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE postroom.jobs SET (autovacuum_enabled = false)")
    any_client.enqueue_batch(churn.prepare(n=n) for n in range(6000))
    worker(any_client, concurrency=1, prefetch=999, keep_finished=0, vacuum_interval=None).run(
        burst=True, handle_signals=False
    )  # 12,000 dead rows: the claims' old versions and the deletes

    def vacuums() -> int:
        return int(
            scalar(
                dsn,
                "SELECT vacuum_count FROM pg_stat_user_tables "
                "WHERE schemaname = 'postroom' AND relname = 'jobs'",
            )
        )

    assert vacuums() == 0
    with running(worker(any_client, vacuum_interval=0.1)):
        wait_for(vacuums, 30, "a worker to vacuum the jobs table")
