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
    """Where the embedded server keeps its data and whether it runs."""
    pgdata = (embedded.home() / "pgdata").resolve()
    console.print(f"data directory: {pgdata}")
    # PostgreSQL writes postmaster.pid while it runs: pid, data dir, start time, port, ...
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except OSError:
        lines = []
    if len(lines) >= 4:
        console.print(f"running: yes (pid {lines[0]}, port {lines[3]})")
    else:
        console.print("running: no")
    for variable in ("POSTROOM_URL", "DATABASE_URL"):
        if os.environ.get(variable):
            console.print(f"note: {variable} is set, so commands use that server, not this one")
            break


@app.command("start")
def start() -> None:
    """Start the embedded server (commands also start it on first use)."""
    embedded.embedded_url()
    console.print(f"running, data in {(embedded.home() / 'pgdata').resolve()}")


@app.command("stop")
def stop() -> None:
    """Stop the embedded server if it runs."""
    if embedded.stop():
        console.print("stopped the embedded PostgreSQL")
    else:
        console.print("the embedded PostgreSQL was not running")
