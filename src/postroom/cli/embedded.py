"""``postroom embedded``: the local PostgreSQL postroom runs when no URL is configured."""

from __future__ import annotations

import os

import typer

from postroom import embedded

from .common import console

app = typer.Typer(
    no_args_is_help=True,
    help="The embedded PostgreSQL used when neither --url, POSTROOM_URL nor DATABASE_URL is set.",
)


@app.command("status")
def status() -> None:
    """Where the embedded server keeps its data, whether it runs, and where it listens.

    Also how to connect to it with psql, and how to stop it."""
    where = embedded.location()
    console.print(f"data directory: {where.pgdata}")
    if where.running:
        console.print(f"running: yes (pid {where.pid})")
        console.print(f"listens on: {where.listens_on}")
        console.print(f"connect: {where.psql}")
        console.print("stop: postroom embedded stop")
    else:
        console.print("running: no (commands start it when no URL is configured)")
    for variable in ("POSTROOM_URL", "DATABASE_URL"):
        if os.environ.get(variable):
            console.print(f"note: {variable} is set, so commands use that server, not this one")
            break


@app.command("start")
def start() -> None:
    """Start the embedded server (commands also start it on first use)."""
    embedded.embedded_url()
    where = embedded.location()
    console.print(f"running, data in {where.pgdata}; {where.listens_on}")
    console.print(f"connect: {where.psql}")


@app.command("stop")
def stop() -> None:
    """Stop the embedded server if it runs."""
    if embedded.stop():
        console.print("stopped the embedded PostgreSQL")
    else:
        console.print("the embedded PostgreSQL was not running")
