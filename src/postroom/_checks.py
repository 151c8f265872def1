"""Input checks shared by the engines: sans-IO, each raising one clear ``postroom.errors`` error."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from .errors import InvalidArgument, InvalidName

MAX_SECONDS = 100 * 365.25 * 86400
"""The longest duration (interval, delay, timeout, ...) accepted: 100 years."""
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_schema(schema: object) -> str:
    """``schema`` if it is a legal postroom schema name; else :class:`InvalidName`."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidName(
            f"invalid schema name {schema!r}: use 1-63 characters from A-Z a-z 0-9 _, "
            "not starting with a digit"
        )
    return schema


def check_int(what: str, value: object, low: int, high: int | None = None, hint: str = "") -> int:
    """``value`` if it is an int (not a bool) in ``[low, high]``; else :class:`InvalidArgument`
    naming ``what``, the value and the allowed range (``hint`` adds why, e.g. "lower runs first").

        check_int("priority", 5, -32768, 32767)   # -> 5
    """
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < low
        or (high is not None and value > high)
    ):
        allowed = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
        raise InvalidArgument(f"invalid {what} {value!r}: {allowed}{f' ({hint})' if hint else ''}")
    return value


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and (
        not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout >= 0
    ):
        raise InvalidArgument(f"invalid timeout {timeout!r}: seconds >= 0, or None")


def check_max_lag(max_lag: int | None) -> int | None:
    if max_lag is not None and (
        not isinstance(max_lag, int) or isinstance(max_lag, bool) or max_lag < 1
    ):
        raise InvalidArgument(f"invalid max_lag {max_lag!r}: an integer >= 1 (messages), or None")
    return max_lag


def check_retention(retention: timedelta | None) -> timedelta | None:
    if retention is not None and (
        not isinstance(retention, timedelta) or retention <= timedelta(0)
    ):
        raise InvalidArgument(f"invalid retention {retention!r}: a positive timedelta or None")
    return retention


def check_group_ttl(group_ttl: timedelta | None) -> timedelta | None:
    if group_ttl is not None and (
        not isinstance(group_ttl, timedelta) or group_ttl <= timedelta(0)
    ):
        raise InvalidArgument(f"invalid group_ttl {group_ttl!r}: a positive timedelta or None")
    return group_ttl


def check_seconds(what: str, value: object, *, allow_zero: bool = True) -> float:
    """A duration given as seconds or a timedelta, as float seconds, from 0 (or above 0 when
    not ``allow_zero``) to ``MAX_SECONDS``; else :class:`InvalidArgument` naming ``what``.

        check_seconds("lease", timedelta(minutes=1))   # -> 60.0
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgument(f"invalid {what} {value!r}: pass seconds (a number) or a timedelta")
    if (
        not math.isfinite(seconds)
        or not 0 <= seconds <= MAX_SECONDS
        or (seconds == 0 and not allow_zero)
    ):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidArgument(
            f"invalid {what} {value!r}: must be {bound} and at most {MAX_SECONDS:.0f} seconds "
            "(100 years)"
        )
    return seconds


def check_interval(what: str, value: object) -> float | None:
    """An interval of a background unit: seconds or a timedelta above 0 (as ``check_seconds``),
    or None (the unit is off)."""
    return None if value is None else check_seconds(what, value, allow_zero=False)


def check_text(what: str, value: str) -> str:
    """``value`` if PostgreSQL can store it as text: no NUL character, no lone surrogate."""
    if "\x00" in value:
        raise InvalidArgument(f"invalid {what} {value!r}: contains a NUL character (\\x00)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"invalid {what} {value!r}: contains a lone surrogate (not valid Unicode text)"
        ) from None
    return value


def safe_str(exc: BaseException) -> str:
    """``str(exc)``, never raising: an exception whose ``__str__`` raises (or returns something
    that is not text) is shown by its type, so formatting an error can never become a second
    error (issue 23, item 8)."""
    try:
        detail = str(exc)
    except Exception:  # noqa: BLE001 - any error of a foreign __str__ is the point
        return f"<{type(exc).__name__}: str() of the exception raised>"
    return detail if isinstance(detail, str) else f"<{type(exc).__name__}>"


def error_text(exc: BaseException) -> str:
    """``"Type: message"`` for any exception, never raising (see ``safe_str``).

    error_text(ValueError("bad"))   # -> "ValueError: bad"
    """
    name = type(exc).__name__
    try:
        detail = str(exc)
    except Exception:  # noqa: BLE001 - as in safe_str
        return f"{name}: <str() of the exception raised>"
    if not isinstance(detail, str):
        return name
    return f"{name}: {detail}" if detail else name
