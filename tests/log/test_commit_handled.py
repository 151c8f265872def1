"""Committing only what was handled (issue 23, item 11): ``commit()`` stores what ``poll()``
returned (Kafka's semantics), ``commit(message)`` the offset after one message, and the
documented pattern for a handler that stops mid-batch (``rewind`` the rest, then ``commit``)
redelivers the message that failed and those after it."""

from __future__ import annotations

import postroom
from postroom import TopicPartition

TP = TopicPartition("t", 0)


def test_commit_of_a_message_stores_the_offset_after_it(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish_batch("t", [str(i) for i in range(10)])
    with any_client.consumer("g", "t") as consumer:
        messages = consumer.poll(timeout=5, max_messages=10)
        assert len(messages) == 10
        consumer.commit(messages[3])
        assert consumer.committed(TP) == 4


def test_the_documented_rewind_pattern_redelivers_the_failed_message_and_the_rest(
    any_client: postroom.Client,
) -> None:
    any_client.create_topic("t")
    any_client.publish_batch("t", [str(i) for i in range(10)])
    handled: list[int] = []
    failures: list[int] = []

    def handle(message: postroom.Message) -> None:
        if message.offset == 4 and not failures:
            failures.append(message.offset)  # fails once
            raise ValueError("transient")
        handled.append(message.offset)

    with any_client.consumer("g", "t") as consumer:
        messages = consumer.poll(timeout=5, max_messages=10)
        for i, message in enumerate(messages):  # the pattern of docs/log.md, "Poll/commit"
            try:
                handle(message)
            except ValueError:
                consumer.rewind(messages[i:])
                break
        consumer.commit()
        assert consumer.committed(TP) == 4  # not 10: 4..9 were not handled
        again = consumer.poll(timeout=5, max_messages=10)
        assert [m.offset for m in again] == list(range(4, 10))
        for message in again:
            handle(message)
        consumer.commit()
    assert (handled, failures) == (list(range(10)), [4])
