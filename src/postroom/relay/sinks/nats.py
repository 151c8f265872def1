"""NATS JetStream: publish each message to the subject named by the destination and wait for
the stream's acknowledgement (PubAck). ``Nats-Msg-Id`` carries the message id, so JetStream
drops a redelivery within the stream's duplicate window by itself.

The stream must exist and cover the subjects (``nats stream add``); until it does, publishes
find no responder and the relay retries. Other headers: the message's own (text), and
``Postroom-Key`` when it has a key.

    nats://127.0.0.1:4222?prefix=outbox.&timeout=5
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import SplitResult

from ..._checks import error_text
from ...errors import DestinationUnusable, MessageRejected, SinkUnavailable
from ..routing import Outbound
from . import Sink, no_more, number, require

log = logging.getLogger("postroom.relay")

OPTIONS = ("prefix", "timeout")
KEY_HEADER = "Postroom-Key"


def from_url(url: str, parts: SplitResult, options: dict[str, Any]) -> NatsSink:
    require("nats", "nats", "nats-py")
    prefix = str(options.pop("prefix", ""))
    timeout = number(options, "timeout", 5.0, 0.001)
    no_more("nats", options, OPTIONS)
    server = parts._replace(query="", fragment="").geturl()
    return NatsSink(server, prefix=prefix, timeout=timeout)


def illegal_subject(subject: str) -> str | None:
    """Why ``subject`` can never be published to, or None if it can: NATS subjects are
    dot-separated tokens, none empty, without whitespace, and a publish names no wildcard
    (``*``, ``>``). Sent as is, such a subject breaks the protocol line: the server closes the
    connection, and the relay would retry it forever."""
    if not subject or any(c in subject for c in " \t\r\n\f\v\0"):
        return f"{subject!r} is not a legal NATS subject (empty, or whitespace in it)"
    tokens = subject.split(".")
    if "" in tokens or "*" in tokens or ">" in tokens:
        return (
            f"{subject!r} is not a legal NATS subject to publish to (an empty token or a wildcard)"
        )
    return None


def nats_headers(out: Outbound) -> dict[str, str]:
    headers = {
        k: v if isinstance(v, str) else v.decode("utf-8", "replace") for k, v in out.headers.items()
    }
    if out.key is not None:
        headers[KEY_HEADER] = out.key.decode("utf-8", "replace")
    headers["Nats-Msg-Id"] = out.id
    return headers


class NatsSink(Sink):
    """JetStream publishes with nats-py's asyncio client."""

    scheme = "nats"

    def __init__(self, url: str, *, prefix: str = "", timeout: float = 5.0) -> None:
        super().__init__(url)
        self.prefix = prefix
        self.timeout = timeout
        self._nc: Any = None
        self._js: Any = None
        self._last_error = ""

    async def open(self) -> None:
        nats = require("nats", "nats", "nats-py")
        self._last_error = ""
        try:
            # No reconnect loop inside the client: the relay's own backoff retries, and a
            # send on a closed connection says so at once instead of buffering. One attempt
            # to connect: max_reconnect_attempts=0 means "forever" to the initial connect of
            # nats-py, which then never returned for a server that was down (issue 23).
            self._nc = await nats.connect(
                servers=[self.url],
                connect_timeout=self.timeout,
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                error_cb=self._on_error,
            )
        except Exception as exc:
            reason = self._last_error or error_text(exc)
            raise SinkUnavailable(f"nats at {self.description}: {reason}") from exc
        self._js = self._nc.jetstream(timeout=self.timeout)

    async def _on_error(self, exc: Exception) -> None:
        """nats-py's report of a connection error: one line (its default logs a traceback
        per failure; the relay reports the failure itself, as SinkUnavailable, and retries)."""
        self._last_error = error_text(exc)
        log.debug("nats at %s: %s", self.description, self._last_error)

    async def send(self, batch: Sequence[Outbound]) -> None:
        errors = require("nats.errors", "nats", "nats-py")
        js_errors = require("nats.js.errors", "nats", "nats-py")
        if self._nc is None or self._nc.is_closed:
            await self.open()
        for index, out in enumerate(batch):
            subject = self.prefix + out.destination
            reason = illegal_subject(subject)
            if reason is not None:
                raise DestinationUnusable(f"{out.id} not sent: {reason}", index)
            try:
                await self._js.publish(
                    subject,
                    out.value or b"",
                    timeout=self.timeout,
                    headers=nats_headers(out),
                )
            except errors.MaxPayloadError as exc:
                raise MessageRejected(f"nats: {exc}", index) from exc
            except (errors.NoRespondersError, js_errors.NoStreamResponseError) as exc:
                raise SinkUnavailable(
                    f"nats: no JetStream stream takes subject {subject!r}"
                    " (create one with `nats stream add`)"
                ) from exc
            except js_errors.APIError as exc:
                if exc.code is not None and 400 <= exc.code < 500 and exc.code != 408:
                    raise MessageRejected(f"nats refused {out.id}: {exc}", index) from exc
                raise SinkUnavailable(f"nats at {self.description}: {exc}") from exc
            except (errors.Error, OSError, TimeoutError) as exc:
                await self.close()
                raise SinkUnavailable(f"nats at {self.description}: {error_text(exc)}") from exc

    async def close(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            try:
                await nc.close()
            except Exception:  # noqa: BLE001 (already broken)
                pass
