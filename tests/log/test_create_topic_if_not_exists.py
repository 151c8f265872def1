"""``create_topic(..., if_not_exists=True)`` (sync and async), as the CLI's --if-not-exists: a
script that creates its topics can run twice."""

from __future__ import annotations

from datetime import timedelta

import pytest

import postroom
from postroom.errors import TopicExists


def test_create_topic_if_not_exists_succeeds_on_an_existing_topic_and_changes_nothing(
    any_client: postroom.Client,
) -> None:
    assert any_client.create_topic("orders", partitions=3, if_not_exists=True) is True
    assert any_client.create_topic("orders", 1, timedelta(days=1), if_not_exists=True) is False
    info = any_client.describe_topic("orders")
    assert info.partitions == 3 and info.retention_seconds is None
    with pytest.raises(TopicExists):
        any_client.create_topic("orders")
