"""OpenTelemetry tracing, when ``opentelemetry-api`` is installed (the ``otel`` extra); sans-I/O.

Without the package ``ENABLED`` is False and nothing here is called: every caller checks it
first (one attribute read), so a process without OpenTelemetry pays nothing more. With it,
postroom makes spans by the OpenTelemetry messaging conventions (docs/observability.md,
"Tracing") and carries the W3C trace context (``traceparent``, ``tracestate``, through the
globally configured propagator) in message headers and in a job's ``meta``:

- ``send <topic>`` (PRODUCER) around publish, publish_batch, publish_event and a producer's
  ``send``; ``send <queue>`` around an enqueue. Its context goes into the headers (the job).
- ``receive <topic>`` (CONSUMER) for a poll that returned messages, linked to each message's
  creation context; ``process <topic>`` (CONSUMER) around a ``@subscribe`` handler, and
  ``process <queue>`` around a job's run: children of the creation context, and linked to it.
- ``send <destination>`` (PRODUCER) per message the relay hands to its sink: a child of the
  message's creation context, whose own context goes on in the sink's headers.

Without an SDK (only the API's no-op tracer provider) nothing is recorded, so postroom does
no work either: ``recording()`` says so for the price of a clock read, and no span, header or
job metadata is made (a header that arrived still passes through the relay as any header).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

try:
    from opentelemetry import trace as _trace
    from opentelemetry.propagators.textmap import Getter
except ImportError:  # the optional extra is not installed: tracing is off
    ENABLED = False
    _GetterBase: Any = object
else:
    ENABLED = True
    _GetterBase = Getter

SYSTEM = "postroom"
TRACEPARENT = "traceparent"
TRACE_HEADERS = ("traceparent", "tracestate")
"""The W3C trace context headers; the relay's Debezium route keeps them too."""

TRACER: Any = _trace.get_tracer("postroom") if ENABLED else None
"""The tracer spans come from: a proxy of the global tracer provider."""
PROVIDER: Any = None
"""A tracer provider that stands in for the global one (``use_provider``), or None."""


RECHECK_SECONDS = 1.0
"""How often ``recording()`` looks again for a tracer provider while there is none."""
_recording = False
_recheck_at = 0.0


def use_provider(provider: Any) -> None:
    """Make spans with ``provider`` rather than the global tracer provider (None: the global
    one again). For tests: OpenTelemetry lets a process set its global provider once."""
    global TRACER, PROVIDER, _recording, _recheck_at
    PROVIDER = provider
    TRACER = _trace.get_tracer("postroom") if provider is None else provider.get_tracer("postroom")
    _recording, _recheck_at = provider is not None, 0.0


def recording() -> bool:
    """Whether spans are recorded: a tracer provider other than the API's default is set (an
    SDK's). Every span and header waits on it, so it is cheap: once one is set it stays (the
    global provider is set once a process), and while none is, the look (``os.environ`` is
    read) is taken again at most every ``RECHECK_SECONDS``: a provider set after postroom's
    first send is seen within that."""
    global _recording, _recheck_at
    if _recording:
        return True
    now = time.monotonic()
    if now < _recheck_at:
        return False
    _recheck_at = now + RECHECK_SECONDS
    provider = PROVIDER or _trace.get_tracer_provider()
    _recording = not isinstance(provider, (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider))
    return _recording


class _HeaderGetter(_GetterBase):  # type: ignore[misc]
    """Reads a trace header from postroom headers, whose values may be str or bytes."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            return None
        return [value.decode("ascii", "replace") if isinstance(value, bytes) else value]

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return list(carrier)


_GETTER = _HeaderGetter()


def _propagator() -> Any:
    """The global propagator; imported at first use (``opentelemetry.propagate`` reads the
    package entry points when imported: about 0.1 s a process that never traces would pay)."""
    from opentelemetry import propagate

    return propagate


def _attributes(destination: str, operation: str, **more: Any) -> dict[str, Any]:
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": destination,
        "messaging.operation.type": operation,
    }
    attributes.update((k.replace("__", "."), v) for k, v in more.items() if v is not None)
    return attributes


def start_send(destination: str, **attributes: Any) -> Any:
    """A PRODUCER span ``send <destination>``, not current; None if nothing is recorded (no
    SDK). The caller ends it (``ending``)."""
    if not recording():
        return None
    return TRACER.start_span(
        f"send {destination}",
        kind=_trace.SpanKind.PRODUCER,
        attributes=_attributes(destination, "send", **attributes),
    )


def carry(span: Any, headers: Mapping[str, Any] | None) -> dict[str, Any]:
    """``headers`` (copied) with ``span``'s trace context added."""
    carried: dict[str, Any] = dict(headers) if headers else {}
    _propagator().inject(carried, _trace.set_span_in_context(span))
    return carried


def trace_context(span: Any) -> dict[str, str]:
    """``span``'s trace context as a job's ``meta`` (traceparent, tracestate)."""
    carried: dict[str, str] = {}
    _propagator().inject(carried, _trace.set_span_in_context(span))
    return carried


@contextmanager
def ending(span: Any) -> Iterator[Any]:
    """End ``span`` when the block ends; an error in it is recorded, with status ERROR."""
    try:
        yield span
    except BaseException as exc:
        fail(span, exc)
        raise
    finally:
        span.end()


def fail(span: Any, exc: BaseException) -> None:
    """Record ``exc`` on ``span``, with status ERROR."""
    span.record_exception(exc)
    span.set_status(_trace.Status(_trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


@contextmanager
def sending(destination: str, **attributes: Any) -> Iterator[Any]:
    """A ``send <destination>`` span, current in the block; the caller checked
    ``recording()``."""
    span = TRACER.start_span(
        f"send {destination}",
        kind=_trace.SpanKind.PRODUCER,
        attributes=_attributes(destination, "send", **attributes),
    )
    with ending(span), _trace.use_span(span, end_on_exit=False, record_exception=False):
        yield span


def creation_context(headers: Mapping[str, Any] | None) -> Any:
    """The context a message's or job's headers carry, or None if they carry none."""
    if not headers or TRACEPARENT not in headers:
        return None
    return _propagator().extract(headers, getter=_GETTER)


def _links(contexts: Iterable[Any]) -> list[Any]:
    links = []
    for context in contexts:
        span_context = _trace.get_current_span(context).get_span_context()
        if span_context.is_valid:
            links.append(_trace.Link(span_context))
    return links


@contextmanager
def processing(
    destination: str, headers: Mapping[str, Any] | None, **attributes: Any
) -> Iterator[Any]:
    """A CONSUMER span ``process <destination>`` current in the block: a child of the context
    in ``headers`` (the message's or job's creation) and linked to it. An error that leaves
    the block is recorded on it. The caller checked ``recording()``."""
    parent = creation_context(headers)
    span = TRACER.start_span(
        f"process {destination}",
        context=parent,
        kind=_trace.SpanKind.CONSUMER,
        attributes=_attributes(destination, "process", **attributes),
        links=_links([parent]) if parent is not None else None,
    )
    with ending(span), _trace.use_span(span, end_on_exit=False, record_exception=False):
        yield span


@contextmanager
def processing_batch(
    destination: str, headers: Iterable[Mapping[str, Any]], **attributes: Any
) -> Iterator[Any]:
    """One CONSUMER span ``process <destination>`` for a batch, linked to the creation context
    of each message that has one (a batch has no single parent)."""
    headers = list(headers)
    links = _links(c for c in map(creation_context, headers) if c is not None)
    span = TRACER.start_span(
        f"process {destination}",
        kind=_trace.SpanKind.CONSUMER,
        attributes=_attributes(
            destination, "process", messaging__batch__message_count=len(headers), **attributes
        ),
        links=links,
    )
    with ending(span), _trace.use_span(span, end_on_exit=False, record_exception=False):
        yield span


def received(messages: list[Any], group: str | None) -> None:
    """Record a poll: one CONSUMER span ``receive <topic>`` per topic among ``messages``,
    linked to each message's creation context. The caller checked ``recording()``."""
    by_topic: dict[str, list[Any]] = {}
    for message in messages:
        by_topic.setdefault(message.topic, []).append(message)
    for topic, batch in by_topic.items():
        span = TRACER.start_span(
            f"receive {topic}",
            kind=_trace.SpanKind.CONSUMER,
            attributes=_attributes(
                topic,
                "receive",
                messaging__consumer__group__name=group,
                messaging__batch__message_count=len(batch),
            ),
            links=_links(c for c in (creation_context(m.headers) for m in batch) if c),
        )
        span.end()


def message_attributes(message: Any, group: str | None) -> dict[str, Any]:
    """The attributes of one message's span (the keyword form ``processing`` takes)."""
    return {
        "messaging__destination__partition__id": str(message.partition),
        "messaging__postroom__offset": message.offset,
        "messaging__message__id": message.id,
        "messaging__consumer__group__name": group,
    }


def batch(items: list[Any]) -> int | None:
    """``messaging.batch.message_count`` for a send of ``items``: None for one message (the
    conventions set it for batches only)."""
    return len(items) if len(items) > 1 else None


def published(span: Any, position: Any) -> None:
    """Note where a published message went (the offset is None in the caller's transaction:
    assigned when it commits)."""
    span.set_attribute("messaging.destination.partition.id", str(position.partition))
    if position.offset is not None:
        span.set_attribute("messaging.postroom.offset", position.offset)


def start_relay(outbound: Any, group: str, sink: str) -> Any:
    """A PRODUCER span ``send <destination>`` for one message the relay hands to its sink: a
    child of the message's creation context, linked to it. Not current; the caller ends it."""
    source = outbound.source
    parent = creation_context(source.headers)
    return TRACER.start_span(
        f"send {outbound.destination}",
        context=parent,
        kind=_trace.SpanKind.PRODUCER,
        attributes=_attributes(
            outbound.destination,
            "send",
            messaging__message__id=outbound.id,
            messaging__consumer__group__name=group,
            postroom__relay__sink=sink,
            postroom__source__topic=source.topic,
            postroom__source__partition=source.partition,
            postroom__source__offset=source.offset,
        ),
        links=_links([parent]) if parent is not None else None,
    )


def enqueued(span: Any, first: Any, jobs: list[Any]) -> None:
    """Note what an enqueue wrote: the job kind (of the first job), the job's id (of one job),
    or the count (of a batch)."""
    span.set_attribute("postroom.job.kind", first.kind)
    if len(jobs) == 1:
        span.set_attribute("messaging.message.id", str(jobs[0].id))
        span.set_attribute("postroom.job.id", jobs[0].id)
    elif len(jobs) > 1:
        span.set_attribute("messaging.batch.message_count", len(jobs))


def job_attributes(job: Any, worker: str) -> dict[str, Any]:
    """The attributes of a job's ``process <queue>`` span (the keyword form ``processing``
    takes)."""
    return {
        "messaging__message__id": str(job.id),
        "postroom__job__id": job.id,
        "postroom__job__kind": job.kind,
        "postroom__job__attempt": job.attempt,
        "postroom__worker": worker,
    }


def job_outcome(span: Any, outcome: Any) -> None:
    """Note how a job's attempt ended; a failed attempt sets status ERROR."""
    span.set_attribute("postroom.job.outcome", outcome.kind)
    if outcome.kind == "fail":
        error = outcome.error or ""
        lines = error.strip().splitlines()
        span.add_event("exception", {"exception.message": lines[-1] if lines else ""})
        span.set_attribute("postroom.job.error", error)
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, lines[-1] if lines else None))
