"""postroom's dashboard and Prometheus metrics as ASGI apps (the ``web`` extra).

    import postroom, postroom.web

    client = await postroom.connect_async(url)
    dashboard = postroom.web.app(client, access=my_access_hook)   # a Starlette app
    main_app.mount("/ops", dashboard)                              # in your own service

``postroom dashboard`` serves it with uvicorn; ``postroom metrics --serve PORT`` serves only
``/metrics``. See docs/dashboard.md for the pages, the security model, the grants a read-only
role needs and the plans of the dashboard's queries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import postroom

from ._app import Dashboard, build_app, make_guard
from ._security import ACTIONS, Access, AccessHook, check_exposure, is_loopback

__all__ = [
    "ACTIONS",
    "Access",
    "AccessHook",
    "app",
    "check_exposure",
    "close",
    "is_loopback",
    "metrics_app",
]


def app(
    client: postroom.AsyncClient | None = None,
    *,
    url: str | None = None,
    schema: str = "postroom",
    token: str | None = None,
    access: AccessHook | None = None,
    read_only: bool = False,
    show_values: bool = True,
    audit: Callable[[dict[str, Any]], None] | None = None,
    sample_interval: float = 5.0,
) -> Any:
    """The dashboard (pages, actions, live view and ``/metrics``) as a Starlette app.

    ``client`` is an :class:`postroom.AsyncClient` the caller owns (closes); without one the
    app connects to ``url`` (``POSTROOM_URL``, ...) on its first request and closes on
    shutdown. Security: with neither ``token`` nor ``access`` only loopback clients are
    served. ``access(request)`` returns ``"full"``, ``"read-only"``, a list of allowed actions
    (``postroom.web.ACTIONS``), an :class:`Access` naming the user, or None to refuse.
    ``read_only=True`` removes every action. ``show_values=False`` hides message values, keys'
    values and job args (sensitive payloads). Every action is logged to the
    ``postroom.web.audit`` logger, kept in memory for the audit page, and passed to ``audit``.
    """
    dashboard = Dashboard(
        client,
        url=url,
        schema=schema,
        guard=make_guard(token, access, read_only, audit),
        show_values=show_values,
        sample_interval=sample_interval,
    )
    return build_app(dashboard)


def metrics_app(
    client: postroom.AsyncClient | None = None,
    *,
    url: str | None = None,
    schema: str = "postroom",
    token: str | None = None,
    sample_interval: float = 5.0,
) -> Any:
    """Only ``/metrics`` (no pages, no actions), for a sidecar: ``postroom metrics --serve``."""
    dashboard = Dashboard(
        client,
        url=url,
        schema=schema,
        guard=make_guard(token, None, True, None),
        show_values=False,
        sample_interval=sample_interval,
    )
    return build_app(dashboard, ui=False)


async def close(dashboard: Any) -> None:
    """Stop a dashboard app's sampler and live view and close its connections (and its client,
    if it opened one). Its own lifespan does this when uvicorn serves it; call it from the
    lifespan of an app you mounted it in."""
    await dashboard.state.dashboard.stop()
