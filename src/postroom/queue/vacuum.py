# Generated from src/postroom/queue/vacuum_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The vacuum: vacuums the queue tables when their dead rows pile up, whatever autovacuum does.

A queue table churns faster than autovacuum's defaults expect, and autovacuum may be off, or
busy elsewhere, or waking once a minute per database. One worker at a time (an advisory lock
elects it) vacuums a table once its dead rows exceed a fifth of its live rows and 10,000 (jobs,
finished_jobs) or 1,000 (the small tables claims and ticks update: job_limits, job_schedules,
job_sequences, job_dependencies, queue_pauses, where a thousand dead rows are many pages for a
few live ones); VACUUM takes a lock that lets claims and writes go on.

When a VACUUM leaves a table's dead rows above that line and what holds the oldest horizon
held it since before the VACUUM began (an idle-in-transaction session, a long report, a
prepared transaction, a replication slot), the worker logs a warning naming it
(``_maintenance.PinnedHorizon``: once, then every five minutes while the same one holds it).
Rows deleted during the VACUUM are left whatever the horizon: a busy queue's own claims are
not named. While the horizon that kept a VACUUM from removing a table's rows still holds, that
table is not vacuumed again (``PinnedHorizon.worth_vacuuming``): it would remove nothing;
``jobs`` is still analyzed every ``ANALYZE_BEHIND_PIN`` seconds.
"""

from __future__ import annotations

import logging
import math
import time

import psycopg

from .._acompat import Event
from .._db import Database
from .._maintenance import SMALL_VACUUM_MIN_DEAD as SMALL_VACUUM_MIN_DEAD
from .._maintenance import PinnedHorizon
from .._maintenance import needs_vacuum as needs_vacuum
from .._periodic import Periodic

log = logging.getLogger("postroom.worker")

ANALYZE_BEHIND_PIN = 60.0
"""While a pinned horizon makes VACUUM pointless on ``jobs``, its planner statistics are still
refreshed (``ANALYZE``) this often, at most: the claim's plan must see a backlog that grows."""

VACUUMS = {
    "jobs": "vacuum_jobs",
    "finished_jobs": "vacuum_finished_jobs",
    "job_limits": "vacuum_job_limits",
    "job_schedules": "vacuum_job_schedules",
    "job_sequences": "vacuum_job_sequences",
    "job_dependencies": "vacuum_job_dependencies",
    "queue_pauses": "vacuum_queue_pauses",
}
"""The named VACUUM of each queue table."""


class Vacuum(Periodic):
    """Every ``interval`` seconds (jittered) vacuums the queue tables whose dead rows call for
    it; a role that does not own them leaves it to autovacuum."""

    name = "vacuum"
    what = "vacuuming the queue tables"

    def __init__(self, db: Database, *, interval: float, stopping: Event) -> None:
        super().__init__(db, interval=interval, stopping=stopping, log=log)
        self._pinned = PinnedHorizon()
        self._analyzed_at = -math.inf  # when jobs was last analyzed (monotonic clock)

    def prepare(self) -> bool:
        try:
            with self._db.connection() as conn:
                cur = conn.execute(self._db.q("may_vacuum_jobs"))
                row = cur.fetchone()
        except psycopg.Error as exc:
            log.warning("cannot check who may vacuum the queue tables: %s", exc)
            return False
        if not (row and row[0]):
            log.info("this role does not own the queue tables: vacuum is left to autovacuum")
            return False
        return True

    def tick(self) -> None:
        self.vacuum_if_needed()

    def vacuum_if_needed(self) -> list[str]:
        """Vacuums the queue tables whose dead rows call for it; returns their names (none if
        another worker holds the vacuum lock)."""
        with self._db.connection() as conn:
            cur = conn.execute(self._db.q("queue_dead_tuples"))
            dead_rows = {
                name: dead for name, dead, live in cur.fetchall() if needs_vacuum(name, dead, live)
            }
            wanted = list(dead_rows)
            if wanted and self._pinned.blocked is not None:
                cur = conn.execute(self._db.q("vacuum_horizon_holder"), {"began": None})
                row = cur.fetchone()
                worth = self._pinned.worth_vacuuming(wanted, None if row is None else row[6])
                if worth != wanted and row is not None:  # the same horizon holds: say so
                    left = {name: dead_rows[name] for name in wanted if name not in worth}
                    warning = self._pinned.warning(left, row[:5], time.monotonic(), since=-1)
                    if warning is not None:
                        log.warning("%s", warning)
                wanted = worth
                if (
                    "jobs" in dead_rows
                    and "jobs" not in wanted
                    and time.monotonic() - self._analyzed_at >= ANALYZE_BEHIND_PIN
                ):
                    conn.execute(self._db.q("analyze_jobs"), prepare=False)
                    self._analyzed_at = time.monotonic()
            if not wanted:
                return []
            lock = {"schema": self._db.schema}
            cur = conn.execute(self._db.q("try_vacuum_lock"), lock)
            row = cur.fetchone()
            if not (row and row[0]):
                return []  # another worker is vacuuming
            try:
                cur = conn.execute(self._db.q("vacuum_next_xid"))
                began = (cur.fetchone() or (0,))[0]
                for name in wanted:
                    conn.execute(self._db.q(VACUUMS[name]), prepare=False)
                    if name == "jobs":  # VACUUM (ANALYZE)
                        self._analyzed_at = time.monotonic()
                cur = conn.execute(self._db.q("queue_dead_tuples"))
                left = {
                    name: dead
                    for name, dead, live in cur.fetchall()
                    if name in wanted and needs_vacuum(name, dead, live)
                }
                if left:  # VACUUM could not remove them: is the horizon held?
                    cur = conn.execute(self._db.q("vacuum_horizon_holder"), {"began": began})
                    row = cur.fetchone()
                    holder, since = (None, 0) if row is None else (row[:5], row[5])
                    warning = self._pinned.warning(left, holder, time.monotonic(), since=since)
                    if warning is not None:
                        log.warning("%s", warning)
                    self._pinned.note(left, holder, None if row is None else row[6], since=since)
                else:
                    self._pinned.note({}, None, None, since=0)
            finally:
                conn.execute(self._db.q("vacuum_unlock"), lock)
        return wanted
