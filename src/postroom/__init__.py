"""postroom: PostgreSQL as message infrastructure: a partitioned log with consumer groups, a job
queue and a transactional outbox.

import postroom

client = postroom.connect()          # POSTROOM_URL, DATABASE_URL, or an embedded PostgreSQL
client.migrate()
client.create_topic("orders", partitions=4)
with psycopg.connect(url) as conn:   # your transaction: the row and its event commit together
    conn.execute("INSERT INTO orders ...")
    client.publish("orders", {"id": 1}, key="customer-7", conn=conn)
"""

# `import postroom` imports none of the package: each public name is imported on first use
# (PEP 562), so a process that needs one part (`postroom relay` needs the relay and the log,
# never the queue or the dashboard) pays for that part only, and `import postroom` costs ~1 ms
# instead of ~150-300 ms (psycopg, the pools, both engines). Type checkers and IDEs read the
# imports below; at run time `__getattr__` looks each name up in _PUBLIC and keeps it.

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import errors
    from ._grants import RoleGrant
    from .client import Client, connect
    from .client_async import AsyncClient, connect_async
    from .errors import Cancel, Snooze
    from .log.consumer import Batch, Consumer
    from .log.consumer_async import AsyncBatch, AsyncConsumer
    from .log.partitioner import murmur2, partition_for_key
    from .log.producer import Producer
    from .log.producer_async import AsyncProducer
    from .log.records import (
        GroupInfo,
        Message,
        PartitionInfo,
        PartitionLag,
        Published,
        TopicInfo,
        TopicPartition,
    )
    from .log.runner import Runner
    from .log.runner_async import AsyncRunner
    from .queue.admin import Job
    from .queue.admin_async import AsyncJob
    from .queue.backoff import Backoff
    from .queue.context import JobContext
    from .queue.enqueue import JobFunction
    from .queue.enqueue_async import AsyncJobFunction
    from .queue.options import EnqueueOptions
    from .queue.records import JobInfo, JobStats, QueueCount
    from .queue.requests import JobRequest
    from .queue.serializer import Serializer
    from .queue.worker import Worker
    from .queue.worker_async import AsyncWorker
    from .relay import AsyncRelay, Relay, RelaySinkError, RelaySource, RelayStatus, Route

__all__ = [
    "AsyncBatch",
    "AsyncClient",
    "AsyncConsumer",
    "AsyncJob",
    "AsyncJobFunction",
    "AsyncProducer",
    "AsyncRelay",
    "AsyncRunner",
    "AsyncWorker",
    "Backoff",
    "Batch",
    "Cancel",
    "Client",
    "Consumer",
    "EnqueueOptions",
    "GroupInfo",
    "Job",
    "JobContext",
    "JobFunction",
    "JobInfo",
    "JobRequest",
    "JobStats",
    "Message",
    "PartitionInfo",
    "PartitionLag",
    "Producer",
    "Published",
    "QueueCount",
    "Relay",
    "RelaySinkError",
    "RelaySource",
    "RelayStatus",
    "RoleGrant",
    "Route",
    "Runner",
    "Serializer",
    "Snooze",
    "TopicInfo",
    "TopicPartition",
    "Worker",
    "connect",
    "connect_async",
    "errors",
    "murmur2",
    "partition_for_key",
]

# Where each public name lives ("errors" is the submodule itself).
_PUBLIC: dict[str, str] = {
    "errors": "postroom.errors",
    "RoleGrant": "postroom._grants",
    "Client": "postroom.client",
    "connect": "postroom.client",
    "AsyncClient": "postroom.client_async",
    "connect_async": "postroom.client_async",
    "Cancel": "postroom.errors",
    "Snooze": "postroom.errors",
    "Batch": "postroom.log.consumer",
    "Consumer": "postroom.log.consumer",
    "AsyncBatch": "postroom.log.consumer_async",
    "AsyncConsumer": "postroom.log.consumer_async",
    "murmur2": "postroom.log.partitioner",
    "partition_for_key": "postroom.log.partitioner",
    "Producer": "postroom.log.producer",
    "AsyncProducer": "postroom.log.producer_async",
    "GroupInfo": "postroom.log.records",
    "Message": "postroom.log.records",
    "PartitionInfo": "postroom.log.records",
    "PartitionLag": "postroom.log.records",
    "Published": "postroom.log.records",
    "TopicInfo": "postroom.log.records",
    "TopicPartition": "postroom.log.records",
    "Runner": "postroom.log.runner",
    "AsyncRunner": "postroom.log.runner_async",
    "Job": "postroom.queue.admin",
    "AsyncJob": "postroom.queue.admin_async",
    "Backoff": "postroom.queue.backoff",
    "JobContext": "postroom.queue.context",
    "JobFunction": "postroom.queue.enqueue",
    "AsyncJobFunction": "postroom.queue.enqueue_async",
    "EnqueueOptions": "postroom.queue.options",
    "JobInfo": "postroom.queue.records",
    "JobStats": "postroom.queue.records",
    "QueueCount": "postroom.queue.records",
    "JobRequest": "postroom.queue.requests",
    "Serializer": "postroom.queue.serializer",
    "Worker": "postroom.queue.worker",
    "AsyncWorker": "postroom.queue.worker_async",
    "AsyncRelay": "postroom.relay",
    "Relay": "postroom.relay",
    "RelaySinkError": "postroom.relay",
    "RelaySource": "postroom.relay",
    "RelayStatus": "postroom.relay",
    "Route": "postroom.relay",
}

if not TYPE_CHECKING:  # hidden from mypy, so a misspelt name stays an error there

    def __getattr__(name: str) -> Any:
        from importlib import import_module

        module_name = _PUBLIC.get(name)
        if module_name is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = import_module(module_name)
        value = module if name == "errors" else getattr(module, name)
        globals()[name] = value  # later look-ups are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
