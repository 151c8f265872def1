"""``postroom group`` and ``postroom lag``: inspect, reset and delete consumer groups."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer
from rich.table import Table

import postroom
from postroom.errors import GroupNotFound, InvalidArgument

from .common import console, fail, jsonable, open_client, print_json, when

app = typer.Typer(no_args_is_help=True, help="Inspect, reset and delete consumer groups.")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
LAG_COLUMNS = (
    "group",
    "topic",
    "partition",
    "committed",
    "high-water",
    "lag",
    "lag seconds",
)


@app.command("list")
def list_(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List consumer groups (those with committed offsets), their lag and state.

    For each: topics, total lag, live members, state (active: members; idle: none; expired:
    none and no commit for 7 days, so it no longer holds back retention), last commit."""
    with open_client(ctx) as client:
        found = client.list_groups()
    if as_json:
        rows = [jsonable(group) for group in found]
        for row in rows:
            del row["partitions"]  # always empty here: `group describe` has the partitions
        print_json(rows)
        return
    table = Table("group", "topics", "lag", "members", "state", "last commit")
    for group in found:
        table.add_row(
            group.name,
            ", ".join(group.topics),
            str(group.lag),
            str(group.members),
            group.state,
            when(group.updated_at),
        )
    console.print(table if found else "no consumer groups")


@app.command("describe")
def describe(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="Consumer group.")],
    as_json: JsonFlag = False,
) -> None:
    """Describe a group per partition: its holder, committed offset and lag.

    Per partition: the member holding it and its fencing epoch, committed offset,
    high-water mark, lag in messages and in seconds."""
    with open_client(ctx) as client:
        info = client.describe_group(group)
    if as_json:
        print_json(info)
        return
    members = sorted({p.member for p in info.partitions if p.member is not None})
    console.print(
        f"group {info.name!r}: {len(members)} live member(s), total lag {info.lag}, "
        f"updated {when(info.updated_at)}"
    )
    _print_lag([info], members=True)


@app.command("reset")
def reset(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="Consumer group.")],
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic whose offsets move.")],
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="earliest, latest, an offset (the next one to read), or an ISO time with a "
            "timezone such as 2026-01-31T12:00:00Z (the first message at or after it).",
        ),
    ],
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", help="Only this partition.")
    ] = None,
) -> None:
    """Move a group's offsets on a topic (backwards too).

    Creates the group if it is new. Stop the group's consumers first: a running consumer
    keeps its in-memory position."""
    target = parse_reset_target(to)
    with open_client(ctx) as client:
        moved = client.reset_group(group, topic, to=target, partition=partition)
    table = Table("partition", "next offset")
    for part, offset in sorted(moved.items()):
        table.add_row(str(part), str(offset))
    console.print(f"group {group!r} on {topic!r} reset to {to}:")
    console.print(table)


def parse_reset_target(text: str) -> str | int | datetime:
    """``earliest``/``latest``, an offset, or an aware ISO-8601 time; else InvalidArgument."""
    cleaned = text.strip()
    if cleaned in ("earliest", "latest"):
        return cleaned
    if cleaned.isdigit():
        return int(cleaned)
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise InvalidArgument(
            f"invalid --to {text!r}: use earliest, latest, an offset >= 0, or an ISO time such "
            "as 2026-01-31T12:00:00Z"
        ) from None
    if moment.tzinfo is None:
        raise InvalidArgument(
            f"invalid --to {text!r}: the time needs a timezone, e.g. {cleaned}Z or {cleaned}+02:00"
        )
    return moment


@app.command("delete")
def delete(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="Consumer group.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Really delete its offsets.")] = False,
) -> None:
    """Forget a group's committed offsets; its next consumer starts anew."""
    if not yes:
        raise fail(f"refusing to delete group {group!r} without --yes: its offsets would be lost")
    with open_client(ctx) as client:
        client.delete_group(group)
    console.print(f"deleted group {group!r}")


def lag(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Every group's lag per partition, in messages and in seconds (age of the oldest unread)."""
    with open_client(ctx) as client:
        infos = []
        for group in client.list_groups():
            try:
                infos.append(client.describe_group(group.name))
            except GroupNotFound:
                continue  # deleted since the list was read
    if as_json:
        print_json(
            [{"group": info.name, **jsonable(part)} for info in infos for part in info.partitions]
        )
        return
    if not infos:
        console.print("no consumer groups")
        return
    _print_lag(infos)


def _print_lag(infos: list[postroom.GroupInfo], *, members: bool = False) -> None:
    # "lost" (messages retention deleted before the group read them) only when there are some.
    lost = any(part.lost for info in infos for part in info.partitions)
    table = Table(
        *LAG_COLUMNS, *(("lost",) if lost else ()), *(("member", "epoch") if members else ())
    )
    for info in infos:
        for part in info.partitions:
            holder = (part.member or "-", "-" if part.epoch is None else str(part.epoch))
            table.add_row(
                info.name,
                part.topic,
                str(part.partition),
                str(part.committed),
                str(part.high_water),
                str(part.lag),
                f"{part.lag_seconds:.1f}",
                *((str(part.lost),) if lost else ()),
                *(holder if members else ()),
            )
    console.print(table)
