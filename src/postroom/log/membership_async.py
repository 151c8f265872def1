"""One consumer's membership in its group: heartbeats, rebalances and partition leases.

No coordinator and no leader: whichever member's heartbeat finds the member set changed (a join,
a clean leave, an expired session, a topic that grew or went away) runs the rebalance, under the
group row lock, with the I/O-free sticky assignment (``assignment.py``), and writes each
partition's target. Members then converge by themselves: a target takes a partition once it is
free (with a new epoch), and the holder frees it once its in-flight batch is committed or
abandoned. Every change is announced on the ``postroom_groups`` channel, so hand-overs take
round trips, not heartbeat intervals; the heartbeat also wakes when another member's session is
due to expire, so a crashed member's partitions move right after its session timeout.

Each consumer instance joins with its own random instance token, sent with every heartbeat,
acquire, release and leave (and by the consumer with its commits and claims): a later join with
the same member id takes the id over, and the server refuses the older instance for good
(``InstanceFenced``). ``renewed_until`` says until when the session is surely live, measured
from the start of the last heartbeat that renewed it: past it, the consumer stops delivering.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable
from typing import Any

import psycopg

from .._acompat import AEvent, agather, asleep, aspawn
from .._db_async import AsyncDatabase
from .._dbshared import translate_errors
from .._reconnect import reconnect_delay
from .._retention_async import AsyncRetentionRunner
from .._wakeups import GROUPS, Subscription
from ..errors import InstanceFenced, PostroomError, TopicNotFound
from .assignment import assign
from .metadata_async import AsyncTopicCache
from .partitions import Lease, PartitionState
from .records import TopicMeta

log = logging.getLogger("postroom.groups")

CHANNEL = "postroom_groups"
DEFAULT_MAX_POLL_INTERVAL = 300.0
"""Seconds a member may go without polling before it leaves its group (Kafka's default)."""
WAIT_SLICE = 0.2
"""Longest single wait for a notification (``leave()`` ends it at once)."""


class AsyncMembership:
    """Keeps one member's session and leases current in the background.

    ``leases`` is replaced as a whole (never mutated) whenever it changes and ``version`` is
    bumped, so the consumer reads a consistent snapshot from another thread or task.
    It reaches the consumer's partition state only through ``state.release_idle`` (called
    with the leases being handed over; it returns those the consumer has no batch in flight
    on, which are released at once) and ``state.busy`` (a transactional batch is open).
    """

    def __init__(
        self,
        db: AsyncDatabase,
        topics_cache: AsyncTopicCache,
        group: str,
        member_id: str,
        topic_names: list[str],
        session_timeout: float,
        state: PartitionState,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
    ) -> None:
        self._db = db
        self._topics_cache = topics_cache
        self.group = group
        self.member_id = member_id
        self._topic_names = topic_names
        self.session_timeout = session_timeout
        self._state = state
        self.leases: dict[tuple[int, int], Lease] = {}
        self.metas: dict[int, TopicMeta] = {}
        self.version = 0
        self.generation_changes = 0
        self._wakeups: Subscription | None = None  # on the client's one listener
        self._announced = AEvent()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._stop = AEvent()
        self._poke = AEvent()
        self._task: Any = None
        self._retention_stop = AEvent()
        self._retention_task: Any = None
        self._next_wait = session_timeout / 3
        self.max_poll_interval = max_poll_interval
        self.last_poll = time.monotonic()
        self.poll_expired = False
        """Set when the member left the group for not polling within ``max_poll_interval``."""
        self.instance = secrets.token_hex(16)
        """This instance's token: a later join with the same member id refuses it for good."""
        self._joined = False
        self.fenced: InstanceFenced | None = None
        """Set once a newer instance with the same member id took this one's place."""
        self.renewed_until = 0.0
        """Monotonic time until which the session is surely live: the start of the last
        heartbeat that renewed it, plus the session timeout (the server counts from later)."""
        self.beats = 0
        """Lease lists read from the server (``group_acquire`` calls that succeeded)."""

    # -- life cycle -------------------------------------------------------------------------

    async def join(self) -> None:
        """Register, take part in the rebalance, and wait (up to 1.5 session timeouts) until
        every partition assigned to this member is taken; then keep heartbeating. Partitions
        still held by others then (a long batch in flight) come in a later ``poll()``. Also
        rejoins after the member left for exceeding ``max_poll_interval``: with the same
        instance token, so a newer instance that took the member id meanwhile is not fenced
        by the older one coming back (this one is: :class:`InstanceFenced`)."""
        if self.fenced is not None:
            raise self.fenced
        self.poll_expired = False
        self.last_poll = time.monotonic()
        await self._connect_listener()
        try:
            try:
                registered = await self._join_beat()
            except InstanceFenced as exc:
                self.fence(exc)
                raise
            # Long enough for a paused holder's session to run out (it cannot release).
            deadline = time.monotonic() + 1.5 * self.session_timeout + 0.5
            while not registered or any(lease.state == "pending" for lease in self.leases.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break  # not registered yet: the heartbeat loop goes on trying
                await self._wait(min(remaining, self._next_wait))
                registered = await self._join_beat()
        except BaseException:
            await self._close_listener()
            await self._close_connection()
            raise
        self._task = aspawn(self._run, name=f"postroom-member-{self.member_id}")
        interval = self._db.options.retention_interval()
        if interval is not None and self._retention_task is None:
            runner = AsyncRetentionRunner(
                self._db, interval=interval, stopping=self._retention_stop
            )
            self._retention_task = aspawn(runner.run, name=f"postroom-retention-{self.member_id}")

    async def leave(self) -> None:
        """Stop heartbeating and leave the group at once: its partitions move now."""
        self._stop.set()
        self._announced.set()  # ends the heartbeat loop's wait now, not after its slice
        self._retention_stop.set()
        if self._retention_task is not None:
            try:
                await agather(self._retention_task, self.session_timeout)
            except (TimeoutError, psycopg.Error) as exc:  # the leave goes on regardless
                log.warning("member %s: retention runner: %s", self.member_id, exc)
            self._retention_task = None
        if self._task is not None:
            try:
                await agather(self._task, self.session_timeout)
            except TimeoutError:
                log.warning("member %s: heartbeat loop did not stop in time", self.member_id)
            self._task = None
        await self._send_leave()
        self.leases = {}
        self.version += 1
        await self._close_listener()
        await self._close_connection()

    async def _join_beat(self) -> bool:
        """One heartbeat of a join; False when the group's rows are locked past this
        member's lock_timeout (another session holds them: a rebalance, an admin), to be
        tried again at the next heartbeat rather than raised out of ``poll()``."""
        try:
            await self._beat(joining=not self._joined)
        except psycopg.errors.LockNotAvailable:
            log.debug("group %s: heartbeat waits, the group is locked", self.group)
            return False
        self._joined = True
        return True

    def polled(self) -> None:
        """The consumer polled (or claimed a batch): restart the ``max_poll_interval`` clock."""
        self.last_poll = time.monotonic()

    async def _send_leave(self) -> None:
        if self.fenced is not None:
            return  # the member id is the newer instance's now: nothing of it is ours to leave
        try:
            held = [lease for lease in self.leases.values() if lease.state != "pending"]
            async with self._db.connection() as conn:
                await conn.execute(
                    self._db.q("group_leave"),
                    {
                        "group": self.group,
                        "member": self.member_id,
                        "topic_ids": [lease.topic_id for lease in held],
                        "partitions": [lease.partition for lease in held],
                        "epochs": [lease.epoch for lease in held],
                        "instance": self.instance,
                    },
                )
        except (psycopg.Error, PostroomError) as exc:
            log.warning("member %s could not leave group %s: %s", self.member_id, self.group, exc)

    async def _leave_for_poll_interval(self) -> None:
        """Kafka's ``max.poll.interval.ms``: a member whose consumer stopped polling (a stuck
        handler) cannot hand over a partition it was asked to give up, so it leaves the group
        and its partitions move. Its next ``commit()`` raises ``Fenced``; ``poll()`` rejoins."""
        log.warning(
            "member %s of group %s did not poll for %.1f s (max_poll_interval %g s): leaving "
            "the group so its partitions move; its next poll() rejoins",
            self.member_id,
            self.group,
            time.monotonic() - self.last_poll,
            self.max_poll_interval,
        )
        await self._send_leave()
        self.poll_expired = True
        self.leases = {}
        self.version += 1
        await self._close_listener()
        await self._close_connection()

    def _poll_overdue(self) -> bool:
        return not self._state.busy and time.monotonic() - self.last_poll > self.max_poll_interval

    def _until_poll_due(self) -> float:
        if self._state.busy:
            return self._next_wait
        return max(0.01, self.last_poll + self.max_poll_interval - time.monotonic() + 0.01)

    async def release(self, leases: Iterable[Lease]) -> None:
        """Hand partitions back (after their batch in flight), so their targets take them."""
        chosen = list(leases)
        if not chosen:
            return
        async with self._db.connection() as conn:
            await conn.execute(
                self._db.q("group_release"),
                {
                    "group": self.group,
                    "member": self.member_id,
                    "topic_ids": [lease.topic_id for lease in chosen],
                    "partitions": [lease.partition for lease in chosen],
                    "epochs": [lease.epoch for lease in chosen],
                    "instance": self.instance,
                },
            )

    def fence(self, exc: InstanceFenced) -> None:
        """A newer instance with this member id joined (the server refused this one's
        heartbeat, commit or claim): hold nothing from now on, for good; the heartbeat loop
        ends at its next turn."""
        if self.fenced is None:
            log.error(
                "member %s of group %s is fenced: a newer instance with this member id "
                "joined, so this one stops delivering and committing for good",
                self.member_id,
                self.group,
            )
        self.fenced = exc
        self.leases = {}
        self.version += 1
        self._stop.set()

    def poke(self) -> None:
        """Make the heartbeat loop beat now (a claim or commit found a lease lost)."""
        self._poke.set()

    # -- the heartbeat loop -----------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0  # in a row
        while not self._stop.is_set():
            try:
                await self._wait(min(self._next_wait, self._until_poll_due()))
                if self._stop.is_set():
                    return
                if self._poll_overdue():
                    await self._leave_for_poll_interval()
                    return
                if await self._join_beat():
                    failures = 0
            except InstanceFenced as exc:
                self.fence(exc)
                await self._close_listener()
                await self._close_connection()
                return
            except (psycopg.Error, PostroomError) as exc:
                if self._db.pool.closed:
                    return  # the client was closed under a consumer left open
                failures += 1
                backoff = reconnect_delay(failures)
                log.log(
                    logging.WARNING if failures == 1 else logging.DEBUG,
                    "member %s of group %s: heartbeat failed (%s); retrying in %.1f s",
                    self.member_id,
                    self.group,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                    backoff,
                )
                await self._close_listener()
                await self._close_connection()
                await asleep(backoff)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        """The heartbeat loop's own connection, in autocommit: a heartbeat or an acquire is
        one statement, so a paused process never sits in a transaction holding row locks.
        Its lock_timeout keeps the loop from waiting on another member's locks for long
        enough to miss its own heartbeats."""
        if self._conn is None or self._conn.closed:
            self._conn = None
            conn = await psycopg.AsyncConnection.connect(self._db.conninfo, autocommit=True)
            ms = str(max(1, round(self.session_timeout * 1000 / 4)))
            try:
                await conn.execute(self._db.q("member_session"), {"lock_ms": ms})
            except BaseException:
                # Not ours to keep yet: a poll cancelled mid-join (a relay stopped as it
                # starts) left it open, and nothing else would close it.
                await conn.close()
                raise
            self._conn = conn
        return self._conn

    async def _close_connection(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                await conn.close()
            except psycopg.Error:
                pass  # already broken

    async def _beat(self, *, joining: bool) -> None:
        metas = await self._resolve_topics()
        with translate_errors(self._db.schema):
            conn = await self._connection()
            started = time.monotonic()  # the server's session starts later: a safe bound
            cur = await conn.execute(
                self._db.q("group_heartbeat"),
                {
                    "group": self.group,
                    "member": self.member_id,
                    "topic_ids": sorted(metas),
                    "session_ms": max(1, round(self.session_timeout * 1000)),
                    "joining": joining,
                    "instance": self.instance,
                },
            )
            row = await cur.fetchone()
        # A session that ran out before this heartbeat (a pause past the session timeout) may
        # have lost its partitions meanwhile: it counts as renewed only once the lease list
        # below is current, or poll() would deliver from the leases it held before the pause
        # (partitions another member now holds, from stale positions).
        lapsed = started >= self.renewed_until
        if not lapsed:
            self.renewed_until = max(self.renewed_until, started + self.session_timeout)
        rebalance, next_expiry = (True, None) if row is None else row
        interval = self.session_timeout / 3
        # Wake just after the next session expiry: a crashed member's partitions move then.
        self._next_wait = interval if next_expiry is None else min(interval, next_expiry + 0.02)
        self._next_wait = max(self._next_wait, 0.01)
        if rebalance:
            await self._rebalance()
        await self._acquire()
        if lapsed:
            self.renewed_until = max(self.renewed_until, started + self.session_timeout)

    async def _resolve_topics(self) -> dict[int, TopicMeta]:
        metas: dict[int, TopicMeta] = {}
        for name in self._topic_names:
            try:
                meta = await self._topics_cache.get(name)
            except TopicNotFound:
                continue  # deleted: its leases go; a topic created again is found next time
            metas[meta.id] = meta
        if set(metas) != set(self.metas) or metas != self.metas:
            self.metas = metas
        return metas

    async def _rebalance(self) -> None:
        conn = await self._connection()
        try:
            with translate_errors(self._db.schema):
                async with conn.transaction():
                    row, members, keys = await self._rebalance_in(conn)
        except psycopg.errors.LockNotAvailable:
            # group_lock does not wait (NOWAIT): another member is rebalancing now, or a
            # session sits on the lock. The next heartbeat asks again; acquiring goes on.
            log.debug("group %s: rebalance skipped, the group is locked", self.group)
            return
        self.generation_changes += 1
        log.info(
            "group %s rebalanced by %s: generation %s, %d member(s), %d partition(s)",
            self.group,
            self.member_id,
            "(incomplete: busy leases)" if row is None or row[0] is None else row[0],
            len(members),
            len(keys),
        )

    async def _rebalance_in(
        self, conn: psycopg.AsyncConnection[Any]
    ) -> tuple[Any, dict[str, list[int]], list[tuple[int, int]]]:
        """One rebalance in the caller's transaction: lock, read, assign, write."""
        ms = str(max(1, round(self.session_timeout * 1000)))
        await conn.execute(self._db.q("batch_idle_timeout"), {"ms": ms})
        cur = await conn.execute(self._db.q("group_lock"), {"group": self.group})
        members = {member: list(topics) for member, topics in await cur.fetchall()}
        topic_ids = sorted({t for topics in members.values() for t in topics})
        cur = await conn.execute(
            self._db.q("group_holders"), {"group": self.group, "topic_ids": topic_ids}
        )
        counts: dict[int, int] = {}
        holders: dict[tuple[int, int], str | None] = {}
        for topic_id, partition, holder in await cur.fetchall():
            counts[topic_id] = max(counts.get(topic_id, 0), partition + 1)
            holders[(topic_id, partition)] = holder
        targets = assign(counts, members, holders)
        keys = sorted(targets)
        cur = await conn.execute(
            self._db.q("group_assign"),
            {
                "group": self.group,
                "members": sorted(members),
                "topic_ids": [k[0] for k in keys],
                "partitions": [k[1] for k in keys],
                "targets": [targets[k] for k in keys],
            },
        )
        row = await cur.fetchone()
        return row, members, keys

    async def _acquire(self) -> None:
        with translate_errors(self._db.schema):
            conn = await self._connection()
            cur = await conn.execute(
                self._db.q("group_acquire"),
                {"group": self.group, "member": self.member_id, "instance": self.instance},
            )
            rows = await cur.fetchall()
        self.beats += 1
        leases = {(t, p): Lease(t, p, epoch, state) for t, p, epoch, state in rows}
        if leases != self.leases:
            self.leases = leases
            self.version += 1
        revoking = [lease for lease in leases.values() if lease.state == "revoking"]
        if revoking:
            await self.release(self._state.release_idle(revoking))

    # -- notifications ----------------------------------------------------------------------

    async def _connect_listener(self) -> None:
        if self._wakeups is None:  # the client's one listener (_listener_async)
            self._wakeups = await self._db.wakeups.subscribe(GROUPS, self._announce, [self.group])

    async def _announce(self, what: str | None) -> None:
        if what is not None:  # None: listening (again); the heartbeat covers what was missed
            self._announced.set()

    async def _wait(self, timeout: float) -> None:
        """Until a change in this group is announced, a stop request, or ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._poke.is_set():
                self._poke.clear()
                return
            if self._wakeups is None:
                await self._connect_listener()
            if await self._announced.wait_timeout(min(remaining, WAIT_SLICE)):
                self._announced.clear()
                return

    async def _close_listener(self) -> None:
        if self._wakeups is not None:
            subscription, self._wakeups = self._wakeups, None
            subscription.close()
