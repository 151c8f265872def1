"""What changes over time: the sampler (charts and counters) and the live wake-ups (SSE).

Time series come from periodic samples kept in memory by the dashboard process: a bounded ring
(``history`` samples, one every ``interval`` seconds), so a read-only role suffices and nothing
is written to the database. Each sample costs what the overview costs: counter rows, index
probes, planner estimates, and the finished jobs since the previous sample (through the BRIN
index on ``finished_at``, so only the newest block ranges are read).

Live view: one connection LISTENs to the publish, job and group channels; every wake-up bumps a
version, and each server-sent-event stream sends at most one ``refresh`` per ``debounce``
seconds. If LISTEN is unavailable (a pooler in transaction mode, a lost connection) the
sampler's ticks bump the version instead: polling is the fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg

from ._store import WebStore

if TYPE_CHECKING:
    from postroom import AsyncClient

log = logging.getLogger("postroom.web")

# Run-time histogram buckets in seconds (Prometheus' defaults, extended for long jobs).
RUN_TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


@dataclass
class Sample:
    at: float
    topic_high_water: dict[str, int]
    group_lag: dict[str, int]
    group_consumed: dict[str, int]
    jobs_done: dict[str, int]
    jobs_failed: dict[str, int]
    run_seconds: dict[str, float]


@dataclass
class Totals:
    """Counters since this process started, from the finished jobs the sampler saw."""

    finished: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    retried: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    failed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Per queue: counts per bucket (non-cumulative), sum and count of run times.
    buckets: dict[str, list[int]] = field(default_factory=dict)
    run_sum: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    run_count: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def observe(self, queue: str, state: str, attempts: int, seconds: float) -> None:
        self.finished[(queue, state)] += 1
        if attempts > 1:
            self.retried[queue] += attempts - 1
        counts = self.buckets.setdefault(queue, [0] * (len(RUN_TIME_BUCKETS) + 1))
        index = next((i for i, b in enumerate(RUN_TIME_BUCKETS) if seconds <= b), -1)
        counts[index] += 1
        self.run_sum[queue] += seconds
        self.run_count[queue] += 1


class Sampler:
    """Samples the schema every ``interval`` seconds into a ring of ``history`` samples."""

    def __init__(
        self, client: AsyncClient, store: WebStore, *, interval: float, history: int = 720
    ) -> None:
        self.client = client
        self.store = store
        self.interval = interval
        self.samples: deque[Sample] = deque(maxlen=history)
        self.totals = Totals()
        self.version = 0
        self.listening = False  # set by Live: ticks then need not refresh the views
        self.changed = asyncio.Event()
        self._finished_after: datetime | None = None
        self._failed_before: dict[str, int] | None = None
        self.jobs_readable = True  # False for a role that may not read jobs (a consumer role)

    def bump(self) -> None:
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()

    async def sample(self) -> Sample:
        topics = {t.name: t.high_water for t in await self.client.list_topics()}
        lag = {g.name: g.lag for g in await self.client.list_groups()}
        if self._finished_after is None:
            self._finished_after = (await self.store.rows("web_clock"))[0][0]
        done: dict[str, int] = defaultdict(int)
        run: dict[str, list[float]] = defaultdict(list)
        failed: dict[str, int] = {}
        if self.jobs_readable:
            try:
                failed = await self._sample_jobs(done, run)
            except psycopg.errors.InsufficientPrivilege as exc:
                # The role reads the log only (docs/dashboard.md, "The database role"): the
                # log's pages and series still work; the job series stay empty.
                log.warning("dashboard sampler: no job series for this role: %s", exc)
                self.jobs_readable = False
        consumed = {g: int(n) for g, n in await self.store.rows("web_group_consumed")}
        sample = Sample(
            time.time(),
            topics,
            lag,
            consumed,
            dict(done),
            failed,
            {q: sum(v) / len(v) for q, v in run.items()},
        )
        self.samples.append(sample)
        return sample

    async def _sample_jobs(
        self, done: dict[str, int], run: dict[str, list[float]]
    ) -> dict[str, int]:
        """Jobs finished since the last sample (into ``done`` and ``run``, and the totals);
        returns the failed jobs per queue."""
        while True:
            rows = await self.store.rows(
                "web_finished_since", {"after": self._finished_after, "limit": 10_000}
            )
            for queue, state, attempts, finished_at, seconds in rows:
                self.totals.observe(queue, state, attempts, max(seconds or 0.0, 0.0))
                if state == "done":
                    done[queue] += 1
                    run[queue].append(seconds or 0.0)
                self._finished_after = finished_at
            if len(rows) < 10_000:
                break
        failed = {q: int(n) for q, n in await self.store.rows("web_failed_count")}
        if self._failed_before is not None:
            for queue, n in failed.items():
                self.totals.failed[queue] += max(n - self._failed_before.get(queue, 0), 0)
        self._failed_before = failed
        return failed

    async def run(self) -> None:
        while True:
            try:
                await self.sample()
                if not self.listening:
                    self.bump()  # the polling fallback: every tick refreshes the live views
            except (psycopg.Error, OSError) as exc:
                _raise_if_cancelled(exc)
                log.warning("dashboard sampler: %s", exc)
            _raise_if_cancelled()  # a round that swallowed its cancellation still ends here
            await asyncio.sleep(self.interval)

    def series(self, pick: str, name: str | None = None) -> dict[str, Any]:
        """One chart's data: ``{"t": [...], "series": {label: [...]}}``. ``pick`` is one of
        :data:`PICKS`: ``rate`` (messages/s per topic), ``lag`` (per group), ``consumed``
        (messages/s per group), ``relayed`` and ``relay_pending`` (those two for the relay
        groups, ``relay.*``), ``done`` (jobs/s per queue), ``failed`` (failed jobs per queue),
        ``failures`` (jobs failed/s per queue) or ``runtime`` (mean run seconds per queue)."""
        samples = list(self.samples)
        times = [s.at for s in samples]
        out: dict[str, list[float | None]] = {}
        for i, s in enumerate(samples):
            values = _pick(pick, s, samples[i - 1] if i else None)
            for label, value in values.items():
                if name is not None and label != name:
                    continue
                out.setdefault(label, [None] * len(samples))[i] = value
        return {"t": times, "series": out}

    def latest(self, pick: str) -> dict[str, float]:
        """The newest value of each series of ``pick`` (see :meth:`series`)."""
        samples = list(self.samples)[-2:]
        if not samples:
            return {}
        return _pick(pick, samples[-1], samples[0] if len(samples) == 2 else None)


def _raise_if_cancelled(exc: BaseException | None = None) -> None:
    """Raise ``CancelledError`` if the calling task was asked to stop. Two ways a loop missed it
    and ``stop()`` waited for ever (the dashboard.md snippet hung on a loaded box): a task
    cancelled inside a query may see psycopg's error for the cancelled query instead (caught as
    an outage), and on Python 3.11 ``asyncio.wait_for`` (which psycopg_pool waits for a
    connection with) returns normally when what it waits for completes as the cancellation
    arrives: the round then ended as if nothing happened. ``Task.cancelling()`` still says so."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc


PICKS = (
    "rate",
    "lag",
    "consumed",
    "relayed",
    "relay_pending",
    "done",
    "failed",
    "failures",
    "runtime",
)
RELAY_PREFIX = "relay."  # the relay groups' names (client.relay_status' default)


def _pick(pick: str, sample: Sample, previous: Sample | None) -> dict[str, float]:
    if pick == "lag":
        return {k: float(v) for k, v in sample.group_lag.items()}
    if pick == "relay_pending":
        return {k: float(v) for k, v in sample.group_lag.items() if k.startswith(RELAY_PREFIX)}
    if pick == "failed":
        return {k: float(v) for k, v in sample.jobs_failed.items()}
    if pick == "runtime":
        return dict(sample.run_seconds)
    if previous is None:
        return {}
    elapsed = max(sample.at - previous.at, 1e-6)
    if pick == "rate":
        return _rates(sample.topic_high_water, previous.topic_high_water, elapsed)
    if pick == "consumed":
        return _rates(sample.group_consumed, previous.group_consumed, elapsed)
    if pick == "relayed":
        rates = _rates(sample.group_consumed, previous.group_consumed, elapsed)
        return {k: v for k, v in rates.items() if k.startswith(RELAY_PREFIX)}
    if pick == "failures":
        # New failed jobs (a retry or delete in the same interval hides as many).
        return _rates(sample.jobs_failed, previous.jobs_failed, elapsed, new_from=0)
    if pick == "done":
        return {k: v / elapsed for k, v in sample.jobs_done.items()}
    return {}


def _rates(
    now: dict[str, int], before: dict[str, int], elapsed: float, new_from: int | None = None
) -> dict[str, float]:
    """Per name, how much ``now`` grew since ``before`` per second (0 if it went back: a reset).
    A name ``before`` lacks grew from ``new_from`` (None: it did not grow; a new topic or group
    starts where it starts)."""
    return {
        k: max(v - before.get(k, v if new_from is None else new_from), 0) / elapsed
        for k, v in now.items()
    }


class Live:
    """LISTEN/NOTIFY wake-ups for the server-sent events, with the sampler as fallback."""

    def __init__(self, store: WebStore, sampler: Sampler, *, debounce: float = 0.25) -> None:
        self.store = store
        self.sampler = sampler
        self.debounce = debounce
        self.listening = False

    async def listen(self) -> None:
        """Hold one LISTEN connection; reconnect after a pause when it is lost."""
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.store.conninfo, autocommit=True)
                async with conn:
                    await conn.execute(self.store.query("web_listen"))
                    self.listening = self.sampler.listening = True
                    self.sampler.bump()  # anything before LISTEN: show it
                    async for _ in conn.notifies():
                        self.sampler.bump()
            except (psycopg.Error, OSError) as exc:
                _raise_if_cancelled(exc)
                log.warning("dashboard live view: LISTEN failed, polling instead: %s", exc)
            _raise_if_cancelled()
            self.listening = self.sampler.listening = False
            await asyncio.sleep(5)

    async def events(self, heartbeat: float = 15.0) -> AsyncIterator[str]:
        """A server-sent-event stream: ``refresh`` after changes (debounced), comments as
        heartbeats."""
        seen = self.sampler.version
        yield f"event: hello\ndata: {datetime.now(UTC).isoformat()}\n\n"
        while True:
            if self.sampler.version == seen:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.sampler.changed.wait(), heartbeat)
            if self.sampler.version == seen:
                yield ": ping\n\n"
                continue
            await asyncio.sleep(self.debounce)  # let a burst of wake-ups become one refresh
            seen = self.sampler.version
            yield f"event: refresh\ndata: {seen}\n\n"
