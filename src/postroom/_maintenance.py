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
    """When to warn of a pinned vacuum horizon: when what holds it held it before the VACUUM
    began, at the first sight of it, and again every ``PINNED_WARN_EVERY`` seconds while the
    same one does."""

    def __init__(self) -> None:
        self._warned: tuple[Any, float] | None = None  # the holder last warned of, and when
        # The horizon (a transaction ID's text) that kept the last VACUUM from removing the
        # dead rows of these tables, while it may still hold.
        self.blocked: tuple[str, frozenset[str]] | None = None

    def note(
        self,
        left: dict[str, int],
        holder: tuple[Any, ...] | None,
        horizon: str | None,
        *,
        since: int,
    ) -> None:
        """After a VACUUM: remember the horizon that kept it from removing ``left``'s dead rows
        (held since before it began: ``since`` as in ``warning``), or forget the last one."""
        held = holder is not None and holder[1] is not None and holder[1] > since
        self.blocked = (horizon, frozenset(left)) if left and held and horizon else None

    def worth_vacuuming(self, wanted: list[str], horizon: str | None) -> list[str]:
        """The tables of ``wanted`` a VACUUM may clean now: all, unless the horizon that kept
        the last VACUUM from removing rows still holds (the same ``horizon``); then not the
        tables it left. A VACUUM under the same horizon removes nothing new (every row
        deleted before the horizon went at the last one), and behind a pinned horizon it
        read the whole bloated table every ``vacuum_interval`` for nothing."""
        if self.blocked is None or horizon != self.blocked[0]:
            self.blocked = None
            return wanted
        return [table for table in wanted if table not in self.blocked[1]]

    def warning(
        self, left: dict[str, int], holder: tuple[Any, ...] | None, now: float, *, since: int
    ) -> str | None:
        """The warning to log now (``pinned_horizon_warning``), or None: nothing holds a
        horizon older than the VACUUM (``since``: the transaction IDs used since it began), or
        it was logged for this holder less than ``PINNED_WARN_EVERY`` seconds ago.

        Why the age: rows deleted while a VACUUM runs are left by it whatever the horizon (at
        20,000 jobs a second, ten thousand in half a second), and the oldest transaction then
        is any claim in flight, a few transaction IDs old; naming it would blame a busy queue's
        own traffic. A transaction that holds the horizon since before the VACUUM began is the
        one that kept it from removing rows."""
        if holder is None or holder[1] is None or holder[1] <= since:
            return None
        key = holder[0] if holder[0] is not None else holder[2]
        if self._warned is not None:
            warned, at = self._warned
            if warned == key and now - at < PINNED_WARN_EVERY:
                return None
        self._warned = (key, now)
        return pinned_horizon_warning(left, holder)


def pinned_horizon_warning(left: dict[str, int], holder: tuple[Any, ...]) -> str:
    """What to log when VACUUM left the queue tables' dead rows (``left``: table to dead rows
    still there) because something holds the vacuum horizon. ``holder`` is its row (pid, XID
    age, state, transaction start, application name): a session's (state and start None where
    the role may not see them), or a prepared transaction's or a replication slot's (pid None,
    what it is in ``state``).

        pinned_horizon_warning({"jobs": 586_144}, (1396, 120_000, "idle in transaction",
                               None, "psql"))
        # -> "VACUUM left 586,144 dead rows in jobs: session pid 1396 (idle in ..."
    """
    rows = ", ".join(f"{dead:,} dead rows in {table}" for table, dead in sorted(left.items()))
    pid, age, state, started, application = holder
    if pid is None:  # a prepared transaction or a replication slot
        who = f"{state} holds the horizon {age:,} transaction IDs back"
        fix = (
            "COMMIT PREPARED or ROLLBACK PREPARED it"
            if str(state).startswith("prepared")
            else "let its consumer catch up, or drop the slot"
        )
    else:
        seen = []
        if state:
            seen.append(str(state))
        if started is not None:
            seen.append(f"its transaction since {started.isoformat(timespec='seconds')}")
        if application:
            seen.append(f"application {application!r}")
        detail = f" ({', '.join(seen)})" if seen else ""
        who = f"session pid {pid}{detail} holds a transaction {age:,} transaction IDs old"
        fix = "end that transaction, or set idle_in_transaction_session_timeout"
    return (
        f"VACUUM left {rows}: {who}, so no row deleted or updated since it began can be "
        f"removed. Dead rows pile up while it lasts (the table and its indexes grow, and scans "
        f"of them slow down); {fix} (docs/queue.md, 'Under a pinned horizon')"
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
