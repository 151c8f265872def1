"""What every command group shares: the global options, opening a client, output helpers."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime, timedelta
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

import postroom
from postroom import embedded
from postroom.errors import InvalidArgument

console = Console(highlight=False, soft_wrap=True)
"""Standard output: tables and results for people."""
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
"""Standard error: errors, notes and progress, so stdout stays clean for pipes."""


@dataclass(frozen=True)
class Settings:
    """The global options, stored on the click context by the root callback."""

    url: str | None
    schema: str


def settings(ctx: typer.Context) -> Settings:
    root = ctx.find_root()
    if isinstance(root.obj, Settings):
        return root.obj
    return Settings(None, "postroom")


@contextmanager
def open_client(ctx: typer.Context, *, schema: str | None = None) -> Iterator[postroom.Client]:
    """A client on the URL of ``--url``, ``POSTROOM_URL``, ``DATABASE_URL`` or the embedded
    server, closed when the block ends.

    ``postroom.connect`` fails at once (not after the pool's retries) with one line naming the
    target and the reason, never the password, if the server cannot be reached.
    """
    options = settings(ctx)
    url = embedded.resolve_url(options.url)
    with postroom.connect(url, schema=schema or options.schema, min_size=1, max_size=8) as client:
        yield client


def fail(message: str) -> typer.Exit:
    """Print ``message`` as one red line on stderr; return the ``Exit(1)`` for the caller to
    raise (so type checkers see the command end there)."""
    err_console.print(Text(f"error: {message}", style="red"))
    return typer.Exit(1)


def note(message: str) -> None:
    """A remark for the person at the terminal, on stderr."""
    err_console.print(Text(message, style="yellow"))


# -- durations ------------------------------------------------------------------------------

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_PART = re.compile(r"(\d+)([smhdw])")
_DURATION = re.compile(r"(?:\d+[smhdw])+")


def parse_duration(text: str) -> timedelta:
    """``30s``, ``15m``, ``12h``, ``7d``, ``2w`` or a sum such as ``1d12h``; raises
    :class:`InvalidArgument` for anything else, and for zero."""
    cleaned = text.strip().lower()
    if not _DURATION.fullmatch(cleaned):
        raise InvalidArgument(
            f"invalid duration {text!r}: use a number and a unit s, m, h, d or w "
            "(30s, 15m, 12h, 7d, 2w, or sums such as 1d12h)"
        )
    seconds = sum(int(n) * _DURATION_UNITS[unit] for n, unit in _DURATION_PART.findall(cleaned))
    if seconds == 0:
        raise InvalidArgument(f"invalid duration {text!r}: must be longer than 0 seconds")
    if seconds > timedelta.max.total_seconds():
        raise InvalidArgument(f"invalid duration {text!r}: at most {timedelta.max.days} days")
    return timedelta(seconds=seconds)


def format_duration(seconds: float | None) -> str:
    """The shortest exact spelling in the units ``parse_duration`` reads (``-`` for None)."""
    if seconds is None:
        return "-"
    remaining = round(seconds)
    parts = []
    for unit, size in sorted(_DURATION_UNITS.items(), key=lambda item: -item[1]):
        if remaining >= size:
            parts.append(f"{remaining // size}{unit}")
            remaining %= size
    return "".join(parts) or "0s"


# -- bytes for a terminal ------------------------------------------------------------------

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(data: bytes | None) -> str:
    """``data`` as one line of text: UTF-8 where it decodes, control characters and undecodable
    bytes as escapes (``\\n``, ``\\x00``, ``\\xff``); ``null`` for None, as Kafka's console
    consumer prints a missing key. Backslashes themselves are left as they are."""
    if data is None:
        return "null"
    text = data.decode("utf-8", errors="backslashreplace")
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


# -- JSON output ---------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """``value`` with dataclasses, tuples, datetimes and bytes turned into JSON types."""
    if is_dataclass(value) and not isinstance(value, type):
        return {k: jsonable(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return printable(value)
    return value


def print_json(value: Any) -> None:
    """Write ``value`` (dataclasses, datetimes included) as indented JSON on stdout."""
    sys.stdout.write(json.dumps(jsonable(value), indent=2) + "\n")


def when(value: datetime) -> str:
    """A timestamp for tables: local time to the second."""
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")
