"""The options of every enqueue call, defined once (sans-IO, no imports from the engine)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict

ParentFailure = Literal["hold", "cancel"]
PARENT_FAILURE_POLICIES = ("hold", "cancel")


class EnqueueOptions(TypedDict, total=False):
    """The options of every enqueue call (``client.enqueue``, ``func.enqueue``, ``prepare``,
    batch items), defined once. Unset options take the job kind's registered defaults."""

    queue: str | None
    """Queue name (default: the registration's, else ``"default"``)."""
    priority: int | None
    """-32768..32767, lower runs first."""
    run_at: datetime | None
    """Run no earlier than this aware datetime."""
    delay: float | timedelta | None
    """Run no earlier than this many seconds from now (not with ``run_at``)."""
    max_attempts: int | None
    """1..1000 attempts before the job ends failed."""
    unique_key: str | None
    """Skip the insert while a ready or running job holds this key."""
    after: Iterable[Any] | None
    """Jobs (handles or ids) that must all succeed before this one becomes ready."""
    sequence: str | None
    """Run after the previous job enqueued with this sequence key (one at a time, in order)."""
    on_parent_failure: ParentFailure | None
    """What a failed or cancelled parent does to this job: ``"hold"`` (default; it waits,
    visible as ``held``, until the parent is retried and succeeds, or it is cancelled) or
    ``"cancel"`` (it is cancelled, and so are its own dependents)."""


ENQUEUE_OPTION_NAMES = frozenset(EnqueueOptions.__annotations__)
