"""Redis Streams: one XADD per message into the stream named by the destination.

Fields: ``id`` (the stable message id, for dedup), ``key`` (absent when the message has none),
``value``, ``headers`` (JSON of the text headers). A batch is one pipelined round trip; a reply
per XADD is the acknowledgement (Redis has no stronger one short of WAIT, see ``replicas``).

    redis://127.0.0.1:6379/0?maxlen=1000000&prefix=outbox.&timeout=5
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult

from ...errors import DestinationUnusable, MessageRejected, SinkUnavailable
from ..routing import Outbound
from . import Sink, no_more, number, require

OPTIONS = ("maxlen", "prefix", "timeout", "replicas")
# Replies that mean "not now" rather than "never": retry the batch.
_TRANSIENT = ("OOM", "BUSY", "LOADING", "TRYAGAIN", "MASTERDOWN", "READONLY", "CLUSTERDOWN")


def from_url(url: str, parts: SplitResult, options: dict[str, Any]) -> RedisSink:
    require("redis", "redis", "redis-py")
    maxlen = options.pop("maxlen", None)
    prefix = str(options.pop("prefix", ""))
    timeout = number(options, "timeout", 5.0, 0.001)
    replicas = int(number(options, "replicas", 0))
    no_more("redis", options, OPTIONS)
    return RedisSink(
        url,
        maxlen=None if maxlen in (None, "") else int(number({"maxlen": maxlen}, "maxlen", 0, 1)),
        prefix=prefix,
        timeout=timeout,
        replicas=replicas,
    )


_quote = json.encoder.encode_basestring_ascii


def encode_headers(headers: Mapping[str, str | bytes]) -> str:
    """The headers as compact JSON: ``json.dumps(..., separators=(",", ":"))`` exactly, bytes
    decoded as UTF-8, written out string by string (json.dumps per message was half of the
    encoding of an XADD)."""
    return (
        "{"
        + ",".join(
            _quote(k) + ":" + _quote(v if isinstance(v, str) else v.decode("utf-8", "replace"))
            for k, v in headers.items()
        )
        + "}"
    )


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _command(*args: str) -> bytes:
    """One command in RESP, the Redis protocol: an array of bulk strings."""
    return b"*%d\r\n" % len(args) + b"".join(_bulk(arg.encode()) for arg in args)


def _xadd(prefix: str, out: Outbound, maxlen: int | None) -> bytes:
    """``XADD stream [MAXLEN ~ n] * id .. value .. [key ..] [headers ..]`` in RESP, written
    out at once (this runs for every message)."""
    fields = 4
    stream = _bulk((prefix + out.destination).encode())
    trim = b""
    if maxlen is not None:
        trim = b"$6\r\nMAXLEN\r\n$1\r\n~\r\n" + _bulk(str(maxlen).encode())
        fields += 3
    tail = b""
    if out.key is not None:
        tail = b"$3\r\nkey\r\n" + _bulk(bytes(out.key))
        fields += 2
    if out.headers:
        tail += b"$7\r\nheaders\r\n" + _bulk(encode_headers(out.headers).encode())
        fields += 2
    return b"".join(
        (
            b"*%d\r\n$4\r\nXADD\r\n" % (fields + 3),
            stream,
            trim,
            b"$1\r\n*\r\n$2\r\nid\r\n",
            _bulk(out.id.encode()),
            b"$5\r\nvalue\r\n",
            _bulk(b"" if out.value is None else bytes(out.value)),
            tail,
        )
    )


class _Refused(str):
    """An error reply (``-ERR ...``), its text whole (prefix included)."""


def _parse_replies(buffer: bytes | bytearray, count: int) -> tuple[list[Any], int]:
    """The complete replies at the start of ``buffer``, at most ``count``, and the bytes they
    take. The replies of XADD and WAIT only: a bulk string, an error, an integer."""
    replies: list[Any] = []
    pos = 0
    size = len(buffer)
    while len(replies) < count:
        end = buffer.find(b"\r\n", pos)
        if end < 0:
            break
        kind = buffer[pos]
        if kind == 36:  # $: a bulk string (the entry id), or $-1 (nil)
            length = int(buffer[pos + 1 : end])
            if length < 0:
                replies.append(None)
                pos = end + 2
                continue
            stop = end + 2 + length + 2
            if stop > size:
                break
            replies.append(bytes(buffer[end + 2 : end + 2 + length]))
            pos = stop
        elif kind == 45:  # -: an error
            replies.append(_Refused(bytes(buffer[pos + 1 : end]).decode("utf-8", "replace")))
            pos = end + 2
        elif kind == 58:  # :: an integer (WAIT)
            replies.append(int(buffer[pos + 1 : end]))
            pos = end + 2
        else:
            raise ValueError(f"unexpected redis reply {bytes(buffer[pos : end + 2])!r}")
    return replies, pos


class RedisSink(Sink):
    """XADD to Redis Streams (redis-py's asyncio client)."""

    scheme = "redis"
    # One pipelined round trip per batch: 2,000 entries cost the relay a third less CPU per
    # message than 500, and as many fewer round trips and commits (bench/RESULTS.md).
    batch_size = 2000

    def __init__(
        self,
        url: str,
        *,
        maxlen: int | None = None,
        prefix: str = "",
        timeout: float = 5.0,
        replicas: int = 0,
    ) -> None:
        super().__init__(url)
        self.maxlen = maxlen
        self.prefix = prefix
        self.timeout = timeout
        self.replicas = replicas
        self._redis: Any = None
        # Ids Redis took in a batch that then failed on another entry (a pipeline is not a
        # transaction: the entries after a refused XADD are added): not added twice when the
        # relay sends the rest again.
        self._acked: set[str] = set()

    async def open(self) -> None:
        redis = require("redis.asyncio", "redis", "redis-py")
        url = self.url.split("?", 1)[0]
        client = redis.from_url(
            url, socket_timeout=self.timeout, socket_connect_timeout=self.timeout
        )
        errors = require("redis.exceptions", "redis", "redis-py")
        try:
            await client.ping()
        except (errors.RedisError, OSError) as exc:
            await client.aclose()
            raise SinkUnavailable(f"redis at {self.description}: {exc}") from exc
        self._redis = client

    async def send(self, batch: Sequence[Outbound]) -> None:
        errors = require("redis.exceptions", "redis", "redis-py")
        if self._redis is None:
            await self.open()
        # One write of the whole batch, encoded here: redis-py's pipeline encodes argument by
        # argument in Python: a third of a relay's time under cProfile (postroom bench relay).
        taken = self._acked
        positions = [i for i, out in enumerate(batch) if not taken or out.source.id not in taken]
        if not positions:
            self._acked.clear()
            return
        packed = [_xadd(self.prefix, batch[i], self.maxlen) for i in positions]
        count = len(positions)
        if self.replicas:
            packed.append(_command("WAIT", str(self.replicas), str(int(self.timeout * 1000))))
            count += 1
        pool = self._redis.connection_pool
        try:
            conn = await pool.get_connection()
            try:
                await conn.send_packed_command(b"".join(packed))
                replies = await self._read_replies(conn, count)
            except BaseException:
                await conn.disconnect()  # replies may be left unread: never reuse it
                raise
            finally:
                await pool.release(conn)
        except (errors.RedisError, OSError, TimeoutError, ValueError) as exc:
            # connection lost, timeout, a reply out of step: retry the batch
            await self.close()
            raise SinkUnavailable(f"redis at {self.description}: {exc!r}") from exc
        self._check(batch, positions, replies)
        if self.replicas:
            acked = replies[-1]
            if isinstance(acked, _Refused) or acked < self.replicas:
                raise SinkUnavailable(
                    f"redis at {self.description}: {acked} of {self.replicas} replicas acked"
                )
        self._acked.clear()

    def _check(self, batch: Sequence[Outbound], positions: list[int], replies: list[Any]) -> None:
        """Raise for the first XADD reply that is an error (``positions``: the batch index of
        each entry sent), after noting which entries Redis took."""
        for position, reply in enumerate(replies[: len(positions)]):
            index = positions[position]
            if isinstance(reply, (_Refused, Exception)):
                self._acked.update(
                    batch[positions[p]].source.id
                    for p, other in enumerate(replies[: len(positions)])
                    if isinstance(other, bytes)
                )
            if isinstance(reply, _Refused):
                if reply.startswith(_TRANSIENT):
                    raise SinkUnavailable(f"redis at {self.description}: {reply}")
                if reply.startswith("WRONGTYPE"):
                    # The key holds something else than a stream: every XADD to it fails.
                    stream = self.prefix + batch[index].destination
                    raise DestinationUnusable(f"redis refused XADD to {stream!r}: {reply}", index)
                raise MessageRejected(f"redis refused XADD: {reply}", index)
            if isinstance(reply, Exception):
                raise SinkUnavailable(f"redis at {self.description}: {reply}")

    async def _read_replies(self, conn: Any, count: int) -> list[Any]:
        """The ``count`` replies of a batch. They are read in blocks from the connection's
        stream and parsed here, under one timeout for the batch: redis-py reads them one by
        one, each under a timeout of its own, a quarter of a relay's time (py-spy, bench/
        RESULTS.md). A connection without that stream (another redis-py version or a hiredis
        parser, which buffers on its own) is read reply by reply."""
        errors = require("redis.exceptions", "redis", "redis-py")
        reader = getattr(conn, "_reader", None)
        parser = type(getattr(conn, "_parser", None)).__name__
        if not isinstance(reader, asyncio.StreamReader) or "Hiredis" in parser:
            replies: list[Any] = []
            for _ in range(count):
                try:
                    replies.append(await conn.read_response())
                except errors.ResponseError as exc:  # this XADD's reply; the rest follow
                    code = getattr(exc, "status_code", None)
                    replies.append(_Refused(f"{code} {exc}" if code else str(exc)))
            return replies
        buffer = bytearray()
        replies = []
        async with asyncio.timeout(self.timeout):
            while len(replies) < count:
                chunk = await reader.read(1 << 16)
                if not chunk:
                    raise ConnectionError("redis closed the connection")
                buffer += chunk
                parsed, used = _parse_replies(buffer, count - len(replies))
                replies += parsed
                del buffer[:used]
        if buffer:
            raise ValueError(f"{len(buffer)} bytes after the batch's replies")
        return replies

    async def close(self) -> None:
        client, self._redis = self._redis, None
        if client is not None:
            try:
                await client.aclose()
            except (require("redis.exceptions", "redis", "redis-py").RedisError, OSError):
                # already broken
                pass
