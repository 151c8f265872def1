"""The SQL API's text and jsonb forms of publish (issue 10, item 16): JSON written from SQL
arrives byte for byte, with no bytea cast (``'{"a": "x\\y"}'::bytea`` reads the backslash as an
escape and corrupts the JSON)."""

from __future__ import annotations

import psycopg

import postroom
from postroom import partition_for_key


def read_all(client: postroom.Client, topic: str) -> list[postroom.Message]:
    with client.consumer("reader", topic) as consumer:
        return consumer.poll(timeout=1)


def test_text_publish_stores_json_text_exactly(client: postroom.Client) -> None:
    client.create_topic("t")
    text = '{"id": 1, "path": "C:\\\\temp\\\\x", "note": "\\\\x41"}'
    with psycopg.connect(client.conninfo) as conn:
        conn.execute(f"SELECT * FROM postroom.publish('t', '{text}')")  # an untyped literal
        conn.execute("SELECT * FROM postroom.publish('t', %s::text, 'k'::text)", [text])
    (first, second) = read_all(client, "t")
    assert first.text() == second.text() == text
    assert first.json() == {"id": 1, "path": "C:\\temp\\x", "note": "\\x41"}
    assert second.key == b"k"


def test_jsonb_publish_stores_the_json_text(client: postroom.Client) -> None:
    client.create_topic("t")
    with psycopg.connect(client.conninfo) as conn:
        conn.execute(
            "SELECT * FROM postroom.publish('t', jsonb_build_object('id', 1, 's', 'a\\b'))"
        )
        conn.execute(
            "SELECT * FROM postroom.publish('t', '{\"n\": 2}'::jsonb, 'k', '{\"h\": \"v\"}')"
        )
    (first, second) = read_all(client, "t")
    assert first.json() == {"id": 1, "s": "a\\b"}
    assert second.json() == {"n": 2}
    assert second.headers == {"h": "v"}


def test_text_and_jsonb_batches_keep_order_and_key_placement(client: postroom.Client) -> None:
    client.create_topic("t", partitions=4)
    with psycopg.connect(client.conninfo) as conn:
        rows = conn.execute(
            "SELECT * FROM postroom.publish_batch('t', ARRAY['a', 'b', 'c'], ARRAY['k1', 'k2'])"
        ).fetchall()
        conn.execute(
            "SELECT * FROM postroom.publish_batch('t', ARRAY['{\"x\": 1}'::jsonb, '[2]'::jsonb])"
        )
        conn.execute("SELECT * FROM postroom.publish('t', '\\x00ff'::bytea)")  # bytea as before
    assert [part for part, _ in rows[:2]] == [
        partition_for_key(b"k1", 4),
        partition_for_key(b"k2", 4),
    ]
    values = sorted(m.value for m in read_all(client, "t"))
    assert values == sorted([b"a", b"b", b"c", b'{"x": 1}', b"[2]", b"\x00\xff"])
