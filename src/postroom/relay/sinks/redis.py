"""Redis Streams: one XADD per message into the stream named by the destination.

Fields: ``id`` (the stable message id, for dedup), ``key`` (absent when the message has none),
``value``, ``headers`` (JSON of the text headers). A batch is one pipelined round trip; a reply
per XADD is the acknowledgement (Redis has no stronger one short of WAIT, see ``replicas``).

    redis://127.0.0.1:6379/0?maxlen=1000000&prefix=outbox.&timeout=5
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult

from ...errors import MessageRejected, SinkUnavailable
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


def encode_headers(headers: Mapping[str, str | bytes]) -> str:
    return json.dumps(
        {k: v if isinstance(v, str) else v.decode("utf-8", "replace") for k, v in headers.items()},
        separators=(",", ":"),
    )


class RedisSink(Sink):
    """XADD to Redis Streams (redis-py's asyncio client)."""

    scheme = "redis"

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
        pipe = self._redis.pipeline(transaction=False)
        for out in batch:
            fields: dict[str, Any] = {"id": out.id, "value": out.value}
            if out.key is not None:
                fields["key"] = out.key
            if out.headers:
                fields["headers"] = encode_headers(out.headers)
            pipe.xadd(self.prefix + out.destination, fields, maxlen=self.maxlen, approximate=True)
        if self.replicas:
            pipe.wait(self.replicas, int(self.timeout * 1000))
        try:
            replies = await pipe.execute(raise_on_error=False)
        except (errors.RedisError, OSError) as exc:  # connection lost, timeout: retry
            await self.close()
            raise SinkUnavailable(f"redis at {self.description}: {exc}") from exc
        for index, reply in enumerate(replies[: len(batch)]):
            if isinstance(reply, errors.ResponseError):
                if str(reply).startswith(_TRANSIENT):
                    raise SinkUnavailable(f"redis at {self.description}: {reply}")
                raise MessageRejected(f"redis refused XADD: {reply}", index)
            if isinstance(reply, Exception):
                raise SinkUnavailable(f"redis at {self.description}: {reply}")
        if self.replicas and replies[-1] < self.replicas:
            raise SinkUnavailable(
                f"redis at {self.description}: {replies[-1]} of {self.replicas} replicas acked"
            )

    async def close(self) -> None:
        client, self._redis = self._redis, None
        if client is not None:
            try:
                await client.aclose()
            except (require("redis.exceptions", "redis", "redis-py").RedisError, OSError):
                # already broken
                pass
