"""``postroom dlq``: list and replay the dead letters of a topic (``<topic>.dlq``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from postroom.errors import InvalidArgument

from .common import console, open_client, print_json, printable, when

app = typer.Typer(no_args_is_help=True, help="List and replay dead letters (<topic>.dlq).")

HEADER = "postroom-dlq-"


@app.command("list")
def list_(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Source topic (or its .dlq topic).")],
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many.", min=1)] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """List the dead letters of TOPIC, oldest first.

    For each: where it came from, the group that failed, attempts, error, value."""
    with open_client(ctx) as client:
        letters = client.list_dead_letters(topic, limit=limit)
    if as_json:
        print_json(
            [
                {
                    "dlq_partition": m.partition,
                    "dlq_offset": m.offset,
                    "headers": {k: _text(v) for k, v in m.headers.items()},
                    "key": printable(m.key),
                    "value": printable(m.value),
                    "time": m.timestamp,
                }
                for m in letters
            ]
        )
        return
    if not letters:
        console.print(f"no dead letters for {topic!r}")
        return
    table = Table("letter", "time", "source", "group", "attempts", "error", "key", "value")
    for m in letters:
        h = {k.removeprefix(HEADER): _text(v) for k, v in m.headers.items()}
        table.add_row(
            f"{m.partition}:{m.offset}",
            when(m.timestamp),
            f"{h.get('topic')}/{h.get('partition')}:{h.get('offset')}",
            h.get("group", "?"),
            h.get("attempts", ""),
            h.get("error", ""),
            printable(m.key),
            printable(m.value),
        )
    console.print(table)


@app.command("replay")
def replay(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Source topic (or its .dlq topic).")],
    letter: Annotated[
        list[str] | None,
        typer.Option(
            "--letter",
            metavar="PARTITION:OFFSET",
            help="Replay only this dead letter (its place on TOPIC.dlq, as `dlq list` shows); "
            "repeatable. Replayed each time asked; the replay of all does not move.",
        ),
    ] = None,
) -> None:
    """Publish TOPIC's dead letters again to their source topic.

    Each is marked for the group that failed on it (postroom-replay-group: other groups pass
    over it) and carries the first message's id (postroom-replay-of). Each is replayed once:
    a second replay only sends what was dead-lettered since."""
    letters = None
    if letter:
        letters = []
        for raw in letter:
            partition, _, offset = raw.partition(":")
            if not (partition.isdigit() and offset.isdigit()):
                raise InvalidArgument(f"--letter {raw!r}: use PARTITION:OFFSET, e.g. 0:12")
            letters.append((int(partition), int(offset)))
    with open_client(ctx) as client:
        count = client.replay_dead_letters(topic, letters=letters)
    console.print(f"replayed {count} dead letter(s) of {topic!r}")


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else printable(value)
