"""A job claimed ahead (buffered) whose lease ran out before a slot took it is not started
(issue 21.4): the worker was frozen, another worker rescued and ran the job meanwhile."""

from __future__ import annotations

import asyncio
import threading

import postroom

from .helpers import query, running


def test_a_buffered_job_whose_lease_ran_out_while_its_worker_froze_runs_once(dsn: str) -> None:
    ran: list[str] = []
    frozen = threading.Event()  # the first worker is frozen (its event loop blocked)
    thaw = threading.Event()
    errors: list[BaseException] = []

    async def frozen_worker() -> None:
        async with await postroom.connect_async(dsn) as client:
            froze_once: list[bool] = []

            @client.job("freeze", queue="frozen")
            async def freeze() -> None:
                if not froze_once:
                    froze_once.append(True)
                    frozen.set()
                    # Blocks the event loop, as a paused VM or a stopped process would: no
                    # heartbeat extends the leases of the jobs claimed with this one.
                    thaw.wait(60)

            @client.job("work")
            async def work() -> None:
                ran.append("frozen worker")

            # Enqueued before the worker starts: its first claim takes both, in this order
            # ("work" waits in the buffer while "freeze" runs).
            await client.enqueue("freeze")
            await client.enqueue("work")
            worker = client.worker(
                queues=["frozen", "default"], concurrency=1, prefetch=5, lease=1.0
            )
            await worker.run(burst=True, handle_signals=False)

    def target() -> None:
        try:
            asyncio.run(frozen_worker())
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        assert frozen.wait(30), "the first worker never froze"
        # Both jobs are the frozen worker's: "work" waits in its buffer.
        assert query(dsn, "SELECT kind FROM postroom.jobs WHERE state = 'running' ORDER BY id") == [
            ("freeze",),
            ("work",),
        ]
        with postroom.connect(dsn) as client:
            taken_over = threading.Event()

            @client.job("work")
            def work() -> None:
                ran.append("other worker")
                taken_over.set()

            # This one returns the expired job (lease 1 s) and runs it.
            other = client.worker(queues=["default"], concurrency=1, rescue_interval=0.1)
            with running(other):
                assert taken_over.wait(30), "the other worker never got the job"
    finally:
        thaw.set()
        thread.join(60)
    assert not thread.is_alive(), "the frozen worker did not finish its burst"
    assert not errors, errors
    assert ran == ["other worker"]
