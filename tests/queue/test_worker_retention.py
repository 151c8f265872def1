"""A queue worker runs the log's retention runner too (issue 8): a process that only works jobs
still expires the log."""

from __future__ import annotations

from datetime import timedelta

import pytest

import postroom
from postroom._retention import ENV

from ..log.test_retention import age_messages
from ..signals import wait_for
from .helpers import running


def test_a_worker_expires_the_log_by_itself(
    any_client: postroom.Client, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    any_client.create_topic("t", retention=timedelta(hours=1))
    any_client.publish_batch("t", list(range(5)))
    age_messages(dsn, 2)
    monkeypatch.setenv(ENV, "0.05")
    with running(any_client.worker(queues=["default"], concurrency=1)):
        wait_for(
            lambda: any_client.describe_topic("t").partition_info[0].messages == 0,
            30,
            "the worker's retention runner to delete the expired messages",
        )
