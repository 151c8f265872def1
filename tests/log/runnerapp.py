"""A module for `postroom run` in tests/test_cli_groups.py: records each message it handles in
the table ``handled`` (in the batch's transaction), fails on the value ``poison``."""

from __future__ import annotations

import psycopg

import postroom

client = postroom.connect()


@client.subscribe("orders", group="billing", transactional=True, max_attempts=2, retry_delay=0)
def handle(message: postroom.Message, conn: psycopg.Connection) -> None:
    if message.text() == "poison":
        raise ValueError("poison")
    conn.execute("INSERT INTO handled (value) VALUES (%s)", [message.text()])
