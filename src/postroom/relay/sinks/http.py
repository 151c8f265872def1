"""HTTP webhook: POST each message (or each batch) as JSON, signed with HMAC-SHA256.

A message is the JSON object ``{"id", "destination", "key", "headers", "payload"}``: the
payload is the value's JSON when it is JSON, else its text; a value that is not UTF-8 goes as
``"payload_base64"`` instead. With ``batch=true`` the body is a JSON array of them.

Headers: ``Postroom-Id`` (per-message mode), ``Postroom-Signature: t=<unix time>,v1=<hex>``
where ``<hex>`` is HMAC-SHA256(secret, f"{t}.{body}") when a secret is set (option ``secret`` or
``$POSTROOM_WEBHOOK_SECRET``). 2xx acknowledges; 408, 429, 5xx, timeouts and connection errors
are retried; any other 4xx rejects the message (after max_attempts it is dead-lettered).

    https://hooks.example.com/orders?batch=true&timeout=10
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlencode

from ...errors import MessageRejected, SinkUnavailable
from ..routing import Outbound
from . import Sink, flag, no_more, number, require

OPTIONS = ("batch", "secret", "timeout")
SECRET_ENV = "POSTROOM_WEBHOOK_SECRET"
_RETRY_STATUSES = frozenset({408, 425, 429})


def from_url(url: str, parts: SplitResult, options: dict[str, Any]) -> WebhookSink:
    require("httpx", "http", "httpx")
    query = parse_qsl(parts.query, keep_blank_values=True)
    for name, _ in query:
        if name not in OPTIONS:
            options.pop(name, None)  # the endpoint's own query parameter, sent as is
    endpoint = parts._replace(query=urlencode([(k, v) for k, v in query if k not in OPTIONS]))
    batch = flag(options, "batch", False)
    secret = options.pop("secret", None) or os.environ.get(SECRET_ENV)
    timeout = number(options, "timeout", 10.0, 0.001)
    no_more("http", options, OPTIONS)
    return WebhookSink(endpoint.geturl(), batch=batch, secret=secret, timeout=timeout)


def envelope(out: Outbound) -> dict[str, Any]:
    """The JSON object one message is sent as."""
    body: dict[str, Any] = {
        "id": out.id,
        "destination": out.destination,
        "key": None if out.key is None else out.key.decode("utf-8", "replace"),
        "headers": {
            k: v if isinstance(v, str) else v.decode("utf-8", "replace")
            for k, v in out.headers.items()
        },
    }
    if out.value is None:  # a tombstone
        body["payload"] = None
        return body
    try:
        text = out.value.decode("utf-8")
    except UnicodeDecodeError:
        body["payload_base64"] = base64.b64encode(out.value).decode()
        return body
    try:
        body["payload"] = json.loads(text)
    except ValueError:
        body["payload"] = text
    return body


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Postroom-Signature`` header value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


class WebhookSink(Sink):
    """POST to an HTTP endpoint with httpx's asyncio client."""

    scheme = "http"

    def __init__(
        self, url: str, *, batch: bool = False, secret: str | None = None, timeout: float = 10.0
    ) -> None:
        super().__init__(url)
        self.batch = batch
        self.secret = secret
        self.timeout = timeout
        self.endpoint = url
        self._http: Any = None

    async def open(self) -> None:
        httpx = require("httpx", "http", "httpx")
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout)
        # No probe request: a webhook may not answer anything but POSTs. The first send tells.

    async def send(self, batch: Sequence[Outbound]) -> None:
        if self._http is None:
            await self.open()
        if self.batch and len(batch) > 1:
            try:
                await self._post([envelope(out) for out in batch], None)
                return
            except MessageRejected:
                pass  # find the message at fault: one by one (acknowledged ones come again)
        for index, out in enumerate(batch):
            try:
                await self._post(envelope(out), out.id)
            except MessageRejected as exc:
                raise MessageRejected(str(exc), index) from None

    async def _post(self, document: Any, message_id: str | None) -> None:
        httpx = require("httpx", "http", "httpx")
        body = json.dumps(document, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"}
        if message_id is not None:
            headers["Postroom-Id"] = message_id
        if self.secret:
            headers["Postroom-Signature"] = signature(self.secret, int(time.time()), body)
        try:
            response = await self._http.post(self.endpoint, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise SinkUnavailable(f"POST {self.description}: {type(exc).__name__} {exc}") from exc
        status = response.status_code
        if 200 <= status < 300:
            return
        reason = f"POST {self.description}: HTTP {status} {response.text[:200]}".strip()
        if status >= 500 or status in _RETRY_STATUSES:
            raise SinkUnavailable(reason)
        raise MessageRejected(reason)

    async def close(self) -> None:
        client, self._http = self._http, None
        if client is not None:
            await client.aclose()
