"""A closed consumer and a worker run twice raise their own errors (issue 16), not
``InvalidArgument``: neither is a bad value."""

from __future__ import annotations

import pytest

import postroom
from postroom.errors import ConsumerClosed, InvalidArgument, WorkerAlreadyRun


def test_a_closed_consumer_raises_consumer_closed(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    consumer = any_client.consumer("g", "t")
    consumer.close()
    with pytest.raises(ConsumerClosed, match="the consumer is closed") as caught:
        consumer.poll(timeout=0)
    assert not isinstance(caught.value, InvalidArgument)


def test_a_worker_runs_once(any_client: postroom.Client) -> None:
    worker = any_client.worker(["default"], poll_interval=0.05)
    worker.run(burst=True, handle_signals=False)
    with pytest.raises(WorkerAlreadyRun, match="a worker runs once") as caught:
        worker.run(burst=True, handle_signals=False)
    assert not isinstance(caught.value, InvalidArgument)
