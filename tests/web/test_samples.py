"""The dashboard's time series are kept in the database (migration 0036, the ring
``web_samples``): they survive a restart, the ring stays bounded (in rows and in pages, with
autovacuum off), several samplers write one sample per interval between them, and a role that
may not record samples still renders every page, from samples kept in memory."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import postroom
import postroom.web
from postroom.web._live import Sampler
from postroom.web._samples import Sample, from_points, pick, to_points
from postroom.web._store import WebStore

from ..log.test_faults import own_server
from ..roles import login_role
from ..signals import wait_for
from .conftest import DashboardServer
from .seed import Seeded
from .test_browser import PAGES

__all__ = ["own_server"]  # the fixture, imported for use here


def recorded(dsn: str) -> list[float]:
    """The times of the samples in the ring, oldest first."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM sampled_at)::float8 FROM postroom.web_samples ORDER BY 1"
        ).fetchall()
    return [r[0] for r in rows]


def age_the_ring(dsn: str) -> None:
    """Move every recorded sample an hour back: the next round finds no sample of its interval
    (the interval passing, without sleeping through it)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE postroom.web_samples SET sampled_at = sampled_at - interval '1 hour'")


def with_samplers(
    dsn: str, count: int, body: Callable[[list[Sampler]], Awaitable[None]], **options: Any
) -> None:
    """Run ``body`` with ``count`` samplers, each on a client and a store of its own."""

    async def main() -> None:
        clients = [await postroom.connect_async(dsn) for _ in range(count)]
        stores = [WebStore(c.conninfo, c.schema) for c in clients]
        try:
            for store in stores:
                await store.open()
            await body([Sampler(c, s, **options) for c, s in zip(clients, stores, strict=True)])
        finally:
            for store in stores:
                await store.close()
            for c in clients:
                await c.close()

    asyncio.run(main())


def test_a_sample_round_trips_through_its_points() -> None:
    sample = Sample(1.0, {"t": 5}, {"g": 2}, {"g": 9}, {"q": 0.5}, {"q": 1}, {"q": 0.25})
    assert from_points(1.0, to_points(sample)) == sample
    assert from_points(1.0, {**to_points(sample), "v": 99}) is None  # another version's
    assert from_points(1.0, {"v": 1, "topics": []}) is None
    later = Sample(3.0, {"t": 9}, {"g": 1}, {"g": 13}, {"q": 2.0}, {"q": 3}, {})
    assert pick("rate", later, sample) == {"t": 2.0}
    assert pick("consumed", later, sample) == {"g": 2.0}
    assert pick("done", later, None) == {"q": 2.0}  # a rate of its own round
    assert pick("failures", later, sample) == {"q": 1.0}


def test_samples_survive_a_restart_of_the_dashboard(
    serve: Callable[..., DashboardServer], seeded: Seeded, dsn: str
) -> None:
    first = serve(sample_interval=0.2)
    wait_for(lambda: len(recorded(dsn)) >= 4, what="four samples recorded")
    first.stop()
    before = recorded(dsn)
    # A long interval: the new dashboard records nothing yet, and shows what the first did.
    second = serve(sample_interval=300)
    lag = httpx.get(second.url + "/api/series?pick=lag").json()
    assert lag["t"] == pytest.approx(before)
    assert lag["series"], "no lag series from the recorded samples"
    assert httpx.get(second.url + "/api/series?pick=rate").json()["t"] == pytest.approx(before)
    assert recorded(dsn) == before


def ring_pages(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT pg_relation_size('postroom.web_samples') / current_setting('block_size')::int"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_ring_stays_bounded_in_rows_and_pages(own_server: tuple[str, Path]) -> None:
    """On a PostgreSQL of its own: a transaction held open anywhere on the shared servers (the
    suite's other workers, in other databases too) keeps the overwritten versions and grows
    the ring past its bound (3 and 4 pages, and 14 with one held open, were seen)."""
    dsn = own_server[0]
    pages: list[int] = []

    async def body(samplers: list[Sampler]) -> None:
        [sampler] = samplers
        for rounds in (120, 480):
            for _ in range(rounds):
                await sampler.sample()
            pages.append(ring_pages(dsn))
        assert len(sampler.samples) == 3
        assert [s.at for s in sampler.samples] == pytest.approx(recorded(dsn))

    # An interval of a microsecond: every round records (transactions' clocks differ).
    with_samplers(dsn, 1, body, interval=1e-6, history=3, max_age=3600)
    assert len(recorded(dsn)) == 3
    # Overwrites of 3 rows are HOT updates, whose old versions are pruned in the page itself,
    # autovacuum or not: the 480 after the first 120 add no page (an insert and a delete a
    # sample grew by about a page every 35 writes when measured).
    assert pages[1] <= pages[0] and pages[1] <= 2, f"the ring grew: {pages} pages"


def test_a_smaller_ring_prunes_the_slots_beyond_it(dsn: str) -> None:
    async def wide(samplers: list[Sampler]) -> None:
        for _ in range(6):
            await samplers[0].sample()

    async def narrow(samplers: list[Sampler]) -> None:
        await samplers[0].sample()
        assert len(samplers[0].samples) == 2

    with_samplers(dsn, 1, wide, interval=1e-6, history=6, max_age=3600)
    assert len(recorded(dsn)) == 6
    with_samplers(dsn, 1, narrow, interval=1e-6, history=2, max_age=3600)
    assert len(recorded(dsn)) == 2


def test_two_samplers_write_one_sample_per_interval(dsn: str) -> None:
    async def body(samplers: list[Sampler]) -> None:
        for round_ in range(1, 4):
            await asyncio.gather(*(s.sample() for s in samplers))
            assert len(recorded(dsn)) == round_
            await asyncio.gather(*(s.sample() for s in samplers))  # the same interval again
            assert len(recorded(dsn)) == round_
            age_the_ring(dsn)
        # Both draw the same series: the ring's (as it was when each read it).
        first, second = ([s.at for s in sampler.samples] for sampler in samplers)
        assert first == second and len(first) == 3

    with_samplers(dsn, 2, body, interval=600, history=10)


def _grant_reads(dsn: str, role: str, *, record: bool) -> None:
    """The grants docs/dashboard.md gives a dashboard's role: reads, and (``record``) the
    function that records samples."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "GRANT USAGE ON SCHEMA postroom TO {role};"
                " GRANT SELECT ON ALL TABLES IN SCHEMA postroom TO {role}"
            ).format(role=sql.Identifier(role))
        )
        if record:
            conn.execute(
                sql.SQL(
                    "GRANT EXECUTE ON FUNCTION"
                    " postroom.record_web_sample(jsonb, interval, integer) TO {role}"
                ).format(role=sql.Identifier(role))
            )


def test_a_role_without_the_grant_keeps_samples_in_memory_and_renders_pages(
    seeded: Seeded, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="postroom.web")
    with login_role(dsn, "dash_mem") as role:
        _grant_reads(dsn, role, record=False)
        app = postroom.web.app(url=make_conninfo(dsn, user=role), sample_interval=0.2)
        server = DashboardServer(app)
        try:
            for path in [*PAGES, "/api/series?pick=lag"]:
                assert httpx.get(server.url + path).status_code == 200, path
            sampler = app.state.dashboard.sampler
            wait_for(lambda: len(sampler.samples) >= 3, what="three samples in memory")
            assert not sampler.durable
            assert len(httpx.get(server.url + "/api/series?pick=lag").json()["t"]) >= 3
        finally:
            server.stop()
    assert recorded(dsn) == []
    said = [r for r in caplog.records if "cannot keep samples in the database" in r.message]
    assert len(said) == 1, [r.message for r in caplog.records]


def test_the_documented_grant_lets_a_read_only_role_record_samples(
    seeded: Seeded, dsn: str
) -> None:
    with login_role(dsn, "dash_rec") as role:
        _grant_reads(dsn, role, record=True)
        app = postroom.web.app(url=make_conninfo(dsn, user=role), sample_interval=0.2)
        server = DashboardServer(app)
        try:
            wait_for(lambda: len(recorded(dsn)) >= 2, what="two samples recorded by the role")
            assert app.state.dashboard.sampler.durable
            # Still no writer of the engine's tables.
            with psycopg.connect(make_conninfo(dsn, user=role)) as conn:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("DELETE FROM postroom.web_samples")
        finally:
            server.stop()
