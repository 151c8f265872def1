"""``postroom bench``: the benchmarks, each a thin door to its module's own ``main(argv)``."""

from __future__ import annotations

import typer

from .common import settings

app = typer.Typer(no_args_is_help=True, help="Benchmarks against the configured server.")

PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command("log", context_settings=PASS_THROUGH, add_help_option=False)
def log(ctx: typer.Context) -> None:
    """Benchmark the log against raw COPY; `postroom bench log --help` lists its options."""
    from postroom.benchmarks.log import main as run_benchmark

    argv = list(ctx.args)
    url = settings(ctx).url
    if url is not None and not any(a == "--url" or a.startswith("--url=") for a in argv):
        argv = ["--url", url, *argv]
    raise typer.Exit(run_benchmark(argv))


@app.command("queue", context_settings=PASS_THROUGH, add_help_option=False)
def queue(ctx: typer.Context) -> None:
    """Benchmark the job queue against a pure-SQL drain and the peers.

    `postroom bench queue --help` lists its options."""
    from postroom.benchmarks.queue import main as run_benchmark

    argv = list(ctx.args)
    url = settings(ctx).url
    if url is not None and not any(a == "--url" or a.startswith("--url=") for a in argv):
        argv = ["--url", url, *argv]
    raise typer.Exit(run_benchmark(argv))


@app.command("relay", context_settings=PASS_THROUGH, add_help_option=False)
def relay(ctx: typer.Context) -> None:
    """Benchmark the outbox relay to Redis and Kafka against each sink's raw produce rate.

    Also commit-to-arrival latency; `postroom bench relay --help` lists its options."""
    from postroom.benchmarks.relay import main as run_benchmark

    argv = list(ctx.args)
    url = settings(ctx).url
    if url is not None and not any(a == "--url" or a.startswith("--url=") for a in argv):
        argv = ["--url", url, *argv]
    raise typer.Exit(run_benchmark(argv))


@app.command("groups", context_settings=PASS_THROUGH, add_help_option=False)
def groups(ctx: typer.Context) -> None:
    """One consumer group draining a backlog with 1, 2 and 4 member processes.

    Also the takeover time after a kill -9; `postroom bench groups --help` lists its
    options."""
    from postroom.benchmarks.groups import main as run_benchmark

    argv = list(ctx.args)
    url = settings(ctx).url
    if url is not None and not any(a == "--url" or a.startswith("--url=") for a in argv):
        argv = ["--url", url, *argv]
    raise typer.Exit(run_benchmark(argv))


@app.command("churn", context_settings=PASS_THROUGH, add_help_option=False)
def churn(ctx: typer.Context) -> None:
    """Produce, consume and expire at a steady rate with a short retention.

    Messages size and dead tuples over time, and a 200,000-message backlog expired;
    `postroom bench churn --help` lists its options."""
    from postroom.benchmarks.churn import main as run_benchmark

    argv = list(ctx.args)
    url = settings(ctx).url
    if url is not None and not any(a == "--url" or a.startswith("--url=") for a in argv):
        argv = ["--url", url, *argv]
    raise typer.Exit(run_benchmark(argv))


@app.command("dashboard", context_settings=PASS_THROUGH, add_help_option=False)
def dashboard(ctx: typer.Context) -> None:
    """Dashboard page times on a 1,000,000-message topic and a 1,000,000-job history.

    The bar: 200 ms a page; `postroom bench dashboard --help` lists its options."""
    from postroom.benchmarks.dashboard import main as run_benchmark

    argv = list(ctx.args)
    url = settings(ctx).url
    if url is not None and not any(a == "--url" or a.startswith("--url=") for a in argv):
        argv = ["--url", url, *argv]
    raise typer.Exit(run_benchmark(argv))
