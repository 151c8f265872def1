"""Job records and the input checks of the queue: sans-IO, unit-tested without a database."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from .._checks import MAX_SECONDS, check_int, check_seconds, check_text
from ..errors import InvalidArgument, InvalidName, InvalidType
from .backoff import Backoff
from .context import JobContext
from .options import ENQUEUE_OPTION_NAMES
from .serializer import DEFAULT_SERIALIZER, Serializer

QUEUE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
KIND_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:-]{0,199}")
JOB_STATES = ("ready", "running", "done", "failed", "cancelled", "waiting", "held")
JobState = Literal["ready", "running", "done", "failed", "cancelled", "waiting", "held"]
"""``waiting``: for its parent jobs (``after``/``sequence``); ``held``: a parent failed."""
DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 25
MAX_ATTEMPTS_LIMIT = 1000
MAX_UNIQUE_KEY = 1000


def check_queue(queue: object) -> str:
    if not isinstance(queue, str) or not QUEUE_PATTERN.fullmatch(queue):
        raise InvalidName(
            f"invalid queue name {queue!r}: use 1-200 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return queue


def check_queues(queues: object) -> list[str]:
    if isinstance(queues, str):
        queues = [queues]
    if not isinstance(queues, list | tuple | set | frozenset) or not queues:
        raise InvalidArgument(f"invalid queues {queues!r}: pass a non-empty list of queue names")
    return sorted({check_queue(q) for q in queues})


def check_kind(kind: object) -> str:
    if not isinstance(kind, str) or not KIND_PATTERN.fullmatch(kind):
        raise InvalidName(
            f"invalid job kind {kind!r}: use 1-200 characters from A-Z a-z 0-9 . _ : -, "
            "starting with a letter, digit or underscore"
        )
    return kind


ENQUEUE_PARAMETERS = ENQUEUE_OPTION_NAMES | {"conn"}
"""Keyword arguments of ``enqueue()`` itself: a job function's parameters may not use them."""


def check_state(state: object) -> str:
    if state not in JOB_STATES:
        raise InvalidArgument(f"invalid job state {state!r}: use one of {', '.join(JOB_STATES)}")
    return str(state)


def check_priority(priority: object) -> int:
    return check_int("priority", priority, -32768, 32767, "lower runs first")


def check_max_attempts(max_attempts: object) -> int:
    return check_int("max_attempts", max_attempts, 1, MAX_ATTEMPTS_LIMIT)


def check_job_id(job_id: object) -> int:
    return check_int("job id", job_id, 1)


def check_row_limit(limit: object) -> int:
    """How many rows a listing returns or a batch deletes."""
    return check_int("limit", limit, 1, 1_000_000)


def check_purge_state(state: object) -> str:
    if state not in ("done", "cancelled", "failed"):
        raise InvalidArgument(
            f"invalid state {state!r} to purge: done, cancelled or failed (live jobs are "
            "cancelled, not purged)"
        )
    return str(state)


def check_limits(
    max_concurrency: object, rate_limit: object, burst: object
) -> tuple[int | None, float | None, float | None]:
    """``set_job_limit``'s arguments checked: at least one running job, a rate in jobs per
    second above 0, a burst of at least one job (default: one second's worth, at least 1)."""
    running = None if max_concurrency is None else check_int("max_concurrency", max_concurrency, 1)
    rate = None if rate_limit is None else check_seconds("rate_limit", rate_limit, allow_zero=False)
    if burst is not None:
        bucket: float | None = check_seconds("burst", burst)
        if bucket is not None and bucket < 1:
            raise InvalidArgument(f"invalid burst {burst!r}: at least 1 job")
    else:
        bucket = None if rate is None else max(1.0, rate)
    return running, rate, bucket


def check_unique_key(key: object, what: str = "unique_key") -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_UNIQUE_KEY:
        raise InvalidArgument(
            f"invalid {what} {key!r}: a non-empty str of at most {MAX_UNIQUE_KEY} characters"
        )
    return check_text(what, key)


EARLIEST_RUN_AT = datetime(1900, 1, 1, tzinfo=UTC)
MAX_DELAY = timedelta(seconds=MAX_SECONDS)
"""A run_at is from EARLIEST_RUN_AT to MAX_DELAY (100 years) from now, as delays are."""


def check_run_at(run_at: object, delay: object) -> tuple[datetime | None, float | None]:
    """The (run_at, delay seconds) pair to store; at most one of them is set."""
    if run_at is not None and delay is not None:
        raise InvalidArgument("pass run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, datetime) or run_at.tzinfo is None:
            raise InvalidArgument(f"invalid run_at {run_at!r}: an aware datetime (with a timezone)")
        # The database's bound (migration 0020, _run_at_valid): readers must be able to show it.
        if not EARLIEST_RUN_AT <= run_at <= datetime.now(UTC) + MAX_DELAY:
            raise InvalidArgument(
                f"invalid run_at {run_at.isoformat()}: a time from 1900-01-01 to 100 years from now"
            )
        return run_at, None
    if delay is not None:
        return None, check_seconds("delay", delay)
    return None, None


def encode_result(result: object, serializer: Serializer = DEFAULT_SERIALIZER) -> str | None:
    """A job's return value as JSON text (None stays SQL NULL); raises TypeError/ValueError.
    Datetimes, dates, UUIDs and Decimals are tagged as ``serializer`` documents."""
    if result is None:
        return None
    return serializer.dumps(result)


@dataclass(frozen=True, slots=True)
class JobDefinition:
    """A registered job kind: the function and its defaults."""

    kind: str
    func: Callable[..., Any]
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout: float | None = None
    backoff: Backoff = field(default_factory=Backoff)
    max_concurrency: int | None = None
    rate_limit: float | None = None
    is_coroutine: bool = False
    signature: inspect.Signature | None = None
    parameters: frozenset[str] = frozenset()
    required: frozenset[str] = frozenset()
    any_keyword: bool = True
    takes_context: bool = False
    """The function declares ``*, job: JobContext``: the worker passes the context."""
    retry_on: tuple[type[BaseException], ...] = ()
    no_retry_on: tuple[type[BaseException], ...] = ()

    def bind_args(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name; raises if they do not fit the function."""
        if self.signature is None:
            if args:
                raise InvalidArgument(f"job {self.kind!r} takes keyword arguments only")
            return dict(kwargs)
        if not args:
            # The common case, checked without Signature.bind (several times faster).
            names = kwargs.keys()
            if self.required <= names and (self.any_keyword or names <= self.parameters):
                return dict(kwargs)
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgument(
                f"arguments do not fit job {self.kind!r}{self.signature}: {exc}"
            ) from None
        return dict(bound.arguments)


def make_definition(
    kind: str,
    func: Callable[..., Any],
    *,
    is_coroutine: bool,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    timeout: float | timedelta | None = None,
    backoff: Backoff | None = None,
    max_concurrency: int | None = None,
    rate_limit: float | None = None,
    retry_on: type[BaseException] | Iterable[type[BaseException]] | None = None,
    no_retry_on: type[BaseException] | Iterable[type[BaseException]] | None = None,
) -> JobDefinition:
    """Check a registration and build its definition."""
    check_kind(kind)
    if not callable(func):
        raise InvalidType(f"job {kind!r}: expected a function, got {type(func).__name__}")
    signature = inspect.signature(func)
    takes_context = _takes_context(kind, signature)
    if takes_context:  # not a job argument: the worker passes it
        signature = signature.replace(
            parameters=[p for n, p in signature.parameters.items() if n != CONTEXT_PARAMETER]
        )
    for name, param in signature.parameters.items():
        if name in ENQUEUE_PARAMETERS:
            raise InvalidArgument(
                f"job {kind!r}: parameter {name!r} clashes with an enqueue() option "
                f"({', '.join(sorted(ENQUEUE_PARAMETERS))}); rename it, or enqueue with "
                "client.enqueue(kind, args)"
            )
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise InvalidArgument(
                f"job {kind!r}: positional-only parameter {name!r}; job arguments are stored "
                "by name"
            )
    if max_concurrency is not None:
        check_int("max_concurrency", max_concurrency, 1)
    if rate_limit is not None:
        check_seconds("rate_limit", rate_limit, allow_zero=False)
    if backoff is not None and not isinstance(backoff, Backoff):
        raise InvalidType(f"invalid backoff {backoff!r}: pass a postroom.Backoff")
    return JobDefinition(
        kind=kind,
        func=func,
        queue=check_queue(queue),
        priority=check_priority(priority),
        max_attempts=check_max_attempts(max_attempts),
        timeout=None if timeout is None else check_seconds("timeout", timeout, allow_zero=False),
        backoff=backoff or Backoff(),
        max_concurrency=max_concurrency,
        rate_limit=None if rate_limit is None else float(rate_limit),
        is_coroutine=is_coroutine,
        signature=signature,
        parameters=frozenset(
            name
            for name, p in signature.parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ),
        required=frozenset(
            name
            for name, p in signature.parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is p.empty
        ),
        any_keyword=any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()),
        takes_context=takes_context,
        retry_on=_exception_types(kind, "retry_on", retry_on),
        no_retry_on=_exception_types(kind, "no_retry_on", no_retry_on),
    )


CONTEXT_PARAMETER = "job"


def _takes_context(kind: str, signature: inspect.Signature) -> bool:
    """Whether the function asks for its :class:`JobContext` (``*, job: JobContext``)."""
    param = signature.parameters.get(CONTEXT_PARAMETER)
    if param is None:
        return False
    annotation = param.annotation
    named = isinstance(annotation, str) and annotation.rpartition(".")[2] == "JobContext"
    if annotation is not JobContext and not named:
        return False
    if param.kind is not param.KEYWORD_ONLY:
        raise InvalidArgument(
            f"job {kind!r}: make the JobContext parameter {CONTEXT_PARAMETER!r} keyword-only "
            f"(after `*`): `def f(..., *, job: JobContext)`"
        )
    return True


def _exception_types(
    kind: str, what: str, types: type[BaseException] | Iterable[type[BaseException]] | None
) -> tuple[type[BaseException], ...]:
    if types is None:
        return ()
    checked: tuple[Any, ...] = (types,) if isinstance(types, type) else tuple(types)
    for item in checked:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise InvalidType(
                f"job {kind!r}: invalid {what} entry {item!r}: pass exception classes"
            )
    return checked


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One job as stored, live or finished."""

    id: int
    queue: str
    kind: str
    args: dict[str, Any]
    state: JobState
    priority: int
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_expires_at: datetime | None
    worker: str | None
    last_error: str | None
    unique_key: str | None
    result: Any
    cancel_requested: bool
    waiting_for: tuple[int, ...] = ()
    """The parents this job still waits for (``after``/``sequence``); filled by ``get_job``."""


@dataclass(frozen=True, slots=True)
class QueueCount:
    queue: str
    state: JobState
    count: int
    oldest_ready_seconds: float | None
    """Age of the oldest due ready job (ready rows only)."""


@dataclass(frozen=True, slots=True)
class JobStats:
    """Counts per queue and state, and jobs done per second over the last minute."""

    counts: tuple[QueueCount, ...]
    done_per_second: dict[str, float]
    """Per queue; counts kept finished jobs only (see ``keep_finished``)."""
    paused: tuple[str, ...] = ()
    """The paused queues (``pause_queue``)."""


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What ``enqueue`` stored: the job id, and whether it is new (False: a ready or running
    job already held the unique key, and ``id`` is that job's)."""

    id: int
    created: bool
