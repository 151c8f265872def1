"""The dashboard's background loops end when cancelled, even when the cancellation reaches them
inside a query as one of psycopg's errors (it hung ``postroom.web.close()`` on a loaded box)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
import pytest

from postroom.web._live import Sampler


class _CancelledQueryClient:
    """A client whose query turns its cancellation into a psycopg error, as a pool or a
    cancelled statement may."""

    def __init__(self) -> None:
        self.querying = asyncio.Event()

    async def list_topics(self) -> list[Any]:
        self.querying.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise psycopg.errors.QueryCanceled("canceling statement due to user request") from None
        return []


def test_a_sampler_cancelled_inside_a_query_ends() -> None:
    async def main() -> None:
        client = _CancelledQueryClient()
        sampler = Sampler(client, store=None, interval=0.01)  # type: ignore[arg-type]
        task = asyncio.create_task(sampler.run())
        await client.querying.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)

    asyncio.run(main())


class _SwallowingSampler(Sampler):
    """A sampler whose round swallows its cancellation and ends as if nothing happened, as a
    round did when ``asyncio.wait_for`` (Python 3.11; psycopg_pool waits for a connection with
    it) returned because what it waited for completed as the cancellation arrived."""

    querying = asyncio.Event()

    async def sample(self) -> Any:
        self.querying.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()


def test_a_sampler_whose_round_swallowed_its_cancellation_ends() -> None:
    async def main() -> None:
        sampler = _SwallowingSampler(None, None, interval=3600)  # type: ignore[arg-type]
        sampler.querying = asyncio.Event()
        task = asyncio.create_task(sampler.run())
        await sampler.querying.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)

    asyncio.run(main())
