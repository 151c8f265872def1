"""``postroom queue`` (pause, resume): queue-wide switches of the job queue."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import console, open_client

app = typer.Typer(no_args_is_help=True, help="Pause and resume job queues.")

QueueArg = Annotated[str, typer.Argument(metavar="QUEUE", help="The queue name.")]


@app.command("pause")
def pause(ctx: typer.Context, queue: QueueArg) -> None:
    """Stop every worker claiming from QUEUE (running jobs finish)."""
    with open_client(ctx) as client:
        changed = client.pause_queue(queue)
    console.print(f"queue {queue} {'paused' if changed else 'was already paused'}")


@app.command("resume")
def resume(ctx: typer.Context, queue: QueueArg) -> None:
    """Let workers claim from QUEUE again."""
    with open_client(ctx) as client:
        changed = client.resume_queue(queue)
    console.print(f"queue {queue} {'resumed' if changed else 'was not paused'}")
