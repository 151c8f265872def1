"""The outbox relay: carries topics out of PostgreSQL to Kafka, RabbitMQ, NATS, Redis or HTTP.

A relay is a consumer group member whose handler publishes to a sink; see docs/outbox.md.
This package sits between the client facade and the log engine: it takes the engine
(``client.log``) and uses its public operations and the log's records only, never the client.
"""

from .delivery import RelayCounters
from .inbox import Inbox
from .inbox_async import AsyncInbox
from .loop import AsyncRelay, Relay, RelaySource
from .records import RelaySinkError, RelayStatus
from .routing import Outbound, Route
from .sinks import Sink, open_sink

__all__ = [
    "AsyncInbox",
    "AsyncRelay",
    "Inbox",
    "Outbound",
    "Relay",
    "RelayCounters",
    "RelaySinkError",
    "RelaySource",
    "RelayStatus",
    "Route",
    "Sink",
    "open_sink",
]
