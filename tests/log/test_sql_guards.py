"""Rows written through SQL obey the limits the Python API enforces (issue 10, item 3): header
shape and size, key and value size, checked by the database at write time; and a consumer
delivers a bad row stored before those checks existed instead of crashing on it."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

import postroom
from postroom.errors import MessageTooLarge
from postroom.log import records
from postroom.log.records import INVALID_HEADERS, MAX_HEADER_BYTES, MAX_KEY_BYTES, MAX_VALUE_BYTES


def sql_publish(
    any_client: postroom.Client, value: bytes, key: bytes | None, headers: object
) -> None:
    with psycopg.connect(any_client.conninfo) as conn:
        conn.execute(
            "SELECT * FROM postroom.publish('t', %s::bytea, %s::bytea, %s)",
            [value, key, None if headers is None else Jsonb(headers)],
        )


def refused_by(
    any_client: postroom.Client,
    constraint: str,
    *,
    value: bytes = b"v",
    key: bytes | None = None,
    headers: object = None,
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        sql_publish(any_client, value, key, headers)
    assert caught.value.diag.constraint_name == constraint


@pytest.mark.parametrize(
    "headers", [[1, 2], "text", 7, True], ids=["array", "string", "number", "bool"]
)
def test_headers_that_are_json_but_not_an_object_are_refused(
    any_client: postroom.Client, headers: object
) -> None:
    any_client.create_topic("t")
    refused_by(any_client, "messages_headers_shape", headers=headers)
    assert any_client.describe_topic("t").high_water == 0


def test_header_count_and_size_limits_hold_in_sql(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    refused_by(any_client, "messages_headers_shape", headers={f"h{i}": "x" for i in range(65)})
    refused_by(any_client, "messages_headers_shape", headers={"h": "x" * MAX_HEADER_BYTES})
    refused_by(any_client, "messages_headers_shape", headers={"": "empty name"})
    # What the Python API accepts at its limits, the database accepts too.
    sql_publish(any_client, b"v", None, {f"h{i}": "x" for i in range(64)})
    any_client.publish("t", b"v", headers={"h": "x" * (MAX_HEADER_BYTES - 1)})
    any_client.publish("t", b"v", headers={"b": b"\xff" * (MAX_HEADER_BYTES - 1)})
    any_client.publish("t", b"v", headers={"b": b"\xff" * (MAX_HEADER_BYTES - 2)})  # b64 padding
    assert any_client.describe_topic("t").high_water == 4


def test_key_and_value_size_limits_hold_in_sql(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    refused_by(any_client, "messages_key_size", key=b"k" * (MAX_KEY_BYTES + 1))
    refused_by(any_client, "messages_value_size", value=b"v" * (MAX_VALUE_BYTES + 1))
    sql_publish(any_client, b"v" * MAX_VALUE_BYTES, b"k" * MAX_KEY_BYTES, None)
    assert any_client.describe_topic("t").high_water == 1


def test_a_limit_the_database_holds_is_a_postroom_error(
    any_client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Were the Python check ever looser than the database's, the caller still gets one clear
    # postroom error naming the limit, not a raw CHECK violation.
    any_client.create_topic("t")
    monkeypatch.setattr(records, "MAX_VALUE_BYTES", 2 * MAX_VALUE_BYTES)
    with pytest.raises(MessageTooLarge, match=f"larger than {MAX_VALUE_BYTES} bytes"):
        any_client.publish("t", b"v" * (MAX_VALUE_BYTES + 1))


def _plant_bad_row(any_client: postroom.Client, headers: str) -> None:
    """A row stored before migration 0003 added the CHECK (as an upgraded install has)."""
    with psycopg.connect(any_client.conninfo) as conn:
        row = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conname = 'messages_headers_shape'"
            " AND conrelid = 'postroom.messages'::regclass"
        ).fetchone()
        assert row is not None
        conn.execute("ALTER TABLE postroom.messages DROP CONSTRAINT messages_headers_shape")
        # Written directly (publish() stages, and staged_messages has the CHECK too).
        conn.execute(
            'INSERT INTO postroom.messages (topic_id, partition, "offset", value, headers)'
            " SELECT r.topic_id, r.partition, r.first_offset, 'bad', %s::jsonb"
            " FROM postroom.reserve_offsets("
            "ARRAY[(SELECT id FROM postroom.topics WHERE name = 't')], '{0}', '{1}') r",
            [headers],
        )
        conn.execute(
            sql.SQL(
                "ALTER TABLE postroom.messages ADD CONSTRAINT messages_headers_shape {}"
            ).format(
                sql.SQL(row[0])  # the catalog's own text
            )
        )


@pytest.mark.parametrize("stored", ["[1, 2]", '"text"', "[]", '{"h": {"b64": "!!not base64"}}'])
def test_a_stored_bad_row_is_delivered_with_flagged_headers(
    any_client: postroom.Client, stored: str
) -> None:
    any_client.create_topic("t")
    any_client.publish("t", "before")
    _plant_bad_row(any_client, stored)
    any_client.publish("t", "after")
    with any_client.consumer("g", "t") as consumer:
        messages = consumer.poll(timeout=1)
        consumer.commit()
    assert [m.value for m in messages] == [b"before", b"bad", b"after"]
    bad = messages[1]
    if stored.startswith("{"):
        assert bad.headers == {"h": '{"b64":"!!not base64"}'}
    else:
        assert set(bad.headers) == {INVALID_HEADERS}
        assert str(bad.headers[INVALID_HEADERS]).replace(" ", "") == stored.replace(" ", "")
    assert any_client.describe_group("g").lag == 0


def test_a_stored_bad_row_does_not_block_transactional_consumption(
    any_client: postroom.Client,
) -> None:
    any_client.create_topic("t")
    _plant_bad_row(any_client, "[1]")
    any_client.publish("t", "after")
    with any_client.consumer("g", "t") as consumer:
        with consumer.transaction(timeout=1) as batch:
            delivered = [(m.value, dict(m.headers)) for m in batch]
    assert delivered == [(b"bad", {INVALID_HEADERS: "[1]"}), (b"after", {})]
    assert any_client.describe_group("g").lag == 0
