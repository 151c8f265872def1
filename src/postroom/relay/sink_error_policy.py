"""When a relay writes its sink error to the database, and what it writes (sans-IO).

A relay retrying a sink that is down fails many times a second at first (its backoff starts
at 0.2 s): one write per attempt would load the database exactly when an operator looks at
it. :class:`SinkErrorPolicy` writes on a change only (a first error, a different error, a
recovery), and otherwise refreshes "last seen" every ``refresh_seconds`` at most.
:func:`error_summary` gives the text: the exception's type and message, every password masked,
cut to :data:`MAX_SINK_ERROR_CHARS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from .._checks import error_text

MAX_SINK_ERROR_CHARS = 500
"""The longest sink error recorded (the table's CHECK holds the same bound)."""
REFRESH_SECONDS = 5.0
"""How often at most a relay failing on the same error refreshes its "last seen"."""

# user:password@ in a URL (any scheme), and password=... / password: ... in key-value text.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@")
_KEY_PASSWORD = re.compile(
    r"(?P<head>\b(?:password|passwd|pwd|secret|token)\s*[=:]\s*)(?P<q>['\"]?)[^\s'\",;&]+",
    re.IGNORECASE,
)


def error_summary(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """``"Type: message"`` of ``exc`` with every password masked (``***``): those in URLs
    (``scheme://user:***@``), ``password=...`` pairs, and each of ``secrets`` (the sink URL's
    password, percent-decoded too) wherever it appears. At most
    :data:`MAX_SINK_ERROR_CHARS` characters.

        error_summary(OSError("redis://u:pw@h down"))   # -> "OSError: redis://u:***@h down"
    """
    return scrub(error_text(exc), secrets)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` as :func:`error_summary` records it (see there)."""
    for secret in secrets:
        for form in {secret, unquote(secret)}:
            if len(form) >= 3:  # shorter would mask ordinary words
                text = text.replace(form, "***")
    text = _URL_PASSWORD.sub(r"\g<head>***@", text)
    text = _KEY_PASSWORD.sub(r"\g<head>\g<q>***", text)
    if len(text) > MAX_SINK_ERROR_CHARS:
        text = text[: MAX_SINK_ERROR_CHARS - 3] + "..."
    return text


@dataclass(frozen=True, slots=True)
class SinkErrorWrite:
    """What to write: ``error`` (None: clear the member's error)."""

    error: str | None


_UNKNOWN = "\x00unknown"  # what the database holds before this relay's first write


class SinkErrorPolicy:
    """Decides, per failed or successful send, whether the relay writes its sink error.

    ``failed(error, now)`` and ``succeeded(now)`` return the write to make, or None:

    - a change is written at once: a first error, a recovery (and, once per relay, the clear
      of an error an earlier run of the same member may have left), a different error (at
      most one per ``min_gap_seconds``: errors that alternate on every retry do not each get
      a write; the latest is written at the next failure after the gap);
    - the same error again refreshes "last seen" once ``refresh_seconds`` passed;
    - after a write that did not go through (``not_written``: the database down, the member
      not registered), the next try waits ``refresh_seconds``.

    Report each write's outcome with ``written()`` or ``not_written()``.

        policy = SinkErrorPolicy()
        write = policy.failed("SinkUnavailable: down", now=0.0)  # -> SinkErrorWrite(...)
        policy.written(write, now=0.0)
        policy.failed("SinkUnavailable: down", now=1.0)  # -> None (refreshed from 5.0 on)
    """

    def __init__(
        self, refresh_seconds: float = REFRESH_SECONDS, min_gap_seconds: float = 1.0
    ) -> None:
        self.refresh_seconds = refresh_seconds
        self.min_gap_seconds = min_gap_seconds
        self._wanted: str | None = None
        self._recorded: str | None = _UNKNOWN
        self._last_attempt = float("-inf")
        self._attempt_failed = False

    @property
    def error(self) -> str | None:
        """The error of the current run of failures (None while sends succeed)."""
        return self._wanted

    def failed(self, error: str, now: float) -> SinkErrorWrite | None:
        self._wanted = error
        return self._decide(now)

    def succeeded(self, now: float) -> SinkErrorWrite | None:
        self._wanted = None
        return self._decide(now)

    def written(self, write: SinkErrorWrite, now: float) -> None:
        """``write`` is in the database."""
        self._recorded = write.error
        self._last_attempt = now
        self._attempt_failed = False

    def not_written(self, now: float) -> None:
        """The last write did not go through: try again ``refresh_seconds`` later."""
        self._last_attempt = now
        self._attempt_failed = True

    def _decide(self, now: float) -> SinkErrorWrite | None:
        wanted, recorded = self._wanted, self._recorded
        elapsed = now - self._last_attempt
        if wanted == recorded:
            if wanted is None or elapsed < self.refresh_seconds:
                return None
            return SinkErrorWrite(wanted)  # the same error, still: refresh "last seen"
        if self._attempt_failed and elapsed < self.refresh_seconds:
            return None
        different = wanted is not None and recorded not in (None, _UNKNOWN)
        if different and elapsed < self.min_gap_seconds:
            return None
        return SinkErrorWrite(wanted)
