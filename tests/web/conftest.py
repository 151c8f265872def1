"""Fixtures of the dashboard tests: a real dashboard served by uvicorn on a real database, and
the system's headless Chromium driven by playwright (``/usr/bin/chromium``; never
``playwright install``). The tests skip, saying why, only where Chromium or playwright cannot
be had; .ci/run installs both."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import postroom

from ..signals import wait_for
from .seed import Seeded, seed

pytest.importorskip("starlette", reason="the web extra is not installed")
uvicorn = pytest.importorskip("uvicorn", reason="the web extra is not installed")
import postroom.web  # noqa: E402

CHROMIUM = os.environ.get("POSTROOM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class DashboardServer:
    """One dashboard app served by uvicorn in a thread of this process, on ``host``."""

    def __init__(self, app: Any, host: str = "127.0.0.1") -> None:
        config = uvicorn.Config(
            app, host=host, port=0, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.app = app
        self.thread = threading.Thread(target=self.server.run, name="dashboard", daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started or not self.thread.is_alive(), what="uvicorn up")
        assert self.server.started, "uvicorn did not start"
        port = self.server.servers[0].sockets[0].getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@pytest.fixture
def seeded(client: postroom.Client) -> Seeded:
    return seed(client)


@pytest.fixture
def serve(dsn: str) -> Iterator[Callable[..., DashboardServer]]:
    """``serve(**options)``: a dashboard of ``postroom.web.app(url=dsn, **options)``, stopped
    when the test ends."""
    servers: list[DashboardServer] = []

    def start(host: str = "127.0.0.1", **options: Any) -> DashboardServer:
        options.setdefault("sample_interval", 0.5)
        server = DashboardServer(postroom.web.app(url=dsn, **options), host)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


# Function-scoped, not session-scoped: while playwright's sync API is open, its event loop
# counts as running in this thread, and every later test of the worker that calls
# asyncio.run() (the async client's tests, the plan test) would fail.
@pytest.fixture
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    if not shutil.which(CHROMIUM) and not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    # Waits on events, not sleeps: 30 s only matters on a loaded box (with four xdist
    # workers on two cores a replay's #flash once took more than 10 s).
    context.set_default_timeout(30_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda dialog: dialog.accept())  # the actions' confirm() prompts
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def outside_address() -> str | None:
    """A non-loopback IPv4 address of this machine (None if it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, a route is chosen
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address
