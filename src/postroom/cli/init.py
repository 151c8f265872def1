"""``postroom init``: install or upgrade the schema, or check that it is current."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import console, open_client


def init(
    ctx: typer.Context,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Change nothing: list pending migrations and exit 1 if there are any.",
        ),
    ] = False,
) -> None:
    """Install or upgrade the postroom schema (idempotent; safe from many processes at once)."""
    with open_client(ctx) as client:
        if check:
            pending = client.pending_migrations()
            if pending:
                console.print(f"schema {client.schema!r}: {len(pending)} pending migration(s):")
                for name in pending:
                    console.print(f"  {name}")
                raise typer.Exit(1)
            console.print(f"schema {client.schema!r} is up to date")
            return
        applied = client.migrate()
        for name in applied:
            console.print(f"applied {name}")
        console.print(f"schema {client.schema!r} is up to date")


def grant(
    ctx: typer.Context,
    role: Annotated[str, typer.Argument(help="An existing database role.")],
    capabilities: Annotated[
        list[str],
        typer.Argument(help="One or more of producer, consumer, enqueuer, worker, admin."),
    ],
    groups: Annotated[
        list[str] | None,
        typer.Option(
            "--group",
            "-g",
            help="With consumer: share these consumer groups with ROLE, or reserve them for it "
            "(repeat).",
        ),
    ] = None,
) -> None:
    """Grant ROLE what the CAPABILITIES need, and nothing more (run as the schema owner, after
    `postroom init`); see README's Security section."""
    with open_client(ctx) as client:
        client.grant(role, *capabilities, groups=groups)
    console.print(f"granted {role!r}: {', '.join(capabilities)} on schema {client.schema!r}")
