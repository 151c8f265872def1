"""Raw errors where one clear postroom error is promised (issue 23, item 12): a lock timeout
in a rebalance, out-of-range arguments, megabyte names, non-ASCII cron digits, CLI input that
overflowed or was not UTF-8."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg import errors as pg_errors

import postroom
from postroom.errors import Fenced, InvalidArgument, InvalidCron, InvalidName
from postroom.queue.cron import parse_cron

from .test_cli import fails


def test_a_lock_timeout_in_a_rebalance_comes_out_of_transaction_as_fenced(
    client: postroom.Client,
) -> None:
    client.create_topic("t")
    consumer = client.consumer("g", "t")
    with pytest.raises(Fenced, match="lock timeout"), consumer._session_guard():
        raise pg_errors.LockNotAvailable("canceling statement due to lock timeout")
    consumer.close()


@pytest.mark.parametrize("max_messages", [2**31, 0])
def test_max_messages_out_of_the_integer_range_is_an_invalid_argument(
    any_client: postroom.Client, max_messages: int
) -> None:
    any_client.create_topic("t")
    with any_client.consumer("g", "t") as consumer:
        with pytest.raises(InvalidArgument, match="invalid max_messages"):
            with consumer.transaction(max_messages=max_messages):
                pass
        with pytest.raises(InvalidArgument, match="invalid max_messages"):
            consumer.poll(timeout=0, max_messages=max_messages)


def test_a_megabyte_group_name_is_an_invalid_name_that_does_not_repeat_it(
    client: postroom.Client,
) -> None:
    with pytest.raises(InvalidName) as raised:
        client.describe_group("g" * 1024 * 1024)
    assert "1048576 characters" in str(raised.value)
    assert len(str(raised.value)) < 300


@pytest.mark.parametrize("field", ["²", "٣", "*/²", "1-٣"])
def test_cron_fields_take_ascii_digits_only(field: str) -> None:
    with pytest.raises(InvalidCron, match="minute field"):
        parse_cron(f"{field} * * * *")


def test_an_overflowing_cli_duration_is_one_red_line(dsn: str) -> None:
    fails(dsn, "topic", "create", "t", "--retention", "99999999999999d", message="at most")


def test_a_cli_file_that_is_not_utf8_is_one_red_line(dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'"ok"\n"\xff\xfe"\n')
    with postroom.connect(dsn) as client:
        client.create_topic("t")
    fails(dsn, "produce", "t", "--file", str(path), message="not UTF-8")


def test_a_null_refused_by_a_postroom_table_is_an_invalid_argument_naming_the_column(
    client: postroom.Client,
) -> None:
    with pytest.raises(InvalidArgument, match="invalid name: null value"):
        with client._db.connection() as conn:
            conn.execute("INSERT INTO postroom.topics (name, partitions) VALUES (NULL, 1)")
