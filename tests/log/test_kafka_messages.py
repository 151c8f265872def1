"""A message read from Kafka (``messages.KafkaMessage``, its headers decoded when first read)
acts as the plain ``Message`` with the same fields: type checks, equality both ways, repr,
pickling, copies, ``dataclasses.replace``, frozenness; and building a batch leaves the garbage
collector's young count under its threshold (no collection a poll). No broker needed."""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
from datetime import UTC, datetime
from typing import Any

import confluent_kafka
import pytest

from postroom import Message
from postroom.log.kafka.messages import KafkaMessage, produce_arguments, to_messages
from postroom.log.records import make_record

STAMP = 1_796_206_306_425
WHEN = datetime.fromtimestamp(STAMP / 1000, UTC)


def _record(offset: int, headers: list[tuple[str, str | bytes | None]] | None = None) -> Any:
    return confluent_kafka.Message(
        topic="t",
        partition=0,
        offset=offset,
        key=b"k",
        value=b"v",
        headers=headers,
        timestamp=(confluent_kafka.TIMESTAMP_CREATE_TIME, STAMP),
    )


def _read(offset: int = 1, headers: list[tuple[str, str | bytes | None]] | None = None) -> Message:
    messages = to_messages([_record(offset, headers)], {("t", 0)}).messages
    assert type(messages[0]) is KafkaMessage  # headers not decoded yet
    return messages[0]


def _plain(offset: int = 1, headers: dict[str, str | bytes] | None = None) -> Message:
    return Message("t", 0, offset, b"k", b"v", headers or {}, WHEN)


def test_a_kafka_message_is_a_message_until_and_after_its_headers_are_read() -> None:
    message = _read(headers=[("s", b"text"), ("b", b"\xff"), ("n", None)])
    assert isinstance(message, Message)
    assert (message.topic, message.partition, message.offset) == ("t", 0, 1)
    assert (message.key, message.value, message.timestamp) == (b"k", b"v", WHEN)
    assert type(message) is KafkaMessage  # reading the other fields decodes nothing
    assert message.headers == {"s": "text", "b": b"\xff", "n": b""}
    assert type(message) is Message  # now a plain one
    assert message.headers is message.headers
    assert message.original_id == message.id == "t/0/1"


def test_equality_both_ways_repr_and_hash_are_a_plain_messages() -> None:
    assert _read() == _plain()
    assert _plain() == _read()
    assert _read() == _read()
    assert _read() != _plain(offset=2)
    assert _plain(offset=2) != _read()
    assert _read(headers=[("h", b"1")]) == _plain(headers={"h": "1"})
    assert _read(headers=[("h", b"1")]) != _plain()
    other: object = "t/0/1"
    assert _read() != other
    assert repr(_read()) == repr(_plain())
    assert repr(_read()).startswith("Message(topic='t'")
    with pytest.raises(TypeError, match="unhashable"):  # a Message's headers are a dict
        hash(_read())
    with pytest.raises(TypeError, match="unhashable"):
        hash(_plain())


def test_pickles_copies_and_replace_give_plain_messages() -> None:
    for made in (
        pickle.loads(pickle.dumps(_read())),
        copy.copy(_read()),
        copy.deepcopy(_read()),
        dataclasses.replace(_read()),
    ):
        assert type(made) is Message
        assert made == _plain()
    changed = dataclasses.replace(_read(), headers={"a": "b"}, offset=9)
    assert type(changed) is Message
    assert changed == _plain(offset=9, headers={"a": "b"})
    assert dataclasses.asdict(_read()) == dataclasses.asdict(_plain())
    assert dataclasses.astuple(_read()) == dataclasses.astuple(_plain())


def test_a_kafka_message_is_frozen_and_each_has_its_own_headers() -> None:
    message = _read()
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.value = b"x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.headers = {}  # type: ignore[misc]
    assert message.value == b"v"
    first, second = to_messages([_record(1), _record(2)], {("t", 0)}).messages
    first.headers["x"] = "y"
    assert second.headers == {}


def test_a_batch_of_500_runs_no_young_collection() -> None:
    """The reason for the lazy headers: the collector counts every GC object made (a record,
    a message, a dict), and a poll ends with a young collection when the count is past the
    threshold (700). 500 records, their 500 messages, the records freed: under it."""
    threshold = gc.get_threshold()[0]
    was_enabled = gc.isenabled()
    gc.disable()  # as the consumer's poll does (gc_paused): count, do not collect
    try:
        gc.collect()
        before = gc.get_count()[0]
        records = [_record(offset) for offset in range(500)]  # what consume() makes
        messages = to_messages(records, {("t", 0)}).messages
        del records
        made = gc.get_count()[0] - before
    finally:
        if was_enabled:
            gc.enable()
    assert len(messages) == 500
    assert made < threshold  # a headers dict each (500 more) would cross it


def test_produce_gets_only_the_arguments_a_record_has() -> None:
    assert produce_arguments(make_record("orders", b"v")) == {}
    keyed = produce_arguments(make_record("orders", b"v", key="k", headers={"h": "x"}))
    assert keyed == {"key": b"k", "headers": [("h", b"x")]}
    assert produce_arguments(make_record("orders", b"v", partition=0)) == {"partition": 0}
