"""Sinks: where a relay delivers. One small module per system, all behind :class:`Sink`.

A sink is opened from a URL whose scheme picks the module:

    redis://127.0.0.1:6379/0                 Redis Streams (XADD, the id in a field)
    http://host/hook, https://host/hook      HTTP webhook (POST, HMAC signature)
    amqp://guest:guest@127.0.0.1:5672/       RabbitMQ (publisher confirms)
    nats://127.0.0.1:4222                    NATS JetStream (publish with ack, Nats-Msg-Id)
    kafka://127.0.0.1:9092                   Kafka (idempotent, acks=all, murmur2 partitions)

Query parameters and keyword arguments set each sink's options (see docs/outbox.md). The
client libraries are optional extras: a missing one raises :class:`MissingExtra` naming it.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar
from urllib.parse import SplitResult, parse_qsl, urlsplit

from ...errors import InvalidArgument, MissingExtra
from ..routing import Outbound

SCHEMES: dict[str, str] = {
    "redis": "redis",
    "rediss": "redis",
    "http": "http",
    "https": "http",
    "amqp": "rabbitmq",
    "amqps": "rabbitmq",
    "nats": "nats",
    "tls": "nats",
    "kafka": "kafka",
}
"""URL scheme -> sink module (and the extra that installs its client library)."""


class Sink(abc.ABC):
    """The interface every sink implements. The relay calls ``open()`` once (again after it
    raised), ``send()`` per batch, ``close()`` at the end.

    ``send`` returns only when every message of ``batch`` is acknowledged by the sink (durably,
    as far as the sink can say), in the order given. It raises :class:`SinkUnavailable` when the
    sink cannot take them now (the relay retries the same batch later) and
    :class:`MessageRejected` with the index of a message the sink refuses for good.
    """

    scheme: ClassVar[str]
    batch_size: ClassVar[int] = 500
    """The relay's default ``batch_size`` for this sink: how many messages one ``send`` gets."""

    def __init__(self, url: str) -> None:
        self.url = url

    @property
    def description(self) -> str:
        """The sink's URL without its password, for logs and status."""
        return redact_url(self.url)

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def send(self, batch: Sequence[Outbound]) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Sink:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def redact_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed url>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def parse_url(url: object) -> SplitResult:
    """Split a sink URL, raising InvalidArgument for anything malformed."""
    if not isinstance(url, str) or not url:
        raise InvalidArgument(f"invalid sink URL {url!r}: a string like redis://127.0.0.1:6379")
    try:
        parts = urlsplit(url)
        # Kafka takes several bootstrap servers: host:port,host:port. Check each port.
        for server in parts.netloc.rsplit("@", 1)[-1].split(","):
            urlsplit(f"//{server}").port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError as exc:
        raise InvalidArgument(f"malformed sink URL {redact_url(url)!r}: {exc}") from None
    if parts.scheme not in SCHEMES:
        raise InvalidArgument(
            f"unknown sink scheme {parts.scheme!r} in {redact_url(url)!r}: use one of "
            f"{', '.join(s + '://' for s in sorted(SCHEMES))}"
        )
    if not parts.hostname:
        raise InvalidArgument(f"malformed sink URL {redact_url(url)!r}: no host")
    return parts


def url_options(parts: SplitResult, options: Mapping[str, Any]) -> dict[str, Any]:
    """Options from the URL's query string, overridden by keyword ``options``."""
    merged: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    merged.update(options)
    return merged


def flag(options: dict[str, Any], name: str, default: bool) -> bool:
    value = options.pop(name, default)
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes", "on"):
        return True
    if str(value).lower() in ("0", "false", "no", "off"):
        return False
    raise InvalidArgument(f"invalid sink option {name}={value!r}: use true or false")


def number(options: dict[str, Any], name: str, default: float, low: float = 0.0) -> float:
    value = options.pop(name, default)
    try:
        result = float(value)
    except (TypeError, ValueError):
        result = float("nan")
    if not result >= low:
        raise InvalidArgument(f"invalid sink option {name}={value!r}: a number >= {low:g}")
    return result


def no_more(scheme: str, options: Mapping[str, Any], known: Sequence[str]) -> None:
    if options:
        raise InvalidArgument(
            f"unknown {scheme} sink options {sorted(options)}: use {', '.join(sorted(known))}"
        )


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import an optional client library, or raise MissingExtra naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(
            f"the {extra} sink needs {what}: pip install 'postroom[{extra}]'"
        ) from None


def open_sink(url: str, **options: Any) -> Sink:
    """The sink for ``url`` (not yet connected: the relay calls ``open()``).

    Raises InvalidArgument for a malformed URL, an unknown scheme or option, and MissingExtra
    when the sink's client library is not installed."""
    parts = parse_url(url)
    module = importlib.import_module(f"{__name__}.{SCHEMES[parts.scheme]}")
    sink: Sink = module.from_url(url, parts, url_options(parts, options))
    return sink


__all__ = ["SCHEMES", "Sink", "open_sink", "redact_url"]
