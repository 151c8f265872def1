"""The errors postroom raises: a small hierarchy under :class:`PostroomError`.

Each message names the bad value and what is allowed. Errors about caller input also derive from
the matching built-in (``ValueError``, ``TypeError``, ``LookupError``) so generic handlers work.

Which psycopg errors pass through, as psycopg raised them (everything else the database says
about a postroom call becomes one of these types, with the bad value named):

- ``psycopg.OperationalError`` when the server goes away during a call (the pools retry the
  connection, not the call), and psycopg_pool's ``PoolTimeout`` (an ``OperationalError``) when
  no pooled connection frees up in time. Two cases are ours instead: an unreachable server at
  ``connect()`` is :class:`DatabaseUnavailable`, a COMMIT whose outcome is unknown is
  :class:`CommitUnknown` (both also ``OperationalError``, where they replace one).
- Errors of the caller's own transaction, with ``conn=``: its failed state
  (``InFailedSqlTransaction``), its isolation (``SerializationFailure``, ``DeadlockDetected``)
  and its settings (``QueryCanceled`` for a ``statement_timeout``, ``LockNotAvailable`` for a
  ``lock_timeout``) are the caller's to handle, so they reach the caller unchanged.
- ``InsufficientPrivilege`` never passes bare: it is :class:`PermissionDenied`, a subclass.

A background unit (a worker's loop, a group member's heartbeat) retries on these and logs
them; ``Worker.run()`` ends only with :class:`WorkerCrashed` or :class:`SchemaNotReady`.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg


class PostroomError(Exception):
    """Base class of every error postroom raises on purpose.

    ``cli``, where set, is the same message for a person at the ``postroom`` command: its
    advice names the command to run instead of the Python call."""

    cli: str | None = None

    def __init__(self, *args: object, cli: str | None = None) -> None:
        super().__init__(*args)
        if cli is not None:
            self.cli = cli


class InvalidArgument(PostroomError, ValueError):
    """A value is outside what is allowed (a name, a count, a size, an offset)."""


class InvalidName(InvalidArgument):
    """A topic, group or queue name does not match the allowed pattern."""


class InvalidType(PostroomError, TypeError):
    """A value has a type postroom cannot encode."""


class MessageTooLarge(InvalidArgument):
    """A key, value or header set is larger than the configured limit."""


class NotFound(PostroomError, LookupError):
    """Base class of the unknown-object errors."""


class TopicNotFound(NotFound):
    """The topic does not exist."""


class GroupNotFound(NotFound):
    """The consumer group has no committed cursor."""


class TopicExists(PostroomError):
    """A topic with this name already exists."""


class OffsetOutOfRange(InvalidArgument):
    """An offset is negative or beyond the partition's high-water mark."""


class SchemaNotReady(PostroomError):
    """The postroom schema is missing or older than this version: run ``postroom init``."""


class ProducerClosed(PostroomError):
    """``send`` was called on a closed producer."""


class ConsumerClosed(PostroomError):
    """``poll``, ``commit`` or another read was called on a closed consumer."""


class WorkerAlreadyRun(PostroomError):
    """``run()`` was called a second time on a worker: a worker runs once."""


class JobNotFound(NotFound):
    """No job has this id (or it finished and was not kept, or was purged)."""


class InvalidCron(InvalidArgument):
    """A cron expression does not parse."""


class JobFailed(PostroomError):
    """``result()`` of a job that ended in the dead-letter state ``failed``."""

    def __init__(self, message: str, job_id: int, last_error: str | None) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.last_error = last_error


class JobCancelled(PostroomError):
    """``result()`` of a job that was cancelled."""


class UniqueKeyTaken(PostroomError):
    """A failed job cannot be retried: another ready or running job holds its unique key."""


class JobInterrupted(BaseException):
    """Raised inside a running job by its worker: timeout, cancellation or shutdown.

    A ``BaseException`` (like ``asyncio.CancelledError``) so that ``except Exception`` in job
    code does not swallow it; let it propagate after your cleanup.
    """

    def __init__(self, reason: str = "interrupted") -> None:
        super().__init__(reason)
        self.reason = reason


class BackendUnavailable(PostroomError):
    """The log's backend cannot be reached now: the database (:class:`DatabaseUnavailable`) or
    the Kafka brokers (:class:`BrokerUnavailable`). The runner retries either with backoff."""


class DatabaseUnavailable(BackendUnavailable):
    """The database cannot be reached (wrong URL, server down, authentication refused)."""


class BrokerUnavailable(BackendUnavailable):
    """No Kafka broker of a ``kafka://`` URL answers (wrong address, brokers down, TLS or SASL
    refused, a call timed out); the message names the brokers, never a password."""


class NotSupported(PostroomError):
    """The backend cannot give this feature (publishing in the caller's database transaction
    on ``kafka://``, the job queue on Kafka, ...); the message names the alternative. The
    table of what each backend gives is in docs/kafka.md."""


class CommitUnknown(PostroomError, psycopg.OperationalError):
    """The connection was lost while postroom committed the caller's write (``publish``,
    ``publish_batch``, a producer's batch, ``enqueue``, ``enqueue_batch`` without ``conn``):
    the server may have committed it or not, and no one can tell from this side.
    ``committing`` says what was being committed.

    Retry only in a way that cannot write twice: ``enqueue`` again with the same
    ``unique_key`` (a job already in the queue under that key is not inserted again); a
    publish again with the same idempotency key in its headers, which consumers deduplicate
    on (docs/log.md). Also a psycopg ``OperationalError``, so code that treats a lost
    connection as such keeps working."""

    def __init__(self, message: str, committing: str = "") -> None:
        super().__init__(message)
        self.committing = committing


class Fenced(PostroomError):
    """A consumer group member no longer holds a partition (its session expired, e.g. after a
    long pause, or the partition was handed to another member): its commit or claim was refused
    and the group's cursor did not move. Like Kafka's ``CommitFailedError``; the partition's
    new owner goes on from the committed cursor."""


class InstanceFenced(PostroomError):
    """A newer instance of this consumer's group member (the same ``member_id``) joined the
    group, so this one is fenced for good, as Kafka fences a stale ``group.instance.id``: every
    later ``poll()``, ``commit()`` and ``transaction()`` raises this, and nothing it holds is
    delivered or committed again. Stop the process (or close the consumer); its replacement
    holds the partitions. Not a :class:`Fenced`, on purpose: code that catches ``Fenced`` to go
    on with the partitions still held must not loop on a consumer that can never go on."""


class BacklogFull(PostroomError):
    """A write to a topic with ``max_lag`` was refused: the slowest active consumer group of the
    partition written is ``max_lag`` or more messages behind (admission control, docs/log.md).
    Nothing of the refused write was stored."""


class BufferFull(PostroomError):
    """A producer's ``send`` waited ``buffer_timeout`` seconds for room in its buffer of
    unwritten sends (``buffer_messages``, ``buffer_bytes``): the database does not take the
    messages as fast as they are sent. The message was not queued."""


class TransactionAborted(PostroomError):
    """The transaction of a ``consumer.transaction()`` block was aborted by a database error
    that the block caught: nothing was committed, and the batch will be delivered again."""


class RoleNotFound(NotFound):
    """``grant()`` named a database role that does not exist."""


class PermissionDenied(PostroomError, psycopg.errors.InsufficientPrivilege):
    """The database role connected lacks a right this operation needs (see ``grant()``).

    Also a psycopg ``InsufficientPrivilege``, as psycopg_pool's ``PoolTimeout`` is an
    ``OperationalError``: code that catches the driver's error keeps working."""


class WorkerCrashed(PostroomError):
    """A worker's background loop (claiming, write-back, heartbeat, ...) failed and cannot go
    on: ``run()`` stopped the worker and raises this, so the process ends with an error and a
    supervisor can restart it."""


class Snooze(PostroomError):
    """Raised by a job to run again in ``seconds`` without spending an attempt (River's
    JobSnooze): ``raise Snooze(60)`` when what it waits for is not there yet."""

    def __init__(self, seconds: float | timedelta = 0.0) -> None:
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds <= 366 * 86400
        ):
            raise InvalidArgument(
                f"invalid snooze {seconds!r}: seconds (or a timedelta) from 0 to 366 days"
            )
        super().__init__(f"snoozed for {seconds:g} s")
        self.seconds = float(seconds)


class Cancel(PostroomError):
    """Raised by a job to stop for good: it ends ``cancelled`` with ``reason`` as its
    ``last_error``, with no retry (River's JobCancel)."""

    def __init__(self, reason: str = "cancelled by the job") -> None:
        super().__init__(reason)
        self.reason = reason


class MissingExtra(PostroomError, ImportError):
    """An optional client library is not installed: the message names the extra to install."""


class SinkError(PostroomError):
    """A relay sink failed; the subclasses say whether the relay retries."""


class SinkUnavailable(SinkError):
    """The sink cannot take messages now (down, timed out, 5xx): the relay retries the same
    batch with backoff, never skipping ahead."""


class MessageRejected(SinkError):
    """The sink refused one message for good (too large, refused by schema, 4xx): after
    ``max_attempts`` the relay moves it to the dead-letter topic.

    ``index`` is the message's position in the batch sent: those before it were acknowledged.
    """

    def __init__(self, message: str, index: int = 0) -> None:
        super().__init__(message)
        self.index = index


class DestinationUnusable(MessageRejected):
    """The message's destination can never take it: not a legal name at the sink (a Kafka
    topic named ``"outbox.event.Gift Card"``, a NATS subject with a space), or refused for good
    by the broker. Retrying cannot help: the relay dead-letters the message at once, with this
    error as the reason, and the partition goes on. A destination missing *now* (a Kafka topic
    not yet created) is :class:`SinkUnavailable` instead: retried."""
