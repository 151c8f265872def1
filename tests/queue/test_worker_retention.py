"""The queue engine starts no log maintenance (issue 16): a worker runs no retention runner,
whatever the environment says; group members run it, at the client's ``retention_interval``
(default: ``POSTROOM_RETENTION_INTERVAL``)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

import postroom
from postroom._maintenance import RETENTION_ENV as ENV
from postroom.errors import InvalidArgument

from ..log.test_retention import age_messages
from ..signals import wait_for
from .helpers import running


def test_a_worker_runs_no_retention_runner(
    client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "0.05")
    with running(client.worker(queues=["default"], concurrency=1)):
        wait_for(lambda: "postroom-rescuer" in _threads(), 10, "the worker's rescuer to start")
        names = _threads()
    assert "postroom-heartbeat" in names
    assert not [n for n in names if "retention" in n], names


def _threads() -> list[str]:
    return [t.name for t in threading.enumerate()]


def test_the_client_option_sets_the_members_retention_interval(dsn: str) -> None:
    # The environment says off (conftest); the option wins.
    with postroom.connect(dsn, retention_interval=0.05) as client:
        client.create_topic("t", retention=timedelta(hours=1))
        client.publish_batch("t", list(range(5)))
        age_messages(dsn, 2)
        with client.consumer("g", "t") as consumer:
            read: list[object] = []
            while len(read) < 5:
                read += consumer.poll(timeout=5)
            consumer.commit()
            wait_for(
                lambda: client.describe_topic("t").partition_info[0].messages == 0,
                30,
                "the member's retention runner to delete what the group read",
            )


@pytest.mark.parametrize("bad", [0, -1, "soon", float("nan")])
def test_a_bad_retention_interval_is_refused_before_connecting(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="invalid retention_interval"):
        postroom.connect("postgresql://nobody@127.0.0.1:1/none", retention_interval=bad)  # type: ignore[arg-type]
