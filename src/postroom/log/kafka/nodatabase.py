# Generated from src/postroom/log/kafka/nodatabase_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""What a client on ``kafka://`` has where a PostgreSQL client has its database: nothing to
query. Every PostgreSQL-only part of the client (the job queue, migrations, grants, the outbox
relay and inbox, ``schema``/``conninfo``) reaches for the database and gets one clear
:class:`NotSupported` naming PostgreSQL; closing it closes the Kafka engine."""

from __future__ import annotations

from typing import Any

from ...errors import NotSupported
from .engine import KafkaLog


class NoDatabase:
    """Stands in for the client's database handle on ``kafka://``; see the module docstring."""

    def __init__(self, engine: KafkaLog) -> None:
        self._engine = engine
        self._closed = False

    @property
    def pool(self) -> NoDatabase:
        return self  # the client closes "its pool" when it closes

    @property
    def wakeups(self) -> NoDatabase:
        return self  # ... and "its listener": nothing listens on Kafka, so that closes nothing

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.close()

    def __getattr__(self, name: str) -> Any:
        raise NotSupported(
            f"this client is on {self._engine.description}, which holds the log only: the job "
            "queue, migrations, grants, the outbox relay and inbox need PostgreSQL; open "
            "another client with postroom.connect('postgresql://...') for them"
        )
