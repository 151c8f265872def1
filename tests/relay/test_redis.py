"""The Redis Streams sink, end to end against the Redis server on 127.0.0.1:6379."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import postroom
from postroom.errors import InvalidArgument, MissingExtra

from ..signals import wait_for
from .helpers import check_delivery, decode, publish_keyed, running_relay, unique

redis = pytest.importorskip("redis")
URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
def stream_prefix() -> Iterator[str]:
    """A key prefix of this test's own; its streams are deleted after."""
    prefix = unique("pt-relay") + "."
    yield prefix
    r = redis.Redis.from_url(URL)
    for key in r.scan_iter(match=prefix + "*"):
        r.delete(key)
    r.close()


def read_stream(name: str) -> list[tuple[str, dict[str, int]]]:
    r = redis.Redis.from_url(URL)
    entries = r.xrange(name)
    r.close()
    return [(fields[b"id"].decode(), decode(fields[b"value"])) for _, fields in entries]


def test_relays_keyed_events_in_order_with_ids(
    client: postroom.Client, dsn: str, stream_prefix: str
) -> None:
    client.create_topic("orders", partitions=4)
    committed = publish_keyed(client, dsn, "orders", 400, keys=7, rollback_every=3)
    stream = stream_prefix + "orders"
    with running_relay(client, "orders", f"{URL}?prefix={stream_prefix}") as relay:
        wait_for(lambda: len(read_stream(stream)) >= len(committed))
    received = read_stream(stream)
    assert check_delivery(received, committed) == 0
    assert relay.counters.delivered == len(committed)
    r = redis.Redis.from_url(URL)
    _, fields = r.xrange(stream, count=1)[0]
    r.close()
    assert fields[b"id"].decode().startswith("orders/")
    assert fields[b"key"].startswith(b"k")
    assert b"postroom-id" in fields[b"headers"]
    # The cursor moved only past what Redis acknowledged: all of it.
    assert client.describe_group("relay.redis").lag == 0


def test_a_second_run_continues_after_the_committed_batch(
    client: postroom.Client, dsn: str, stream_prefix: str
) -> None:
    client.create_topic("t")
    client.publish_batch("t", [{"value": {"seq": i, "key": 0}} for i in range(10)])
    stream = stream_prefix + "t"
    url = f"{URL}?prefix={stream_prefix}"
    with running_relay(client, "t", url):
        wait_for(lambda: len(read_stream(stream)) == 10)
    client.publish_batch("t", [{"value": {"seq": i, "key": 0}} for i in range(10, 15)])
    with running_relay(client, "t", url):
        wait_for(lambda: len(read_stream(stream)) >= 15)
    assert [e["seq"] for _, e in read_stream(stream)] == list(range(15))


def test_bad_urls_and_options_are_one_clear_error(client: postroom.Client) -> None:
    client.create_topic("t")
    with pytest.raises(InvalidArgument, match="unknown sink scheme 'foo'"):
        client.relay("t", "foo://127.0.0.1")
    with pytest.raises(InvalidArgument, match="malformed sink URL"):
        client.relay("t", "redis://127.0.0.1:notaport")
    with pytest.raises(InvalidArgument, match="no host"):
        client.relay("t", "redis://")
    with pytest.raises(InvalidArgument, match=r"unknown redis sink options \['colour'\]"):
        client.relay("t", "redis://127.0.0.1?colour=red")
    with pytest.raises(InvalidArgument, match="timeout"):
        client.relay("t", "redis://127.0.0.1?timeout=-1")


def test_a_missing_client_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from postroom.relay import open_sink

    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(MissingExtra, match=r"pip install 'postroom\[redis\]'"):
        open_sink(URL)


@pytest.mark.slow
def test_a_paused_redis_delays_but_loses_and_reorders_nothing(
    client: postroom.Client, dsn: str, stream_prefix: str
) -> None:
    from postroom import Backoff

    client.create_topic("orders", partitions=3)
    committed = publish_keyed(client, dsn, "orders", 3000, keys=13, rollback_every=5)
    stream = stream_prefix + "orders"
    r = redis.Redis.from_url(URL)
    url = f"{URL}?prefix={stream_prefix}&timeout=0.3"
    fast = Backoff(base=0.05, max_delay=0.3)
    try:
        with running_relay(client, "orders", url, batch_size=100, backoff=fast) as relay:
            wait_for(lambda: r.xlen(stream) >= 300, interval=0.005)
            r.execute_command("CLIENT", "PAUSE", "2000", "WRITE")  # the sink "stops" for 2 s
            wait_for(lambda: relay.counters.sink_failures >= 1)
            wait_for(lambda: client.describe_group("relay.redis").lag == 0, timeout=60)
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
        r.close()
    check_delivery(read_stream(stream), committed)


def test_an_unreachable_redis_at_start_is_retried(client: postroom.Client) -> None:
    from postroom import Backoff

    client.create_topic("t")
    client.publish("t", "x")
    fast = Backoff(base=0.01, max_delay=0.1)
    with running_relay(client, "t", "redis://127.0.0.1:1/0?timeout=0.5", backoff=fast) as relay:
        wait_for(lambda: relay.counters.last_error and "attempt 3" in relay.counters.last_error)
        assert "sink unreachable" in str(relay.counters.last_error)
    assert relay.counters.delivered == 0


def test_a_key_that_is_not_a_stream_is_dead_lettered_at_once(
    client: postroom.Client, stream_prefix: str
) -> None:
    from postroom.relay import Route

    r = redis.Redis.from_url(URL)
    r.set(stream_prefix + "taken", "a string, not a stream")
    r.close()
    client.create_topic("t")
    client.publish("t", {"seq": 0, "key": 0}, key="free")
    client.publish("t", {"seq": 1, "key": 1}, key="taken")
    client.publish("t", {"seq": 2, "key": 0}, key="free")
    sink = f"{URL}?prefix={stream_prefix}"
    with running_relay(client, "t", sink, route=Route(template="{key}")) as relay:
        wait_for(lambda: relay.counters.delivered == 2 and relay.counters.dead_lettered == 1)
    assert [e["seq"] for _, e in read_stream(stream_prefix + "free")] == [0, 2]
    [letter] = client.list_dead_letters("t")
    assert letter.headers["postroom-dlq-attempts"] == "1"
    assert "WRONGTYPE" in str(letter.headers["postroom-dlq-error"])
