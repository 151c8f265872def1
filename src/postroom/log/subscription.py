"""What ``@client.subscribe`` registers, checked at import time (sans-IO)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .._checks import error_text
from ..errors import InvalidArgument
from .records import (
    check_max_poll_interval,
    check_member_id,
    check_name,
    check_session_timeout,
)

DLQ_SUFFIX = ".dlq"
DLQ_HEADERS = ("topic", "partition", "offset", "attempts", "error")
"""Headers a dead letter carries, each prefixed ``postroom-dlq-``."""


@dataclass(frozen=True)
class Subscription:
    """A handler of ``topics`` run as member(s) of ``group`` by the runner.

    ``handler(message)`` (or ``handler(messages)`` with ``batch``); with ``transactional`` it
    runs in the batch's transaction and gets its connection: ``handler(message, conn)`` or
    ``handler(batch)`` (``batch.connection``). A handler that raises is retried in place,
    ``backoff`` apart, up to ``max_attempts`` attempts; then the message goes to the
    dead-letter topic (``<topic>.dlq`` unless ``dead_letter_topic``) and the partition goes on.
    Retries wait ``retry_delay`` seconds, doubled after each failure up to ``max_retry_delay``.
    ``concurrency`` members run in the process: partitions are processed in parallel, each in
    order.
    """

    topics: tuple[str, ...]
    group: str
    handler: Callable[..., Any]
    batch: bool = False
    transactional: bool = False
    max_attempts: int = 5
    retry_delay: float = 0.2
    max_retry_delay: float = 10.0
    dead_letter_topic: str | None = None
    concurrency: int = 1
    max_messages: int = 100
    session_timeout: float = 10.0
    max_poll_interval: float = 300.0
    """A member whose handler runs longer than this leaves its group (docs/log.md)."""
    member_id: str | None = None

    def retry_wait(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based)."""
        return float(min(self.retry_delay * 2 ** min(attempt - 1, 60), self.max_retry_delay))

    def dead_letter_for(self, topic: str) -> str:
        return self.dead_letter_topic or f"{topic}{DLQ_SUFFIX}"

    @property
    def name(self) -> str:
        return getattr(self.handler, "__qualname__", repr(self.handler))


def make_subscription(
    topics: str | Iterable[str], group: str, handler: Callable[..., Any], **options: Any
) -> Subscription:
    """A checked :class:`Subscription`; raises :class:`InvalidArgument` naming a bad option."""
    names = (topics,) if isinstance(topics, str) else tuple(topics)
    if not names:
        raise InvalidArgument("subscribe() needs at least one topic")
    for name in names:
        check_name("topic", name)
    check_name("group", group)
    if not callable(handler):
        raise InvalidArgument(f"subscribe() decorates a function, got {handler!r}")
    known = set(Subscription.__dataclass_fields__) - {"topics", "group", "handler"}
    unknown = set(options) - known
    if unknown:
        raise InvalidArgument(f"unknown subscribe() options {sorted(unknown)}: use {sorted(known)}")
    for key in ("max_attempts", "concurrency", "max_messages"):
        value = options.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 100_000:
            raise InvalidArgument(f"invalid {key} {value!r}: an integer from 1 to 100000")
    _check_membership_options(options)
    for key in ("retry_delay", "max_retry_delay"):
        value = options.get(key, 0.0)
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 3600:
            raise InvalidArgument(f"invalid {key} {value!r}: seconds from 0 to 3600")
    return Subscription(names, group, handler, **options)


def _check_membership_options(options: dict[str, Any]) -> None:
    if "session_timeout" in options:
        check_session_timeout(options["session_timeout"])
    if "max_poll_interval" in options:
        check_max_poll_interval(options["max_poll_interval"])
    if options.get("member_id") is not None:
        check_member_id(options["member_id"])
    if options.get("dead_letter_topic") is not None:
        check_name("topic", options["dead_letter_topic"])


class Subscriptions:
    """The subscriptions registered on one client."""

    def __init__(self) -> None:
        self.items: list[Subscription] = []

    def decorator(
        self, topics: str | Iterable[str], group: str, options: dict[str, Any]
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
            self.items.append(make_subscription(topics, group, handler, **options))
            return handler

        return decorate


MAX_ERROR_CHARS = 2000
"""A handler's error is cut to this many characters in logs and dead-letter headers."""


class StoppedInBackoff(Exception):
    """``stop()`` came while a failed message waited for its next attempt: the message is
    neither retried at once nor dead-lettered (its failure may be transient); it stays
    uncommitted for the partition's next owner."""


def describe_failure(exc: BaseException) -> str:
    text = error_text(exc).replace("\x00", "\\x00")
    return text.encode("utf-8", "replace").decode("utf-8")[:MAX_ERROR_CHARS]
