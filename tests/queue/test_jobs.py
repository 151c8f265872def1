"""The queue through the sync client on real PostgreSQL: enqueue, run, retry, redrive, cancel,
results, unique keys, bad input. Workers run in a thread of the test process."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
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
    UniqueKeyTaken,
)

from .helpers import running, scalar, wait_for

NAIVE = datetime(2030, 1, 1)  # noqa: DTZ001 - a naive datetime on purpose
FAST = {"poll_interval": 0.05, "lease": 2.0}


def worker(client: postroom.Client, **options: Any) -> postroom.Worker:
    return client.worker(**{"concurrency": 2, **FAST, **options})


def test_enqueue_in_a_rolled_back_transaction_never_runs(client: postroom.Client, dsn: str) -> None:
    ran: list[int] = []

    @client.job("note")
    def note(n: int) -> None:
        ran.append(n)

    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE orders (id int)")
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (1)")
        note.enqueue(n=1, conn=conn)
        conn.rollback()
        conn.execute("INSERT INTO orders VALUES (2)")
        note.enqueue(n=2, conn=conn)
        conn.commit()
    worker(client).run(burst=True, handle_signals=False)
    assert ran == [2]
    assert scalar(dsn, "SELECT count(*) FROM postroom.all_jobs") == 1


def test_results_are_stored_and_awaitable(client: postroom.Client) -> None:
    @client.job("add", queue="math")
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    job = add.enqueue(1, b=2)
    assert job.created and job.info().state == "ready"
    with pytest.raises(TimeoutError, match="still ready"):
        job.result(timeout=0.05)
    with running(worker(client)):
        assert job.result(timeout=10) == {"sum": 3}
    info = client.get_job(job.id)
    assert (info.state, info.attempts, info.result, info.queue) == ("done", 1, {"sum": 3}, "math")
    assert add(2, 3) == {"sum": 5}  # the function is still callable directly


def test_priority_then_run_at_order(client: postroom.Client) -> None:
    order: list[str] = []

    @client.job("step")
    def step(name: str) -> None:
        order.append(name)

    step.enqueue(name="late", priority=5)
    step.enqueue(name="first", priority=-5)
    step.enqueue(name="second")
    step.enqueue(name="third")
    step.enqueue(name="future", delay=3600)
    worker(client, concurrency=1).run(burst=True, handle_signals=False)
    assert order == ["first", "second", "third", "late"]


def test_retries_follow_the_backoff_then_fail(client: postroom.Client) -> None:
    attempts: list[float] = []

    @client.job("flaky", max_attempts=3, backoff=Backoff(base=0.2, factor=2, jitter=0))
    def flaky() -> None:
        attempts.append(time.monotonic())
        raise RuntimeError(f"attempt {len(attempts)} broke")

    job = flaky.enqueue()
    with running(worker(client)):
        wait_for(lambda: client.get_job(job.id).state == "failed", what="the job to fail")
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert len(attempts) == 3
    assert gaps[0] >= 0.2 - 0.01 and gaps[1] >= 0.4 - 0.01
    info = client.get_job(job.id)
    assert info.attempts == 3
    assert info.last_error is not None and "RuntimeError: attempt 3 broke" in info.last_error
    assert info.last_error.startswith("Traceback") and "postroom" not in info.last_error
    with pytest.raises(JobFailed, match="attempt 3 broke") as failed:
        job.result(timeout=1)
    assert failed.value.job_id == job.id


def test_failed_jobs_are_listed_and_redriven(client: postroom.Client, dsn: str) -> None:
    broken = True
    ran: list[int] = []

    @client.job("fragile", max_attempts=1)
    def fragile(n: int) -> None:
        if broken:
            raise ValueError(f"cannot handle {n}")
        ran.append(n)

    jobs = [fragile.enqueue(n=n) for n in range(3)]
    worker(client).run(burst=True, handle_signals=False)
    failed = client.list_jobs(state="failed")
    assert sorted(j.id for j in failed) == sorted(j.id for j in jobs)
    assert all("cannot handle" in (j.last_error or "") for j in failed)
    broken = False
    client.retry_job(jobs[0].id)
    assert client.get_job(jobs[0].id).state == "ready"
    # The rest through the SQL API, as another language would.
    assert scalar(dsn, "SELECT postroom.retry_failed_jobs(job_kind => 'fragile')") == 2
    worker(client).run(burst=True, handle_signals=False)
    assert sorted(ran) == [0, 1, 2]
    assert client.list_jobs(state="failed") == []
    with pytest.raises(JobNotFound):
        client.retry_job(jobs[0].id)  # done now: finished jobs are not live
    assert client.retry_failed_jobs() == 0


def test_retry_refuses_a_job_that_is_not_failed(client: postroom.Client) -> None:
    job = client.enqueue("anything")
    with pytest.raises(InvalidArgument, match="is ready: only failed jobs are retried"):
        client.retry_job(job.id)


def test_unknown_kind_fails_with_a_clear_error(client: postroom.Client) -> None:
    @client.job("known")
    def known() -> None:
        pass

    job = client.enqueue("unknown.kind", {"x": 1}, max_attempts=1)
    worker(client).run(burst=True, handle_signals=False)
    info = client.get_job(job.id)
    assert info.state == "failed"
    assert info.last_error is not None
    assert "no function is registered for job kind 'unknown.kind'" in info.last_error
    assert "registered kinds: known" in info.last_error


def test_timeout_interrupts_a_sync_job(client: postroom.Client) -> None:
    cleaned: list[bool] = []

    @client.job("stuck", timeout=0.3, max_attempts=1)
    def stuck() -> None:
        try:
            while True:
                time.sleep(0.01)
        finally:
            cleaned.append(True)

    job = stuck.enqueue()
    with running(worker(client)):
        wait_for(lambda: client.get_job(job.id).state == "failed", what="the timeout")
    info = client.get_job(job.id)
    assert info.last_error == "JobTimeout: timed out after 0.3 s"
    assert cleaned == [True]


def test_cancel_a_ready_job(client: postroom.Client) -> None:
    ran: list[int] = []

    @client.job("later")
    def later() -> None:
        ran.append(1)

    job = later.enqueue(delay=0.2)
    assert client.cancel_job(job.id) == "ready"
    time.sleep(0.3)  # past its run_at: it would be due now
    worker(client).run(burst=True, handle_signals=False)
    assert ran == []
    assert client.get_job(job.id).state == "cancelled"
    with pytest.raises(JobCancelled):
        job.result(timeout=1)
    with pytest.raises(JobNotFound):
        client.cancel_job(job.id)


def test_cancel_a_running_job(client: postroom.Client) -> None:
    started = threading.Event()
    interrupted: list[str] = []

    @client.job("endless")
    def endless() -> None:
        started.set()
        try:
            while True:
                time.sleep(0.01)
        except JobInterrupted as exc:
            interrupted.append(exc.reason)
            raise

    job = endless.enqueue()
    with running(worker(client, heartbeat=0.5)):
        assert started.wait(10)
        assert job.cancel() == "running"
        wait_for(lambda: client.get_job(job.id).state == "cancelled", what="the cancellation")
    assert interrupted == ["cancelled"]


def test_unique_keys_hold_under_concurrent_enqueues(client: postroom.Client) -> None:
    def enqueue_many(_: int) -> set[int]:
        return {
            client.enqueue("report", {"day": "2024-01-01"}, unique_key="report:2024-01-01").id
            for _ in range(10)
        }

    with ThreadPoolExecutor(8) as pool:
        ids = set().union(*pool.map(enqueue_many, range(8)))
    assert len(ids) == 1
    live = client.list_jobs(kind="report")
    assert [j.id for j in live] == list(ids)
    again = client.enqueue("report", unique_key="report:2024-01-01")
    assert (again.id, again.created) == (live[0].id, False)

    @client.job("report")
    def report(day: str = "") -> None:
        pass

    worker(client).run(burst=True, handle_signals=False)
    fresh = client.enqueue("report", unique_key="report:2024-01-01")
    assert fresh.created and fresh.id not in ids  # the key is free once the job finished


def test_unique_key_in_a_batch_and_through_sql(client: postroom.Client, dsn: str) -> None:
    jobs = client.enqueue_batch(
        [
            {"kind": "k", "unique_key": "a"},
            {"kind": "k"},
            {"kind": "k", "unique_key": "a"},
            {"kind": "k", "unique_key": "b"},
        ]
    )
    assert [j.created for j in jobs] == [True, True, False, True]
    assert jobs[0].id == jobs[2].id
    sql_id = scalar(dsn, "SELECT postroom.enqueue('k', unique_key => 'b')")
    assert sql_id == jobs[3].id


def test_retrying_a_failed_job_whose_unique_key_is_taken(client: postroom.Client) -> None:
    @client.job("once", max_attempts=1)
    def once() -> None:
        raise RuntimeError("no")

    first = once.enqueue(unique_key="u")
    worker(client).run(burst=True, handle_signals=False)
    second = once.enqueue(unique_key="u")
    assert second.created  # a failed job does not hold its key
    with pytest.raises(UniqueKeyTaken, match="holds its unique key"):
        client.retry_job(first.id)


def test_enqueue_batch_inserts_thousands_in_one_call(client: postroom.Client) -> None:
    @client.job("noop")
    def noop(n: int) -> None:
        pass

    jobs = client.enqueue_batch([noop.prepare(n=n, priority=n % 3) for n in range(12_000)])
    assert len({j.id for j in jobs}) == 12_000
    stats = client.job_stats()
    assert [(c.queue, c.state, c.count) for c in stats.counts] == [("default", "ready", 12_000)]
    assert stats.counts[0].oldest_ready_seconds is not None


def test_sql_enqueue_runs_on_a_python_worker(client: postroom.Client, dsn: str) -> None:
    @client.job("greet", queue="mail")
    def greet(name: str) -> str:
        return f"hello {name}"

    job_id = scalar(dsn, """SELECT postroom.enqueue('greet', '{"name": "ada"}', queue => 'mail')""")
    worker(client).run(burst=True, handle_signals=False)
    assert client.job_handle(job_id).result(timeout=1) == "hello ada"


def test_purge_and_stats(client: postroom.Client) -> None:
    @client.job("tiny")
    def tiny() -> None:
        pass

    for _ in range(5):
        tiny.enqueue()
    worker(client).run(burst=True, handle_signals=False)
    stats = client.job_stats()
    assert [(c.state, c.count) for c in stats.counts] == [("done", 5)]
    assert stats.done_per_second["default"] == pytest.approx(5 / 60)
    assert client.purge_jobs("done", older_than=timedelta(days=7)) == 0
    assert client.purge_jobs("done", older_than=0) == 5
    assert client.list_jobs() == []


def test_keep_finished_zero_deletes_done_jobs(client: postroom.Client) -> None:
    @client.job("gone")
    def gone() -> int:
        return 1

    job = gone.enqueue()
    worker(client, keep_finished=0).run(burst=True, handle_signals=False)
    with pytest.raises(JobNotFound, match="keep_finished=0"):
        job.result(timeout=1)


def test_a_result_that_is_not_json_fails_the_job_without_retry(client: postroom.Client) -> None:
    @client.job("odd")
    def odd() -> object:
        return object()

    job = odd.enqueue()
    worker(client).run(burst=True, handle_signals=False)
    info = client.get_job(job.id)
    assert (info.state, info.attempts) == ("failed", 1)
    assert "result is not JSON-serializable" in (info.last_error or "")


def test_bad_input_is_refused_before_anything_is_stored(client: postroom.Client) -> None:
    @client.job("ok")
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
        (lambda: client.enqueue("bad kind!"), InvalidName, "invalid job kind"),
        (lambda: client.enqueue("k", args=[1]), InvalidType, "must be a mapping"),  # type: ignore[arg-type]
        (lambda: client.enqueue("k", {"x": float("nan")}), InvalidType, "'x' of job 'k' cannot"),
        (lambda: client.periodic("61 * * * *"), InvalidCron, "minute field '61'"),
        (
            lambda: client.enqueue_batch([ok.prepare(when="x"), {"kind": "ok", "arg": {}}]),
            InvalidArgument,
            "unknown job fields",
        ),
        (lambda: client.enqueue_batch([42]), InvalidType, "invalid batch item"),
        (lambda: client.worker(queues=["no way"]), InvalidName, "invalid queue name"),
        (lambda: client.worker(concurrency=0), InvalidArgument, "invalid concurrency"),
        (lambda: client.worker(lease=1, heartbeat=2), InvalidArgument, "shorter than the lease"),
        (lambda: client.purge_jobs("ready", 1), InvalidArgument, "invalid state 'ready'"),
        (lambda: client.list_jobs(state="lost"), InvalidArgument, "invalid job state 'lost'"),
        (lambda: client.get_job(999), JobNotFound, "job 999 not found"),
        (lambda: client.set_job_limit("ok", max_concurrency=0), InvalidArgument, "max_concurrency"),
        (lambda: client.set_queue_limit("q", rate_limit=-1), InvalidArgument, "rate_limit"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert client.list_jobs() == []


def test_bad_registrations(client: postroom.Client) -> None:
    with pytest.raises(InvalidArgument, match="parameter 'priority' clashes"):

        @client.job("clash")
        def clash(priority: int) -> None:
            pass

    with pytest.raises(InvalidType, match=r"register coroutine functions on postroom\.AsyncClient"):

        @client.job("coro")
        async def coro() -> None:
            pass

    @client.job("twice")
    def twice() -> None:
        pass

    with pytest.raises(InvalidArgument, match="already registered"):
        client.job("twice")(twice)
    with pytest.raises(InvalidArgument, match="nothing to run"):
        postroom.connect(client.conninfo).worker()


def test_rescue_fails_a_crashed_job_without_attempts_left(
    client: postroom.Client, dsn: str
) -> None:
    job = client.enqueue("crashy", max_attempts=1)
    cancelled = client.enqueue("crashy")
    # A worker that claims both and dies: its leases expire and nobody extends them.
    claimed = query_ids(dsn, "SELECT id FROM postroom.claim_jobs('{default}', 10, 'ghost', '1 ms')")
    assert claimed == sorted([job.id, cancelled.id])
    assert client.cancel_job(cancelled.id) == "running"

    @client.job("crashy")
    def crashy() -> None:
        raise AssertionError("must not run")

    with running(worker(client, rescue_interval=0.05)):
        wait_for(lambda: client.get_job(job.id).state == "failed", what="the rescue")
        wait_for(lambda: client.get_job(cancelled.id).state == "cancelled", what="the cancel")
    info = client.get_job(job.id)
    assert info.attempts == 1
    assert info.last_error == "lease expired: worker ghost stopped heartbeating during attempt 1"


def test_queue_limit_holds_in_one_worker(client: postroom.Client) -> None:
    lock = threading.Lock()
    running_now = peak = 0

    @client.job("narrow", queue="narrow")
    def narrow() -> None:
        nonlocal running_now, peak
        with lock:
            running_now += 1
            peak = max(peak, running_now)
        time.sleep(0.05)
        with lock:
            running_now -= 1

    client.set_queue_limit("narrow", max_concurrency=2)
    client.enqueue_batch(narrow.prepare() for _ in range(12))
    worker(client, concurrency=6).run(burst=True, handle_signals=False)
    assert peak == 2
    client.set_queue_limit("narrow")  # no limits: removed
    for _ in range(12):
        narrow.enqueue()
    worker(client, concurrency=6).run(burst=True, handle_signals=False)
    assert peak > 2


def query_ids(dsn: str, statement: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return sorted(row[0] for row in conn.execute(statement.encode()).fetchall())


def test_workers_vacuum_the_jobs_table_when_dead_rows_pile_up(
    client: postroom.Client, dsn: str
) -> None:
    @client.job("churn")
    def churn(n: int) -> None:
        pass

    client.enqueue_batch(churn.prepare(n=n) for n in range(6000))
    worker(client, concurrency=1, prefetch=999, keep_finished=0, vacuum_interval=None).run(
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
    with running(worker(client, vacuum_interval=0.1)):
        wait_for(vacuums, 30, "a worker to vacuum the jobs table")
