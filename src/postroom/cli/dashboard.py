"""``postroom dashboard`` and ``postroom metrics --serve``: the web adapter served by uvicorn."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from postroom import embedded
from postroom.errors import MissingExtra

from .common import console, settings

HostOpt = Annotated[
    str,
    typer.Option(
        "--host",
        help="Address to bind. Beyond loopback a token is required (--token or "
        "$POSTROOM_DASHBOARD_TOKEN).",
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="POSTROOM_DASHBOARD_TOKEN",
        help="Require this token (Authorization: Bearer T, or ?token=T once in the browser).",
        show_default=False,
    ),
]


def _web() -> Any:
    try:
        import uvicorn

        import postroom.web
    except ImportError as exc:
        raise MissingExtra(
            f"the dashboard needs the web extra ({exc.name} is missing): "
            "pip install 'postroom[web]'"
        ) from None
    return postroom.web, uvicorn


def mounted(asgi: Any, prefix: str) -> Any:
    """``asgi`` served under ``prefix`` (``--prefix /ops``), its lifespan run by the outer app;
    ``asgi`` itself for an empty prefix."""
    if not prefix.rstrip("/"):
        return asgi
    from starlette.applications import Starlette
    from starlette.routing import Mount

    return Starlette(routes=[Mount(prefix.rstrip("/"), asgi)], lifespan=_lifespan_of(asgi))


def _serve(asgi: Any, host: str, port: int, prefix: str, what: str) -> None:
    _, uvicorn = _web()
    asgi = mounted(asgi, prefix)
    shown = f"[{host}]" if ":" in host else host
    console.print(f"postroom {what} on http://{shown}:{port}{prefix.rstrip('/')}/")
    uvicorn.run(
        asgi, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2, lifespan="on"
    )


def _lifespan_of(inner: Any) -> Any:
    """The mounted app's lifespan, run by the outer one (Mount does not run it)."""
    return lambda _app: inner.router.lifespan_context(inner)


def dashboard(
    ctx: typer.Context,
    host: HostOpt = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="No actions: every page, no button.")
    ] = False,
    token: TokenOpt = None,
    prefix: Annotated[
        str, typer.Option("--prefix", help="Serve under this path (e.g. /ops).")
    ] = "",
    hide_values: Annotated[
        bool,
        typer.Option("--hide-values", help="Never show message values, keys or job args."),
    ] = False,
) -> None:
    """Serve the dashboard: topics, groups, queues, jobs, dead letters, relays, workers.

    With live updates, actions (unless --read-only) and /metrics."""
    web, _ = _web()
    web.check_exposure(host, token)
    options = settings(ctx)
    asgi = web.app(
        url=embedded.resolve_url(options.url),
        schema=options.schema,
        token=token,
        read_only=read_only,
        show_values=not hide_values,
    )
    _serve(asgi, host, port, prefix, "dashboard")


def metrics(
    ctx: typer.Context,
    serve: Annotated[int, typer.Option("--serve", metavar="PORT", help="Serve /metrics on PORT.")],
    host: HostOpt = "127.0.0.1",
    token: TokenOpt = None,
) -> None:
    """Serve only /metrics (Prometheus text format), for a sidecar: no pages, no actions."""
    web, _ = _web()
    web.check_exposure(host, token)
    options = settings(ctx)
    asgi = web.metrics_app(
        url=embedded.resolve_url(options.url), schema=options.schema, token=token
    )
    _serve(asgi, host, serve, "", "metrics")


__all__ = ["dashboard", "metrics"]
