# Generated from src/postroom/_retention_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The retention runner: applies the topics' retention by itself, from any running process.

Every group member (consumers, runners, relays) runs one; queue workers do not (the queue
engine starts no log maintenance). Every
``interval`` seconds (with jitter) each one tries a session advisory lock keyed by the schema;
the one that gets it deletes expired messages (``run_retention``, migration 0011: the defaults
of ``apply_retention``, batches of 10,000 per partition, repeated until nothing is left to
expire) and, if that deleted rows and its role owns ``messages``, VACUUMs ``messages`` so that
the dead rows are reused whatever autovacuum does (it may be off, or slow). It also VACUUMs the
log's small hot tables (the counter rows ``partitions``, the ``cursors``, and the group state
``groups``, ``members``, ``leases``, ``group_activity``), and the dashboard's ring of samples
``web_samples``, once one holds more than 1,000 dead rows and more than a fifth of its live
ones: every publish and commit updates a row there (and every sample a slot); and
``staged_messages`` every round (the dead rows that publishes in callers' transactions leave,
migration 0017). The others skip that round. ``POSTROOM_RETENTION_INTERVAL`` sets the
interval in seconds (default 30), and ``connect(retention_interval=...)`` overrides it per
client; ``off`` (or ``0``, or None) turns the runner off in that process, and retention is
then left to ``apply_retention()`` / ``postroom topic retention``. A role
without EXECUTE on ``run_retention`` (granted to the producer, consumer and admin
capabilities) logs it once and stops; a role that does not own ``messages`` runs retention
and leaves VACUUM to autovacuum.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from ._acompat import Event
from ._db import Database
from ._maintenance import needs_vacuum
from ._periodic import Periodic

log = logging.getLogger("postroom.retention")

SMALL_TABLE_VACUUMS = {
    "partitions": "vacuum_partitions",
    "cursors": "vacuum_cursors",
    "groups": "vacuum_groups",
    "members": "vacuum_members",
    "leases": "vacuum_leases",
    "group_activity": "vacuum_group_activity",
    "web_samples": "vacuum_web_samples",  # the dashboard's ring (migration 0036)
}
MAX_CALLS_PER_ROUND = 100
"""run_retention calls per round at most (each up to 10,000 messages per partition), so that a
round ends even while writers outrun it; the next round goes on."""


class RetentionRunner(Periodic):
    """One process's retention runner; ``run`` loops until ``stopping`` is set."""

    name = "retention"
    what = "applying retention"

    def __init__(self, db: Database, *, interval: float, stopping: Event) -> None:
        super().__init__(db, interval=interval, stopping=stopping, log=log)
        self._may_vacuum: bool | None = None
        self.vacuums = 0
        """VACUUMs of messages this runner ran (for tests and logs)."""
        self.vacuumed: list[str] = []
        """The small hot tables this runner vacuumed, in order (for tests and logs)."""

    def tick(self) -> None:
        self.run_once()

    def run_once(self) -> int | None:
        """One round: None if another process holds the runner's lock, else how many messages
        it deleted (then VACUUMs messages if it deleted any and its role owns the table, and
        staged_messages if it owns it)."""
        lock = {"schema": self._db.schema}
        with self._db.connection() as conn:
            # Autocommit for the round: each retention call commits by itself (short
            # transactions, row locks let go at once), and VACUUM runs outside a transaction.
            was_autocommit = conn.autocommit
            if not was_autocommit:
                conn.commit()
                conn.set_autocommit(True)
            try:
                cur = conn.execute(self._db.q("try_retention_lock"), lock)
                row = cur.fetchone()
                if not (row and row[0]):
                    return None
                try:
                    removed = self._expire(conn)
                    owner = self._owns_messages(conn)
                    if removed and owner:
                        if conn.info.server_version >= 150000:
                            # The deletes' counts first: flushed after the VACUUM's report
                            # they would show its removed rows as dead tuples again.
                            conn.execute(self._db.q("flush_statistics"))
                        conn.execute(self._db.q("vacuum_messages"), prepare=False)
                        self.vacuums += 1
                    if owner:
                        self._vacuum_small_tables(conn)
                        # Each message published in a caller's transaction leaves a dead row
                        # in staged_messages (migration 0017); small, so every round.
                        conn.execute(self._db.q("vacuum_staged"), prepare=False)
                finally:
                    conn.execute(self._db.q("retention_unlock"), lock)
            finally:
                if not was_autocommit:
                    conn.set_autocommit(False)
        if removed:
            log.debug("retention removed %d messages", removed)
        return removed

    def _expire(self, conn: psycopg.Connection[Any]) -> int:
        removed = 0
        for _ in range(MAX_CALLS_PER_ROUND):
            cur = conn.execute(self._db.q("run_retention"))
            row = cur.fetchone()
            done = 0 if row is None or row[0] is None else int(row[0])
            removed += done
            if not done or self._stopping.is_set():
                break
        return removed

    def _vacuum_small_tables(self, conn: psycopg.Connection[Any]) -> None:
        cur = conn.execute(self._db.q("log_dead_tuples"))
        for table, dead, live in cur.fetchall():
            if needs_vacuum(table, dead, live):
                conn.execute(self._db.q(SMALL_TABLE_VACUUMS[table]), prepare=False)
                self.vacuumed.append(table)
                log.debug("vacuumed %s (%d dead rows, %d live)", table, dead, live)

    def _owns_messages(self, conn: psycopg.Connection[Any]) -> bool:
        if self._may_vacuum is None:
            cur = conn.execute(self._db.q("may_vacuum_messages"))
            row = cur.fetchone()
            self._may_vacuum = bool(row and row[0])
            if not self._may_vacuum:
                log.info("this role does not own the log tables: VACUUM is left to autovacuum")
        return self._may_vacuum
