"""Retention runs by itself (issue 8): every group member elects, with an advisory lock, one
runner per round that deletes expired messages (keeping what any active group has not read) and
VACUUMs messages when its role owns the table. POSTROOM_RETENTION_INTERVAL turns it off."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import postroom
from postroom._acompat import Event
from postroom._maintenance import RETENTION_ENV as ENV
from postroom._maintenance import retention_interval_from_env as retention_interval
from postroom._retention import RetentionRunner

from ..queue.helpers import scalar
from ..signals import wait_for
from .test_retention import age_messages

RUNNER_LOCK = "SELECT pg_advisory_lock(hashtext('postroom.retention-runner'), hashtext('postroom'))"


def low_water(client: postroom.Client, topic: str) -> int:
    return client.describe_topic(topic).partition_info[0].low_water


def vacuums(dsn: str) -> int:
    return int(
        scalar(
            dsn,
            "SELECT vacuum_count FROM pg_stat_user_tables "
            "WHERE schemaname = 'postroom' AND relname = 'messages'",
        )
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, 30.0), ("", 30.0), ("off", None), ("OFF", None), ("0", None), ("2.5", 2.5)],
)
def test_the_interval_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: float | None
) -> None:
    if raw is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, raw)
    assert retention_interval() == expected


def test_a_bad_interval_falls_back_to_the_default(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV, "soon")
    assert retention_interval() == 30.0
    assert "soon" in caplog.text


def test_one_process_runs_each_round(client: postroom.Client, dsn: str) -> None:
    client.create_topic("t", retention=timedelta(hours=1))
    client.publish_batch("t", list(range(5)))
    age_messages(dsn, 2)
    runner = RetentionRunner(client._db, interval=60, stopping=Event())
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute(RUNNER_LOCK)  # another process is this round's runner
        assert runner.run_once() is None
        assert low_water(client, "t") == 0
        pid = other.info.backend_pid
    # The server lets the lock go when that backend has exited, a moment after the close.
    wait_for(
        lambda: not scalar(dsn, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]),
        what="the other session's backend to exit",
    )
    assert runner.run_once() == 5  # the lock went with the other session
    assert runner.run_once() == 0
    assert low_water(client, "t") == 5


def test_the_runner_vacuums_messages_when_its_role_owns_them(
    client: postroom.Client, dsn: str
) -> None:
    client.create_topic("t", retention=timedelta(hours=1))
    client.publish_batch("t", list(range(5)))
    age_messages(dsn, 2)
    runner = RetentionRunner(client._db, interval=60, stopping=Event())
    before = vacuums(dsn)
    assert runner.run_once() == 5
    assert runner.vacuums == 1
    wait_for(lambda: vacuums(dsn) > before, 10, "the runner's VACUUM in the statistics")
    assert runner.run_once() == 0
    assert runner.vacuums == 1  # nothing deleted, nothing to vacuum


def dead_tuples(dsn: str) -> int:
    return int(
        scalar(
            dsn,
            "SELECT n_dead_tup FROM pg_stat_user_tables "
            "WHERE schemaname = 'postroom' AND relname = 'messages'",
        )
    )


def test_the_statistics_show_no_dead_tuples_after_the_runner(dsn: str) -> None:
    """The deletes' statistics are sent before the VACUUM reports, not after it, where they
    would show the removed rows as dead again (and wake autovacuum for nothing)."""
    with postroom.connect(dsn) as client:
        client.create_topic("t", retention=timedelta(hours=1))
        client.publish_batch("t", list(range(50)))
        age_messages(dsn, 2)
        runner = RetentionRunner(client._db, interval=60, stopping=Event())
        assert runner.run_once() == 50
    # The runner's sessions ended: every statistic they held is sent.
    assert dead_tuples(dsn) == 0


def retention_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("postroom-retention-")]


@pytest.mark.parametrize("setting", ["off", "0.05"])
def test_the_environment_turns_the_runner_off(
    client: postroom.Client, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    monkeypatch.setenv(ENV, setting)
    client.create_topic("t")
    client.publish("t", "x")
    with client.consumer("g", "t") as consumer:
        assert consumer.poll(timeout=5)
        running = retention_threads()
    assert bool(running) == (setting != "off"), running
    assert retention_threads() == []  # the member's runner stops when it leaves


def test_a_group_member_expires_the_log_by_itself_and_keeps_unread_messages(
    any_client: postroom.Client, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    any_client.create_topic("t", retention=timedelta(hours=1))
    any_client.publish_batch("t", list(range(10)))
    with any_client.consumer("slow", "t") as consumer:  # runner off (conftest): nothing yet
        consumer.poll(timeout=5, max_messages=4)
        consumer.commit()
    age_messages(dsn, 2)
    monkeypatch.setenv(ENV, "0.05")
    before = vacuums(dsn)
    with any_client.consumer("fast", "t") as consumer:
        read: list[Any] = []
        while len(read) < 10:
            read += consumer.poll(timeout=5)
        consumer.commit()
        any_client.publish("t", "fresh")  # produced while the runner runs: not expired
        expired: Callable[[], bool] = lambda: low_water(any_client, "t") == 4  # noqa: E731
        wait_for(expired, 30, "the runner to delete what both groups have read")
        wait_for(lambda: vacuums(dsn) > before, 30, "the runner to vacuum messages")
        info = any_client.describe_topic("t").partition_info[0]
        assert (info.low_water, info.high_water) == (4, 11)
    monkeypatch.setenv(ENV, "off")
    with any_client.consumer("slow", "t") as consumer:  # every unread message is still there
        got: list[Any] = []
        while len(got) < 7:
            got += consumer.poll(timeout=5)
        assert [m.offset for m in got] == list(range(4, 11))
