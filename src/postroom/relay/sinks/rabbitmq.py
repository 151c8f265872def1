"""RabbitMQ: publish to an exchange with publisher confirms (aio-pika), one confirm per
message before the next is sent, so the broker's order is the partition's order.

Routing key = the destination (the topic, or a route template such as ``{event_type}``);
``exchange`` names the exchange (default: the default exchange, where the routing key is a
queue name). Messages are persistent, ``message_id`` = the message id, ``headers`` = the
message's headers, and the key travels in the ``postroom-key`` header. Publishing is
``mandatory``: a message no queue takes is not dropped but retried until one is bound.

    amqp://guest:guest@127.0.0.1:5672/?exchange=outbox&timeout=5
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import SplitResult

from ...errors import DestinationUnusable, MessageRejected, SinkUnavailable
from ..routing import Outbound
from . import Sink, no_more, number, require

OPTIONS = ("exchange", "timeout")
KEY_HEADER = "postroom-key"
MAX_ROUTING_KEY = 255  # AMQP 0-9-1 shortstr: bytes of UTF-8


def from_url(url: str, parts: SplitResult, options: dict[str, Any]) -> RabbitSink:
    require("aio_pika", "rabbitmq", "aio-pika")
    exchange = str(options.pop("exchange", ""))
    timeout = number(options, "timeout", 10.0, 0.001)
    no_more("rabbitmq", options, OPTIONS)
    server = parts._replace(query="", fragment="").geturl()
    return RabbitSink(server, exchange=exchange, timeout=timeout)


class RabbitSink(Sink):
    """Publisher-confirmed publishes with aio-pika."""

    scheme = "amqp"

    def __init__(self, url: str, *, exchange: str = "", timeout: float = 10.0) -> None:
        super().__init__(url)
        self.exchange_name = exchange
        self.timeout = timeout
        self._connection: Any = None
        self._channel: Any = None
        self._exchange: Any = None

    async def open(self) -> None:
        aio_pika = require("aio_pika", "rabbitmq", "aio-pika")
        try:
            if self._connection is None or self._connection.is_closed:
                self._connection = await aio_pika.connect(self.url, timeout=self.timeout)
            self._channel = await self._connection.channel(publisher_confirms=True)
            if self.exchange_name:
                self._exchange = await self._channel.get_exchange(self.exchange_name)
            else:
                self._exchange = self._channel.default_exchange
        except Exception as exc:
            await self.close()
            raise SinkUnavailable(
                f"rabbitmq at {self.description}: {type(exc).__name__} {exc}"
            ) from exc

    async def send(self, batch: Sequence[Outbound]) -> None:
        aio_pika = require("aio_pika", "rabbitmq", "aio-pika")
        aiormq = require("aiormq.exceptions", "rabbitmq", "aio-pika")
        spec = require("pamqp.commands", "rabbitmq", "aio-pika")
        if self._channel is None or self._channel.is_closed:
            await self.open()
        for index, out in enumerate(batch):
            if len(out.destination.encode()) > MAX_ROUTING_KEY:
                # Not encodable in a publish frame: retrying cannot help.
                raise DestinationUnusable(
                    f"{out.id} not sent: routing key {out.destination[:40]!r}... is "
                    f"{len(out.destination.encode())} bytes, AMQP allows {MAX_ROUTING_KEY}",
                    index,
                )
            headers: dict[str, Any] = {
                k: v if isinstance(v, str) else v.decode("utf-8", "replace")
                for k, v in out.headers.items()
            }
            if out.key is not None:
                headers[KEY_HEADER] = out.key.decode("utf-8", "replace")
            message = aio_pika.Message(
                out.value or b"",
                message_id=out.id,
                headers=headers,
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                type=out.event_type,
            )
            try:
                confirmation = await self._exchange.publish(
                    message, routing_key=out.destination, mandatory=True, timeout=self.timeout
                )
            except aio_pika.exceptions.DeliveryError as exc:
                raise self._not_taken(out) from exc
            except aiormq.ChannelPreconditionFailed as exc:
                self._channel = None
                raise MessageRejected(f"rabbitmq refused {out.id}: {exc}", index) from exc
            except Exception as exc:
                await self.close()
                raise SinkUnavailable(
                    f"rabbitmq at {self.description}: {type(exc).__name__} {exc}"
                ) from exc
            if not isinstance(confirmation, spec.Basic.Ack):
                raise self._not_taken(out)  # returned (no queue bound) or nacked

    def _not_taken(self, out: Outbound) -> SinkUnavailable:
        return SinkUnavailable(
            f"rabbitmq did not take {out.id} (routing key {out.destination!r}, exchange "
            f"{self.exchange_name!r}): unroutable or nacked; bind a queue to it"
        )

    async def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and not connection.is_closed:
            try:
                await connection.close()
            except Exception:  # noqa: BLE001 (already broken)
                pass
