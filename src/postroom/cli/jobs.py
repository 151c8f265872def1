"""``postroom job`` (enqueue, list, show, retry, cancel, purge, stats) and ``postroom worker``."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from typing import Annotated, Any

import typer
from rich.table import Table

import postroom
from postroom.errors import InvalidArgument

from . import worker_logging
from .common import (
    console,
    format_duration,
    jsonable,
    note,
    open_client,
    parse_duration,
    print_json,
    settings,
    when,
)

app = typer.Typer(
    no_args_is_help=True,
    help="Enqueue, inspect, retry, cancel and purge jobs of the job queue.",
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
STATES = "ready, running, done, failed, cancelled, waiting, held"


def parse_seconds(text: str) -> float:
    """Seconds as a number (``1.5``) or a duration (``30s``, ``5m``, ``1h``)."""
    try:
        value = float(text)
    except ValueError:
        return parse_duration(text).total_seconds()
    if value < 0:
        raise InvalidArgument(f"invalid delay {text!r}: must be >= 0 seconds")
    return value


@app.command("enqueue")
def enqueue(
    ctx: typer.Context,
    kind: Annotated[str, typer.Argument(help="The job kind (the name a worker registered).")],
    args: Annotated[
        str, typer.Option("--args", help="The arguments as a JSON object: '{\"order_id\": 42}'.")
    ] = "{}",
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Queue name.")] = None,
    delay: Annotated[
        str | None,
        typer.Option("--delay", help="Run no earlier than this from now: 30 (seconds), 5m, 2h."),
    ] = None,
    priority: Annotated[int | None, typer.Option("--priority", help="Lower runs first.")] = None,
    unique_key: Annotated[
        str | None,
        typer.Option("--unique-key", help="Skip if a ready or running job holds this key."),
    ] = None,
    max_attempts: Annotated[int | None, typer.Option("--max-attempts")] = None,
    after: Annotated[
        list[int] | None,
        typer.Option("--after", help="A job ID that must succeed first (repeatable)."),
    ] = None,
    sequence: Annotated[
        str | None,
        typer.Option("--sequence", help="Run after the previous job of this sequence key."),
    ] = None,
) -> None:
    """Enqueue one job."""
    try:
        decoded = json.loads(args)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"--args is not valid JSON ({exc}): pass a JSON object") from None
    if not isinstance(decoded, dict):
        raise InvalidArgument(f"--args must be a JSON object, got {args!r}")
    with open_client(ctx) as client:
        job = client.enqueue(
            kind,
            decoded,
            queue=queue,
            delay=None if delay is None else parse_seconds(delay),
            priority=priority,
            unique_key=unique_key,
            max_attempts=max_attempts,
            after=after or None,
            sequence=sequence,
        )
    if job.created:
        console.print(f"enqueued job {job.id} ({kind})")
    else:
        console.print(f"job {job.id} already holds unique key {unique_key!r}: nothing enqueued")


@app.command("list")
def list_(
    ctx: typer.Context,
    state: Annotated[str | None, typer.Option("--state", "-s", help=f"One of: {STATES}.")] = None,
    kind: Annotated[str | None, typer.Option("--kind", "-k")] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List jobs, newest first (`--state failed` lists the dead letters)."""
    with open_client(ctx) as client:
        found = client.list_jobs(state=state, kind=kind, queue=queue, limit=limit)
    if as_json:
        print_json(found)
        return
    table = Table("id", "kind", "queue", "state", "attempts", "run at", "last error")
    for job in found:
        error = (job.last_error or "").strip().splitlines()
        table.add_row(
            str(job.id),
            job.kind,
            job.queue,
            job.state,
            f"{job.attempts}/{job.max_attempts}",
            when(job.run_at),
            error[-1][:80] if error else "",
        )
    console.print(table)


@app.command("show")
def show(
    ctx: typer.Context,
    job_id: Annotated[int, typer.Argument(metavar="ID")],
    as_json: JsonFlag = False,
) -> None:
    """Show one job with its arguments, result and last error."""
    with open_client(ctx) as client:
        job = client.get_job(job_id)
    if as_json:
        print_json(job)
        return
    for name, value in jsonable(job).items():
        if name in ("args", "result"):
            value = json.dumps(value)
        if name == "last_error" and value:
            console.print(f"{name}:")
            console.print(value, markup=False)
            continue
        console.print(f"{name}: {'-' if value is None else value}", markup=False)


@app.command("retry")
def retry(
    ctx: typer.Context,
    job_id: Annotated[int | None, typer.Argument(metavar="[ID]")] = None,
    all_failed: Annotated[
        bool, typer.Option("--all-failed", help="Every failed job (of --kind/--queue).")
    ] = False,
    kind: Annotated[str | None, typer.Option("--kind", "-k")] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q")] = None,
) -> None:
    """Redrive failed jobs: ready now, with a fresh set of attempts."""
    if (job_id is None) == (not all_failed):
        raise InvalidArgument("pass a job ID or --all-failed (not both)")
    with open_client(ctx) as client:
        if job_id is not None:
            client.retry_job(job_id)
            console.print(f"job {job_id} is ready again")
            return
        moved = client.retry_failed_jobs(kind=kind, queue=queue)
    console.print(f"{moved} failed job(s) ready again")


@app.command("cancel")
def cancel(ctx: typer.Context, job_id: Annotated[int, typer.Argument(metavar="ID")]) -> None:
    """Cancel a job: at once if it waits, by its worker if it runs."""
    with open_client(ctx) as client:
        state = client.cancel_job(job_id)
    if state == "running":
        console.print(f"job {job_id} is running: its worker interrupts it")
    else:
        console.print(f"job {job_id} cancelled (was {state})")


@app.command("purge")
def purge(
    ctx: typer.Context,
    state: Annotated[str, typer.Option("--state", help="done, cancelled or failed.")],
    older: Annotated[
        str, typer.Option("--older", help="Only jobs older than this: 30m, 12h, 7d, 2w.")
    ],
    kind: Annotated[str | None, typer.Option("--kind", "-k")] = None,
) -> None:
    """Delete finished or failed jobs older than --older, in batches."""
    age = parse_duration(older)
    with open_client(ctx) as client:
        deleted = client.purge_jobs(state, age, kind=kind)
    console.print(
        f"purged {deleted} {state} job(s) older than {format_duration(age.total_seconds())}"
    )


@app.command("stats")
def stats(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Jobs per queue and state, the oldest due ready job's age, jobs done per second."""
    with open_client(ctx) as client:
        found = client.job_stats()
    if as_json:
        print_json(found)
        return
    table = Table("queue", "state", "jobs", "oldest ready", "done/s (1 min)")
    for count in found.counts:
        rate = found.done_per_second.get(count.queue) if count.state == "done" else None
        table.add_row(
            count.queue,
            count.state,
            str(count.count),
            format_duration(count.oldest_ready_seconds) if count.state == "ready" else "",
            "" if rate is None else f"{rate:.1f}",
        )
    console.print(table)
    if found.paused:
        console.print(f"paused queues: {', '.join(found.paused)}")


def worker(
    ctx: typer.Context,
    module: Annotated[
        str,
        typer.Argument(
            help="The module that registers the jobs (imports them), as `pkg.jobs` or "
            "`pkg.jobs:client` to name the client."
        ),
    ],
    queue: Annotated[
        list[str] | None,
        typer.Option(
            "--queue",
            "-q",
            help="A queue to work (repeatable). Default: all queues of the registered jobs.",
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", help="Jobs at once.")] = 10,
    prefetch: Annotated[
        int | None,
        typer.Option(
            "--prefetch",
            help="Jobs claimed ahead of free slots. Default: sized from the jobs' run time.",
        ),
    ] = None,
    lease: Annotated[float, typer.Option("--lease", help="Lease seconds per claim.")] = 30.0,
    grace: Annotated[
        float, typer.Option("--shutdown-grace", help="Seconds running jobs get on SIGTERM.")
    ] = 30.0,
    poll_only: Annotated[
        bool, typer.Option("--poll-only", help="No LISTEN (PgBouncer transaction pooling).")
    ] = False,
    burst: Annotated[bool, typer.Option("--burst", help="Stop when no job is due.")] = False,
    log_level: Annotated[
        str,
        typer.Option(
            "--log-level", help="debug, info (a line per job start and end), warning, error."
        ),
    ] = "info",
    log_format: Annotated[
        str, typer.Option("--log-format", help="text, or json (one object per line).")
    ] = "text",
) -> None:
    """Run a worker for the jobs MODULE registers, until SIGTERM or Ctrl-C."""
    worker_logging.configure(log_level, log_format)
    url = settings(ctx).url
    if url is not None:
        os.environ["POSTROOM_URL"] = url  # for a module that calls postroom.connect()
    client = load_client(module)
    options: dict[str, Any] = {
        "concurrency": concurrency,
        "prefetch": prefetch,
        "lease": lease,
        "shutdown_grace": grace,
        "listen": not poll_only,
    }
    if isinstance(client, postroom.AsyncClient):
        async_worker = client.worker(queue or None, **options)
        note(f"postroom worker {async_worker.name}: queues {', '.join(async_worker.queues)}")
        asyncio.run(async_worker.run(burst=burst))
        return
    sync_worker = client.worker(queue or None, **options)
    note(f"postroom worker {sync_worker.name}: queues {', '.join(sync_worker.queues)}")
    sync_worker.run(burst=burst)
    note(f"stopped after {sync_worker.processed} job(s)")


def load_client(spec: str) -> postroom.Client | postroom.AsyncClient:
    """Import ``module`` (or ``module:attribute``) and return its postroom client."""
    name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: modules next to the caller
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise InvalidArgument(f"cannot import {name!r}: {exc}") from None
    if attribute:
        found = getattr(module, attribute, None)
        if not isinstance(found, postroom.Client | postroom.AsyncClient):
            raise InvalidArgument(f"{spec!r} is not a postroom.Client or AsyncClient")
        return found
    clients = [
        value
        for value in vars(module).values()
        if isinstance(value, postroom.Client | postroom.AsyncClient)
    ]
    if len(clients) != 1:
        raise InvalidArgument(
            f"module {name!r} has {len(clients)} postroom clients: it needs exactly one, "
            f"or name it as {name}:ATTRIBUTE"
        )
    return clients[0]
