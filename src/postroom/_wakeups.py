"""The wake-up room's pure parts: channel names and payloads, in one place for every engine.

A wake-up is a hint (polling stays the source of truth): a NOTIFY, delivered at commit, that
something may be waiting. Three channels carry them, each payload ``"<schema>":<what>`` (the
schema quoted, as the SQL functions write ``'{schema}:'``), so two postroom schemas in one
database never wake each other (migration 0029 scoped the log's and the groups' as the
queue's always were):

| channel           | ``what``                               | sent by                         |
|-------------------|----------------------------------------|---------------------------------|
| ``postroom_jobs`` | a queue name; ``*`` (every queue, e.g. | enqueue, release, resume_queue, |
|                   | a resumed queue's); ``cancel``         | cancel_job                      |
| ``postroom``      | a topic id                             | every write's ``reserve_offsets``|
| ``postroom_groups``| a group name                          | group_assign, leave, release    |

The client's listener (``_listener_async``) holds one LISTEN connection and hands each
wake-up of its schema to the subscribers of its channel; ``send_wakeups`` is the one helper
that sends them from Python.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, Literal, Protocol

JOBS: Final = "postroom_jobs"
LOG: Final = "postroom"
GROUPS: Final = "postroom_groups"
Channel = Literal["postroom_jobs", "postroom", "postroom_groups"]
CHANNELS: Final[tuple[Channel, ...]] = (JOBS, LOG, GROUPS)
LISTEN_QUERIES: Final[dict[str, str]] = {
    JOBS: "listen_postroom_jobs",
    LOG: "listen_postroom",
    GROUPS: "listen_postroom_groups",
}
"""The named query (``_sql/wakeups.sql``) that LISTENs to each channel."""

EVERY_QUEUE: Final = "*"
CANCEL: Final = "cancel"


def payload(schema: str, what: str) -> str:
    """The payload of a wake-up of ``schema`` about ``what``.

    payload("postroom", "email")   # -> '"postroom":email'
    """
    return f'"{schema}":{what}'


def parse(schema: str, raw: str) -> str | None:
    """``what`` of a payload of ``schema``; None for another schema's (or a foreign) payload."""
    prefix = f'"{schema}":'
    return raw[len(prefix) :] if raw.startswith(prefix) else None


def queue_wakes(what: str, queues: frozenset[str]) -> bool:
    """Whether a job wake-up about ``what`` concerns a worker of ``queues``."""
    return what in queues or what == EVERY_QUEUE


class _Unsubscribe(Protocol):
    def unsubscribe(self, subscription: Subscription) -> None: ...


class Subscription:
    """One subscriber's interest in a channel of a client's listener (either flavour's);
    ``close()`` ends it (idempotent)."""

    def __init__(
        self,
        listener: _Unsubscribe,
        channel: str,
        callback: Callable[[str | None], Any],
        wanted: frozenset[str] | None,
    ) -> None:
        self._listener = listener
        self.channel = channel
        self.callback = callback
        self.wanted = wanted

    def want(self, wanted: Iterable[str] | None) -> None:
        """Change the ``what``s this subscriber is woken for (None: every one)."""
        self.wanted = None if wanted is None else frozenset(wanted)

    def close(self) -> None:
        self._listener.unsubscribe(self)
