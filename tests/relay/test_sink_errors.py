"""A relay member's sink error (migration 0037): recorded when its sink fails, shown by
``relay_status()``, cleared by the next send that succeeds, written on changes and refreshes
only, never with a password; and relay status under a consumer-only role."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from psycopg.conninfo import make_conninfo

import postroom
from postroom.errors import SinkUnavailable
from postroom.relay import Outbound, RelaySinkError, delivery, sink_errors_async
from postroom.relay.sink_error_policy import (
    MAX_SINK_ERROR_CHARS,
    SinkErrorPolicy,
    SinkErrorWrite,
    error_summary,
    scrub,
)

from ..roles import login_role
from ..signals import wait_for
from .helpers import CLI, FAST, ScriptedSink, group_lag, running_relay

ERROR = "SinkUnavailable: scripted outage"


def cli(client: postroom.Client, *args: str) -> str:
    """``postroom ARGS`` in a process of its own, on a wide terminal; its stdout."""
    env = {**os.environ, "COLUMNS": "300"}
    done = subprocess.run(
        [*CLI, "--url", client.conninfo, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- the policy, sans-IO -------------------------------------------------------------------


def test_a_change_is_written_at_once_and_the_same_error_only_every_refresh() -> None:
    policy = SinkErrorPolicy(refresh_seconds=5.0, min_gap_seconds=1.0)
    write = policy.failed("down", now=0.0)
    assert write == SinkErrorWrite("down")
    policy.written(write, now=0.0)
    assert [policy.failed("down", now=t / 10) for t in range(1, 50)] == [None] * 49
    refresh = policy.failed("down", now=5.0)
    assert refresh == SinkErrorWrite("down")
    policy.written(refresh, now=5.0)
    different = policy.failed("refused", now=6.5)
    assert different == SinkErrorWrite("refused")
    policy.written(different, now=6.5)
    recovery = policy.succeeded(now=6.6)
    assert recovery == SinkErrorWrite(None)
    policy.written(recovery, now=6.6)
    assert policy.succeeded(now=6.7) is None
    assert policy.error is None


def test_errors_that_alternate_on_every_retry_are_coalesced() -> None:
    policy = SinkErrorPolicy(refresh_seconds=5.0, min_gap_seconds=1.0)
    policy.written(SinkErrorWrite("a"), now=0.0)
    writes = [policy.failed("b" if i % 2 else "a", now=i / 100) for i in range(1, 99)]
    assert [w for w in writes if w is not None] == []
    assert policy.failed("b", now=1.0) == SinkErrorWrite("b")


def test_the_first_success_clears_what_an_earlier_run_may_have_left_once() -> None:
    policy = SinkErrorPolicy()
    first = policy.succeeded(now=0.0)
    assert first == SinkErrorWrite(None)
    policy.written(first, now=0.0)
    assert policy.succeeded(now=0.1) is None


def test_a_write_that_did_not_go_through_is_tried_again_after_a_refresh() -> None:
    policy = SinkErrorPolicy(refresh_seconds=5.0)
    assert policy.failed("down", now=0.0) == SinkErrorWrite("down")
    policy.not_written(now=0.0)
    assert policy.failed("down", now=1.0) is None
    assert policy.succeeded(now=2.0) is None  # the clear waits too
    assert policy.failed("down", now=5.0) == SinkErrorWrite("down")


def test_the_text_has_no_password_and_is_bounded() -> None:
    text = error_summary(
        SinkUnavailable(
            "cannot reach amqp://relay:hunter2@broker:5672/ (kafka sasl password=swordfish, "
            "token: 'abc123'), url nats://n:p%40ss@x"
        ),
        secrets=["p%40ss"],
    )
    assert text.startswith("SinkUnavailable: cannot reach amqp://relay:***@broker:5672/")
    for secret in ("hunter2", "swordfish", "abc123", "p@ss", "p%40ss"):
        assert secret not in text
    assert scrub("password was s3cret-pw here", ["s3cret-pw"]) == "password was *** here"
    long = scrub("x" * 10_000)
    assert len(long) == MAX_SINK_ERROR_CHARS and long.endswith("...")


def test_a_new_member_starts_a_policy_of_its_own() -> None:
    deliveries = delivery.Delivery(
        cast(Any, None),
        ScriptedSink(),
        group="relay.s",
        counters=delivery.RelayCounters(),
        stopping=asyncio.Event(),
        backoff=FAST,
        max_attempts=1,
        dead_letter_topic="dead",
    )
    deliveries.member_id = "m1"
    policy = deliveries.sink_errors
    policy.written(SinkErrorWrite("down"), now=0.0)
    deliveries.member_id = "m1"
    assert deliveries.sink_errors is policy
    deliveries.member_id = "m2"  # a consumer made again: m1's row is not m2's
    assert deliveries.sink_errors.failed("down", now=0.1) == SinkErrorWrite("down")


# -- with a relay, against PostgreSQL -------------------------------------------------------


def sink_error(client: postroom.Client, group: str = "relay.s") -> RelaySinkError | None:
    """The group's first sink error (None also while the group has no cursor yet)."""
    if group_lag(client, group) is None:
        return None
    [status] = client.relay_status([group])
    return status.sink_error


@pytest.fixture
def committed(client: postroom.Client) -> Iterator[None]:
    """Topic t with a first message relayed (so relay.s has a cursor and shows in status)."""
    client.create_topic("t")
    client.publish("t", "first")
    yield


def test_an_outage_shows_the_error_with_its_start_and_a_recovery_clears_it(
    client: postroom.Client, committed: None
) -> None:
    sink = ScriptedSink()
    with running_relay(client, "t", sink, group="relay.s", backoff=FAST) as relay:
        wait_for(lambda: group_lag(client, "relay.s") == 0)
        assert client.relay_status(["relay.s"])[0].sink_errors == ()
        before = datetime.now(UTC)
        sink.down.set()
        client.publish("t", "during the outage")
        wait_for(lambda: sink_error(client) is not None, what="the outage recorded")
        [status] = client.relay_status(["relay.s"])
        error = status.sink_error
        assert error is not None
        assert error.error == ERROR
        assert before - timedelta(seconds=1) <= error.since  # one clock: the same machine
        assert error.since <= error.seen_at <= datetime.now(UTC)
        assert status.pending == 1
        assert [e.member for e in status.sink_errors] == [error.member]
        shown = cli(client, "relay", "status", "--json")
        [listed] = json.loads(shown)
        assert [(e["member"], e["error"]) for e in listed["sink_errors"]] == [
            (error.member, error.error)
        ]
        table = cli(client, "relay", "status")
        assert "sink error" in table and ERROR in table and f"member {error.member}" in table
        sink.down.clear()
        wait_for(lambda: sink_error(client) is None, what="the recovery recorded")
        # Cleared once the sink took the batch; committed just after.
        wait_for(lambda: client.relay_status(["relay.s"])[0].pending == 0)
    assert relay.counters.sink_failures >= 1


def test_a_retried_outage_is_not_one_write_per_attempt(
    client: postroom.Client, committed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[str | None] = []
    record = sink_errors_async.record_sink_error

    async def counting(db: object, group: str, member: str, error: str | None) -> bool:
        writes.append(error)
        return await record(db, group, member, error)  # type: ignore[arg-type]

    monkeypatch.setattr(delivery, "record_sink_error", counting)
    sink = ScriptedSink()
    with running_relay(client, "t", sink, group="relay.s", backoff=FAST):
        wait_for(lambda: group_lag(client, "relay.s") == 0)
        assert writes == [None]  # the first success clears what an earlier run left
        sink.down.set()
        client.publish("t", "during the outage")
        wait_for(lambda: sink_error(client) is not None, what="the outage recorded")
        first = sink_error(client)
        started = time.monotonic()
        # Past one refresh (5 s): "last seen" moves on, with one more write, however many
        # attempts the backoff (10-50 ms) made meanwhile.
        assert first is not None
        wait_for(
            lambda: getattr(sink_error(client), "seen_at", first.seen_at) != first.seen_at,
            timeout=20,
            what="last seen refreshed",
        )
        elapsed = time.monotonic() - started
        calls = sink.calls
        refreshed = sink_error(client)
        assert refreshed is not None
        assert refreshed.since == first.since and refreshed.seen_at > first.seen_at
        sink.down.clear()
        wait_for(lambda: sink_error(client) is None, what="the recovery recorded")
    failures = [w for w in writes if w is not None]
    assert calls > 40, calls
    assert len(failures) <= 2 + elapsed // 5, (writes, calls)
    assert writes[-1] is None


class LeakySink(ScriptedSink):
    """A sink whose URL and errors carry passwords."""

    def __init__(self) -> None:
        super().__init__()
        self.url = "scripted://relay:s3cret-pw@test"

    async def send(self, batch: Sequence[Outbound]) -> None:
        self.calls += 1
        raise SinkUnavailable(
            "login refused for amqp://relay:hunter2@broker:5672/ with password s3cret-pw"
        )


def test_the_recorded_error_has_no_password(client: postroom.Client, committed: None) -> None:
    with running_relay(client, "t", LeakySink(), group="relay.s", backoff=FAST):
        wait_for(lambda: sink_error(client) is not None, what="the error recorded")
        error = sink_error(client)
    assert error is not None
    assert "hunter2" not in error.error and "s3cret-pw" not in error.error, error.error
    assert "amqp://relay:***@broker:5672/" in error.error


def test_a_refused_message_shows_until_it_is_dead_lettered(
    client: postroom.Client, committed: None
) -> None:
    sink = ScriptedSink()
    sink.refuse = {"t/0/0"}
    slow = postroom.Backoff(base=0.5, factor=1, max_delay=0.5, jitter=0)
    with running_relay(client, "t", sink, group="relay.s", backoff=slow, max_attempts=3):
        wait_for(
            lambda: getattr(sink_error(client), "error", "") == "MessageRejected: refused t/0/0",
            what="the refusal recorded",
        )
        wait_for(lambda: group_lag(client, "relay.s") == 0, what="dead-lettered, committed")
        wait_for(lambda: sink_error(client) is None, what="cleared once it moved on")


def test_a_consumer_only_role_sees_relay_status_and_records_its_errors(
    client: postroom.Client, committed: None
) -> None:
    with login_role(client.conninfo, "relay_consumer") as role:
        client.grant(role, "consumer", groups=["relay.s"])
        with postroom.connect(make_conninfo(client.conninfo, user=role)) as as_role:
            sink = ScriptedSink()
            with running_relay(as_role, "t", sink, group="relay.s", backoff=FAST):
                wait_for(lambda: group_lag(client, "relay.s") == 0)
                # Before migration 0037: "permission denied for table members" (list_groups),
                # and for table leases with the group named (describe_group).
                [status] = as_role.relay_status()
                assert [s.pending for s in as_role.relay_status(["relay.s"])] == [0]
                assert status.group == "relay.s" and status.pending == 0
                assert [p.member for p in status.partitions] != [None]
                sink.down.set()
                client.publish("t", "during the outage")
                wait_for(lambda: as_role.relay_status()[0].sink_error is not None)
                error = as_role.relay_status()[0].sink_error
                assert error is not None and error.error == "SinkUnavailable: scripted outage"
                sink.down.clear()
                wait_for(lambda: as_role.relay_status()[0].sink_error is None)
