# Generated from src/postroom/relay/inbox_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The inbox: a receiver records the ids of the messages it processed in its own transaction,
so a redelivered message (the relay delivers at least once) is recognised and skipped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from .._db import Database
from ..errors import InvalidArgument
from ..log.records import check_name
from .records import check_message_id


class Inbox:
    """Message ids processed by one receiver (``name``), recorded in the transaction of
    ``conn`` (a psycopg connection, or a SQLAlchemy/Django connection or session wrapping one).

        with conn.transaction():
            if client.inbox(conn).seen(message_id):
                return  # a duplicate: its effects are already committed
            conn.execute("UPDATE accounts ...")  # the effects commit with the id, or neither

    If the transaction rolls back, the id is forgotten with the effects and the message counts
    as new when it comes again. Run ``client.prune_inbox(older_than=...)`` from time to time:
    keep ids at least as long as a redelivery can arrive (the relay resends only its batch in
    flight, so hours are plenty; days are safe).
    """

    def __init__(self, db: Database, conn: object, name: str = "default") -> None:
        if conn is None:
            raise InvalidArgument(
                "an inbox needs your connection (conn=...): the id must commit with your work"
            )
        self._db = db
        self._conn = conn
        self.name = check_name("inbox", name)

    def seen(self, message_id: str) -> bool:
        """True if ``message_id`` was recorded before (a duplicate: skip it); False if it is
        new, and now recorded in the caller's transaction. A concurrent transaction recording
        the same id waits for this one to end; then exactly one of the two sees it new."""
        check_message_id(message_id)
        with self._db.connection(self._conn) as conn:
            cur = conn.execute(
                self._db.q("inbox_record"), {"name": self.name, "message_id": message_id}
            )
            return cur.fetchone() is None


def prune_inbox(db: Database, older_than: timedelta, name: str | None, batch_size: int) -> int:
    """Delete ids recorded more than ``older_than`` ago; returns how many."""
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise InvalidArgument(f"invalid older_than {older_than!r}: a timedelta >= 0")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgument(f"invalid batch_size {batch_size!r}: must be >= 1")
    if name is not None:
        check_name("inbox", name)
    before = datetime.now(UTC) - older_than
    total = 0
    while True:
        with db.connection() as conn:
            cur = conn.execute(
                db.q("inbox_prune"), {"before": before, "name": name, "batch": batch_size}
            )
            deleted = cur.rowcount
        total += deleted
        if deleted < batch_size:
            return total
