"""Cron schedules in a time zone (issue 21 item 16): "9 am in the user's time zone", summer and
winter, with cronie's rules across a daylight-saving change. The cron module is pure (no
database); the last test stores a schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

import postroom
from postroom.errors import InvalidCron
from postroom.queue.cron import parse_cron

from ..signals import wait_for
from .helpers import query, running

NEW_YORK = ZoneInfo("America/New_York")  # 2026: clocks go 02:00 -> 03:00 on Mar 8, back Nov 1
PARIS = ZoneInfo("Europe/Paris")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def local(
    zone: ZoneInfo, year: int, month: int, day: int, hour: int = 0, minute: int = 0, fold: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=zone, fold=fold)


def ticks(expression: str, zone: str, after: datetime, count: int) -> list[datetime]:
    cron = parse_cron(expression, zone)
    found = []
    for _ in range(count):
        after = cron.next_after(after)
        found.append(after)
    return found


def test_nine_am_stays_nine_am_in_summer_and_winter() -> None:
    got = ticks("0 9 * * *", "America/New_York", utc(2026, 3, 6, 15), 4)
    assert [t.astimezone(NEW_YORK).hour for t in got] == [9, 9, 9, 9]
    assert got == [
        utc(2026, 3, 7, 14),
        utc(2026, 3, 8, 13),
        utc(2026, 3, 9, 13),
        utc(2026, 3, 10, 13),
    ]
    assert all(t.tzinfo is UTC for t in got)
    winter = ticks("0 9 * * *", "America/New_York", utc(2026, 10, 31, 12), 2)
    assert winter == [utc(2026, 10, 31, 13), utc(2026, 11, 1, 14)]


def test_a_named_hour_skipped_by_the_clocks_runs_when_the_gap_ends() -> None:
    # 02:30 does not exist on Mar 8: that tick runs at 03:00 EDT, then 02:30 as usual.
    got = ticks("30 2 * * *", "America/New_York", local(NEW_YORK, 2026, 3, 7, 3), 3)
    assert got == [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30), utc(2026, 3, 10, 6, 30)]
    assert got[0].astimezone(NEW_YORK) == local(NEW_YORK, 2026, 3, 8, 3)
    # Two ticks in the gap run once, at its end.
    assert ticks("0,30 2 * * *", "America/New_York", utc(2026, 3, 8, 6, 59), 2) == [
        utc(2026, 3, 8, 7),
        utc(2026, 3, 9, 6),
    ]


def test_a_named_hour_that_happens_twice_runs_once() -> None:
    # 01:30 happens at 05:30 UTC (EDT) and 06:30 UTC (EST) on Nov 1: only the first runs.
    got = ticks("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), 3)
    assert got == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30), utc(2026, 11, 3, 6, 30)]
    # Asked from inside the repeated hour (after the first 01:30): the next day's.
    assert parse_cron("30 1 * * *", "America/New_York").next_after(
        local(NEW_YORK, 2026, 11, 1, 1, 10, fold=1)
    ) == utc(2026, 11, 2, 6, 30)


def test_a_frequent_schedule_follows_the_clock_across_both_changes() -> None:
    # Every 30 minutes: the skipped hour has no ticks, the repeated hour has them twice.
    spring = ticks("*/30 * * * *", "America/New_York", utc(2026, 3, 8, 6), 3)
    assert spring == [utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 7), utc(2026, 3, 8, 7, 30)]
    assert [t.astimezone(NEW_YORK).strftime("%H:%M") for t in spring] == ["01:30", "03:00", "03:30"]
    autumn = ticks("*/30 * * * *", "America/New_York", utc(2026, 11, 1, 4, 59), 5)
    assert autumn == [
        utc(2026, 11, 1, 5),  # 01:00 EDT
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT
        utc(2026, 11, 1, 6),  # 01:00 EST
        utc(2026, 11, 1, 6, 30),  # 01:30 EST
        utc(2026, 11, 1, 7),  # 02:00 EST
    ]


def test_the_zone_comes_from_the_argument_or_a_cron_tz_prefix() -> None:
    by_argument = parse_cron("0 9 * * *", "Europe/Paris")
    by_prefix = parse_cron("CRON_TZ=Europe/Paris 0 9 * * *")
    assert by_argument.time_zone == by_prefix.time_zone == "Europe/Paris"
    assert by_argument.spec == by_prefix.spec == "CRON_TZ=Europe/Paris 0 9 * * *"
    assert parse_cron("TZ=Europe/Paris @daily").next_after(utc(2026, 7, 1)) == local(
        PARIS, 2026, 7, 2
    ).astimezone(UTC)
    assert parse_cron("0 9 * * *").spec == "0 9 * * *"  # UTC: stored as before
    assert parse_cron("0 9 * * *").next_after(utc(2026, 7, 1)) == utc(2026, 7, 1, 9)


@pytest.mark.parametrize(
    ("expression", "zone", "message"),
    [
        ("0 9 * * *", "Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'"),
        ("0 9 * * *", "../../etc/passwd", "invalid time zone"),
        ("0 9 * * *", "", "invalid time zone"),
        ("CRON_TZ=Nowhere/City 0 9 * * *", None, "unknown time zone 'Nowhere/City'"),
        ("CRON_TZ=Europe/Paris 0 9 * * *", "Asia/Tokyo", "give one"),
    ],
)
def test_a_bad_time_zone_is_refused_by_name(
    expression: str, zone: str | None, message: str
) -> None:
    with pytest.raises(InvalidCron, match=message):
        parse_cron(expression, zone)


@pytest.mark.parametrize("start", [utc(2026, 3, 7), utc(2026, 10, 31)])
def test_every_quarter_hour_keeps_its_pace_through_a_change(start: datetime) -> None:
    got = ticks("*/15 * * * *", "America/New_York", start, 4 * 24 * 3)
    assert {b - a for a, b in pairwise(got)} == {timedelta(minutes=15)}


def test_a_daily_tick_runs_once_every_local_day_for_a_year() -> None:
    for expression, zone in (("0 9 * * *", "Europe/Paris"), ("30 2 * * *", "America/New_York")):
        tz = ZoneInfo(zone)
        got = ticks(expression, zone, utc(2026, 1, 1, 12), 365)
        days = [t.astimezone(tz).date() for t in got]
        assert days == sorted(set(days)) and len(days) == 365
        assert days[-1] - days[0] == timedelta(days=364)


def test_a_periodic_job_in_a_time_zone_is_stored_with_it(dsn: str) -> None:
    """The zone is stored with the cron text (``CRON_TZ=...``), so a schedule whose zone
    changes starts again from the new zone's next tick, and SQL readers see the zone."""

    def stored() -> list[tuple[str, datetime]]:
        return [
            (c, n) for c, n in query(dsn, "SELECT cron, next_run_at FROM postroom.job_schedules")
        ]

    def zone_stored(zone: str) -> bool:
        return any(cron.startswith(f"CRON_TZ={zone} ") for cron, _ in stored())

    for zone in ("Pacific/Auckland", "America/New_York"):
        with postroom.connect(dsn) as client:

            @client.periodic("0 9 * * *", name="report", time_zone=zone)
            @client.job("report")
            def report() -> None: ...

            with running(client.worker(["default"], poll_interval=0.05)):
                wait_for(partial(zone_stored, zone), 30, "the worker to store the schedule")
            [(cron, next_run_at)] = stored()
            assert cron == f"CRON_TZ={zone} 0 9 * * *"
            assert next_run_at.astimezone(ZoneInfo(zone)).hour == 9
