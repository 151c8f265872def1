"""The overview's cards each draw a sparkline of their series (the sum over every topic,
group, queue or relay), and draw it again when the live view swaps the cards in anew; in real
Chromium on a real database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

import postroom

from ..signals import wait_for
from .conftest import DashboardServer
from .seed import Seeded

SPARKS = ["rate", "lag", "done", "failed", "relay_pending"]
ALL_DRAWN = "[...document.querySelectorAll('figure.spark')].every(f => f.querySelector('canvas'))"


def _rate_sampled(server: DashboardServer) -> bool:
    series = httpx.get(f"{server.url}/api/series?pick=rate").json()["series"]
    return any(v for values in series.values() for v in values)


def test_every_card_draws_a_sparkline_and_the_live_view_keeps_them(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    server = serve()

    def publish_and_check() -> bool:
        client.publish("orders", {"order": 99})
        return _rate_sampled(server)

    wait_for(publish_and_check, what="a message rate sampled")
    page.goto(server.url + "/")
    page.wait_for_function(ALL_DRAWN)
    picks = page.eval_on_selector_all("a.card figure.spark", "fs => fs.map(f => f.dataset.pick)")
    assert picks == SPARKS
    # Each card's canvas laid out at 140 x 20-40 px, checked and read in one evaluation: the
    # live view may swap the cards in anew at any moment, and a card caught mid-swap has no
    # canvas yet or one of 0 x 0 (both seen in loaded CI runs).
    sizes = page.wait_for_function(
        """count => {
            const figures = [...document.querySelectorAll('figure.spark')];
            const sizes = figures.map(f => {
                const c = f.querySelector('canvas');
                return c ? [c.clientWidth, c.clientHeight] : null;
            });
            const laid = sizes.every(s => s && s[0] == 140 && s[1] >= 20 && s[1] <= 40);
            return figures.length == count && laid ? sizes : null;
        }""",
        arg=len(SPARKS),
    ).json_value()
    assert len(sizes) == len(SPARKS)
    assert all(w == 140 and 20 <= h <= 40 for w, h in sizes), sizes
    page.wait_for_function(
        "+document.querySelector('figure.spark[data-pick=rate]').dataset.points > 0"
    )
    # A publish wakes the live view, which swaps the cards: their sparklines are drawn again.
    page.wait_for_function("+document.body.dataset.connected > 0")
    page.eval_on_selector_all("figure.spark", "fs => fs.forEach(f => { f.dataset.old = '1'; })")
    client.publish("orders", {"order": 100})
    page.wait_for_function("+document.body.dataset.refreshes > 0")
    page.wait_for_function("!document.querySelector('figure.spark[data-old]')")
    page.wait_for_function(ALL_DRAWN)
    assert page.locator("figure.spark canvas").count() == len(SPARKS)
