"""The log engine: the client composes one (``client.log``) and delegates to it, and it
implements the seam (``postroom.log.seam.LogEngine``) another engine plugs into."""

from __future__ import annotations

from typing import Any

import postroom
from postroom.log.engine_async import AsyncLog
from postroom.log.seam import LogConsumer, LogEngine, LogProducer


def _implements(engine: AsyncLog) -> LogEngine:
    # mypy --strict checks this assignment structurally: AsyncLog's signatures must accept
    # every call the protocol allows, and return what it promises.
    return engine


def test_the_engine_implements_the_seam() -> None:
    for protocol in (LogEngine, LogProducer, LogConsumer):
        members = [
            name
            for name in vars(protocol)
            if not name.startswith("_") or name in ("__aenter__", "__aexit__")
        ]
        assert members, protocol
    public = {name for name in vars(LogEngine) if not name.startswith("_")}
    assert public <= set(dir(AsyncLog)), public - set(dir(AsyncLog))


def test_the_client_delegates_to_its_engine(any_client: Any) -> None:
    client = any_client
    log = client.log
    assert log.schema == client.schema
    client.create_topic("t", partitions=2)
    published = log.publish("t", b"x", partition=1)
    assert published.offset == 0
    assert client.describe_topic("t").partitions == 2
    with log.consumer("g", "t") as consumer:
        assert [m.value for m in consumer.poll(timeout=5)] == [b"x"]
        consumer.commit()
    assert log.lag("g") == 0
    client.publish("t", b"y", partition=0)
    assert log.lag("g") == client.describe_group("g").lag == 1
    assert log.reset_group("g", "t", to="earliest") == {0: 0, 1: 0}
    assert log.lag("g") == 2


def test_the_sync_engine_has_the_seams_methods() -> None:
    # The seam is written for asyncio; the generated sync engine mirrors it name for name.
    from postroom.log.engine import Log

    for name in (n for n in vars(LogEngine) if not n.startswith("_")):
        assert callable(getattr(Log, name)) or isinstance(getattr(Log, name), property), name
        assert hasattr(postroom.Client, name) or name == "lag", name
