"""The periodic unit's one policy (issue 16): jittered waits, a failure streak logged once and
retried sooner, a role that may not do the work stops the unit, a closed pool stops it."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace
from typing import Any, cast

import psycopg
import pytest

from postroom._acompat import Event
from postroom._maintenance import jittered
from postroom._periodic import Periodic

log = logging.getLogger("tests.periodic")


class Script(Periodic):
    what = "scripted work"

    def __init__(self, outcomes: list[BaseException | None], stopping: Event) -> None:
        db: Any = SimpleNamespace(pool=SimpleNamespace(closed=False))
        super().__init__(db, interval=0.01, stopping=stopping, log=log, immediately=True)
        self.outcomes = outcomes
        self.ticks = 0

    def tick(self) -> None:
        self.ticks += 1
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if not self.outcomes and outcome is None:
            self._stopping.set()
        if outcome is not None:
            raise outcome


def test_a_failure_streak_is_logged_once_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    down = psycopg.OperationalError("server closed the connection")
    unit = Script([down, down, down, None], Event())
    with caplog.at_level(logging.WARNING, "tests.periodic"):
        unit.run()
    assert unit.ticks == 4 and unit.failures == 0
    assert [r.getMessage() for r in caplog.records] == [
        "scripted work failed: server closed the connection"
    ]


def test_a_role_that_may_not_stops_the_unit(caplog: pytest.LogCaptureFixture) -> None:
    denied = psycopg.errors.InsufficientPrivilege("permission denied for table jobs")
    unit = Script([denied, None, None], Event())
    with caplog.at_level(logging.WARNING, "tests.periodic"):
        unit.run()
    assert unit.ticks == 1
    assert "this role may not" in caplog.records[0].getMessage()


def test_other_errors_reach_the_host() -> None:
    unit = Script([ValueError("a bug")], Event())
    with pytest.raises(ValueError, match="a bug"):
        unit.run()


def test_a_closed_pool_or_the_stop_event_ends_the_unit() -> None:
    stopping = Event()
    unit = Script([None] * 1000, stopping)
    cast(Any, unit._db).pool.closed = True
    unit.run()
    assert unit.ticks == 0
    stopping.set()
    thread = threading.Thread(target=Script([None], stopping).run)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()


def test_jitter_stays_within_its_bounds() -> None:
    assert jittered(10, 0.2, lambda: 0.0) == pytest.approx(8.0)
    assert jittered(10, 0.2, lambda: 1.0) == pytest.approx(12.0)
    assert jittered(10, 0, lambda: 0.7) == 10
