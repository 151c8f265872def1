"""The dashboard in real headless Chromium, on a real database: every page renders, charts
draw, each action changes the database, the live view follows a publish."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

import postroom
import postroom.web._store

from ..signals import wait_for
from .conftest import DashboardServer
from .seed import Seeded

PAGES = {
    "/": ["Overview", "Jobs failed"],
    "/topics": ["orders", "orders.dlq"],
    "/topics/orders": ["OrderCreated", "customer-"],
    "/topics/orders?partition=1&offset=0": ["from offset 0"],
    "/groups": ["billing"],
    "/groups/billing": ["Reset offsets", "orders"],
    "/queues": ["reports", "yearly-report", "paused-q", "paused"],
    "/jobs?state=failed": ["explode", "boom 1"],
    "/jobs?state=done": ["fine"],
    "/deadletters": ["orders.dlq", "total must be positive"],
    "/relays": ["Relays"],
    "/workers": ["Job workers", "Group members"],
    "/audit": ["Audit log"],
}


def test_every_page_renders_from_the_database(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any
) -> None:
    server = serve()
    for path, texts in {**PAGES, f"/jobs/{seeded.failed_job}": ["RuntimeError: boom 1"]}.items():
        response = page.goto(server.url + path)
        assert response.status == 200, (path, response.status, page.content()[:500])
        body = page.inner_text("body")
        for text in texts:
            assert text in body, f"{path} does not show {text!r}"


def test_binary_values_and_filters_in_the_browser(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any
) -> None:
    server = serve()
    page.goto(server.url + "/topics/orders?partition=0&offset=0")
    partition = "0" if "raw" in page.inner_text("#messages") else "1"
    page.goto(server.url + f"/topics/orders?partition={partition}&offset=0&key=raw")
    assert "bytes: 00 ff" in page.inner_text("#messages")
    page.goto(server.url + '/topics/orders?partition=0&offset=0&contains={"order": 4}')
    rows = page.locator("#messages tbody tr")
    texts = [rows.nth(i).inner_text() for i in range(rows.count())]
    assert (texts and all('"order": 4' in t for t in texts)) or texts == ["no messages here"]
    page.goto(server.url + "/jobs?state=failed&error=boom")
    assert "explode" in page.inner_text("#jobs")
    page.goto(server.url + "/jobs?state=failed&error=nothing-like-this")
    assert "explode" not in page.inner_text("#jobs")


def test_charts_draw(serve: Callable[..., DashboardServer], seeded: Seeded, page: Any) -> None:
    server = serve()
    page.goto(server.url + "/")
    page.wait_for_function(
        "[...document.querySelectorAll('figure.chart')].every(f => f.querySelector('canvas'))"
    )
    sizes = page.eval_on_selector_all(
        "figure.chart canvas", "cs => cs.map(c => [c.width, c.height])"
    )
    assert len(sizes) == 4 and all(w > 100 and h > 50 for w, h in sizes), sizes


def _series(server: DashboardServer, pick: str) -> dict[str, list[float | None]]:
    series: dict[str, list[float | None]] = httpx.get(
        f"{server.url}/api/series?pick={pick}"
    ).json()["series"]
    return series


def _has_data(server: DashboardServer, pick: str, label: str) -> bool:
    return any(v for v in _series(server, pick).get(label, []))


def _drawn_with_data(page: Any, pick: str) -> None:
    page.wait_for_function(
        f"(f => f && f.querySelector('canvas') && +f.dataset.points > 0)"
        f"(document.querySelector('figure.chart[data-pick={pick}]'))"
    )
    width, height = page.eval_on_selector(
        f"figure.chart[data-pick={pick}] canvas", "c => [c.width, c.height]"
    )
    assert width > 100 and height > 50


def test_relay_throughput_and_pending_charts_draw_with_data(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    server = serve()
    # A relay's progress is its group's cursor (relay.*): commit as a relay would.
    with client.consumer("relay.sink", "orders") as relay:
        relay.poll(timeout=5, max_messages=3)
        relay.commit()
        wait_for(lambda: "relay.sink" in _series(server, "relay_pending"), what="sampled")
        relay.poll(timeout=5, max_messages=5)
        relay.commit()
        wait_for(lambda: _has_data(server, "relayed", "relay.sink"), what="throughput sampled")
    page.goto(server.url + "/relays")
    assert "/s" in page.inner_text("#relays tr:has-text('relay.sink')")
    _drawn_with_data(page, "relayed")
    _drawn_with_data(page, "relay_pending")


def test_queue_failure_rate_and_run_time_charts_draw_with_data(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    server = serve()
    wait_for(lambda: "default" in _series(server, "failed"), what="the seeded failure sampled")
    client.enqueue("explode", {"n": 2})
    client.enqueue("fine")
    client.worker(["default"], concurrency=1).run(burst=True, handle_signals=False)
    wait_for(lambda: _has_data(server, "failures", "default"), what="the failure sampled")
    wait_for(lambda: "default" in _series(server, "runtime"), what="the run time sampled")
    page.goto(server.url + "/queues")
    _drawn_with_data(page, "failures")
    _drawn_with_data(page, "runtime")


def test_retry_a_failed_job(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    server = serve()
    page.goto(server.url + f"/jobs/{seeded.failed_job}")
    page.click("button:text('Retry')")
    page.wait_for_selector("#flash")
    assert "retry: 1 of 1" in page.inner_text("#flash")
    assert client.get_job(seeded.failed_job).state == "ready"


def test_retry_all_jobs_matching_the_filter(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    server = serve()
    page.goto(server.url + "/jobs?state=failed&kind=explode")
    page.click("button:text('Retry all matching')")
    page.wait_for_selector("#flash")
    assert client.list_jobs(state="failed") == []


def test_cancel_and_delete_jobs(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    waiting = client.enqueue("fine", queue="paused-q")
    server = serve()
    page.goto(server.url + "/jobs?state=ready")
    page.check(f"input[name=id][value='{waiting.id}']")
    page.click("button:text('Cancel selected')")
    page.wait_for_selector("#flash")
    assert client.get_job(waiting.id).state == "cancelled"
    page.goto(server.url + f"/jobs/{seeded.done_job}")
    page.click("button:text('Delete')")
    page.wait_for_selector("#flash")
    assert seeded.done_job not in [j.id for j in client.list_jobs(state="done")]


def test_pause_and_resume_a_queue(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    server = serve()
    page.goto(server.url + "/queues")
    page.click("tr[data-queue='reports'] button:text('Pause')")
    page.wait_for_selector("#flash")
    assert "reports" in client.job_stats().paused
    page.click("tr[data-queue='reports'] button:text('Resume')")
    page.wait_for_selector("#flash")
    assert "reports" not in client.job_stats().paused


def test_reset_a_group_with_its_dry_run(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    before = {p.partition: p.committed for p in client.describe_group("billing").partitions}
    assert any(before.values())
    server = serve()
    page.goto(server.url + "/groups/billing")
    page.select_option("#reset-preview select[name=to]", "earliest")
    page.click("#reset-preview button")
    page.wait_for_selector("#preview")
    preview = page.inner_text("#preview")
    for partition, committed in before.items():
        assert f"{partition}\t{committed}\t0\t{-committed}" in preview, preview
    # The dry run moved nothing.
    assert {p.partition: p.committed for p in client.describe_group("billing").partitions} == before
    page.click("#reset-apply button")
    page.wait_for_selector("#flash")
    after = {p.partition: p.committed for p in client.describe_group("billing").partitions}
    assert after == dict.fromkeys(before, 0)


def test_replay_dead_letters(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    written = client.describe_topic("orders").high_water
    server = serve()
    page.goto(server.url + "/deadletters")
    page.click("#dlq-topics button:text('Replay all')")
    page.wait_for_selector("#flash")
    assert "replayed 1 dead letter" in page.inner_text("#flash")
    assert client.describe_topic("orders").high_water == written + 1
    assert page.locator("#letters .replayed").count() == 1  # the replay's cursor passed it
    page.click("#dlq-topics button:text('Replay all')")  # each once: nothing new to replay
    page.wait_for_selector("#flash:text('replayed 0')")
    assert client.describe_topic("orders").high_water == written + 1


def _second_dead_letter(client: postroom.Client) -> None:
    with client.consumer("shipping", "orders") as consumer:
        [message] = consumer.poll(timeout=5, max_messages=1)
        client.dead_letter(message, group="shipping", error="KeyError: address")


def test_replay_selected_and_all_matching_dead_letters(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    _second_dead_letter(client)
    written = client.describe_topic("orders").high_water
    server = serve()
    page.goto(server.url + "/deadletters?topic=orders.dlq")
    assert page.locator("#letters input[name=letter]").count() == 2
    page.check("#letters tr:has-text('KeyError') input[name=letter]")
    page.click("#replay-selected")
    page.wait_for_selector("#flash")
    assert "replayed 1 dead letter" in page.inner_text("#flash")
    assert _replays(client) == ["shipping"]
    # All matching a filter: the billing group's dead letter only.
    page.goto(server.url + "/deadletters?topic=orders.dlq&group=billing")
    assert page.locator("#letters input[name=letter]").count() == 1
    page.click("#replay-matching")
    page.wait_for_selector("#flash")
    assert "replayed 1 dead letter" in page.inner_text("#flash")
    assert _replays(client) == ["shipping", "billing"]
    assert client.describe_topic("orders").high_water == written + 2
    page.goto(server.url + "/audit")
    audit = page.inner_text("#audit")
    assert "replay_dead_letters" in audit and "matching" in audit


def _replays(client: postroom.Client) -> list[str]:
    """The groups the replays on ``orders`` are for, oldest first."""
    found: list[postroom.Message] = []
    with client.consumer(None, "orders") as peek:
        while batch := peek.poll(timeout=0, max_messages=100):
            found.extend(m for m in batch if "postroom-replay-group" in m.headers)
    return [
        str(m.headers["postroom-replay-group"]) for m in sorted(found, key=lambda m: m.timestamp)
    ]


def test_run_a_cron_schedule_now(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    assert client.list_jobs(kind="report") == []
    server = serve()
    page.goto(server.url + "/queues")
    page.click("#schedules button:text('Run now')")
    page.wait_for_selector("#flash")
    [job] = client.list_jobs(kind="report")
    assert job.queue == "reports" and job.state == "ready"
    page.goto(server.url + "/audit")
    assert "run_schedule" in page.inner_text("#audit")


def test_the_live_view_updates_when_a_message_is_published(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    # A long sampling interval: only LISTEN/NOTIFY can bring the new row within the wait
    # (the polling fallback fires every 30 s).
    server = serve(sample_interval=300)
    page.goto(server.url + "/topics/orders?partition=0&tail=1")
    # The page renders "live" when the server listens; the stream's hello marks the body.
    page.wait_for_function("document.body.dataset.connected === '1'", timeout=10_000)
    client.publish("orders", {"live": True}, key="live-key", partition=0)
    page.wait_for_function(
        "document.querySelector('#messages').innerText.includes('live-key')", timeout=10_000
    )
    # A notification's event comes too, not only the refresh on connecting (which may have
    # brought the row already, if the publish beat that refresh: so wait for it, not assert).
    page.wait_for_function("Number(document.body.dataset.refreshes || 0) >= 1", timeout=10_000)
    assert page.inner_text("#live-state") == "live"  # the events say the server listens
    page.goto(server.url + "/")
    page.wait_for_function("document.body.dataset.connected === '1'", timeout=10_000)
    failed_before = page.inner_text("#n-failed")
    client.retry_failed_jobs()
    page.wait_for_function(
        f"document.querySelector('#n-failed').innerText !== {failed_before!r}", timeout=10_000
    )


def test_a_filtered_browse_reads_a_bounded_range_and_goes_on(
    serve: Callable[..., DashboardServer],
    seeded: Seeded,
    page: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(postroom.web._store, "SCAN_LIMIT", 4)
    server = serve()
    page.goto(server.url + '/topics/orders?partition=0&offset=0&contains={"no": "match"}')
    assert "searched offsets 0 to 3" in page.inner_text("#searched")
    page.click("#searched a")
    assert "offset=4" in page.url
    assert "searched offsets 4 to 7" in page.inner_text("#searched")


def test_delete_all_failed_jobs_matching_a_filter(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any, client: postroom.Client
) -> None:
    server = serve()
    page.goto(server.url + "/jobs?state=failed&error=boom")
    page.click("button:text('Delete all matching')")
    page.wait_for_selector("#flash")
    assert "delete: 1 of 1" in page.inner_text("#flash")
    assert client.list_jobs(state="failed") == []
    page.goto(server.url + "/audit")
    assert "delete_job" in page.inner_text("#audit")
