"""The W3C ``tracestate`` goes with the ``traceparent``: a publish or an enqueue inside a trace
that carries vendor state writes it into the message's headers and the job's ``meta``, and the
consumer's and the worker's spans continue it (docs/observability.md, "Tracing")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

import postroom
from postroom import _tracing

from .helpers import Spans, traceparent
from .test_log import poll_all
from .test_queue import job_meta

STATE = TraceState([("vendor", "rojo"), ("other", "x1")])


@contextmanager
def inside_a_remote_trace() -> Iterator[None]:
    """Current: a span of a remote caller whose context carries ``STATE``."""
    remote = SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
        span_id=0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=STATE,
    )
    token = context.attach(trace.set_span_in_context(NonRecordingSpan(remote)))
    try:
        tracer = trace.get_tracer("app", tracer_provider=_tracing.PROVIDER)
        with tracer.start_as_current_span("checkout"):
            yield
    finally:
        context.detach(token)


def test_a_message_carries_the_tracestate_to_its_consumer(
    client: postroom.Client, spans: Spans
) -> None:
    client.create_topic("orders")
    with inside_a_remote_trace():
        client.publish("orders", b"one")
    send = spans.one("send orders")
    with client.consumer("billing", "orders") as consumer:
        (message,) = poll_all(consumer, 1)
    assert message.headers["traceparent"] == traceparent(send)
    assert message.headers["tracestate"] == STATE.to_header() == "vendor=rojo,other=x1"
    (link,) = spans.one("receive orders").links
    assert link.context.trace_state == STATE


def test_a_job_carries_the_tracestate_to_its_run(
    client: postroom.Client, dsn: str, spans: Spans
) -> None:
    @client.job("receipt")
    def receipt() -> None: ...

    with inside_a_remote_trace():
        job = receipt.enqueue()
    enqueue = spans.one("send default")
    assert job_meta(dsn, job.id) == {
        "traceparent": traceparent(enqueue),
        "tracestate": "vendor=rojo,other=x1",
    }
    client.worker().run(burst=True, handle_signals=False)
    run = spans.one("process default")
    assert run.get_span_context().trace_state == STATE
    assert run.get_span_context().trace_id == enqueue.get_span_context().trace_id
