"""Dead letters name the group that failed, are written once per group and message however
many processes handle it, and a replay reaches only the group that failed, marked as a replay
with the id of the message first dead-lettered."""

from __future__ import annotations

import threading

import psycopg

import postroom
from postroom.relay import Outbound

from ..relay.helpers import FAST, ScriptedSink, group_lag, running_relay
from ..signals import wait_for
from .test_runner import running


def lag(client: postroom.Client, group: str) -> int | None:
    return group_lag(client, group)


def test_a_replay_reaches_only_the_group_that_failed(client: postroom.Client) -> None:
    client.create_topic("t")
    fixed = threading.Event()
    handled: dict[str, list[postroom.Message]] = {"ok": [], "flaky": []}
    lock = threading.Lock()

    def ok(message: postroom.Message) -> None:
        with lock:
            handled["ok"].append(message)

    def flaky(message: postroom.Message) -> None:
        if message.text() == "bad" and not fixed.is_set():
            raise ValueError("cannot handle bad")
        with lock:
            handled["flaky"].append(message)

    client.subscribe("t", group="ok", max_attempts=1)(ok)
    client.subscribe("t", group="flaky", max_attempts=2, retry_delay=0.01)(flaky)
    client.publish_batch("t", ["a", "bad", "c"])
    with running(client) as runner:
        wait_for(lambda: runner.dead_lettered == 1 and lag(client, "flaky") == 0)
        wait_for(lambda: lag(client, "ok") == 0)
        [letter] = client.list_dead_letters("t")
        assert letter.headers["postroom-dlq-group"] == "flaky"  # names the group that failed
        assert letter.headers["postroom-dlq-id"] == "t/0/1"
        fixed.set()
        assert client.replay_dead_letters("t") == 1
        wait_for(lambda: len(handled["flaky"]) == 3, what="the replay reached the flaky group")
        wait_for(lambda: lag(client, "ok") == 0, what="the ok group passed over the replay")
    assert [m.text() for m in handled["ok"]] == ["a", "bad", "c"]  # not handled twice
    replay = handled["flaky"][-1]
    assert replay.text() == "bad" and replay.offset == 3
    assert replay.headers["postroom-replay-group"] == "flaky"
    assert replay.headers["postroom-replay-of"] == "t/0/1"
    assert replay.original_id == "t/0/1"  # the stable id, to deduplicate on
    assert not any(k.startswith("postroom-dlq-") for k in replay.headers)


def test_a_replay_that_fails_again_keeps_the_first_id(client: postroom.Client) -> None:
    client.create_topic("t")
    client.publish("t", "bad")
    [message] = client.consumer(None, "t").poll(timeout=1)
    assert client.dead_letter(message, group="g", error="boom")
    assert client.replay_dead_letters("t") == 1
    with client.consumer("reader", "t") as consumer:
        replay = next(m for m in consumer.poll(timeout=1) if m.offset == 1)
    assert replay.original_id == "t/0/0"
    assert client.dead_letter(replay, group="g", error="boom again")  # a new failure: written
    assert client.replay_dead_letters("t") == 1
    with client.consumer("reader", "t") as consumer:
        second = next(m for m in consumer.poll(timeout=1) if m.offset == 2)
    assert second.original_id == "t/0/0"


def test_one_dead_letter_per_group_and_message_however_many_write_it(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    client.publish("t", "poison")
    [message] = client.consumer(None, "t").poll(timeout=1)
    assert client.dead_letter(message, group="relay.x", error="refused") is True
    assert client.dead_letter(message, group="relay.x", error="refused") is False  # a 2nd relay
    assert client.dead_letter(message, group="billing", error="failed") is True  # another group
    # Two at once: the second waits for the first's transaction, then writes nothing.
    client.publish("t", "poison 2")
    [second] = [m for m in client.consumer(None, "t").poll(timeout=1) if m.offset == 1]
    outcome: list[bool] = []
    with psycopg.connect(client.conninfo) as conn:
        assert client.dead_letter(second, group="relay.x", error="refused", conn=conn)
        racer = threading.Thread(
            target=lambda: outcome.append(client.dead_letter(second, group="relay.x", error="x"))
        )
        racer.start()
        wait_for(lambda: _waits_on_a_lock(client), what="the second writer to wait")
    racer.join(30)
    assert outcome == [False]
    letters = client.list_dead_letters("t")
    assert sorted((m.headers["postroom-dlq-group"], m.text()) for m in letters) == [
        ("billing", "poison"),
        ("relay.x", "poison"),
        ("relay.x", "poison 2"),
    ]


def _waits_on_a_lock(client: postroom.Client) -> bool:
    with psycopg.connect(client.conninfo) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return row is not None and row[0] > 0


def test_a_rolled_back_dead_letter_leaves_no_claim(client: postroom.Client) -> None:
    client.create_topic("t")
    client.publish("t", "poison")
    [message] = client.consumer(None, "t").poll(timeout=1)
    with psycopg.connect(client.conninfo) as conn:
        assert client.dead_letter(message, group="g", error="e", conn=conn)
        conn.rollback()
    assert client.dead_letter(message, group="g", error="e")  # the claim rolled back too
    assert len(client.list_dead_letters("t")) == 1


def test_a_relay_passes_over_a_replay_for_another_group_and_names_itself_in_its_dead_letters(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    client.publish("t", "for billing", headers={"postroom-replay-group": "billing"})
    client.publish("t", "for the relay", headers={"postroom-replay-group": "relay.s"})
    client.publish("t", "refused")
    sink = ScriptedSink()
    sink.refuse = {"t/0/2"}
    with running_relay(client, "t", sink, group="relay.s", max_attempts=1, backoff=FAST):
        wait_for(lambda: group_lag(client, "relay.s") == 0)
    assert sink.sent == ["t/0/1"]
    [letter] = client.list_dead_letters("t")
    assert letter.headers["postroom-dlq-group"] == "relay.s"
    assert letter.headers["postroom-dlq-id"] == "t/0/2"
    assert letter.headers["postroom-dlq-sink"] == "scripted://test"


_ = Outbound  # the scripted sink's batches are of Outbound


def test_a_replay_of_chosen_dead_letters_publishes_those_each_time_and_moves_no_cursor(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    client.publish_batch("t", ["a", "b", "c"])
    with client.consumer(None, "t") as peek:
        messages = peek.poll(timeout=5, max_messages=3)
    for m in messages:
        client.dead_letter(m, group="g", error=f"failed {m.text()}")
    letters = {m.text(): (m.partition, m.offset) for m in client.list_dead_letters("t")}
    high = client.describe_topic("t").high_water
    chosen = [letters["a"], letters["c"], (letters["c"][0], 999)]  # 999: none there
    assert client.replay_dead_letters("t", letters=chosen) == 2
    assert client.replay_dead_letters("t", letters=[letters["c"]]) == 1  # again when asked
    with client.consumer(None, "t") as peek:
        replays = [m for m in peek.poll(timeout=5, max_messages=100) if m.offset >= 3]
    assert sorted(m.text() for m in replays) == ["a", "c", "c"]
    assert all(m.headers["postroom-replay-group"] == "g" for m in replays)
    assert client.describe_topic("t").high_water == high + 3
    assert client.replay_dead_letters("t") == 3  # the replay of all had not moved
