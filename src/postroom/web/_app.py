"""The dashboard's state and its Starlette app: one :class:`Dashboard` per app."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

import postroom
from postroom.errors import NotFound, PostroomError

from . import _actions, _metrics, _pages
from ._actions import refused
from ._format import FILTERS
from ._live import Live, Sampler
from ._security import Access, AccessHook, Guard
from ._store import WebStore

Handler = Callable[["Dashboard", Request, Access], Awaitable[Response]]


class Dashboard:
    """Everything one dashboard app holds: the client (actions), the store (reads), the
    sampler and live view, the security guard and the templates. Started on the first request
    (so it works when mounted in another app, whose lifespan does not reach it) or by the
    lifespan of :func:`postroom.web.app`'s own Starlette app."""

    def __init__(
        self,
        client: postroom.AsyncClient | None,
        *,
        url: str | None,
        schema: str,
        guard: Guard,
        show_values: bool,
        sample_interval: float,
    ) -> None:
        self.client_given = client
        self._client = client
        self.url = url
        self.schema_name = schema
        self.guard = guard
        self.show_values = show_values
        self.sample_interval = sample_interval
        self._store: WebStore | None = None
        self._sampler: Sampler | None = None
        self.live: Live | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()
        env = jinja2.Environment(
            loader=jinja2.PackageLoader("postroom.web", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        env.filters.update(FILTERS)
        self.templates = Jinja2Templates(env=env)

    @property
    def client(self) -> postroom.AsyncClient:
        assert self._client is not None, "the dashboard has not started"
        return self._client

    @property
    def store(self) -> WebStore:
        assert self._store is not None, "the dashboard has not started"
        return self._store

    @property
    def sampler(self) -> Sampler:
        assert self._sampler is not None, "the dashboard has not started"
        return self._sampler

    async def start(self) -> None:
        async with self._lock:
            if self._store is not None:
                return
            if self._client is None:
                self._client = await postroom.connect_async(self.url, schema=self.schema_name)
            store = WebStore(self._client.conninfo, self._client.schema)
            await store.open()
            self._store = store
            self._sampler = Sampler(self._client, store, interval=self.sample_interval)
            await self._sampler.sample()
            self.live = Live(store, self._sampler)
            self._tasks = [
                asyncio.create_task(self._sampler.run(), name="postroom-web-sampler"),
                asyncio.create_task(self.live.listen(), name="postroom-web-listen"),
            ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            # A library may swallow one cancellation (see _live._raise_if_cancelled): ask again
            # rather than wait for ever.
            while not task.done():
                await asyncio.wait({task}, timeout=1)
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._store is not None:
            await self._store.close()
            self._store = None
        if self.client_given is None and self._client is not None:
            await self._client.close()
            self._client = None

    def render(
        self, request: Request, name: str, access: Access, status_code: int = 200, **context: Any
    ) -> Response:
        base = request.scope.get("root_path", "")
        return self.templates.TemplateResponse(
            request,
            name,
            status_code=status_code,
            context={
                "base": base,
                "access": access,
                "csrf": self.guard.csrf_token,
                "show_values": self.show_values,
                "schema": self.schema_name if self._client is None else self.client.schema,
                "flash": request.query_params.get("flash", ""),
                "listening": self.live is not None and self.live.listening,
                **context,
            },
        )


def _guarded(dashboard: Dashboard, handler: Handler, *, secure: bool = True) -> Any:
    async def endpoint(request: Request) -> Response:
        access = await dashboard.guard.resolve(request)
        if access is None:
            return PlainTextResponse(
                "postroom dashboard: a token is required (Authorization: Bearer T, or ?token=T "
                "once)",
                status_code=401 if dashboard.guard.token else 403,
            )
        await dashboard.start()
        try:
            response = await handler(dashboard, request, access)
        except PostroomError as exc:
            response = refused(exc) or dashboard.render(
                request,
                "error.html",
                access,
                status_code=404 if isinstance(exc, NotFound) else 400,
                message=str(exc),
            )
        if dashboard.guard.token and "token" in request.query_params:
            response.set_cookie(
                "postroom_dashboard",
                dashboard.guard.session_value(),
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    return endpoint


def build_app(dashboard: Dashboard, *, metrics: bool = True, ui: bool = True) -> Starlette:
    routes: list[Route | Mount] = []
    if ui:
        for path, handler in _pages.ROUTES:
            routes.append(Route(path, _guarded(dashboard, handler), methods=["GET"]))
        for path, handler in _actions.ROUTES:
            routes.append(Route(path, _guarded(dashboard, handler), methods=["POST"]))
        routes.append(Mount("/static", StaticFiles(packages=[("postroom.web", "static")])))
    if metrics:
        routes.append(Route("/metrics", _guarded(dashboard, _metrics.endpoint), methods=["GET"]))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Served on its own (uvicorn runs this lifespan): start sampling at once, so the
        # charts have history by the first visit. Mounted in another app it starts on its
        # first request instead.
        await dashboard.start()
        try:
            yield
        finally:
            await dashboard.stop()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.dashboard = dashboard
    return app


def make_guard(
    token: str | None,
    access: AccessHook | None,
    read_only: bool,
    audit: Callable[[dict[str, Any]], None] | None,
) -> Guard:
    return Guard(token=token or None, access=access, read_only=read_only, audit_hook=audit)
