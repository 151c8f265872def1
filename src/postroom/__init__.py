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
