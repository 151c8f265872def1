"""The maintenance host's sans-IO parts: the unit protocol, the jitter every periodic unit
waits with, and the client options the units read (the retention interval, the GC pause).

Every background loop of the house is a unit (River keeps each maintenance service in its own
file, ``internal/maintenance/job_rescuer.go``): the queue's rescuer, purger, unregistered-kind
warning, vacuum, scheduler and heartbeat, the log's retention runner. Periodic units subclass
``AsyncPeriodic``/``Periodic`` (``_periodic_async``), which holds the interval, the jitter and
the error policy once; a worker or group member runs its units (River's maintenance is a
composition of services, not one loop).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ._checks import check_interval
from .errors import InvalidArgument

log = logging.getLogger("postroom.retention")

DEFAULT_JITTER = 0.2
"""A periodic unit waits ``interval * (1 ± jitter)``: many processes do not run in step."""
DEFAULT_RETENTION_INTERVAL = 30.0
RETENTION_ENV = "POSTROOM_RETENTION_INTERVAL"


class Unit(Protocol):
    """A background unit: ``run()`` loops until its host's stop event is set, and returns.

    An error the unit cannot go on after is raised from ``run()``; its host reports it (a
    worker stops and raises :class:`~postroom.errors.WorkerCrashed`)."""

    name: str

    def run(self) -> Any: ...  # a coroutine in the asyncio flavour


def jittered(
    interval: float, jitter: float = DEFAULT_JITTER, rand: Callable[[], float] = random.random
) -> float:
    """``interval`` scaled by a random factor in ``[1 - jitter, 1 + jitter]``."""
    return interval * (1 - jitter + 2 * jitter * rand())


VACUUM_MIN_DEAD = 10_000
"""Dead rows past which a big churning table (jobs, finished_jobs) is vacuumed."""
SMALL_VACUUM_MIN_DEAD = 1_000
"""Dead rows past which a small hot table is vacuumed: a thousand dead rows are many pages for
a few hundred live ones (the log's counters and group state, the queue's limits, schedules,
sequences, dependencies, pauses)."""
BIG_TABLES = frozenset({"jobs", "finished_jobs"})


def needs_vacuum(table: str, dead: int, live: int) -> bool:
    """Whether ``table``'s dead rows call for a VACUUM, whatever autovacuum does: more than a
    fifth of its live rows, and more than ``VACUUM_MIN_DEAD`` (big tables) or
    ``SMALL_VACUUM_MIN_DEAD`` (the others). One policy for the queue's vacuum and the log's
    retention runner.

        needs_vacuum("job_limits", 1_001, 10)   # -> True
    """
    least = VACUUM_MIN_DEAD if table in BIG_TABLES else SMALL_VACUUM_MIN_DEAD
    return dead > least and dead > live / 5


def retention_interval_from_env() -> float | None:
    """The retention runner's default interval, from ``POSTROOM_RETENTION_INTERVAL`` (seconds;
    ``off`` or ``0``: None, no runner; unset: 30 s; not a number: 30 s, with a warning)."""
    raw = os.environ.get(RETENTION_ENV, "").strip().lower()
    if not raw:
        return DEFAULT_RETENTION_INTERVAL
    if raw in ("off", "none", "0", "false", "no"):
        return None
    try:
        seconds = float(raw)
    except ValueError:
        log.warning(
            "%s=%r is not a number of seconds or 'off': using %s",
            RETENTION_ENV,
            raw,
            DEFAULT_RETENTION_INTERVAL,
        )
        return DEFAULT_RETENTION_INTERVAL
    return seconds if seconds > 0 else None


UNSET: Any = object()
"""A ``connect()`` option not given: its default (for the retention interval, the env var)."""


@dataclass(frozen=True)
class ClientOptions:
    """What a client's background units and fast paths follow; the database handle carries
    it to every engine (``connect(retention_interval=..., pause_gc=...)``).

    ``retention``: seconds between the retention runner's rounds in this process's group
    members (None: no runner; retention is then left to ``apply_retention()``); UNSET reads
    ``POSTROOM_RETENTION_INTERVAL`` when a member starts. ``pause_gc``: whether a consumer's
    poll pauses the cyclic garbage collector while it decodes a batch (``_fastpaths``)."""

    retention: float | None = UNSET
    pause_gc: bool = True

    def retention_interval(self) -> float | None:
        """The retention runner's interval now (None: no runner)."""
        return retention_interval_from_env() if self.retention is UNSET else self.retention


def client_options(retention_interval: Any = UNSET, pause_gc: object = True) -> ClientOptions:
    """The checked options of ``connect()``; raises :class:`InvalidArgument` naming a bad one."""
    interval = (
        UNSET
        if retention_interval is UNSET
        else check_interval("retention_interval", retention_interval)
    )
    if not isinstance(pause_gc, bool):
        raise InvalidArgument(f"invalid pause_gc {pause_gc!r}: True or False")
    return ClientOptions(interval, pause_gc)
