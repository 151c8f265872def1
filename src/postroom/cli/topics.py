"""``postroom topic``: create, list, describe, delete and grow topics."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.table import Table

from .common import (
    console,
    fail,
    format_duration,
    jsonable,
    open_client,
    parse_duration,
    print_json,
    when,
)

app = typer.Typer(no_args_is_help=True, help="Create, list, describe, delete and grow topics.")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


@app.command("create")
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name: 1-200 of A-Z a-z 0-9 . _ -")],
    partitions: Annotated[
        int, typer.Option("--partitions", "-p", help="Number of partitions (1-1000).")
    ] = 1,
    retention: Annotated[
        str | None,
        typer.Option(
            "--retention",
            help="How long messages are kept: 30s, 15m, 12h, 7d, 2w (or sums: 1d12h). "
            "Default: forever.",
            show_default=False,
        ),
    ] = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="Succeed if the topic already exists.")
    ] = False,
    max_lag: Annotated[
        str | None,
        typer.Option(
            "--max-lag",
            help="Refuse writes while the slowest active group is this many messages behind "
            "(admission control). Default: off.",
            show_default=False,
        ),
    ] = None,
    group_ttl: Annotated[
        str | None,
        typer.Option(
            "--group-ttl",
            help="A group without members or commits for this long expires (7d by default).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Create a topic."""
    keep = None if retention is None else parse_duration(retention)
    lag = None if max_lag is None else _parse_max_lag(max_lag)
    ttl = None if group_ttl is None else parse_duration(group_ttl)
    with open_client(ctx) as client:
        created = client.create_topic(
            name,
            partitions=partitions,
            retention=keep,
            max_lag=lag,
            group_ttl=ttl,
            if_not_exists=if_not_exists,
        )
        if not created:
            console.print(f"topic {name!r} already exists")
            return
    kept = "forever" if keep is None else format_duration(keep.total_seconds())
    console.print(f"created topic {name!r}: {partitions} partition(s), retention {kept}")


def _parse_max_lag(text: str) -> int | None:
    if text.lower() == "off":
        return None
    try:
        return int(text)
    except ValueError:
        raise fail(f"invalid --max-lag {text!r}: a message count >= 1, or 'off'") from None


@app.command("alter")
def alter(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name.")],
    max_lag: Annotated[
        str | None,
        typer.Option(
            "--max-lag",
            help="Messages the slowest active group may lag before writes are refused, or off.",
            show_default=False,
        ),
    ] = None,
    group_ttl: Annotated[
        str | None,
        typer.Option(
            "--group-ttl",
            help="How long a group without members or commits stays active (e.g. 7d), or default.",
            show_default=False,
        ),
    ] = None,
    retention: Annotated[
        str | None,
        typer.Option(
            "--retention",
            help="How long messages are kept (e.g. 7d), or none to keep every message.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Change a topic's admission control, group expiry or retention.

    Admission control with --max-lag, group expiry with --group-ttl, retention with
    --retention."""
    if max_lag is None and group_ttl is None and retention is None:
        raise fail("nothing to alter: give --max-lag, --group-ttl and/or --retention")
    changes: dict[str, Any] = {}
    if retention is not None:
        changes["retention"] = None if retention.lower() == "none" else parse_duration(retention)
    if max_lag is not None:
        changes["max_lag"] = _parse_max_lag(max_lag)
    if group_ttl is not None:
        changes["group_ttl"] = None if group_ttl.lower() == "default" else parse_duration(group_ttl)
    with open_client(ctx) as client:
        client.alter_topic(name, **changes)
    console.print(f"altered topic {name!r}: " + ", ".join(f"{k} {v}" for k, v in changes.items()))


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List topics with their partition counts and messages ever written."""
    with open_client(ctx) as client:
        found = client.list_topics()
    if as_json:
        rows = [jsonable(topic) for topic in found]
        for row in rows:
            del row["partition_info"]  # always empty here: `topic describe` has the partitions
        print_json(rows)
        return
    table = Table("topic", "partitions", "messages written", "retention", "created")
    for topic in found:
        table.add_row(
            topic.name,
            str(topic.partitions),
            str(topic.high_water),
            format_duration(topic.retention_seconds),
            when(topic.created_at),
        )
    console.print(table if found else "no topics")


@app.command("describe")
def describe(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name.")],
    as_json: JsonFlag = False,
) -> None:
    """Show a topic's partitions: low- and high-water marks, retained messages and bytes."""
    with open_client(ctx) as client:
        topic = client.describe_topic(name)
    if as_json:
        print_json(topic)
        return
    console.print(
        f"topic {topic.name!r}: {topic.partitions} partition(s), "
        f"{topic.high_water} message(s) written, retention "
        f"{format_duration(topic.retention_seconds) if topic.retention_seconds else 'forever'}, "
        f"created {when(topic.created_at)}, max lag "
        f"{'off' if topic.max_lag is None else topic.max_lag}, group ttl "
        f"{format_duration(topic.group_ttl_seconds or 7 * 86400)}"
    )
    table = Table("partition", "low-water", "high-water", "messages", "bytes")
    for part in topic.partition_info:
        table.add_row(
            str(part.partition),
            str(part.low_water),
            str(part.high_water),
            str(part.messages),
            str(part.bytes),
        )
    console.print(table)


@app.command("delete")
def delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name.")],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Really delete: messages and cursors go too.")
    ] = False,
) -> None:
    """Delete a topic with all its messages and every group's cursors on it."""
    if not yes:
        raise fail(
            f"refusing to delete topic {name!r} without --yes: its messages and every "
            "consumer group's offsets on it would be gone"
        )
    with open_client(ctx) as client:
        client.delete_topic(name)
    console.print(f"deleted topic {name!r}")


@app.command("add-partitions")
def add_partitions(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name.")],
    total: Annotated[int, typer.Option("--total", help="The new partition count (more than now).")],
) -> None:
    """Grow a topic to --total partitions. Keys then map to partitions anew, as in Kafka."""
    with open_client(ctx) as client:
        client.add_partitions(name, total)
    console.print(f"topic {name!r} now has {total} partitions")


@app.command("retention")
def retention(
    ctx: typer.Context,
    group_expiry: Annotated[
        str,
        typer.Option(
            "--group-expiry",
            help="A group that has not committed for this long no longer pins messages.",
        ),
    ] = "7d",
    batch_size: Annotated[
        int,
        typer.Option("--batch-size", help="Messages deleted per partition per transaction.", min=1),
    ] = 10000,
) -> None:
    """Delete messages older than their topic's retention that every active group has read.

    Running consumers and workers do this every 30 s by themselves (docs/log.md, Retention).
    """
    expiry = parse_duration(group_expiry)
    total = 0
    with open_client(ctx) as client:
        # Each call deletes at most batch_size per partition in one short transaction; repeat
        # until nothing is left to delete.
        while deleted := client.apply_retention(group_expiry=expiry, batch_size=batch_size):
            total += deleted
    console.print(f"deleted {total} message(s)")


@app.command("move")
def move(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The PostgreSQL topic to move.")],
    to: Annotated[str, typer.Option("--to", help="The Kafka cluster: kafka://host:port,...")],
    status: Annotated[
        bool, typer.Option("--status", help="Show the mirror lag per partition and exit.")
    ] = False,
    once: Annotated[
        bool, typer.Option("--once", help="Copy what is there, then exit (no mirroring).")
    ] = False,
    translate: Annotated[
        bool,
        typer.Option(
            "--translate",
            help="After copying, commit each group's place on Kafka (stop its consumers "
            "first). Implies --once.",
        ),
    ] = False,
    groups: Annotated[
        list[str] | None, typer.Option("--group", help="Translate only these groups.")
    ] = None,
) -> None:
    """Move a topic to Kafka: copy its messages, then mirror new ones until Ctrl-C.

    Messages keep their partition numbers and offset order; with --translate every consumer
    group's position is committed on Kafka. Cut-over steps: docs/kafka.md, "Moving a topic"."""
    with open_client(ctx) as client:
        mover = client.move_topic(name, to=to)
        try:
            if status:
                _print_mirror(mover.status())
                return
            copied = 0
            try:
                while True:
                    done = mover.copy()
                    copied += done
                    if not done and (once or translate):
                        break
                    if not done:
                        time.sleep(0.2)
            except KeyboardInterrupt:
                pass
            console.print(f"copied {copied} message(s) of {name!r} to {mover.target.description}")
            if translate:
                for group, offsets in mover.translate_groups(groups or None).items():
                    places = ", ".join(f"{p}: {o}" for p, o in sorted(offsets.items()))
                    console.print(f"group {group!r} committed on Kafka at {places}")
        finally:
            mover.close()


def _print_mirror(lags: list[Any]) -> None:
    table = Table("partition", "high-water", "mirrored", "lag")
    for lag in lags:
        table.add_row(str(lag.partition), str(lag.high_water), str(lag.mirrored), str(lag.lag))
    console.print(table)
    console.print(f"mirror lag {sum(lag.lag for lag in lags)}")
