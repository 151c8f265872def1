"""The outbox relay: carries topics out of PostgreSQL to Kafka, RabbitMQ, NATS, Redis or HTTP.

A relay is a consumer group member whose handler publishes to a sink; see docs/outbox.md.
This package sits between the adapters (cli, web) and the log engine: it uses the public
client API and the log's records only.
"""

from .delivery import RelayCounters
from .inbox import Inbox
from .inbox_async import AsyncInbox
from .loop import AsyncRelay, Relay
from .records import RelayStatus
from .routing import Outbound, Route
from .sinks import Sink, open_sink

__all__ = [
    "AsyncInbox",
    "AsyncRelay",
    "Inbox",
    "Outbound",
    "Relay",
    "RelayCounters",
    "RelayStatus",
    "Route",
    "Sink",
    "open_sink",
]
