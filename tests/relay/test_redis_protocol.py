"""The Redis sink writes each batch as one block of RESP it encodes itself: the bytes are
those redis-py would send, and a refused XADD in the middle of a batch is reported at its
index while the connection stays in step with the replies."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from postroom.errors import MessageRejected
from postroom.log.records import build_message
from postroom.relay import Outbound
from postroom.relay.sinks.redis import RedisSink, _xadd, encode_headers

from .helpers import unique

redis = pytest.importorskip("redis")
URL = "redis://127.0.0.1:6379/0"


def outbound(
    offset: int, destination: str, key: bytes | None, headers: dict[str, str | bytes]
) -> Outbound:
    message = build_message("t", 0, offset, key, b"v\r\n\x00x", {}, datetime.now(UTC))
    return Outbound(f"t/0/{offset}", destination, key, b"v\r\n\x00x", headers, message)


@pytest.mark.parametrize(
    ("key", "headers", "maxlen"),
    [
        (b"k1", {"a": "b", "postroom-id": "t/0/5"}, None),
        (None, {}, 1000),
        (b"", {"x": b"\xff", "\u00e9": "\u00fc"}, 5),
    ],
)
def test_the_bytes_are_those_redis_py_sends(
    key: bytes | None, headers: dict[str, str | bytes], maxlen: int | None
) -> None:
    from redis.asyncio.connection import Connection

    out = outbound(5, "d\u00e9st", key, headers)
    args: list[Any] = ["XADD", "p.d\u00e9st"]
    if maxlen is not None:
        args += ["MAXLEN", "~", maxlen]
    args += ["*", "id", "t/0/5", "value", out.value]
    if key is not None:
        args += ["key", key]
    if headers:
        args += ["headers", encode_headers(headers)]
    assert b"".join(Connection().pack_command(*args)) == _xadd("p.", out, maxlen)


def test_a_refused_xadd_mid_batch_is_reported_at_its_index() -> None:
    prefix = unique("pt-relay-resp") + "."
    r = redis.Redis.from_url(URL)
    r.set(prefix + "bad", "not a stream")  # XADD to it: WRONGTYPE, refused for good
    sink = RedisSink(URL, prefix=prefix)

    async def scenario() -> None:
        await sink.open()
        try:
            batch = [outbound(0, "good", b"k", {}), outbound(1, "bad", b"k", {})]
            batch.append(outbound(2, "good", None, {"h": "v"}))
            with pytest.raises(MessageRejected, match="WRONGTYPE") as refused:
                await sink.send(batch)
            assert refused.value.index == 1
            # The replies after the refused one were read: the next batch's are its own.
            await sink.send([outbound(3, "good", b"k", {})])
        finally:
            await sink.close()

    try:
        asyncio.run(scenario())
        ids = [fields[b"id"] for _, fields in r.xrange(prefix + "good")]
        assert ids == [b"t/0/0", b"t/0/2", b"t/0/3"]
    finally:
        for name in r.scan_iter(match=prefix + "*"):
            r.delete(name)
        r.close()


def test_replies_are_parsed_in_blocks_split_anywhere() -> None:
    from postroom.relay.sinks.redis import _parse_replies

    data = b"$15\r\n1700000000000-0\r\n-OOM command not allowed\r\n:2\r\n$-1\r\n$3\r\na\r\n\r\n"
    whole, used = _parse_replies(data, 5)
    assert whole == [b"1700000000000-0", "OOM command not allowed", 2, None, b"a\r\n"]
    assert used == len(data)
    for cut in range(len(data)):  # a block may end anywhere: only whole replies are taken
        first, used = _parse_replies(data[:cut], 5)
        rest, _ = _parse_replies(data[used:], 5 - len(first))
        assert first + rest == whole
    with pytest.raises(ValueError, match="unexpected redis reply"):
        _parse_replies(b"+OK\r\n", 1)


def test_an_out_of_memory_reply_is_retried_not_dead_lettered() -> None:
    """OOM (maxmemory reached) means "not now": the batch is retried. Its reply keeps the
    OOM prefix (redis-py's error classes strip it)."""
    from postroom.errors import SinkUnavailable
    from postroom.relay.sinks.redis import _Refused

    sink = RedisSink(URL)

    class Conn:
        pass

    async def scenario() -> None:
        async def replies(conn: Any, count: int) -> list[Any]:
            return [_Refused("OOM command not allowed when used memory > 'maxmemory'.")]

        class Pool:
            async def get_connection(self) -> Any:
                conn = Conn()
                conn.send_packed_command = noop  # type: ignore[attr-defined]
                return conn

            async def release(self, conn: Any) -> None:
                pass

        async def noop(data: bytes) -> None:
            pass

        class Client:
            connection_pool = Pool()

        sink._redis = Client()
        sink._read_replies = replies  # type: ignore[method-assign]
        with pytest.raises(SinkUnavailable, match="OOM"):
            await sink.send([outbound(0, "d", b"k", {})])

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"a": "b"},
        {"postroom-id": "t/0/5", "x": b"\xff", "\u00e9": '\u00fc\n"\\'},
        {"k": "\u2028\x00"},
    ],
)
def test_headers_are_the_json_of_json_dumps(headers: dict[str, str | bytes]) -> None:
    import json

    text = {
        k: v if isinstance(v, str) else v.decode("utf-8", "replace") for k, v in headers.items()
    }
    assert encode_headers(headers) == json.dumps(text, separators=(",", ":"))
