"""The Kafka producer's sends in flight (postroom/log/kafka/inflight.py, sans-IO): where a send
goes, and which send a delivery report is for, successes in their partition's order and
failures by content, whatever order librdkafka reports them in. Reports are real
confluent-kafka ``Message`` objects given to ``InFlight.report``, the producer's
``on_delivery``."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import confluent_kafka
import pytest

from postroom.log.kafka import inflight
from postroom.log.kafka.inflight import InFlight
from postroom.log.partitioner import partition_for_key


class Group:
    """What ``report`` records a success into: a ``_futures.Sends``'s lock-free slots, and
    ``deliver`` when someone waits on the group."""

    def __init__(self, waited: bool = False) -> None:
        self._results: dict[int, tuple[int, int]] = {}
        self._waited = waited
        self.delivered: list[tuple[int, tuple[int, int]]] = []

    def deliver(self, index: int, position: tuple[int, int]) -> None:
        self.delivered.append((index, position))


SENDS = "sends"  # a failure test's stand-in group: failures only carry it back


def add(
    flight: InFlight,
    topic: str,
    partition: int,
    index: int,
    value: bytes,
    key: Any = None,
    sends: Any = SENDS,
) -> None:
    """What the producer adds before its ``produce``: four items, no object of their own."""
    flight.queue(topic, partition).extend((sends, index, value, key))


def report(topic: str, partition: int, offset: int = 0, value: Any = None, key: Any = None) -> Any:
    return confluent_kafka.Message(
        topic=topic, partition=partition, offset=offset, value=value, key=key
    )


def succeed(flight: InFlight, topic: str, partition: int, offset: int) -> None:
    flight.report(None, report(topic, partition, offset))


@pytest.mark.parametrize("count", [1, 3, 4, 12])
def test_a_key_goes_to_kafkas_default_partition(count: int) -> None:
    flight = InFlight()
    for n in range(200):
        key = f"customer-{n}".encode()
        assert flight.place("t", count, key) == partition_for_key(key, count)
        assert flight.place("t", count, key) == partition_for_key(key, count)  # cached


def test_the_key_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inflight, "KEY_CACHE", 10)
    flight = InFlight()
    for n in range(35):
        key = f"k{n}".encode()
        assert flight.place("t", 7, key) == partition_for_key(key, 7)
        assert len(flight._hashes) <= 10


def test_unkeyed_sends_stick_to_a_partition_then_move_on(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    fake = SimpleNamespace(monotonic=lambda: clock[0])
    monkeypatch.setattr("postroom.log.kafka.inflight.time", fake)
    flight = InFlight()
    first = flight.place("t", 4, None)
    assert all(flight.place("t", 4, None) == first for _ in range(50))
    seen = set()
    for _ in range(200):  # each step outlives the sticky time: a new random pick
        clock[0] += inflight.STICKY_SECONDS
        seen.add(flight.place("t", 4, None))
    assert seen == {0, 1, 2, 3}
    # A topic that shrank (deleted and made again): the sticky partition must exist.
    lane = flight.lane("u", 8)
    assert 0 <= lane[1] < 8 and lane[0] == clock[0] + inflight.STICKY_SECONDS
    assert flight.place("u", 1, None) == 0
    assert lane[2] is flight.queue("u", lane[1])


def test_successes_are_the_oldest_sends_of_their_partition() -> None:
    flight, group = InFlight(), Group()
    for index in range(6):
        add(flight, "t", index % 2, index, b"v%d" % index, sends=group)
    assert flight.only is flight.queues["t"]  # one topic: a report's topic name is not read
    assert flight.pending() == 6
    for offset in range(3):
        succeed(flight, "t", 1, offset)
    assert group._results == {1: (1, 0), 3: (1, 1), 5: (1, 2)}
    succeed(flight, "t", 1, 3)  # none left there: not a send of this producer
    succeed(flight, "t", 9, 0)  # a partition never sent to
    assert len(group._results) == 3 and flight.pending() == 3
    succeed(flight, "t", 0, 7)
    assert group._results[0] == (0, 7) and flight.pending() == 2
    assert group.delivered == []  # nobody waited: the slot alone


def test_successes_of_several_topics_and_a_waited_group() -> None:
    flight, quiet, waited = InFlight(), Group(), Group(waited=True)
    add(flight, "t", 0, 0, b"a", sends=quiet)
    add(flight, "u", 0, 0, b"b", sends=waited)
    assert flight.only is None  # two topics: each report's topic is read
    succeed(flight, "u", 0, 41)
    succeed(flight, "other", 0, 5)  # a topic never sent to: not this producer's
    succeed(flight, "t", 0, 40)
    assert (quiet._results, waited._results) == ({0: (0, 40)}, {0: (0, 41)})
    assert (quiet.delivered, waited.delivered) == ([], [(0, (0, 41))])
    assert flight.pending() == 0


def test_a_failure_report_queues_the_send_and_its_error() -> None:
    flight, group = InFlight(), Group()
    add(flight, "t", 0, 0, b"first", sends=group)
    add(flight, "t", 0, 1, b"second", b"k", sends=group)
    error = confluent_kafka.KafkaError(confluent_kafka.KafkaError._MSG_TIMED_OUT)
    flight.report(error, report("t", 0, -1, b"second", b"k"))
    flight.report(error, report("t", 0, -1, b"not sent", b"k"))  # matches none: dropped
    assert list(flight.failures) == [(group, 1, error)]
    succeed(flight, "t", 0, 3)
    assert group._results == {0: (0, 3)} and flight.pending() == 0


def test_a_failure_reported_out_of_order_is_matched_by_content() -> None:
    """librdkafka may time out a queued message while an older one is still in flight, and
    report that failure first: the older send must still get the success that follows."""
    flight = InFlight()
    add(flight, "t", 0, 0, b"in flight")
    add(flight, "t", 0, 1, b"queued", b"k")
    add(flight, "t", 0, 2, b"queued")
    assert flight.failed("t", 0, b"queued", b"k") == ("sends", 1)
    group = Group()
    flight.queues["t"][0][0] = group  # the oldest entry's group: where its success goes
    succeed(flight, "t", 0, 10)
    assert group._results == {0: (0, 10)}
    assert flight.failed("t", 0, b"queued", b"other key") is None
    assert flight.failed("t", 0, b"queued", None) == ("sends", 2)
    assert flight.pending() == 0


def test_a_failure_matches_the_oldest_identical_send() -> None:
    flight = InFlight()
    for index in range(3):
        add(flight, "t", 0, index, b"same")
    assert flight.failed("t", 0, b"same", None) == ("sends", 0)
    assert [list(entries)[1::4] for entries in flight.queues["t"]] == [[1, 2]]  # the later two


def test_a_failure_without_a_partition_is_searched_in_every_partition() -> None:
    flight = InFlight()
    add(flight, "t", 0, 0, b"a")
    add(flight, "t", 2, 1, b"b")
    add(flight, "t", 2, 2, b"")
    assert flight.failed("t", -1, b"b", None) == ("sends", 1)
    assert flight.failed("t", -1, None, None) == ("sends", 2)  # an empty value comes as None
    assert flight.failed("missing", -1, b"a", None) is None
    assert flight.pending() == 1


def test_a_failure_is_found_while_a_sender_adds() -> None:
    """The failure search copies the FIFO in one C call: a sender appending meanwhile (another
    thread, no lock shared) never makes it fail or take a wrong entry."""
    flight = InFlight()
    add(flight, "t", 0, -1, b"target")
    stop = threading.Event()

    def sender() -> None:
        index = 0
        while not stop.is_set():
            add(flight, "t", 0, index, b"filler")
            index += 1

    thread = threading.Thread(target=sender)
    thread.start()
    try:
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            assert flight.failed("t", 0, b"target", None) == ("sends", -1)
            add(flight, "t", 0, -1, b"target")
    finally:
        stop.set()
        thread.join()
    assert flight.failed("t", 0, b"target", None) == ("sends", -1)
