"""Traces of the queue: ``send <queue>`` around an enqueue, its context in the job's ``meta``
(migration 0035), ``process <queue>`` around the job's run, a child of the enqueue and linked
to it, current while the job runs (docs/observability.md, "Tracing")."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

import postroom

from .helpers import Spans, child_of, linked_to, traceparent


def job_meta(dsn: str, job_id: int) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT meta FROM postroom.jobs WHERE id = %s", (job_id,)).fetchone()
    return None if row is None else row[0]


def check_run(run: Any, enqueue: Any, job_id: int, kind: str) -> None:
    assert run.kind is SpanKind.CONSUMER
    assert child_of(run, enqueue) and linked_to(run, enqueue)
    assert run.attributes["messaging.system"] == "postroom"
    assert run.attributes["messaging.destination.name"] == "default"
    assert run.attributes["messaging.operation.type"] == "process"
    assert run.attributes["postroom.job.id"] == job_id
    assert run.attributes["messaging.message.id"] == str(job_id)
    assert run.attributes["postroom.job.kind"] == kind
    assert run.attributes["postroom.job.attempt"] == 1


def test_enqueue_then_run_is_one_trace(client: postroom.Client, dsn: str, spans: Spans) -> None:
    current: list[Any] = []

    @client.job("receipt")
    def receipt(order: int) -> None:
        current.append(trace.get_current_span())

    @client.job("broken", max_attempts=1)
    def broken() -> None:
        raise RuntimeError("out of paper")

    job = receipt.enqueue(order=7)
    enqueue = spans.one("send default")
    assert enqueue.kind is SpanKind.PRODUCER
    assert enqueue.attributes["messaging.destination.name"] == "default"
    assert enqueue.attributes["postroom.job.kind"] == "receipt"
    assert enqueue.attributes["postroom.job.id"] == job.id
    assert job_meta(dsn, job.id) == {"traceparent": traceparent(enqueue)}
    failing = broken.enqueue()
    client.worker().run(burst=True, handle_signals=False)
    runs = {span.attributes["postroom.job.id"]: span for span in spans.named("process default")}
    check_run(runs[job.id], enqueue, job.id, "receipt")
    assert current[0].get_span_context().span_id == runs[job.id].get_span_context().span_id
    assert runs[job.id].attributes["postroom.job.outcome"] == "done"
    failed = runs[failing.id]
    assert failed.status.status_code is StatusCode.ERROR
    assert "out of paper" in (failed.status.description or "")


def test_a_batch_shares_one_enqueue_span_and_the_rest_of_the_transaction_has_none(
    client: postroom.Client, dsn: str, spans: Spans
) -> None:
    @client.job("k")
    def k(n: int) -> None:
        pass

    with psycopg.connect(dsn) as conn:
        jobs = client.enqueue_batch([k.prepare(n=1), k.prepare(n=2)], conn=conn)
        # Enqueued with SQL in the same transaction, after: the meta was cleared.
        row = conn.execute("SELECT postroom.enqueue('k', '{\"n\": 3}'::jsonb)").fetchone()
        assert row is not None
        plain = row[0]
    batch = spans.one("send default")
    assert batch.attributes["messaging.batch.message_count"] == 2
    assert [job_meta(dsn, job.id) for job in jobs] == [{"traceparent": traceparent(batch)}] * 2
    assert job_meta(dsn, plain) is None


def test_the_async_client_and_worker(dsn: str, spans: Spans) -> None:
    current: dict[str, Any] = {}

    async def main() -> list[int]:
        async with await postroom.connect_async(dsn) as client:

            @client.job("coro")
            async def coro() -> None:
                current["coro"] = trace.get_current_span()

            @client.job("plain")
            def plain() -> None:  # runs in the worker's threads: the context goes with it
                current["plain"] = trace.get_current_span()

            ids = [(await coro.enqueue()).id, (await plain.enqueue()).id]
            await client.worker().run(burst=True, handle_signals=False)
            return ids

    coro_id, plain_id = asyncio.run(main())
    enqueues = {s.attributes["postroom.job.id"]: s for s in spans.named("send default")}
    runs = {s.attributes["postroom.job.id"]: s for s in spans.named("process default")}
    check_run(runs[coro_id], enqueues[coro_id], coro_id, "coro")
    check_run(runs[plain_id], enqueues[plain_id], plain_id, "plain")
    for name, job_id in (("coro", coro_id), ("plain", plain_id)):
        span_id = current[name].get_span_context().span_id
        assert span_id == runs[job_id].get_span_context().span_id


def test_without_an_sdk_a_job_has_no_meta(client: postroom.Client, dsn: str) -> None:
    @client.job("k")
    def k() -> None:
        pass

    assert job_meta(dsn, k.enqueue().id) is None
