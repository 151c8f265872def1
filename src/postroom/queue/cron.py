"""Cron expressions (sans-IO): parse once, then ask for the next tick after a time.

Five fields, as in crontab(5): ``minute hour day-of-month month day-of-week``; each a ``*``, a
number, a range ``a-b``, a step ``*/n`` or ``a-b/n``, or a comma list of those. Months and
weekdays also take names (``jan``, ``mon``); weekday 0 and 7 are Sunday. When both day fields
are restricted a day matches either (Vixie cron). An optional sixth, leading field gives seconds
(``*/10 * * * * *``). Macros: ``@yearly``, ``@monthly``, ``@weekly``, ``@daily``, ``@hourly``.

Ticks are computed in UTC, or in an IANA time zone (``time_zone="Europe/Paris"``, or a leading
``CRON_TZ=Europe/Paris`` as in cronie and robfig/cron): then "0 9 * * *" is 9 am there, summer
and winter. Across a daylight-saving change the rules are cronie's: a schedule that runs every
hour or more often is scheduled by the clock as it is (a skipped hour has no ticks, a repeated
hour has them twice); one that names its hours runs a tick whose time is skipped at the end of
the gap, and a tick whose time happens twice only the first time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import InvalidCron

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {m: i for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
_SEARCH_YEARS = 8  # long enough for Feb 29 on any weekday rule
_ONE_SECOND = timedelta(seconds=1)
_ZONE_PREFIX = re.compile(r"^(?:CRON_TZ|TZ)=(\S+)\s+")
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DOM = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTHS)
_DOW = _Field("day-of-week", 0, 7, _DAYS)


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed cron expression; ``next_after(t)`` is the first tick strictly after ``t``."""

    expression: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    day_restricted: bool
    weekday_restricted: bool
    time_zone: str | None = None
    """The IANA time zone the fields are read in (None: UTC)."""

    @property
    def spec(self) -> str:
        """The expression as stored: with a leading ``CRON_TZ=<zone>`` when it has a zone (so
        a schedule whose zone changes is a changed schedule)."""
        fields = _ZONE_PREFIX.sub("", self.expression.strip(), count=1)
        return f"CRON_TZ={self.time_zone} {fields}" if self.time_zone else fields

    def next_after(self, after: datetime) -> datetime:
        """The first tick strictly after ``after`` (an aware datetime), in UTC."""
        if after.tzinfo is None:
            raise InvalidCron(f"next_after needs an aware datetime, got {after!r}")
        if self.time_zone is None:
            wall = after.astimezone(UTC).replace(tzinfo=None, microsecond=0)
            return self._next_wall(wall + _ONE_SECOND).replace(tzinfo=UTC)
        zone = ZoneInfo(self.time_zone)
        if len(self.hours) == 24:
            return self._next_by_clock(after.astimezone(UTC), zone)
        wall = after.astimezone(zone).replace(tzinfo=None, microsecond=0)
        while True:
            wall = self._next_wall(wall + _ONE_SECOND)
            first = wall.replace(tzinfo=zone, fold=0)  # the first time, if it happens twice
            if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall:
                if first.astimezone(UTC) > after:
                    return first.astimezone(UTC)
                continue  # inside the repeated hour, after the first time: the next one
            # Skipped by a change of clocks (a gap): run this tick when the gap ends.
            earlier = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
            tick = _gap_end(earlier, first.astimezone(UTC), zone)
            if tick > after:
                return tick

    def _next_by_clock(self, after: datetime, zone: ZoneInfo) -> datetime:
        """For a schedule that runs every hour or more often: the first instant after
        ``after`` (UTC) whose wall-clock time there matches, whichever offset is in force."""
        offset = after.astimezone(zone).utcoffset()
        while True:
            assert offset is not None
            fixed = timezone(offset)
            wall = after.astimezone(fixed).replace(tzinfo=None, microsecond=0)
            tick = self._next_wall(wall + _ONE_SECOND).replace(tzinfo=fixed).astimezone(UTC)
            if tick.astimezone(zone).utcoffset() == offset:
                return tick
            # The clocks change before that tick: search again from the change, in the new
            # offset (a repeated hour's times come again, a skipped hour's never).
            change = _gap_end(after, tick, zone)
            after, offset = change - _ONE_SECOND, change.astimezone(zone).utcoffset()

    def _next_wall(self, t: datetime) -> datetime:
        """The first wall-clock time at or after ``t`` (naive) that the fields match."""
        limit = t + timedelta(days=366 * _SEARCH_YEARS)
        while t < limit:
            if t.month not in self.months:
                year, month = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
                t = t.replace(year=year, month=month, day=1, hour=0, minute=0, second=0)
            elif not self._day_matches(t):
                t = (t + timedelta(days=1)).replace(hour=0, minute=0, second=0)
            elif t.hour not in self.hours:
                t = (t + timedelta(hours=1)).replace(minute=0, second=0)
            elif t.minute not in self.minutes:
                t = (t + timedelta(minutes=1)).replace(second=0)
            elif t.second not in self.seconds:
                t += timedelta(seconds=1)
            else:
                return t
        raise InvalidCron(
            f"cron {self.expression!r} has no tick in the {_SEARCH_YEARS} years after {t}"
        )

    def _day_matches(self, t: datetime) -> bool:
        day_ok = t.day in self.days
        weekday_ok = (t.isoweekday() % 7) in self.weekdays
        if self.day_restricted and self.weekday_restricted:
            return day_ok or weekday_ok
        return day_ok and weekday_ok


def _gap_end(earlier: datetime, later: datetime, zone: ZoneInfo) -> datetime:
    """The instant (UTC, whole seconds) the clocks change between ``earlier`` and ``later``
    (one change apart, less than a day): the first from which ``later``'s offset holds."""
    offset = later.astimezone(zone).utcoffset()
    while later - earlier > _ONE_SECOND:
        middle = earlier + (later - earlier) / 2
        middle = middle.replace(microsecond=0)
        if middle.astimezone(zone).utcoffset() == offset:
            later = middle
        else:
            earlier = middle
    return later


def check_time_zone(time_zone: object) -> str | None:
    """``time_zone`` if it names an IANA time zone (or is None); else :class:`InvalidCron`."""
    if time_zone is None:
        return None
    if not isinstance(time_zone, str) or not _ZONE_NAME.fullmatch(time_zone):
        raise InvalidCron(
            f"invalid time zone {time_zone!r}: an IANA time zone name such as 'Europe/Paris'"
        )
    try:
        ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidCron(
            f"unknown time zone {time_zone!r}: an IANA time zone name such as 'Europe/Paris' "
            "(is the tzdata package installed?)"
        ) from exc
    return time_zone


def parse_cron(expression: object, time_zone: str | None = None) -> Cron:
    """Parse ``expression`` (its fields read in ``time_zone``, an IANA name, or in the zone of
    a leading ``CRON_TZ=<zone>``; else UTC); raises :class:`InvalidCron` naming the bad field
    or zone."""
    if not isinstance(expression, str):
        raise InvalidCron(f"invalid cron {expression!r}: pass a string like '*/5 * * * *'")
    zone = check_time_zone(time_zone)
    text = expression.strip()
    prefix = _ZONE_PREFIX.match(text)
    if prefix:
        named = check_time_zone(prefix.group(1))
        if zone is not None and zone != named:
            raise InvalidCron(
                f"invalid cron {expression!r}: it names time zone {named!r} and time_zone "
                f"is {zone!r}; give one"
            )
        zone, text = named, text[prefix.end() :]
    text = _MACROS.get(text.lower(), text)
    parts = text.split()
    if len(parts) == 5:
        parts = ["0", *parts]
    elif len(parts) != 6:
        raise InvalidCron(
            f"invalid cron {expression!r}: expected 5 fields (minute hour day-of-month month "
            f"day-of-week), or 6 with leading seconds, got {len(parts)}"
        )
    fields = (_SECOND, _MINUTE, _HOUR, _DOM, _MONTH, _DOW)
    sets = [_parse_field(expression, f, p) for f, p in zip(fields, parts, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[5])
    cron = Cron(
        expression=expression,
        seconds=sets[0],
        minutes=sets[1],
        hours=sets[2],
        days=sets[3],
        months=sets[4],
        weekdays=weekdays,
        day_restricted=not parts[3].startswith("*"),
        weekday_restricted=not parts[5].startswith("*"),
        time_zone=zone,
    )
    cron.next_after(datetime(2000, 1, 1, tzinfo=UTC))  # rejects rules that never fire (Feb 30)
    return cron


def _parse_field(expression: str, field: _Field, text: str) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        values.update(_parse_item(expression, field, item))
    return frozenset(values)


def _parse_item(expression: str, field: _Field, item: str) -> range:
    def bad(why: str) -> InvalidCron:
        return InvalidCron(
            f"invalid cron {expression!r}: {field.name} field {item!r} {why} "
            f"(allowed {field.low}-{field.high}, *, a-b, */n, a-b/n, lists with commas)"
        )

    base, _, step_text = item.partition("/")
    step = 1
    if step_text:
        if not _ascii_number(step_text) or int(step_text) < 1:
            raise bad("has an invalid step")
        step = int(step_text)
    if base == "*":
        low, high = field.low, field.high
    elif "-" in base:
        first, _, last = base.partition("-")
        low, high = _value(field, first, bad), _value(field, last, bad)
        if low > high:
            raise bad("is a backwards range")
    else:
        low = _value(field, base, bad)
        high = field.high if step_text else low
    return range(low, high + 1, step)


def _ascii_number(text: str) -> bool:
    """Whether ``text`` is ASCII digits only: ``str.isdigit`` also takes '²' (which ``int``
    then refuses) and '٣' (which ``int`` reads as 3)."""
    return text.isascii() and text.isdigit()


def _value(field: _Field, text: str, bad: object) -> int:
    assert callable(bad)
    lowered = text.lower()
    if field.names and lowered in field.names:
        return field.names[lowered]
    if not _ascii_number(text):
        raise bad("is not a number")
    value = int(text)
    if not field.low <= value <= field.high:
        raise bad("is out of range")
    return value


@dataclass(frozen=True, slots=True)
class Schedule:
    """A periodic job: enqueue ``kind`` with ``args`` at every tick of ``cron``."""

    name: str
    cron: Cron
    kind: str
    args_json: str
    queue: str
    priority: int
    max_attempts: int
