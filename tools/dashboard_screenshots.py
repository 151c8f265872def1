"""Screenshots of the dashboard's main pages for docs/dashboard.md and README.md.

    PYTHONPATH=$PWD/src python tools/dashboard_screenshots.py --url URL [--out docs/img]

Fills a schema of its own (``postroom_screenshots``, dropped at the end) with a little of
everything (topics, a lagging group, a dead letter, failed and done jobs, a schedule), serves
the dashboard with uvicorn on loopback and photographs each page in headless Chromium
(``/usr/bin/chromium``, driven by playwright).
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

import postroom
import postroom.web
from postroom.benchmarks import _common

SCHEMA = "postroom_screenshots"
PAGES = {
    "overview": "/",
    "topics": "/topics",
    "topic": "/topics/orders?partition=0&offset=0",
    "group": "/groups/billing?topic=orders&to=earliest",
    "queues": "/queues",
    "jobs": "/jobs?state=failed",
    "job": "/jobs/{failed}",
    "deadletters": "/deadletters",
    "relays": "/relays",
}
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def seed(client: postroom.Client) -> int:
    client.create_topic("orders", partitions=3)
    client.create_topic("payments", partitions=2)
    # A relay's progress is its group's cursor (relay.*): this one delivers as a relay would.
    with client.consumer("relay.webhooks", "payments") as relay:
        for round_ in range(6):
            client.publish_batch(
                "orders",
                [
                    {"key": f"customer-{i % 7}", "value": {"order": i, "total": 10 * i}}
                    for i in range(round_ * 50, round_ * 50 + 50)
                ],
            )
            client.publish_batch("payments", [{"value": {"payment": i}} for i in range(30)])
            relay.poll(timeout=1, max_messages=10 + 8 * round_)
            relay.commit()
            time.sleep(1.1)  # a few samples apart: the rate charts get a shape
    with client.consumer("billing", "orders") as consumer:
        batch = consumer.poll(timeout=5, max_messages=40)
        consumer.commit()
        client.dead_letter(batch[0], group="billing", error="ValueError: total must be positive")

    @client.periodic("0 6 * * *", name="daily-report")
    @client.job("report", queue="reports")
    def report() -> None: ...

    @client.job("charge", max_attempts=1)
    def charge(order: int) -> None:
        raise RuntimeError(f"card declined for order {order}")

    @client.job("email")
    def email(to: str) -> str:
        return f"sent to {to}"

    failed = client.enqueue("charge", {"order": 42})
    client.enqueue_batch({"kind": "email", "args": {"to": f"u{i}@example.com"}} for i in range(40))
    client.worker(["default", "reports"], concurrency=4).run(burst=True, handle_signals=False)
    client.enqueue_batch({"kind": "email", "args": {"to": f"v{i}@example.com"}} for i in range(9))
    client.set_queue_limit("reports", max_concurrency=1)
    return failed.id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", default="docs/img")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _common.drop_schema(args.url, SCHEMA)
    try:
        with postroom.connect(args.url, schema=SCHEMA) as client:
            client.migrate()
            app = postroom.web.app(url=args.url, schema=SCHEMA, sample_interval=1.0)
            server = uvicorn.Server(
                uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
            )
            thread = threading.Thread(target=server.run, daemon=True)
            thread.start()
            while not server.started:
                time.sleep(0.05)
            port = server.servers[0].sockets[0].getsockname()[1]
            failed = seed(client)  # while the dashboard samples: the charts have history
            shoot(f"http://127.0.0.1:{port}", out, failed)
            server.should_exit = True
            thread.join(timeout=10)
    finally:
        _common.drop_schema(args.url, SCHEMA)


def shoot(base: str, out: Path, failed: int) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        for name, path in PAGES.items():
            page.goto(base + path.format(failed=failed))
            page.wait_for_timeout(600)  # charts fetch their series after load
            page.screenshot(path=str(out / f"dashboard-{name}.png"), full_page=False)
            print(out / f"dashboard-{name}.png")
        browser.close()


if __name__ == "__main__":
    main()
