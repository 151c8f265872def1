# Generated from src/postroom/_listener_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The client's one listener: a LISTEN connection per client, shared by its workers, consumers
and group members, and the one helper that sends wake-ups (``send_wakeups``). Channels and
payloads are in ``_wakeups``.

A subscriber names a channel, the ``what``s it cares about (None: every one) and a callback;
the listener calls it with ``what`` for each wake-up of the client's schema that matches, and
with None once the channel is listened to (again, after a reconnect): anything may have
happened while nobody listened, so a subscriber then checks the database. The connection is
opened at the first subscription, reconnected after a loss (wake-ups are hints: polling covers
the gap) and closed when the last subscriber leaves, or with the client.

    subscription = await client_db.wakeups.subscribe(JOBS, on_wakeup, wanted={"email"})
    ...
    subscription.close()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from ._acompat import Event, gather, spawn
from ._reconnect import reconnect_delay
from ._wakeups import LISTEN_QUERIES, Subscription, parse, payload

if TYPE_CHECKING:
    from ._db import Database

log = logging.getLogger("postroom.wakeups")

WAIT_SLICE = 0.1
"""Longest wait for a notification, so that a new channel or a close is taken up promptly."""


class Wakeups:
    """The listener of one client on ``conninfo``, for wake-ups of ``schema``."""

    def __init__(self, conninfo: str, schema: str, queries: dict[str, sql.Composed]) -> None:
        self._conninfo = conninfo
        self._schema = schema
        self._listen = {channel: queries[name] for channel, name in LISTEN_QUERIES.items()}
        self._lock = threading.Lock()  # subscribers come from any thread in the sync twin
        self._subscribers: list[Subscription] = []
        self._fresh: list[Subscription] = []  # not yet told that their channel is heard
        self._stopping = Event()
        self._task: Any = None
        self._ending: list[Any] = []  # listeners stopped by their last unsubscribe
        self.connections = 0
        """LISTEN connections opened so far (for tests: one per client, plus reconnects)."""

    def subscribe(
        self,
        channel: str,
        callback: Callable[[str | None], Any],
        wanted: Iterable[str] | None = None,
    ) -> Subscription:
        """Call ``callback(what)`` (awaited in the asyncio flavour; from the listener's thread
        in the sync one) for each wake-up on ``channel`` whose ``what`` is in ``wanted``, and
        ``callback(None)`` once it is listened to. The callback must be quick and must not
        raise (an error is logged). Call ``close()`` on the result when done."""
        if channel not in self._listen:
            raise ValueError(f"unknown wake-up channel {channel!r}")
        subscription = Subscription(
            self, channel, callback, None if wanted is None else frozenset(wanted)
        )
        with self._lock:
            self._subscribers.append(subscription)
            self._fresh.append(subscription)
            if self._task is None or self._stopping.is_set():
                self._stopping = Event()
                self._task = spawn(self._run, self._stopping, name="postroom-wakeups")
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """End ``subscription``; the last one to end closes the LISTEN connection (the next
        subscription opens a new one), so a client nobody listens through holds none."""
        with self._lock:
            if subscription in self._subscribers:
                self._subscribers.remove(subscription)
            if subscription in self._fresh:
                self._fresh.remove(subscription)
            if not self._subscribers and self._task is not None:
                self._stopping.set()  # the task ends within WAIT_SLICE; close() waits for it
                self._ending.append(self._task)
                self._task = None

    def close(self) -> None:
        """Stop listening (the client closes); subscribing again starts anew."""
        with self._lock:
            if self._task is not None:
                self._ending.append(self._task)
            tasks, self._ending, self._task = self._ending, [], None
            self._stopping.set()
        for task in tasks:
            try:
                gather(task, 5)
            except (TimeoutError, psycopg.Error) as exc:
                log.warning("the wake-up listener did not stop cleanly: %s", exc)

    def _run(self, stopping: Event) -> None:
        failures = 0
        while not stopping.is_set():
            try:
                conn = psycopg.Connection.connect(self._conninfo, autocommit=True)
            except psycopg.Error as exc:
                failures += 1
                if failures == 1:
                    log.warning("LISTEN connection failed, polling meanwhile: %s", exc)
                stopping.wait_timeout(reconnect_delay(failures))
                continue
            failures = 0
            self.connections += 1
            heard: set[str] = set()
            with self._lock:  # after a (re)connect, every subscriber may have missed some
                self._fresh = list(self._subscribers)
            try:
                while not stopping.is_set():
                    self._listen_to_new_channels(conn, heard)
                    for notify in conn.notifies(timeout=WAIT_SLICE):
                        what = parse(self._schema, notify.payload)
                        if what is not None:
                            self._deliver(notify.channel, what)
            except psycopg.Error as exc:
                if not stopping.is_set():
                    log.warning("LISTEN connection lost, reconnecting: %s", exc)
            finally:
                conn.close()

    def _listen_to_new_channels(self, conn: psycopg.Connection[Any], heard: set[str]) -> None:
        with self._lock:
            fresh, self._fresh = self._fresh, []
        for channel in sorted({s.channel for s in fresh} - heard):
            conn.execute(self._listen[channel])
            heard.add(channel)
        for subscription in fresh:
            self._call(subscription, None)

    def _deliver(self, channel: str, what: str) -> None:
        with self._lock:
            subscribers = [s for s in self._subscribers if s.channel == channel]
        for subscription in subscribers:
            wanted = subscription.wanted
            if wanted is None or what in wanted:
                self._call(subscription, what)

    def _call(self, subscription: Subscription, what: str | None) -> None:
        try:
            subscription.callback(what)
        except Exception:  # a subscriber's bug must not stop the others' wake-ups
            log.exception("a wake-up subscriber on %s failed", subscription.channel)


def send_wakeups(
    conn: psycopg.Connection[Any], db: Database, channel: str, whats: Iterable[str]
) -> None:
    """Send a wake-up about each of ``whats`` on ``channel`` in ``conn``'s transaction (they
    are delivered when it commits). ``db`` is the database handle (its schema and queries)."""
    payloads = [payload(db.schema, what) for what in sorted(set(whats))]
    if payloads:
        conn.execute(db.q("send_wakeups"), {"channel": channel, "payloads": payloads})
