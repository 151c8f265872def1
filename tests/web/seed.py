"""A small but complete postroom schema for the dashboard tests: every page has rows to show."""

from __future__ import annotations

from dataclasses import dataclass

import postroom


@dataclass
class Seeded:
    failed_job: int
    done_job: int


def seed(client: postroom.Client) -> Seeded:
    """Topics with messages, a group with lag, a dead letter, a failed and a done job, a cron
    schedule, a limit and a paused queue."""
    client.create_topic("orders", partitions=2)
    for i in range(20):
        client.publish(
            "orders",
            {"order": i, "total": i * 10},
            key=f"customer-{i % 4}",
            headers={"type": "OrderCreated" if i % 2 else "OrderPaid"},
        )
    client.publish("orders", b"\x00\xffbinary", key="raw")
    with client.consumer("billing", "orders") as consumer:
        batch = consumer.poll(timeout=5, max_messages=6)
        assert batch
        consumer.commit()
        client.dead_letter(batch[0], group="billing", error="ValueError: total must be positive")

    @client.periodic("0 0 1 1 *", name="yearly-report")
    @client.job("report", queue="reports")
    def report() -> None: ...

    @client.job("explode", max_attempts=1)
    def explode(n: int) -> None:
        raise RuntimeError(f"boom {n}")

    @client.job("fine")
    def fine() -> str:
        return "ok"

    failed = client.enqueue("explode", {"n": 1})
    done = client.enqueue("fine")
    client.worker(["default", "reports"], concurrency=2).run(burst=True, handle_signals=False)
    # the seeded client keeps "fine" registered: tests enqueue more and run a burst worker
    client.set_queue_limit("reports", max_concurrency=2)
    client.pause_queue("paused-q")
    assert client.get_job(failed.id).state == "failed"
    return Seeded(failed.id, done.id)
