"""``postroom produce``: write messages from the command line, stdin lines or a JSON-lines file."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Annotated, Any

import typer

import postroom
from postroom.errors import InvalidArgument, PostroomError, TopicNotFound

from .common import open_client

ENVELOPE_FIELDS = frozenset({"value", "key", "headers", "partition"})


def produce(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to write to.")],
    value: Annotated[
        str | None,
        typer.Argument(help="The message value, sent as UTF-8 text.", show_default=False),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", "-k", help="Message key (text): picks the partition by murmur2."),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", "-H", help="A header NAME=VALUE; repeat for more."),
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", help="Write to this partition.")
    ] = None,
    live: Annotated[
        bool,
        typer.Option("--live", help="Read stdin: one message per line (text), until end of input."),
    ] = False,
    key_separator: Annotated[
        str | None,
        typer.Option(
            "--key-separator",
            help="With --live: split each line at the first SEP into key and value.",
            metavar="SEP",
        ),
    ] = None,
    file: Annotated[
        str | None,
        typer.Option(
            "--file",
            "-f",
            help='JSON lines ("-" for stdin): each line is a JSON value, or an object '
            '{"value": ..., "key": ..., "headers": {...}, "partition": N}.',
            metavar="PATH",
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Do not print partition:offset.")
    ] = False,
) -> None:
    """Write messages to TOPIC and print where each landed, as partition:offset.

    Exactly one source: VALUE, --live (stdin lines) or --file (JSON lines). Values from the
    command line and from --live are text; a JSON string in --file is sent as its text and any
    other JSON value as compact JSON. --key, --header and --partition apply to every message
    (in --file, the line's own fields win).
    """
    sources = [value is not None, live, file is not None]
    if sum(sources) != 1:
        raise InvalidArgument("give exactly one of: a VALUE argument, --live, or --file PATH")
    if key_separator is not None and not live:
        raise InvalidArgument("--key-separator works with --live only")
    if key_separator == "":
        raise InvalidArgument("--key-separator must not be empty")
    defaults: dict[str, Any] = {
        "key": key,
        "headers": parse_headers(header or []),
        "partition": partition,
    }
    with open_client(ctx) as client:
        if value is not None:
            published = client.publish(topic, value, **defaults)
            if not quiet:
                sys.stdout.write(f"{published.partition}:{published.offset}\n")
            return
        if not any(t.name == topic for t in client.list_topics()):
            # Checked up front: the producer would only report it after the first batch.
            raise TopicNotFound(f"unknown topic {topic!r}: create it with `postroom topic create`")
        if live:
            messages = _stdin_lines(sys.stdin, defaults, key_separator)
        else:
            assert file is not None
            messages = _json_lines(file, defaults)
        _send_all(client, topic, messages, quiet=quiet)


def parse_headers(items: list[str]) -> dict[str, str] | None:
    """``["a=1", "b=x=y"]`` to ``{"a": "1", "b": "x=y"}``; None when there are none."""
    if not items:
        return None
    headers = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise InvalidArgument(f"invalid header {item!r}: use NAME=VALUE")
        headers[name] = text
    return headers


def _stdin_lines(
    stream: IO[str], defaults: dict[str, Any], key_separator: str | None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(value, options) for every non-blank line; the newline is not part of the value."""
    for line in stream:
        text = line.rstrip("\r\n")
        if not text.strip():
            continue
        options = dict(defaults)
        if key_separator is not None:
            found_key, sep, rest = text.partition(key_separator)
            if not sep:
                raise InvalidArgument(
                    f"line {text!r} has no key separator {key_separator!r}: "
                    "write KEY SEP VALUE on every line"
                )
            options["key"], text = found_key, rest
        yield text, options


def _numbered_lines(stream: IO[str], path: str) -> Iterator[tuple[int, str]]:
    """``stream``'s lines with their numbers; a line that is not UTF-8 is a one-line error."""
    number = 0
    lines = iter(stream)
    while True:
        number += 1
        try:
            line = next(lines)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise InvalidArgument(
                f"{path}: not UTF-8 text near line {number} ({exc.reason}): "
                "--file reads JSON lines in UTF-8"
            ) from None
        yield number, line


def _json_lines(path: str, defaults: dict[str, Any]) -> Iterator[tuple[Any, dict[str, Any]]]:
    """(value, options) for every non-blank line of a JSON-lines file (``-`` is stdin).

    An object with a ``value`` field is an envelope (fields value, key, headers, partition and
    nothing else, as ``Client.publish_batch`` reads them); any other JSON value is the value.
    """
    stream = sys.stdin if path == "-" else _open(path)
    try:
        for number, line in _numbered_lines(stream, path):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidArgument(f"{path} line {number}: not JSON ({exc})") from None
            options = dict(defaults)
            if isinstance(item, dict) and "value" in item:
                extra = set(item) - ENVELOPE_FIELDS
                if extra:
                    raise InvalidArgument(
                        f"{path} line {number}: unknown fields {sorted(extra)}: use value, "
                        "key, headers, partition"
                    )
                options.update({k: v for k, v in item.items() if k != "value"})
                item = item["value"]
            yield item, options
    finally:
        if stream is not sys.stdin:
            stream.close()


def _open(path: str) -> IO[str]:
    try:
        return Path(path).open(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"cannot read {path}: {exc.strerror}") from None


def _send_all(
    client: postroom.Client,
    topic: str,
    messages: Iterator[tuple[Any, dict[str, Any]]],
    *,
    quiet: bool,
) -> None:
    """Send through the batching producer, printing each position as its batch commits.

    Positions print in send order: the producer's single writer resolves futures batch by batch,
    in order, and each callback is attached before the next message is sent. The first failure
    stops reading input and is raised once everything sent has settled. Ctrl-C ends the input.
    """
    failures: list[BaseException] = []
    lock = threading.Lock()

    def report(future: Future[postroom.Published]) -> None:
        error = future.exception()
        with lock:
            if error is not None:
                failures.append(error)
            elif not quiet:
                published = future.result()
                sys.stdout.write(f"{published.partition}:{published.offset}\n")
                sys.stdout.flush()

    with client.producer() as producer:
        try:
            for number, (value, options) in enumerate(messages, start=1):
                if failures:
                    break
                try:
                    future = producer.send(topic, value, **options)
                except PostroomError as exc:
                    raise type(exc)(f"message {number}: {exc}") from None
                future.add_done_callback(report)
        except KeyboardInterrupt:
            pass  # Ctrl-C ends the input like end-of-file: what was sent is still written
        producer.flush()
    if failures:
        error = failures[0]
        if isinstance(error, PostroomError):
            raise error
        raise PostroomError(f"publishing failed: {error}") from error
