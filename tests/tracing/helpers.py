"""Helpers of the tracing tests: the spans a test recorded, and how two spans relate."""

from __future__ import annotations

from typing import Any


class Spans:
    """The spans postroom ended during a test, by name."""

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter

    def all(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[Any]:
        return [span for span in self.all() if span.name == name]

    def one(self, name: str) -> Any:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s.name for s in self.all()]}"
        return found[0]


def traceparent(span: Any) -> str:
    """The W3C traceparent header of ``span``'s context."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def linked_to(span: Any, other: Any) -> bool:
    return any(link.context.span_id == other.get_span_context().span_id for link in span.links)


def child_of(span: Any, parent: Any) -> bool:
    return (
        span.parent is not None
        and span.parent.span_id == parent.get_span_context().span_id
        and span.get_span_context().trace_id == parent.get_span_context().trace_id
    )


def check_relayed(spans: Spans, event: Any, destination: str, headers: dict[str, str]) -> None:
    """The relay's span of ``event`` to ``destination``: a producer span, a child of the
    event's send and linked to it, whose context the sink's ``headers`` carry."""
    relayed = next(
        s for s in spans.named(f"send {destination}") if "postroom.relay.sink" in s.attributes
    )
    assert relayed.kind.name == "PRODUCER"
    assert child_of(relayed, event) and linked_to(relayed, event)
    assert relayed.attributes["messaging.system"] == "postroom"
    assert relayed.attributes["messaging.destination.name"] == destination
    assert relayed.attributes["messaging.consumer.group.name"].startswith("relay.")
    assert relayed.attributes["postroom.source.topic"] == "outbox"
    assert headers["traceparent"] == traceparent(relayed)
