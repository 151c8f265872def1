"""Fixtures of the tracing tests: spans recorded by the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from postroom import _tracing

from .helpers import Spans

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)


@pytest.fixture
def spans() -> Iterator[Spans]:
    """postroom's spans go to an SDK tracer provider of this test's own (the process's global
    provider is left alone: OpenTelemetry lets it be set once)."""
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracing.use_provider(provider)
    try:
        yield Spans(exporter)
    finally:
        _tracing.use_provider(None)
        provider.shutdown()
