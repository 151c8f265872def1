"""Large job arguments: an enqueue of tens of megabytes ends (psycopg's pipeline mode waited
forever on such a statement: issue 23, item 10), and so does a batch whose chunks add up."""

from __future__ import annotations

import pytest

import postroom

from .helpers import scalar


@pytest.mark.timeout(90)
def test_an_enqueue_of_25_mb_of_args_never_hangs(any_client: postroom.Client, dsn: str) -> None:
    @any_client.job("big")
    def big(data: str) -> None: ...

    payload = "x" * (25 * 1024 * 1024)
    ids = [big.enqueue(data=payload).id for _ in range(3)]
    assert scalar(dsn, "SELECT count(*) FROM postroom.jobs WHERE kind = 'big'") == 3
    assert len(any_client.get_job(ids[-1]).args["data"]) == len(payload)


@pytest.mark.timeout(90)
def test_a_batch_of_large_jobs_is_sent_in_bounded_pipelines(
    any_client: postroom.Client, dsn: str
) -> None:
    @any_client.job("big")
    def big(data: str) -> None: ...

    payload = "y" * (3 * 1024 * 1024)
    jobs = any_client.enqueue_batch([big.prepare(data=payload) for _ in range(6)])
    small = any_client.enqueue_batch([big.prepare(data="z") for _ in range(10)])
    assert len({job.id for job in [*jobs, *small]}) == 16
    assert scalar(dsn, "SELECT count(*) FROM postroom.jobs WHERE kind = 'big'") == 16
