"""The client's pool hands out live connections: one the server closed while it sat idle in the
pool is found (its socket turned readable) and replaced, without a round trip for the others."""

from __future__ import annotations

import psycopg

import postroom


def _terminate_others(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "  # waits for each
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        ).fetchone()
        assert row is not None
        return int(row[0])


def test_connections_the_server_closed_while_idle_are_replaced(any_client: postroom.Client) -> None:
    any_client.create_topic("t")
    any_client.publish("t", "before")
    assert _terminate_others(any_client.conninfo) >= 1
    for i in range(5):  # every pooled connection was closed: each is replaced, none fails
        any_client.publish("t", f"after {i}")
    with any_client.consumer(None, "t") as consumer:
        assert [m.text() for m in consumer.poll(timeout=5)] == ["before"] + [
            f"after {i}" for i in range(5)
        ]
