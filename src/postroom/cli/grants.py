"""``postroom grant``, ``postroom revoke`` and ``postroom grants``: least-privilege roles."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from .common import console, jsonable, open_client, print_json, when

Groups = Annotated[
    list[str] | None,
    typer.Option(
        "--group",
        "-g",
        help="A consumer group the role may use (repeat it; '*': any group nobody holds yet, "
        "taken on first use).",
    ),
]
Topics = Annotated[
    list[str] | None,
    typer.Option(
        "--topic", "-t", help="A topic the role may publish to (repeat it; '*': every topic)."
    ),
]
Queues = Annotated[
    list[str] | None,
    typer.Option(
        "--queue",
        "-q",
        help="With enqueuer or worker: a queue the role may use (repeat it; without --queue: "
        "every queue).",
    ),
]


def grant(
    ctx: typer.Context,
    role: Annotated[str, typer.Argument(help="An existing database role.")],
    capabilities: Annotated[
        list[str],
        typer.Argument(help="producer, consumer, enqueuer, worker or admin (one or more)."),
    ],
    groups: Groups = None,
    topics: Topics = None,
    queues: Queues = None,
) -> None:
    """Grant a database role what its capabilities need, and nothing more.

    A consumer uses only the groups given with --group, a producer publishes only to the
    topics given with --topic, an enqueuer or worker only the queues given with --queue
    (every queue without it). Run as an admin (the schema owner)."""
    with open_client(ctx) as client:
        client.grant(role, *capabilities, groups=groups, topics=topics, queues=queues)
    scoped = (
        [f"group {g!r}" for g in groups or ()]
        + [f"topic {t!r}" for t in topics or ()]
        + [f"queue {q!r}" for q in queues or ()]
    )
    console.print(
        f"granted {', '.join(capabilities)} to role {role!r}"
        + (f" on {', '.join(scoped)}" if scoped else "")
    )


def revoke(
    ctx: typer.Context,
    role: Annotated[str, typer.Argument(help="A database role.")],
    groups: Groups = None,
    topics: Topics = None,
    queues: Queues = None,
) -> None:
    """Take back a role's grants on consumer groups, topics and queues.

    Groups with --group, topics with --topic, queues with --queue ('*' for the every-queue
    grant)."""
    with open_client(ctx) as client:
        removed = client.revoke(role, groups=groups, topics=topics, queues=queues)
    console.print(f"revoked {removed} grant(s) of role {role!r}")


def grants(
    ctx: typer.Context,
    role: Annotated[str | None, typer.Argument(help="Only this role's grants.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """List the scoped grants: which role may use which group, queue or topic.

    For each role: the consumer groups and queues it may use, the topics it may publish to
    ('*': every one), and whether it took the group on first use (owner)."""
    with open_client(ctx) as client:
        found = client.grants(role)
    if as_json:
        print_json([jsonable(g._asdict()) for g in found])
        return
    table = Table("role", "resource", "name", "owner", "granted")
    for g in found:
        table.add_row(g.role, g.resource, g.name, "yes" if g.owner else "", when(g.granted_at))
    console.print(table if found else "no scoped grants")
