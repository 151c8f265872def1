"""Sans-IO parts of the queue: the cron parser and the retry backoff, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from postroom import Backoff
from postroom.errors import InvalidArgument, InvalidCron
from postroom.queue.cron import parse_cron


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[arg-type,misc]


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/5 * * * *", at(2024, 1, 1, 0, 3), at(2024, 1, 1, 0, 5)),
        ("*/5 * * * *", at(2024, 1, 1, 0, 5), at(2024, 1, 1, 0, 10)),
        ("0 9 * * mon-fri", at(2024, 1, 5, 10), at(2024, 1, 8, 9)),  # Friday -> Monday
        ("30 2 1 * *", at(2024, 1, 31), at(2024, 2, 1, 2, 30)),
        ("0 0 29 2 *", at(2024, 3, 1), at(2028, 2, 29)),
        ("0 0 1 jan *", at(2024, 6, 1), at(2025, 1, 1)),
        ("0 12 13 * 5", at(2024, 1, 1), at(2024, 1, 5, 12)),  # day 13 OR Friday (Vixie)
        ("15,45 */6 * * *", at(2024, 1, 1, 6, 20), at(2024, 1, 1, 6, 45)),
        ("0 0 * * 7", at(2024, 1, 1), at(2024, 1, 7)),  # 7 is Sunday too
        ("@hourly", at(2024, 1, 1, 0, 0, 1), at(2024, 1, 1, 1)),
        ("@daily", at(2024, 12, 31, 23, 59), at(2025, 1, 1)),
        ("*/10 * * * * *", at(2024, 1, 1, 0, 0, 7), at(2024, 1, 1, 0, 0, 10)),
        ("* * * * * *", at(2024, 1, 1, 0, 0, 7), at(2024, 1, 1, 0, 0, 8)),
        ("0 10-20/5 * * *", at(2024, 1, 1, 16), at(2024, 1, 1, 20)),
    ],
)
def test_next_tick(expression: str, after: datetime, expected: datetime) -> None:
    assert parse_cron(expression).next_after(after) == expected


def test_ticks_are_computed_in_utc() -> None:
    paris = timezone(timedelta(hours=1))
    assert parse_cron("0 * * * *").next_after(datetime(2024, 1, 1, 10, 30, tzinfo=paris)) == at(
        2024, 1, 1, 10
    )


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * *", "expected 5 fields"),
        ("60 * * * *", "minute field '60' is out of range"),
        ("* 24 * * *", "hour field '24' is out of range"),
        ("* * 0 * *", "day-of-month field '0' is out of range"),
        ("* * * 13 *", "month field '13' is out of range"),
        ("* * * * 8", "day-of-week field '8' is out of range"),
        ("*/0 * * * *", "invalid step"),
        ("5-1 * * * *", "backwards range"),
        ("x * * * *", "is not a number"),
        ("0 0 30 2 *", "has no tick"),
        ("", "expected 5 fields"),
    ],
)
def test_invalid_cron_names_the_bad_field(expression: str, message: str) -> None:
    with pytest.raises(InvalidCron, match=message):
        parse_cron(expression)


def test_cron_must_be_a_string() -> None:
    with pytest.raises(InvalidCron, match="pass a string"):
        parse_cron(5)


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1)))  # noqa: DTZ001
def test_next_tick_is_strictly_later_and_matches(naive: datetime) -> None:
    after = naive.replace(tzinfo=UTC)
    cron = parse_cron("7,37 */3 * * 1-5")
    tick = cron.next_after(after)
    assert tick > after
    assert tick.minute in (7, 37) and tick.hour % 3 == 0 and tick.isoweekday() <= 5
    assert tick - after <= timedelta(days=4)


def test_backoff_grows_exponentially_up_to_the_cap() -> None:
    backoff = Backoff(base=1, factor=2, max_delay=10, jitter=0)
    assert [backoff.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert Backoff().nominal(10_000) == 3600


def test_backoff_jitter_stays_within_bounds() -> None:
    backoff = Backoff(base=10, jitter=0.2)
    assert backoff.delay(1, rand=lambda: 0.0) == pytest.approx(8)
    assert backoff.delay(1, rand=lambda: 1.0) == pytest.approx(12)


@pytest.mark.parametrize(
    "kwargs",
    [{"base": -1}, {"factor": 0.5}, {"jitter": 2}, {"max_delay": float("nan")}],
)
def test_invalid_backoff(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidArgument, match="invalid backoff"):
        Backoff(**kwargs)
