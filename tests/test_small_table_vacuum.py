"""The small hot tables are vacuumed when their dead rows pile up (issue 21 item 16), whatever
autovacuum does (it is off on the test server): the log's counter rows and cursors by the
retention runner, the queue's limits, schedules and sequences by the workers' vacuum. Each test
makes the dead rows on purpose and reads them back from pg_stat_user_tables."""

from __future__ import annotations

import logging
import threading
from functools import partial

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

import postroom
from postroom._acompat import Event
from postroom._db import Database
from postroom._maintenance import PINNED_WARN_EVERY, PinnedHorizon, pinned_horizon_warning
from postroom._retention import RetentionRunner
from postroom.queue import vacuum as vacuum_module
from postroom.queue.vacuum import SMALL_VACUUM_MIN_DEAD, Vacuum, needs_vacuum

from .signals import wait_for

MANY = 1_500  # dead rows made on purpose: past the threshold of 1,000


def stats(dsn: str, table: str) -> tuple[int, int]:
    """(n_dead_tup, vacuum_count) of postroom.<table>, this session's pending counts sent."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT n_dead_tup, vacuum_count FROM pg_stat_user_tables"
            " WHERE schemaname = 'postroom' AND relname = %s",
            [table],
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def churn(dsn: str, statement: str) -> None:
    """Runs ``statement`` MANY times in one session (one transaction: MANY row versions), then
    sends the session's statistics at once."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"DO $$ BEGIN FOR i IN 1 .. {MANY} LOOP {statement}; END LOOP; END $$".encode()
        )
        conn.execute("SELECT pg_stat_force_next_flush()")


def test_the_retention_runner_vacuums_counters_and_cursors_past_the_threshold(
    client: postroom.Client, dsn: str
) -> None:
    # Autovacuum off on the two tables (this test's own database): on a server where it runs
    # (the embedded pg18), it may vacuum them first, and the dead rows to count are gone.
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("partitions", "cursors"):
            conn.execute(
                sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
                    sql.Identifier("postroom", table)
                )
            )
    client.create_topic("t")
    client.publish("t", "first")
    client.reset_group("g", "t", to="earliest")
    # Cursors first: a commit reads the counter row, and a read may prune its dead versions
    # (PostgreSQL 15 then lowers n_dead_tup), which would leave fewer to see here.
    churn(dsn, "PERFORM postroom.commit('g', 't', 0, 1)")
    # A publish in a transaction is written at COMMIT (migration 0017); IMMEDIATE writes each one
    # at once, so every publish updates the counter row.
    churn(dsn, "SET CONSTRAINTS ALL IMMEDIATE; PERFORM postroom.publish('t', i::text)")

    def dead(table: str) -> bool:
        return stats(dsn, table)[0] > SMALL_VACUUM_MIN_DEAD

    for table in ("partitions", "cursors"):
        wait_for(partial(dead, table), 10, f"{table} stats")
    before = {t: stats(dsn, t)[1] for t in ("partitions", "cursors")}
    runner = RetentionRunner(client._db, interval=60, stopping=Event())
    assert runner.run_once() == 0  # nothing to expire: the small tables are vacuumed anyway
    assert sorted(runner.vacuumed) == ["cursors", "partitions"]

    def vacuumed(table: str) -> bool:
        return stats(dsn, table)[1] > before[table]

    for table in ("partitions", "cursors"):
        wait_for(partial(vacuumed, table), 10, f"{table}'s VACUUM")
        assert stats(dsn, table)[0] < SMALL_VACUUM_MIN_DEAD
    runner.run_once()
    assert sorted(runner.vacuumed) == ["cursors", "partitions"]  # not again: nothing dead


def test_the_retention_runner_vacuums_the_dashboards_ring_of_samples(
    client: postroom.Client, dsn: str
) -> None:
    # A ring of three samples (migration 0036), each overwritten many times: the dead versions
    # a long transaction elsewhere would keep from being pruned in place.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO postroom.web_samples SELECT s, now(), '{}' FROM generate_series(0, 2) s"
        )
    churn(dsn, "UPDATE postroom.web_samples SET sampled_at = clock_timestamp()")
    wait_for(lambda: stats(dsn, "web_samples")[0] > SMALL_VACUUM_MIN_DEAD, 10, "ring stats")
    before = stats(dsn, "web_samples")[1]
    runner = RetentionRunner(client._db, interval=60, stopping=Event())
    runner.run_once()
    assert runner.vacuumed == ["web_samples"]
    wait_for(lambda: stats(dsn, "web_samples")[1] > before, 10, "web_samples's VACUUM")
    assert stats(dsn, "web_samples")[0] < SMALL_VACUUM_MIN_DEAD


def test_the_workers_vacuum_the_queues_small_tables_past_the_threshold(
    client: postroom.Client, dsn: str
) -> None:
    churn(dsn, "PERFORM postroom.set_job_limit('kind', 'k', i, NULL, NULL)")
    wait_for(lambda: stats(dsn, "job_limits")[0] > SMALL_VACUUM_MIN_DEAD, 10, "job_limits stats")
    before = stats(dsn, "job_limits")[1]
    # As a worker runs it: on the worker's pool of autocommit connections.
    with ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        vacuum = Vacuum(Database(pool, dsn, "postroom"), interval=60, stopping=Event())
        assert vacuum.vacuum_if_needed() == ["job_limits"]
        wait_for(lambda: stats(dsn, "job_limits")[1] > before, 10, "job_limits's VACUUM")
        assert stats(dsn, "job_limits")[0] < SMALL_VACUUM_MIN_DEAD
        assert vacuum.vacuum_if_needed() == []


def test_a_vacuum_held_back_by_an_open_transaction_names_its_session(
    client: postroom.Client, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Behind a pinned horizon VACUUM removes nothing (docs/queue.md, 'Under a pinned
    horizon'): the worker's vacuum says which session holds it, once for that session, runs
    no second VACUUM while that horizon holds, and vacuums and says nothing once that
    transaction has ended and VACUUM could remove the rows."""

    def pinned_warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if "VACUUM left" in r.getMessage()]

    # Autovacuum off on the table (this test's own database): on the embedded pg18, where it
    # runs, its worker's snapshot may be older than the pin and be named first.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE postroom.job_limits SET (autovacuum_enabled = false)")
    with psycopg.connect(dsn) as pin:
        pid = pin.info.backend_pid
        pin.execute("SELECT txid_current()")  # an XID, then idle in transaction
        churn(dsn, "PERFORM postroom.set_job_limit('kind', 'k', i, NULL, NULL)")
        wait_for(lambda: stats(dsn, "job_limits")[0] > SMALL_VACUUM_MIN_DEAD, 10, "stats")
        with ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
            vacuum = Vacuum(Database(pool, dsn, "postroom"), interval=60, stopping=Event())
            with caplog.at_level(logging.WARNING, logger="postroom.worker"):
                assert vacuum.vacuum_if_needed() == ["job_limits"]
                vacuums = stats(dsn, "job_limits")[1]
                # The same horizon holds: another VACUUM would remove nothing, so none runs.
                assert vacuum.vacuum_if_needed() == []
                assert stats(dsn, "job_limits")[1] == vacuums
                named = [w for w in pinned_warnings() if f"session pid {pid} " in w]
                (warning,) = named  # once for one session
                assert f"session pid {pid} (idle in transaction, its transaction since" in warning
                assert "dead rows in job_limits" in warning
                assert "idle_in_transaction_session_timeout" in warning
                assert stats(dsn, "job_limits")[0] > SMALL_VACUUM_MIN_DEAD
                pin.rollback()
                caplog.clear()
                assert vacuum.vacuum_if_needed() == ["job_limits"]
                assert pinned_warnings() == []
                assert stats(dsn, "job_limits")[0] < SMALL_VACUUM_MIN_DEAD


def test_rows_left_by_a_vacuum_under_traffic_blame_no_younger_transaction(
    client: postroom.Client, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows deleted while a VACUUM runs are left by it whatever the horizon, and the oldest
    transaction then is one younger than the VACUUM (on a busy queue, a claim in flight): no
    warning names it. Made deterministic here: the VACUUM waits on a lock while a transaction
    begins and more rows die. The next VACUUM, which that transaction predates, names it."""

    def pinned_warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if "VACUUM left" in r.getMessage()]

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE postroom.job_limits SET (autovacuum_enabled = false)")
    churn(dsn, "PERFORM postroom.set_job_limit('kind', 'k', i, NULL, NULL)")
    wait_for(lambda: stats(dsn, "job_limits")[0] > SMALL_VACUUM_MIN_DEAD, 10, "stats")
    with (
        ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool,
        psycopg.connect(dsn) as lock,
        psycopg.connect(dsn) as young,
        caplog.at_level(logging.WARNING, logger="postroom.worker"),
    ):
        vacuum = Vacuum(Database(pool, dsn, "postroom"), interval=60, stopping=Event())
        lock.execute("LOCK TABLE postroom.job_limits IN SHARE UPDATE EXCLUSIVE MODE")
        done: list[list[str]] = []
        thread = threading.Thread(target=lambda: done.append(vacuum.vacuum_if_needed()))
        thread.start()
        wait_for(
            lambda: (
                scalar(
                    dsn,
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE 'VACUUM %job_limits%'",
                )
                == 1
            ),
            10,
            "the VACUUM to wait for the lock",
        )
        young.execute("SELECT txid_current()")  # begins after the VACUUM, holds an XID
        churn(dsn, "PERFORM postroom.set_job_limit('kind', 'k', i, NULL, NULL)")
        lock.rollback()  # the VACUUM goes on: the rows that died since are left
        thread.join(30)
        assert done == [["job_limits"]]
        assert stats(dsn, "job_limits")[0] > SMALL_VACUUM_MIN_DEAD  # left by it
        assert pinned_warnings() == []
        assert vacuum.vacuum_if_needed() == ["job_limits"]  # `young` predates this one
        (warning,) = pinned_warnings()
        assert f"session pid {young.info.backend_pid} (idle in transaction" in warning
        young.rollback()


def scalar(dsn: str, query: str) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query.encode()).fetchone()
    return None if row is None else row[0]


def test_a_pinned_horizon_is_warned_of_once_per_holder_every_five_minutes() -> None:
    pinned = PinnedHorizon()
    holder = (42, 7_000, "idle in transaction", None, "psql")
    warn = partial(pinned.warning, since=100)
    assert warn({"jobs": 20_000}, holder, now=0.0) is not None
    assert warn({"jobs": 30_000}, holder, now=PINNED_WARN_EVERY - 1) is None
    assert warn({"jobs": 30_000}, holder, now=PINNED_WARN_EVERY) is not None
    other = (43, 9_000, None, None, None)
    assert warn({"jobs": 40_000}, other, now=PINNED_WARN_EVERY + 1) is not None
    slot = (None, 9_500, "replication slot 'reader'", None, None)
    assert warn({"jobs": 40_000}, slot, now=PINNED_WARN_EVERY + 2) is not None
    assert warn({"jobs": 40_000}, slot, now=PINNED_WARN_EVERY + 3) is None


def test_nothing_older_than_the_vacuum_is_no_pinned_horizon() -> None:
    pinned = PinnedHorizon()
    assert pinned.warning({"jobs": 20_000}, None, now=0.0, since=10) is None
    young = (42, 3, "active", None, "worker")  # a claim in flight, 3 XIDs old
    assert pinned.warning({"jobs": 20_000}, young, now=0.0, since=3) is None
    assert pinned.warning({"jobs": 20_000}, young, now=0.0, since=2) is not None


def test_the_pinned_horizon_warning_names_what_holds_it() -> None:
    text = pinned_horizon_warning(
        {"jobs": 586_144, "job_limits": 1_200},
        (None, 90_000, "prepared transaction 'tx1'", None, None),
    )
    assert text.startswith("VACUUM left 1,200 dead rows in job_limits, 586,144 dead rows in jobs")
    assert "prepared transaction 'tx1' holds the horizon 90,000 transaction IDs back" in text
    assert "ROLLBACK PREPARED" in text
    slot = pinned_horizon_warning({"jobs": 20_000}, (None, 7, "replication slot 's'", None, None))
    assert "replication slot 's' holds the horizon" in slot and "drop the slot" in slot
    hidden = pinned_horizon_warning({"jobs": 20_000}, (42, 7_000, None, None, ""))
    assert "session pid 42 holds a transaction 7,000 transaction IDs old" in hidden
    assert "idle_in_transaction_session_timeout" in hidden


def test_which_tables_need_a_vacuum() -> None:
    assert not needs_vacuum("job_limits", 1_000, 10)
    assert needs_vacuum("job_limits", 1_001, 10)
    assert not needs_vacuum("job_limits", 1_001, 10_000)  # a fifth of the live rows, at least
    assert not needs_vacuum("jobs", 9_999, 0)
    assert needs_vacuum("jobs", 10_001, 0)


def test_a_vacuum_runs_again_once_the_horizon_that_blocked_it_moves() -> None:
    pinned = PinnedHorizon()
    holder = (42, 1_000, "idle in transaction", None, None)
    assert pinned.worth_vacuuming(["jobs"], "700") == ["jobs"]  # nothing blocked yet
    pinned.note({"jobs": 20_000}, holder, "700", since=10)  # held since before the VACUUM
    assert pinned.worth_vacuuming(["jobs", "job_limits"], "700") == ["job_limits"]
    assert pinned.worth_vacuuming(["jobs"], "900") == ["jobs"]  # the horizon moved on
    assert pinned.worth_vacuuming(["jobs"], "700") == ["jobs"]  # and is forgotten
    pinned.note({"jobs": 20_000}, holder, "700", since=5_000)  # younger than the VACUUM
    assert pinned.worth_vacuuming(["jobs"], "700") == ["jobs"]


def test_behind_a_pinned_horizon_jobs_is_analyzed_not_vacuumed_again(
    client: postroom.Client, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The VACUUM that a pinned horizon kept from removing `jobs`'s dead rows is not repeated
    while that horizon holds (it would read the whole table for nothing); the table's planner
    statistics are still refreshed (ANALYZE, here at every pass); once the pin ends, VACUUM
    runs and removes them."""
    monkeypatch.setattr(vacuum_module, "ANALYZE_BEHIND_PIN", 0.0)

    def counts() -> tuple[int, int, int]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT n_dead_tup, vacuum_count, analyze_count FROM pg_stat_user_tables"
                " WHERE schemaname = 'postroom' AND relname = 'jobs'"
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE postroom.jobs SET (autovacuum_enabled = false)")
    with psycopg.connect(dsn) as pin:
        pin.execute("SELECT txid_current()")  # an XID, then idle in transaction
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT count(*) FROM postroom.enqueue_batch(ARRAY['default'], ARRAY['k'],"
                " array_fill('{}'::text, ARRAY[12000]), ARRAY[0]::smallint[],"
                " ARRAY[NULL]::timestamptz[], ARRAY[0]::float8[], ARRAY[1])"
            )
            conn.execute("DELETE FROM postroom.jobs")
            conn.execute("SELECT pg_stat_force_next_flush()")
        wait_for(lambda: counts()[0] > 10_000, 10, "the dead rows in the statistics")
        with ConnectionPool(dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
            vacuum = Vacuum(Database(pool, dsn, "postroom"), interval=60, stopping=Event())
            assert vacuum.vacuum_if_needed() == ["jobs"]
            _, vacuums, analyzes = counts()
            assert vacuum.vacuum_if_needed() == []
            dead, vacuums_now, analyzes_now = counts()
            assert (vacuums_now, analyzes_now) == (vacuums, analyzes + 1)
            assert dead > 10_000
            pin.rollback()
            assert vacuum.vacuum_if_needed() == ["jobs"]
            assert counts()[0] < 10_000
