"""One bad ``send()`` fails only itself (issue 10, item 7): what ``send()`` can check raises at
once; a record found bad when its batch is written fails its own future, and the rest of the
batch commits."""

from __future__ import annotations

import pytest

import postroom
from postroom.errors import InvalidArgument, MessageTooLarge
from postroom.log import records
from postroom.log.records import MAX_VALUE_BYTES


def test_send_refuses_a_partition_out_of_range_at_once(any_client: postroom.Client) -> None:
    any_client.create_topic("t", partitions=2)
    with any_client.producer(linger_ms=1000) as producer:
        good = producer.send("t", "a", partition=1)
        with pytest.raises(InvalidArgument, match=r"partition 2 does not exist.*0\.\.1"):
            producer.send("t", "b", partition=2)
    assert good.result(timeout=10).partition == 1


@pytest.mark.parametrize(
    "headers,named",
    [
        ({"h": "a\x00b"}, "header 'h'"),
        ({"a\x00": "v"}, "header name"),
        ({"h": "\udc80"}, "header 'h'"),
    ],
    ids=["NUL in a value", "NUL in a name", "lone surrogate"],
)
def test_send_refuses_bad_headers_at_once(
    any_client: postroom.Client, headers: dict[str, str], named: str
) -> None:
    any_client.create_topic("t")
    with any_client.producer(linger_ms=1000) as producer:
        good = producer.send("t", "a")
        with pytest.raises(InvalidArgument, match=named):
            producer.send("t", "b", headers=headers)
        after = producer.send("t", "c")
    assert [good.result(timeout=10).offset, after.result(timeout=10).offset] == [0, 1]


def test_a_record_refused_at_write_time_fails_only_its_own_future(
    any_client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A value the Python check lets through (its limit raised here) but the database refuses:
    # the stand-in for anything only the write can find out.
    any_client.create_topic("t")
    monkeypatch.setattr(records, "MAX_VALUE_BYTES", 2 * MAX_VALUE_BYTES)
    with any_client.producer(linger_ms=60_000, batch_size=100) as producer:
        futures = [producer.send("t", f"m{i}") for i in range(7)]
        bad = producer.send("t", b"x" * (MAX_VALUE_BYTES + 1))
        futures += [producer.send("t", f"m{i}") for i in range(7, 12)]
        producer.flush()
    with pytest.raises(MessageTooLarge):
        bad.result(timeout=10)
    offsets = [f.result(timeout=10).offset for f in futures]
    assert sorted(-1 if o is None else o for o in offsets) == list(range(12))
    with any_client.consumer("g", "t") as consumer:
        assert [m.text() for m in consumer.poll(timeout=1)] == [f"m{i}" for i in range(12)]


def test_a_partition_gone_at_write_time_fails_only_its_own_future(
    any_client: postroom.Client,
) -> None:
    any_client.create_topic("t", partitions=3)
    with any_client.producer(linger_ms=60_000) as producer:
        good = producer.send("t", "a", partition=0)
        doomed = producer.send("t", "b", partition=2)
        # The topic is recreated with fewer partitions before the batch is written.
        any_client.delete_topic("t")
        any_client.create_topic("t", partitions=1)
        producer._appender._topics.forget("t")  # as after METADATA_MAX_AGE
        producer.flush()
    with pytest.raises(InvalidArgument, match="partition 2 does not exist"):
        doomed.result(timeout=10)
    assert good.result(timeout=10).offset == 0
