"""What a worker holds and what it writes back: claimed jobs, their outcomes, and the decision
of which outcome a finished call gets. No I/O; shared by the async worker and its sync twin."""

from __future__ import annotations

import math
import os
import sysconfig
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from ..errors import JobInterrupted
from .backoff import Backoff
from .context import JobContext
from .records import encode_result
from .serializer import DEFAULT_SERIALIZER, Serializer

MAX_ERROR_CHARS = 8000
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Frames that lead to a job without being the job's: postroom's own and, for a sync job on the
# async worker, the thread pool's (the standard library's).
_NOT_THE_JOB = (_PACKAGE_DIR, sysconfig.get_paths()["stdlib"] + os.sep)
OutcomeKind = Literal["done", "fail", "cancelled", "release", "snooze"]
InterruptKind = Literal["cancel", "shutdown", "lost"]


class Interruptible(Protocol):
    def interrupt(self, reason: JobInterrupted) -> None: ...


@dataclass(eq=False)
class Claimed:
    """A job this worker claimed, from the claim until its outcome is written back."""

    id: int
    queue: str
    kind: str
    args: str
    """The arguments as JSON text, decoded when the job runs."""
    attempt: int
    max_attempts: int
    enqueued_at: datetime | None = None
    scheduled_at: datetime | None = None
    token: str = ""
    """The claim's token (a UUID's text), which every write-back of this claim names: only the
    claiming connection learns it, so no other worker can write this job's outcome."""
    meta: dict[str, Any] | None = None
    """What travels with the job from its enqueue (migration 0035): the trace context."""
    call: Interruptible | None = None
    context: JobContext | None = None
    cooperative: bool = False
    """It takes its JobContext: asked to stop first, interrupted only after a grace period."""
    started: bool = False
    reported: bool = False
    interrupt_kind: InterruptKind | None = None
    lease_deadline: float = math.inf
    """When its lease runs out at the earliest, on this process's monotonic clock: the claim
    (or the last heartbeat that extended it) was sent at ``lease_deadline - lease``, and the
    server counts the lease from when it ran the statement, later. A job still buffered past
    it is no longer this worker's: another worker may have taken it."""


@dataclass(eq=False)
class Outcome:
    """How one attempt of a job ended, waiting to be written back."""

    job: Claimed
    kind: OutcomeKind
    result: str | None = None
    error: str | None = None
    delay: float = 0.0
    final: bool = False


class HeldJobs:
    """The jobs a worker holds a lease on, by id, from their claim until their outcome is
    written (or their lease is found lost). The fetcher adds, the completer and the heartbeat
    remove; each operation is a single dict operation, safe from any task or thread."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        """Claim no more once this many are held (back-pressure on a slow write-back)."""
        self._jobs: dict[int, Claimed] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: Claimed) -> None:
        self._jobs[job.id] = job

    def discard(self, job: Claimed) -> None:
        self._jobs.pop(job.id, None)

    def snapshot(self) -> list[Claimed]:
        return list(self._jobs.values())


def int_array(values: Iterable[int]) -> str:
    """Integers as a PostgreSQL array literal (``{1,2,3}``), for a ``%s::bigint[]`` or
    ``%s::integer[]`` parameter: psycopg dumps a list element by element, ten times slower
    than this join (the write-back of a batch of no-op jobs sent two such lists per job)."""
    return "{" + ",".join(map(str, values)) + "}"


def token_array(tokens: Iterable[str]) -> str:
    """Claim tokens (UUID text, no character to quote) as a PostgreSQL array literal, for a
    ``%s::uuid[]`` parameter (see int_array)."""
    return "{" + ",".join(tokens) + "}"


def storable_text(text: str) -> str:
    """``text`` as PostgreSQL can store it: NUL becomes ``\\x00`` and a lone surrogate its
    ``\\udXXX`` escape (PostgreSQL refuses both). ASCII text without NUL is returned as is."""
    if text.isascii() and "\x00" not in text:
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def unstorable_result(value: Any) -> str | None:
    """Why PostgreSQL would refuse ``value`` in a jsonb column, or None when it would not: a
    string with NUL (jsonb refuses ``\\u0000``) or a lone surrogate."""
    strings: list[Any] = [value]
    while strings:
        item = strings.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "it contains a NUL character (\\u0000)"
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return "it contains a lone surrogate, which is not valid UTF-8"
        elif isinstance(item, dict):
            strings.extend(item.keys())
            strings.extend(item.values())
        elif isinstance(item, list | tuple):
            strings.extend(item)
    return None


def success(job: Claimed, value: Any, serializer: Serializer = DEFAULT_SERIALIZER) -> Outcome:
    try:
        result = encode_result(value, serializer)
    except (TypeError, ValueError) as exc:
        # The job ran; running it again would repeat its effects. Fail it for a person to
        # look at instead.
        return Outcome(
            job,
            "fail",
            error=f"the job ran but its result is not JSON-serializable ({exc}); return "
            "str, int, float, bool, None, or lists and dicts of them",
            final=True,
        )
    # A JSON text with an escape the database refuses: the common results (ASCII, no
    # backslash) skip the walk.
    if result is not None and "\\u" in result:
        reason = unstorable_result(value)
        if reason is not None:
            return Outcome(
                job,
                "fail",
                error=f"the job ran but its result cannot be stored: {reason}",
                final=True,
            )
    return Outcome(job, "done", result=result)


def unstorable(outcome: Outcome, exc: BaseException) -> Outcome:
    """The outcome to write instead of ``outcome`` when the database refused it: the attempt
    fails with the database's reason (finally if the job ran to its end: running it again
    would repeat its effects)."""
    return Outcome(
        outcome.job,
        "fail",
        error=storable_text(
            f"postroom could not store this attempt's outcome ({outcome.kind}): "
            f"{type(exc).__name__}: {exc}"
        )[-MAX_ERROR_CHARS:],
        delay=outcome.delay,
        final=outcome.final or outcome.kind == "done",
    )


def failure(job: Claimed, error: str, backoff: Backoff, *, final: bool = False) -> Outcome:
    return Outcome(
        job,
        "fail",
        error=storable_text(error[-MAX_ERROR_CHARS:]),
        delay=backoff.delay(job.attempt),
        final=final or job.attempt >= job.max_attempts,
    )


def retryable(
    exc: BaseException,
    retry_on: tuple[type[BaseException], ...],
    no_retry_on: tuple[type[BaseException], ...],
) -> bool:
    """Whether a job kind retries after ``exc``: not if it is one of ``no_retry_on``; if
    ``retry_on`` is given, only if it is one of those."""
    if no_retry_on and isinstance(exc, no_retry_on):
        return False
    return not retry_on or isinstance(exc, retry_on)


def after_stop_request(job: Claimed, outcome: Outcome, backoff: Backoff) -> Outcome:
    """The outcome of a job that was asked to stop (cancelled, timed out, worker shutting
    down) and then returned or raised by itself: it stopped early, so it is cancelled, timed
    out (a failed attempt) or released, whatever it returned."""
    if outcome.kind not in ("done", "fail"):
        return outcome
    if job.interrupt_kind == "cancel":
        return Outcome(job, "cancelled")
    if job.interrupt_kind in ("shutdown", "lost"):
        return Outcome(job, "release")
    reason = job.context.cancel_reason if job.context is not None else None
    return failure(job, f"JobTimeout: {reason} (the job stopped when asked)", backoff)


def interrupted(job: Claimed, exc: JobInterrupted, backoff: Backoff) -> Outcome:
    if job.interrupt_kind == "cancel":
        return Outcome(job, "cancelled")
    if job.interrupt_kind == "shutdown":
        return Outcome(job, "release")
    if job.interrupt_kind == "lost":
        return Outcome(job, "release")  # fenced: the write-back matches nothing
    return failure(job, f"JobTimeout: {exc.reason}", backoff)


def format_error(exc: BaseException) -> str:
    """The exception with its traceback, starting at the job's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_NOT_THE_JOB):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).strip()
