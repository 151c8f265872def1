"""How values look on a page: JSON pretty-printed, text as text, bytes as hex, all truncated."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

MAX_SHOWN = 2000
HIDDEN = "(hidden: show_values is off)"


def show_bytes(value: bytes | None, *, hidden: bool = False) -> str:
    """A message key or value for a page: pretty JSON, UTF-8 text, else hex; truncated."""
    if value is None:
        return ""
    if hidden:
        return HIDDEN
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        shown = value[: MAX_SHOWN // 2].hex(" ")
        more = len(value) > MAX_SHOWN // 2
        return f"bytes: {shown}" + (f" ... ({len(value)} bytes)" if more else "")
    try:
        text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        pass
    return truncate(text)


def show_json(value: Any, *, hidden: bool = False) -> str:
    if hidden:
        return HIDDEN
    return truncate(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def truncate(text: str, limit: int = MAX_SHOWN) -> str:
    return text if len(text) <= limit else f"{text[:limit]} ... ({len(text)} characters)"


def age(seconds: float | None) -> str:
    """``3.2 s``, ``4 min``, ``2.5 h``, ``3 d``; an empty string for None."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


def since(moment: datetime | None) -> str:
    if moment is None:
        return ""
    return age((datetime.now(UTC) - moment).total_seconds()) + " ago"


def when(moment: datetime | None) -> str:
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def count(n: int | None, estimated: bool = False) -> str:
    if n is None:
        return ""
    return f"~{n:,}" if estimated else f"{n:,}"


def size(n: int | None) -> str:
    if n is None:
        return ""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


FILTERS = {
    "bytes": show_bytes,
    "json": show_json,
    "age": age,
    "since": since,
    "when": when,
    "count": count,
    "size": size,
}
