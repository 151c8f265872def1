"""``postroom consume``: print a topic's messages, as a member of a consumer group (committing
exactly what was printed), or without a group (a peek that stores nothing)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Annotated, Any

import typer

import postroom
from postroom import TopicPartition
from postroom.errors import GroupNotFound, InvalidArgument

from .common import note, open_client, printable

POLL_SLICE = 0.5
"""Longest single wait in poll(), so Ctrl-C and --timeout are noticed promptly."""


def consume(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            help="Consumer group to join (its offsets are used and committed). Without it: "
            "read without a group, nothing stored (from the end, or --from-beginning).",
        ),
    ] = None,
    from_beginning: Annotated[
        bool,
        typer.Option(
            "--from-beginning",
            help="A new group starts at the earliest retained message (default: only messages "
            "written from now on). No effect on a group with committed offsets.",
        ),
    ] = False,
    partition: Annotated[
        list[int] | None,
        typer.Option("--partition", "-p", help="Read only this partition; repeat for more."),
    ] = None,
    max_messages: Annotated[
        int | None,
        typer.Option("--max-messages", "-n", help="Exit after this many messages.", min=1),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", help="Exit after this many seconds without a message (not with --live)."
        ),
    ] = 5.0,
    live: Annotated[
        bool, typer.Option("--live", help="Keep reading until Ctrl-C (or --max-messages).")
    ] = False,
    payload_only: Annotated[
        bool, typer.Option("--payload-only", help="Print only the values, one per line.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON object per line: topic, partition, offset, time, key, headers, value.",
        ),
    ] = False,
) -> None:
    """Print messages of TOPIC as `partition:offset key value`, one per line.

    Values and keys are shown as UTF-8 text; control characters and bytes that are not UTF-8
    are escaped (\\n, \\x00, \\xff); a missing key prints as null. With --group, the consumer
    joins the group like any member (it reads the partitions the group assigns it) and commits
    after each printed batch and on exit, so the next run continues after the last printed
    message. Without --group nothing is created or committed.
    """
    if timeout < 0:
        raise InvalidArgument(f"invalid --timeout {timeout}: must be >= 0 seconds")
    wanted = None if not partition else [TopicPartition(topic, p) for p in partition]
    with open_client(ctx) as client:
        if from_beginning and group is not None:
            _warn_if_not_new(client, group, topic)
        consumer = client.consumer(
            group,
            topic,
            partitions=wanted,
            auto_offset_reset="earliest" if from_beginning else "latest",
        )
        with consumer:
            printed = _print_messages(
                consumer,
                max_messages=max_messages,
                idle_timeout=None if live else timeout,
                style="json" if as_json else "payload" if payload_only else "line",
            )
    note(f"consumed {printed} message(s)")


def _warn_if_not_new(client: postroom.Client, group: str, topic: str) -> None:
    try:
        info = client.describe_group(group)
    except GroupNotFound:
        return
    if topic in info.topics:
        note(
            f"group {group!r} already has offsets on {topic!r}: --from-beginning only applies "
            f"to a new group (use `postroom group reset {group} --topic {topic} --to earliest`)"
        )


class _CtrlC:
    """Within the block, Ctrl-C sets ``requested`` instead of raising, so the loop stops between
    batches and never between printing a message and recording it; a second Ctrl-C raises
    KeyboardInterrupt at once. Only the main thread can own signal handlers; elsewhere
    (embedded use) Ctrl-C keeps its default behaviour."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None
        self._installed = False

    def __enter__(self) -> _CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested.is_set():
            raise KeyboardInterrupt
        self.requested.set()

    def __exit__(
        self, exc_type: object, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._installed:
            # None means a handler not set from Python: the default is the closest match.
            previous = signal.SIG_DFL if self._previous is None else self._previous
            signal.signal(signal.SIGINT, previous)


def _print_messages(
    consumer: postroom.Consumer,
    *,
    max_messages: int | None,
    idle_timeout: float | None,
    style: str,
) -> int:
    """Poll, print and commit until the limit, the idle timeout, Ctrl-C or a closed pipe.

    Commits the offsets after the last *printed* message per partition (not the consumer's
    position, which an interrupted batch may have moved further), after stdout is flushed.
    """
    printed = 0
    done: dict[TopicPartition, int] = {}
    committed: dict[TopicPartition, int] = {}
    last_message = time.monotonic()
    out = sys.stdout
    with _CtrlC() as ctrl_c:
        try:
            while not ctrl_c.requested.is_set() and (
                max_messages is None or printed < max_messages
            ):
                limit = 500 if max_messages is None else min(500, max_messages - printed)
                wait = POLL_SLICE
                if idle_timeout is not None:
                    wait = min(wait, max(0.0, last_message + idle_timeout - time.monotonic()))
                messages = consumer.poll(timeout=wait, max_messages=limit)
                if not messages:
                    if idle_timeout is not None and time.monotonic() - last_message >= idle_timeout:
                        break
                    continue
                for message in messages:
                    out.write(_line(message, style))
                    done[message.topic_partition] = message.offset + 1
                    printed += 1
                out.flush()
                if consumer.group is not None:
                    consumer.commit(done)
                committed.update(done)
                last_message = time.monotonic()
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: stop now, still committing what was printed
        except BrokenPipeError:
            # The reader went away (`| head`): stop quietly; stdout goes nowhere from now on.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            if done != committed and consumer.group is not None:
                consumer.commit(done)
    return printed


def _line(message: postroom.Message, style: str) -> str:
    value = printable(message.value)
    if style == "json":
        return (
            json.dumps(
                {
                    "topic": message.topic,
                    "partition": message.partition,
                    "offset": message.offset,
                    "time": message.timestamp.isoformat(),
                    "key": None if message.key is None else printable(message.key),
                    "headers": {
                        k: v if isinstance(v, str) else printable(v)
                        for k, v in message.headers.items()
                    },
                    "value": value,
                }
            )
            + "\n"
        )
    if style == "payload":
        return value + "\n"
    return f"{message.partition}:{message.offset} {printable(message.key)} {value}\n"
