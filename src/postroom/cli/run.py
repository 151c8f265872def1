"""``postroom run MODULE``: run the ``@client.subscribe`` handlers a module registers."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Annotated

import typer

import postroom

from .common import note, settings
from .jobs import load_client


def run(
    ctx: typer.Context,
    module: Annotated[
        str,
        typer.Argument(
            help="The module that registers the handlers with @client.subscribe, as `pkg.app` "
            "or `pkg.app:client` to name the client."
        ),
    ],
) -> None:
    """Run the consumer handlers MODULE registers, as group members, until SIGTERM or Ctrl-C.

    On SIGTERM or Ctrl-C each member finishes and commits its batch, leaves its group, and the
    command exits 0."""
    url = settings(ctx).url
    if url is not None:
        os.environ["POSTROOM_URL"] = url  # for a module that calls postroom.connect()
    client = load_client(module)
    if isinstance(client, postroom.AsyncClient):
        async_runner = client.runner()
        _announce(async_runner.subscriptions)
        asyncio.run(async_runner.run())
        note(f"stopped after {async_runner.processed} message(s)")
        return
    runner = client.runner()
    _announce(runner.subscriptions)
    runner.run()
    note(f"stopped after {runner.processed} message(s)")


def _announce(subscriptions: Sequence[object]) -> None:
    for sub in subscriptions:
        note(
            f"postroom run: {getattr(sub, 'name', sub)} on {', '.join(getattr(sub, 'topics', ()))}"
            f" as group {getattr(sub, 'group', '?')!r}"
        )
