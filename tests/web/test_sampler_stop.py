"""The dashboard's background loops end when cancelled, even when the cancellation reaches them
inside a query as one of psycopg's errors (it hung ``postroom.web.close()`` on a loaded box)."""

from __future__ import annotations

import asyncio
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
