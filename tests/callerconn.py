"""Every postroom operation that takes the caller's connection, run on one connection (a psycopg
connection, or a SQLAlchemy or Django one wrapping it): tests/test_caller_connections.py runs it
in-process for psycopg and SQLAlchemy and in a fresh interpreter for Django (whose settings are
process-wide).

Each call of ``write_all`` writes, in the caller's transaction: 5 messages to topic ``t``
(publish, publish_batch of plain bytes, publish_batch of records, publish_event to ``t``,
publish of raw bytes), 6 jobs (enqueue, enqueue_batch plain and with a unique key,
enqueue_group with a callback, a job function's enqueue) and one inbox id."""

from __future__ import annotations

from typing import Any

import postroom

MESSAGES = 5
JOBS = 6


def prepare(client: postroom.Client) -> None:
    client.create_topic("t", partitions=2)

    @client.job("callerconn.job")
    def job(tag: str) -> None:
        del tag

    JOB_FUNCTIONS[id(client)] = job


JOB_FUNCTIONS: dict[int, Any] = {}


def write_all(client: postroom.Client, conn: Any, tag: str) -> None:
    """The writes of one transaction; ``tag`` keeps unique keys and inbox ids apart."""
    client.publish("t", {"tag": tag}, key=tag, conn=conn)
    client.publish_batch("t", [b"plain"], conn=conn)
    client.publish_batch(
        "t", [{"value": {"tag": tag}, "key": "k", "headers": {"h": "v"}}], conn=conn
    )
    client.publish_event(conn, "Order", 1, "Created", {"tag": tag}, topic="t")
    client.publish("t", b"raw", conn=conn)
    client.enqueue("kind", {"tag": tag}, conn=conn)
    client.enqueue_batch([{"kind": "kind", "args": {"n": 1}}], conn=conn)
    client.enqueue_batch([{"kind": "kind", "args": {}, "unique_key": f"u-{tag}"}], conn=conn)
    members, callback = client.enqueue_group(
        [{"kind": "kind", "args": {"m": 1}}],
        then={"kind": "kind", "args": {"then": True}},
        conn=conn,
    )
    assert callback is not None and len(members) == 1
    JOB_FUNCTIONS[id(client)].enqueue(tag=tag, conn=conn)
    assert client.inbox(conn).seen(f"id-{tag}") is False
    assert client.inbox(conn).seen(f"id-{tag}") is True


def counts(dsn: str) -> tuple[int, int, int]:
    """Messages in ``t``, jobs, inbox ids: what committed."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM postroom.messages m JOIN postroom.topics t"
            "         ON t.id = m.topic_id WHERE t.name = 't'),"
            "       (SELECT count(*) FROM postroom.jobs),"
            "       (SELECT count(*) FROM postroom.inbox)"
        ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]
