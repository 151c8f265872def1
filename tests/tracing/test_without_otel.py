"""Without ``opentelemetry-api`` (made unimportable here) postroom works as before: nothing
fails, no span is made, no header or job metadata is written."""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import postroom
from postroom import _tracing

from ..conftest import run_python
from .helpers import Spans

BLOCKED = ("opentelemetry", "opentelemetry.trace", "opentelemetry.propagate")


@pytest.fixture
def without_otel(spans: Spans, monkeypatch: pytest.MonkeyPatch) -> Iterator[Spans]:
    """``_tracing`` as it is when the package is missing (an SDK provider is set up first:
    nothing may reach it)."""
    provider = _tracing.PROVIDER
    for name in BLOCKED:
        monkeypatch.setitem(sys.modules, name, None)
    importlib.reload(_tracing)
    try:
        assert not _tracing.ENABLED
        yield spans
    finally:
        monkeypatch.undo()
        importlib.reload(_tracing)
        _tracing.use_provider(provider)


def check_untouched(dsn: str, spans: Spans) -> None:
    assert spans.all() == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        headers = conn.execute("SELECT headers FROM postroom.messages").fetchall()
        metas = conn.execute("SELECT meta FROM postroom.jobs").fetchall()
    assert all(h is None or "traceparent" not in h for (h,) in headers), headers
    assert metas and all(m is None for (m,) in metas)


def test_the_sync_client(client: postroom.Client, dsn: str, without_otel: Spans) -> None:
    client.create_topic("t")
    handled = threading.Event()

    @client.subscribe("t", group="g")
    def handle(message: postroom.Message) -> None:
        handled.set()

    @client.job("k")
    def k() -> None:
        pass

    client.publish("t", b"a")
    client.publish_batch("t", [b"b"])
    client.publish_event(None, "order", 1, "Created", {}, topic="t")
    with client.producer() as producer:
        producer.send("t", b"c").result()
    with client.consumer(None, "t") as consumer:
        assert consumer.poll(timeout=5)
    runner = client.runner()
    thread = threading.Thread(target=runner.run, kwargs={"handle_signals": False})
    thread.start()
    assert handled.wait(30)
    runner.stop()
    thread.join(30)
    k.enqueue()
    k.enqueue()
    client.worker().run(burst=True, handle_signals=False)
    k.enqueue()  # left ready: its meta is read below
    check_untouched(dsn, without_otel)


def test_the_async_client(dsn: str, without_otel: Spans) -> None:
    async def main() -> None:
        async with await postroom.connect_async(dsn) as client:
            await client.create_topic("t")

            @client.job("k")
            async def k() -> None:
                pass

            await client.publish("t", b"a")
            async with client.producer() as producer:
                await (await producer.send("t", b"b"))
            async with client.consumer(None, "t") as consumer:
                assert await consumer.poll(timeout=5)
            await k.enqueue()
            await client.worker().run(burst=True, handle_signals=False)
            await k.enqueue()

    asyncio.run(main())
    check_untouched(dsn, without_otel)


def test_postroom_imports_without_the_package() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "import postroom, postroom.relay\n"
        "from postroom import _tracing\n"
        "assert not _tracing.ENABLED and _tracing.TRACER is None\n"
        "assert not any(m.startswith('opentelemetry.') for m in sys.modules)\n"
    )
    result: Any = run_python(code)
    assert result.returncode == 0, result.stderr
