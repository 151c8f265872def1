"""What ``enqueue`` takes: the options type, the checked options, and the prepared request.

Shared by both twins (``jobs_async`` and its generated ``jobs``), so a request prepared on a
sync client is a request to an async one too. Sans-IO.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._checks import check_int, check_text
from ..errors import InvalidArgument, InvalidType
from .options import ENQUEUE_OPTION_NAMES, PARENT_FAILURE_POLICIES, EnqueueOptions, ParentFailure
from .records import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    MAX_ATTEMPTS_LIMIT,
    JobDefinition,
    check_queue,
    check_run_at,
    check_unique_key,
)
from .serializer import DEFAULT_SERIALIZER, Serializer


def split_options(kwargs: dict[str, Any]) -> tuple[dict[str, Any], EnqueueOptions]:
    """A call's keyword arguments split into job arguments and enqueue options."""
    if not ENQUEUE_OPTION_NAMES.intersection(kwargs):
        return kwargs, {}
    options: dict[str, Any] = {}
    for name in ENQUEUE_OPTION_NAMES.intersection(kwargs):
        options[name] = kwargs.pop(name)
    return kwargs, options  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Enqueue options of one job, checked."""

    queue: str
    priority: int
    run_at: datetime | None
    delay: float | None
    max_attempts: int
    unique_key: str | None
    after: tuple[int, ...] = ()
    sequence: str | None = None
    on_parent_failure: ParentFailure = "hold"

    @property
    def is_workflow(self) -> bool:
        return bool(self.after) or self.sequence is not None


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One job to enqueue, checked and encoded: ``func.prepare(...)`` makes one, and any
    client (sync or async) takes it in ``enqueue_batch``."""

    kind: str
    args_json: str
    options: JobOptions


def job_options(defaults: JobDefinition | None, options: Mapping[str, Any]) -> JobOptions:
    """Check ``options`` (an :class:`EnqueueOptions`) against the kind's ``defaults``."""
    unknown = set(options) - ENQUEUE_OPTION_NAMES
    if unknown:
        raise InvalidArgument(
            f"unknown enqueue options {sorted(unknown)}: use "
            f"{', '.join(sorted(ENQUEUE_OPTION_NAMES))}"
        )
    queue = options.get("queue")
    priority = options.get("priority")
    max_attempts = options.get("max_attempts")
    at, seconds = check_run_at(options.get("run_at"), options.get("delay"))
    policy: ParentFailure = options.get("on_parent_failure") or "hold"
    if policy not in PARENT_FAILURE_POLICIES:
        raise InvalidArgument(f"invalid on_parent_failure {policy!r}: 'hold' or 'cancel'")
    sequence = options.get("sequence")
    if sequence is not None:
        sequence = check_unique_key(sequence, "sequence")
    unique_key = check_unique_key(options.get("unique_key"))
    after = _parent_ids(options.get("after"))
    if unique_key is not None and (after or sequence is not None):
        # A waiting job does not hold its key, so its release could collide with a holder.
        raise InvalidArgument(
            f"unique_key {unique_key!r} cannot be combined with after or sequence"
        )
    return JobOptions(
        queue=check_queue(
            queue if queue is not None else (defaults.queue if defaults else DEFAULT_QUEUE)
        ),
        priority=check_int(
            "priority",
            priority if priority is not None else (defaults.priority if defaults else 0),
            -32768,
            32767,
            "lower runs first",
        ),
        run_at=at,
        delay=seconds,
        max_attempts=check_int(
            "max_attempts",
            max_attempts
            if max_attempts is not None
            else (defaults.max_attempts if defaults else DEFAULT_MAX_ATTEMPTS),
            1,
            MAX_ATTEMPTS_LIMIT,
        ),
        unique_key=unique_key,
        after=after,
        sequence=sequence,
        on_parent_failure=policy,
    )


def _parent_ids(after: object) -> tuple[int, ...]:
    if after is None:
        return ()
    if isinstance(after, str | bytes | Mapping) or not isinstance(after, Iterable):
        raise InvalidArgument(f"invalid after {after!r}: pass a list of jobs or job ids")
    ids = []
    for parent in after:
        job_id = getattr(parent, "id", parent)
        ids.append(check_int("parent job id in after", job_id, 1))
    return tuple(sorted(set(ids)))


def encode_args(kind: str, args: object, serializer: Serializer = DEFAULT_SERIALIZER) -> str:
    """``args`` as JSON object text; raises naming the argument that cannot be stored."""
    if type(args) is not dict:
        if not isinstance(args, Mapping):
            raise InvalidType(
                f"args of job {kind!r} must be a mapping of argument names to values, "
                f"got {type(args).__name__}"
            )
        args = dict(args)
    try:
        "".join(args)  # every name is a str: one check in C, not a test per name
    except TypeError:
        for name in args:
            if not isinstance(name, str):
                raise InvalidType(
                    f"args of job {kind!r}: argument names are str, got {name!r}"
                ) from None
        raise
    try:
        text = serializer.dumps(args)
    except (TypeError, ValueError):
        raise _explain(kind, args, serializer) from None
    # jsonb refuses \u0000 and lone surrogates: a cheap look first, the walk only on suspicion.
    if "\\u0000" in text or "\\ud" in text:
        _check_storable(kind, args)
    return text


def _explain(kind: str, args: Mapping[str, Any], serializer: Serializer) -> Exception:
    for name, value in args.items():
        try:
            serializer.dumps(value)
        except (TypeError, ValueError) as exc:
            return InvalidType(
                f"argument {name!r} of job {kind!r} cannot be serialized ({exc}): pass JSON "
                "values, datetime, date, UUID or Decimal, or give the client a serializer "
                "for this type"
            )
    return InvalidType(f"args of job {kind!r} cannot be serialized")


def _check_storable(kind: str, args: Mapping[str, Any]) -> None:
    def walk(name: str, value: Any) -> None:
        if isinstance(value, str):
            check_text(f"argument {name!r} of job {kind!r}", value)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(name, key)
                walk(name, item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(name, item)

    for name, value in args.items():
        check_text(f"argument name of job {kind!r}", name)
        walk(name, value)


def batch_columns(chunk: list[JobRequest]) -> dict[str, list[Any]]:
    """The parameters of ``enqueue_batch`` for plain (not workflow) requests: the jobs' args,
    and for each other column an array with one element per job or, when every job has the
    same value, one element (migration 0014): a batch of one kind with default options sends
    its arguments and little else. Adds ``unique_keys`` only when a job has one."""
    first = chunk[0].options
    if all(r.options is first for r in chunk):  # the usual batch: one cached JobOptions
        params: dict[str, list[Any]] = {
            "queues": [first.queue],
            "priorities": [first.priority],
            "run_ats": [first.run_at],
            "delays": [first.delay],
            "max_attempts": [first.max_attempts],
        }
    else:
        params = {
            "queues": _shared([r.options.queue for r in chunk]),
            "priorities": _shared([r.options.priority for r in chunk]),
            "run_ats": _shared([r.options.run_at for r in chunk]),
            "delays": _shared([r.options.delay for r in chunk]),
            "max_attempts": _shared([r.options.max_attempts for r in chunk]),
        }
    params["kinds"] = _shared([r.kind for r in chunk])
    params["args"] = [r.args_json for r in chunk]  # one per job: the batch's size
    keys = [r.options.unique_key for r in chunk]
    if keys.count(None) != len(keys):
        params["unique_keys"] = keys
    return params


def _shared(values: list[Any]) -> list[Any]:
    """``values``, or its one value when all are equal (list.count compares in C)."""
    return values[:1] if values.count(values[0]) == len(values) else values


def describe_jobs(requests: list[JobRequest]) -> str:
    """What an enqueue commits, for :class:`CommitUnknown`: the count, kinds and unique keys
    (the keys to enqueue again with, at most the first ten named)."""
    kinds = sorted({r.kind for r in requests})
    keys = [r.options.unique_key for r in requests if r.options.unique_key is not None]
    text = f"{len(requests)} job{'' if len(requests) == 1 else 's'} ({', '.join(kinds)})"
    if keys:
        shown = ", ".join(repr(k) for k in keys[:10])
        text += f" with unique keys {shown}{', ...' if len(keys) > 10 else ''}"
    else:
        text += " without unique keys"
    return text


ENQUEUE_CHUNK = 5000
"""Jobs per INSERT statement in ``enqueue_batch``."""
PIPELINE_MAX_BYTES = 1024 * 1024
"""Arguments one pipeline sends at most; a larger chunk goes alone, outside a pipeline (a
round trip costs nothing next to sending a megabyte, and psycopg's pipeline mode was seen to
wait forever on statements of 20-30 MB: issue 23, item 10)."""


def args_size(chunk: list[JobRequest]) -> int:
    """About the bytes a chunk's statement sends (its arguments' JSON text)."""
    return sum(len(r.args_json) for r in chunk)


def statement_chunks(requests: Iterable[JobRequest]) -> Iterator[list[JobRequest]]:
    """Runs of plain requests (at most ENQUEUE_CHUNK each) and single workflow requests, in
    order: a workflow job may depend on the jobs before it."""
    run: list[JobRequest] = []
    for request in requests:
        if request.options.is_workflow:
            if run:
                yield run
                run = []
            yield [request]
        else:
            run.append(request)
            if len(run) == ENQUEUE_CHUNK:
                yield run
                run = []
    if run:
        yield run


def peek(requests: Iterable[JobRequest]) -> tuple[Iterable[JobRequest], JobRequest | None]:
    """The first of ``requests`` (None: there is none), and the requests to write, all of
    them: an iterator is not consumed beyond its first (a batch checked as it is sent)."""
    if isinstance(requests, list | tuple):
        return requests, requests[0] if requests else None
    rest = iter(requests)
    first = next(rest, None)
    return ([] if first is None else itertools.chain([first], rest)), first
