"""``postroom relay``: carry topics to a sink (Kafka, RabbitMQ, NATS, Redis, HTTP), and
``postroom relay status``: what each relay still has to send."""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Annotated

import typer

import postroom
from postroom import embedded
from postroom.errors import InvalidArgument

from .common import console, format_duration, note, open_client, print_json, settings, when
from .progress import every

RELAY_HELP = (
    "Relay TOPIC... to the sink at --to URL until Ctrl-C or SIGTERM; or, as `postroom relay "
    "status`, show each relay's pending messages and the age of the oldest.\n\n"
    "Sinks: kafka://HOST:PORT, amqp://USER:PASS@HOST:PORT/, nats://HOST:PORT, "
    "redis://HOST:PORT/DB, http(s)://HOST/PATH; sink options go in the query string "
    "(docs/outbox.md).\n\n"
    "The relay is a member of consumer group --group (default relay.<scheme>): start several "
    "to split the partitions. A batch is committed only after the sink acknowledged it (at "
    "least once, in order per key); while the sink is down the same batch is retried; a "
    "message it rejects goes to TOPIC.dlq after --max-attempts."
)


def relay(
    ctx: typer.Context,
    topics: Annotated[
        list[str], typer.Argument(help="Topics to relay, or `status`.", show_default=False)
    ],
    to: Annotated[
        str | None, typer.Option("--to", help="Sink URL (see above).", show_default=False)
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group",
            "-g",
            help="Consumer group of the relay (default relay.<scheme>); with status, the "
            "relays to show (repeat; default every group named relay.*).",
            show_default=False,
        ),
    ] = None,
    profile: Annotated[
        str,
        typer.Option("--profile", help="Routing: postroom (as is) or debezium (outbox router)."),
    ] = "postroom",
    template: Annotated[
        str | None,
        typer.Option(
            "--template",
            help="Destination name, e.g. 'outbox.event.{aggregate_type}' (fields: topic, "
            "partition, key, aggregate_type, aggregate_id, event_type).",
            show_default=False,
        ),
    ] = None,
    event_type_header: Annotated[
        str | None,
        typer.Option(
            "--event-type-header",
            help="debezium profile: also send the event type in this header (Debezium's "
            "table.fields.additional.placement=type:header:NAME).",
            show_default=False,
        ),
    ] = None,
    payload: Annotated[
        str,
        typer.Option(
            "--payload",
            help="Value bytes: as-written, jsonb (as PostgreSQL renders jsonb), jsonb-string "
            "(that text as a JSON string) or compact (Debezium's expanded JSON); the Debezium "
            "converter settings each equals: docs/outbox.md.",
        ),
    ] = "as-written",
    key_format: Annotated[
        str,
        typer.Option(
            "--key-format", help="Key bytes: string (StringConverter) or json (JsonConverter)."
        ),
    ] = "string",
    tombstone_on_empty: Annotated[
        bool,
        typer.Option(
            "--tombstone-on-empty",
            help="Send an empty, blank (or, postroom profile, null) payload as a Kafka null "
            "(route.tombstone.on.empty.payload).",
        ),
    ] = False,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size",
            min=1,
            help="Messages per poll and per send (default: 2000 for kafka and redis, else 500).",
            show_default=False,
        ),
    ] = None,
    max_attempts: Annotated[int, typer.Option("--max-attempts", min=1)] = 5,
    dead_letter_topic: Annotated[
        str, typer.Option("--dead-letter-topic", help="{topic} is the source topic.")
    ] = "{topic}.dlq",
    member_id: Annotated[
        str | None,
        typer.Option(
            "--member-id",
            help="Static group membership: a restart within the session timeout keeps the "
            "relay's partitions (e.g. the pod name).",
            show_default=False,
        ),
    ] = None,
    session_timeout: Annotated[
        float | None,
        typer.Option(
            "--session-timeout",
            help="Seconds without a heartbeat before partitions move.",
            show_default=False,
        ),
    ] = None,
    progress: Annotated[
        float,
        typer.Option(
            "--progress",
            help="Seconds between status lines on stderr (delivered, dead-lettered); 0: none.",
        ),
    ] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="status: print JSON.")] = False,
) -> None:
    if topics == ["status"] and to is None:
        _status(ctx, group, as_json)
        return
    if to is None:
        raise InvalidArgument("missing --to URL: the sink to relay to (e.g. redis://127.0.0.1)")
    if group is not None and len(group) > 1:
        raise InvalidArgument(f"one --group for a relay, got {group}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    route = postroom.Route(
        profile,  # type: ignore[arg-type] # checked by Route, as the formats below
        template,
        event_type_header,
        payload,  # type: ignore[arg-type]
        key_format,  # type: ignore[arg-type]
        tombstone_on_empty,
    )
    # No client: the relay opens its own pool (asyncio) on the URL and schema, and a client's
    # sync pool, opened and closed unused, cost a connection and a round trip at each start.
    options = settings(ctx)
    source = postroom.RelaySource(embedded.resolve_url(options.url), options.schema)
    runner = postroom.Relay(
        source,
        topics,
        to,
        group=group[0] if group else None,
        route=route,
        batch_size=batch_size,
        max_attempts=max_attempts,
        dead_letter_topic=dead_letter_topic,
        member_id=member_id,
        session_timeout=session_timeout,
    )
    note(f"relaying {', '.join(topics)} to {runner.sink_description}; Ctrl-C stops")
    # The process is the relay's alone, so the collector is set for it. What start-up made
    # (modules, typer's and psycopg's objects: ~50,000) lives until exit, and each full
    # collection walked it all again (150 ms a time on the benchmark box): frozen, it is
    # left out. A batch's messages and their Outbounds (~3 tracked objects a message, a
    # few batches alive) pushed a young collection every 700 net allocations, a third of
    # them moving the batch a generation up: 330 collections for 100,000 messages, about
    # a tenth of the relay's CPU. A batch makes no cycles (refcounts free it); the
    # threshold leaves collections to the garbage cycles of rarer work (bench/RESULTS.md,
    # "Relay to Kafka (Tansu), 2026-12-02").
    gc.freeze()
    gc.set_threshold(50_000, 10, 10)
    with every(progress, _status_line(runner)):
        runner.run()
    counters = runner.counters
    note(f"stopped: {counters.delivered} delivered, {counters.dead_lettered} dead-lettered")


relay.__doc__ = RELAY_HELP


def _status_line(runner: postroom.Relay) -> Callable[[], str]:
    """The relay's counters since it started, and what it delivered since the last line."""
    last = 0
    started = time.monotonic()

    def line() -> str:
        nonlocal last
        counters = runner.counters
        delivered, last = counters.delivered - last, counters.delivered
        text = (
            f"relay: {counters.delivered} delivered (+{delivered}), "
            f"{counters.dead_lettered} dead-lettered, {counters.batches} batches in "
            f"{time.monotonic() - started:.0f} s"
        )
        if counters.last_error:
            text += f"; last error: {counters.last_error}"
        return text

    return line


def _status(ctx: typer.Context, groups: list[str] | None, as_json: bool) -> None:
    from rich.table import Table  # here: a relay that runs draws no table

    with open_client(ctx) as client:
        statuses = client.relay_status(groups)
    if as_json:
        print_json(statuses)
        return
    table = Table("relay", "topics", "pending", "oldest pending", "last commit", "sink error")
    for status in statuses:
        table.add_row(
            status.group,
            ", ".join(status.topics),
            str(status.pending),
            format_duration(status.oldest_pending_seconds) if status.pending else "-",
            when(status.updated_at),
            _sink_error(status),
        )
    console.print(table if statuses else "no relays (no group named relay.* has committed)")


def _sink_error(status: postroom.RelayStatus) -> str:
    """The first member's sink error with its start, and how many more members fail."""
    first = status.sink_error
    if first is None:
        return "-"
    text = f"{first.error} (since {when(first.since)}, member {first.member})"
    more = len(status.sink_errors) - 1
    return text + (f"; +{more} more" if more else "")
