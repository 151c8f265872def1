"""Where LISTEN fails (a pooler in transaction mode, say) the live view falls back to polling:
each sampler tick refreshes the open pages, so a published message still shows up."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import postroom
from postroom.web._store import WebStore

from .conftest import DashboardServer
from .seed import Seeded


def test_without_listen_the_sampler_ticks_refresh_the_page(
    serve: Callable[..., DashboardServer],
    seeded: Seeded,
    page: Any,
    client: postroom.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = WebStore.query

    def broken_listen(self: WebStore, name: str) -> Any:
        return b"LISTEN" if name == "web_listen" else original(self, name)  # a syntax error

    monkeypatch.setattr(WebStore, "query", broken_listen)
    server = serve(sample_interval=0.5)
    page.goto(server.url + "/topics/orders?partition=0&tail=1")
    page.wait_for_function("+document.body.dataset.connected > 0")
    assert server.app.state.dashboard.live.listening is False
    client.publish("orders", {"polled": True}, key="polled-key", partition=0)
    page.wait_for_function(
        "document.querySelector('#messages').innerText.includes('polled-key')", timeout=10_000
    )
    # A tick's refresh event comes too (the refresh on connecting may have brought the row
    # already, if the publish beat it: so wait for the event, not assert it at once).
    page.wait_for_function("Number(document.body.dataset.refreshes || 0) >= 1", timeout=10_000)
    # The stream is open, but the label says what it carries: the sampler's ticks, not LISTEN.
    assert page.inner_text("#live-state") == "polling"
