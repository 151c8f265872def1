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


PINNED_WARN_EVERY = 300.0
"""Seconds between two warnings of a pinned vacuum horizon held by the same session."""


class PinnedHorizon:
    """When to warn of a pinned vacuum horizon: at the first sight of a session holding it,
    and again every ``PINNED_WARN_EVERY`` seconds while the same one does."""

    def __init__(self) -> None:
        self._warned: tuple[Any, float] | None = None  # the holder last warned of, and when

    def warning(
        self, left: dict[str, int], holder: tuple[Any, ...] | None, now: float
    ) -> str | None:
        """The warning to log now (``pinned_horizon_warning``), or None if it was logged for
        this holder less than ``PINNED_WARN_EVERY`` seconds ago."""
        pid = None if holder is None else holder[0]
        if self._warned is not None:
            warned_pid, at = self._warned
            if warned_pid == pid and now - at < PINNED_WARN_EVERY:
                return None
        self._warned = (pid, now)
        return pinned_horizon_warning(left, holder)


def pinned_horizon_warning(left: dict[str, int], holder: tuple[Any, ...] | None) -> str:
    """What to log when VACUUM left the queue tables' dead rows (``left``: table to dead rows
    still there) because a transaction holds the vacuum horizon. ``holder`` is the oldest
    session's row (pid, XID age, state, transaction start, application name; state and start
    None where the role may not see them), None if no session this role can see holds one.

        pinned_horizon_warning({"jobs": 586_144}, (1396, 120_000, "idle in transaction",
                               None, "psql"))
        # -> "VACUUM left 586,144 dead rows in jobs: session pid 1396 (idle in ..."
    """
    rows = ", ".join(f"{dead:,} dead rows in {table}" for table, dead in sorted(left.items()))
    if holder is None:
        who = (
            "no session this role can see holds an old transaction: look for a prepared "
            "transaction (pg_prepared_xacts), a replication slot (pg_replication_slots) or a "
            "standby's hot_standby_feedback"
        )
    else:
        pid, age, state, started, application = holder
        seen = []
        if state:
            seen.append(str(state))
        if started is not None:
            seen.append(f"its transaction since {started.isoformat(timespec='seconds')}")
        if application:
            seen.append(f"application {application!r}")
        detail = f" ({', '.join(seen)})" if seen else ""
        who = (
            f"session pid {pid}{detail} holds a transaction {age:,} transaction IDs old, so "
            "no row deleted or updated since it began can be removed"
        )
    return (
        f"VACUUM left {rows}: {who}. Claims slow down while it lasts (each walks the entries "
        "of every job claimed since); end that transaction, or set "
        "idle_in_transaction_session_timeout (docs/queue.md, 'Not under a pinned horizon')"
    )


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
