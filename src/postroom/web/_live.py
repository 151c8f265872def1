"""What changes over time: the sampler (charts and counters) and the live wake-ups (SSE).

Time series come from periodic samples recorded in the database: the ring ``web_samples``
(migration 0036; ``history`` rows, one sample every ``interval`` seconds), so a restarted
dashboard keeps its charts and every dashboard process of a schema (and ``postroom metrics
--serve``) draws the same series. Each process samples every interval; ``record_web_sample``
writes a sample only if none of the last interval is there, so several samplers write one
between them, and each process then reads the ring's new rows into its own copy
(:attr:`Sampler.samples`), which the charts are drawn from. A role that may not record samples
(no EXECUTE on ``record_web_sample``, no SELECT on ``web_samples``, a schema before 0036, a
read-only standby) keeps its samples in that copy alone, as before: history then starts when
the process starts, and the log says so once.

Each sample costs what the overview costs: counter rows, index probes, planner estimates, and
the finished jobs since the previous sample (through the BRIN index on ``finished_at``, so
only the newest block ranges are read).

Live view: one connection LISTENs to the publish, job and group channels; every wake-up bumps a
version, and each server-sent-event stream sends at most one ``refresh`` per ``debounce``
seconds. If LISTEN is unavailable (a pooler in transaction mode, a lost connection) the
sampler's ticks bump the version instead: polling is the fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors

from ._samples import Sample, from_points, pick, to_points
from ._store import WebStore

if TYPE_CHECKING:
    from postroom import AsyncClient

log = logging.getLogger("postroom.web")

# Run-time histogram buckets in seconds (Prometheus' defaults, extended for long jobs).
RUN_TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


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


# What says this role (or this schema, or this server) cannot record or read the samples in the
# database: the sampler then keeps them in memory. Anything else is an outage, tried again.
NOT_RECORDABLE = (
    pg_errors.InsufficientPrivilege,  # no EXECUTE on record_web_sample, no SELECT on web_samples
    pg_errors.UndefinedFunction,  # a schema migrated before 0036
    pg_errors.UndefinedTable,
    pg_errors.ReadOnlySqlTransaction,  # a hot standby
)


class Sampler:
    """Samples the schema every ``interval`` seconds, records the sample in the database's ring
    of ``history`` samples (unless another sampler recorded one this interval) and keeps a copy
    of that ring in :attr:`samples`, from which :meth:`series` and :meth:`latest` draw. Where
    the ring cannot be recorded or read, :attr:`samples` is a ring in memory alone."""

    def __init__(
        self,
        client: AsyncClient,
        store: WebStore,
        *,
        interval: float,
        history: int = 720,
        max_age: float | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self.interval = interval
        self.history = history
        # Recorded samples older than this are not drawn (a ring a dashboard stopped long ago
        # left); twice the ring's span, as rounds take longer than the interval.
        self.max_age = 2 * interval * history if max_age is None else max_age
        self.samples: deque[Sample] = deque(maxlen=history)
        self.durable = True  # False once the database refused: samples stay in memory
        self.totals = Totals()
        self.version = 0
        self.listening = False  # set by Live: ticks then need not refresh the views
        self.changed = asyncio.Event()
        self._finished_after: datetime | None = None
        self._failed_before: dict[str, int] | None = None
        self._round_at: float | None = None  # monotonic time of the previous round
        self._read_until: datetime | None = None  # the newest recorded sample read
        self.jobs_readable = True  # False for a role that may not read jobs (a consumer role)

    def bump(self) -> None:
        self.version += 1
        self.changed.set()
        self.changed = asyncio.Event()

    async def sample(self) -> Sample:
        """One round: read the schema, record the sample (or keep it in memory), read the
        samples recorded since the last round (this one's or another process's)."""
        sample = await self.read()
        if self.durable:
            try:
                await self.store.record_sample(
                    to_points(sample), timedelta(seconds=self.interval), self.history
                )
                await self._read_recorded()
                return sample
            except NOT_RECORDABLE as exc:
                self.durable = False
                log.warning(
                    "dashboard sampler: cannot keep samples in the database (%s); keeping them "
                    "in this process's memory: charts start with this process (docs/dashboard.md"
                    ', "Time series", names the grant)',
                    str(exc).strip(),
                )
        self.samples.append(sample)
        return sample

    async def _read_recorded(self) -> None:
        window = timedelta(seconds=self.max_age)
        rows = await self.store.rows(
            "web_samples_since", {"after": self._read_until, "window": window}
        )
        for sampled_at, points in rows:
            self._read_until = sampled_at
            recorded = from_points(sampled_at.timestamp(), points)
            if recorded is not None:
                self.samples.append(recorded)

    async def read(self) -> Sample:
        """The schema's counters and gauges now, and the jobs finished since the last round."""
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
        now = time.monotonic()
        # A rate over this sampler's own round, so it stands on its own whoever records it.
        elapsed = None if self._round_at is None else max(now - self._round_at, 1e-6)
        self._round_at = now
        return Sample(
            time.time(),
            topics,
            lag,
            consumed,
            {} if elapsed is None else {q: n / elapsed for q, n in done.items()},
            failed,
            {q: sum(v) / len(v) for q, v in run.items()},
        )

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

    def series(self, chart: str, name: str | None = None) -> dict[str, Any]:
        """One chart's data: ``{"t": [...], "series": {label: [...]}}``. ``chart`` is one of
        :data:`~._samples.PICKS`: ``rate`` (messages/s per topic), ``lag`` (per group),
        ``consumed`` (messages/s per group), ``relayed`` and ``relay_pending`` (those two for
        the relay groups, ``relay.*``), ``done`` (jobs/s per queue), ``failed`` (failed jobs
        per queue), ``failures`` (jobs failed/s per queue) or ``runtime`` (mean run seconds per
        queue)."""
        samples = list(self.samples)
        times = [s.at for s in samples]
        out: dict[str, list[float | None]] = {}
        for i, s in enumerate(samples):
            values = pick(chart, s, samples[i - 1] if i else None)
            for label, value in values.items():
                if name is not None and label != name:
                    continue
                out.setdefault(label, [None] * len(samples))[i] = value
        return {"t": times, "series": out}

    def latest(self, chart: str) -> dict[str, float]:
        """The newest value of each series of ``chart`` (see :meth:`series`)."""
        samples = list(self.samples)[-2:]
        if not samples:
            return {}
        return pick(chart, samples[-1], samples[0] if len(samples) == 2 else None)


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
        # The data says whether the server listens: the page's label shows "live" only then
        # (with LISTEN failing, the stream still carries the sampler's ticks: "polling").
        yield f"event: hello\ndata: {self._state()}\n\n"
        while True:
            if self.sampler.version == seen:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.sampler.changed.wait(), heartbeat)
            if self.sampler.version == seen:
                yield ": ping\n\n"
                continue
            await asyncio.sleep(self.debounce)  # let a burst of wake-ups become one refresh
            seen = self.sampler.version
            yield f"event: refresh\ndata: {self._state()}\n\n"

    def _state(self) -> str:
        """An event's data: the time, the sampler's version and whether LISTEN holds."""
        return json.dumps(
            {
                "at": datetime.now(UTC).isoformat(),
                "version": self.sampler.version,
                "listening": self.listening,
            }
        )
