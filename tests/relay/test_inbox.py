"""The inbox: ids recorded in the receiver's transaction, duplicates recognised, concurrent
receivers serialized on the id, pruning, least privilege."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import postroom
from postroom.errors import InvalidArgument, InvalidName


def test_seen_says_duplicate_only_after_a_commit(client: postroom.Client, dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        inbox = client.inbox(conn)
        assert inbox.seen("orders/0/1") is False  # new: recorded in this transaction
        assert inbox.seen("orders/0/1") is True  # same transaction: already recorded
        conn.rollback()  # the effects and the id go together
        assert inbox.seen("orders/0/1") is False
        conn.commit()
    with psycopg.connect(dsn) as conn:
        assert client.inbox(conn).seen("orders/0/1") is True
        assert client.inbox(conn, "billing").seen("orders/0/1") is False  # another inbox


def test_two_receivers_racing_on_one_id_see_it_new_once(client: postroom.Client, dsn: str) -> None:
    first_recorded = threading.Event()
    results: dict[str, bool] = {}

    def second() -> None:
        with psycopg.connect(dsn) as conn:
            first_recorded.wait(10)
            results["second"] = client.inbox(conn).seen("t/0/7")  # waits for the first
            conn.commit()

    thread = threading.Thread(target=second)
    thread.start()
    with psycopg.connect(dsn) as conn:
        results["first"] = client.inbox(conn).seen("t/0/7")
        first_recorded.set()
        thread.join(0.5)
        assert thread.is_alive(), "the second receiver did not wait for the first"
        conn.commit()
    thread.join(10)
    assert results == {"first": False, "second": True}


def test_async_inbox(dsn: str) -> None:
    async def main() -> list[bool]:
        async with await postroom.connect_async(dsn) as client:
            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                inbox = client.inbox(conn)
                return [await inbox.seen("a"), await inbox.seen("a")]

    assert asyncio.run(main()) == [False, True]


def test_prune_forgets_old_ids(client: postroom.Client, dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        for i in range(25):
            client.inbox(conn).seen(f"old/{i}")
        client.inbox(conn, "other").seen("old/x")
        conn.execute("UPDATE postroom.inbox SET seen_at = now() - interval '2 days'")
        client.inbox(conn).seen("fresh")
    assert client.prune_inbox(timedelta(days=1), name="default", batch_size=10) == 25
    assert client.prune_inbox(timedelta(days=1)) == 1
    with psycopg.connect(dsn) as conn:
        assert client.inbox(conn).seen("fresh") is True
        assert client.inbox(conn).seen("old/3") is False


def test_bad_input(client: postroom.Client, dsn: str) -> None:
    with pytest.raises(InvalidArgument, match="needs your connection"):
        client.inbox(None)
    with pytest.raises(InvalidName, match="invalid inbox name"):
        client.inbox(object(), "bad name")
    with psycopg.connect(dsn) as conn:
        for bad in ("", "x" * 1001, 7):
            with pytest.raises(InvalidArgument, match="invalid message id"):
                client.inbox(conn).seen(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="older_than"):
        client.prune_inbox(timedelta(days=-1))
    with pytest.raises(InvalidArgument, match="batch_size"):
        client.prune_inbox(timedelta(days=1), batch_size=0)


@pytest.fixture
def role(client: postroom.Client) -> Iterator[str]:
    name = f"postroom_inbox_{os.getpid()}"
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_a_consumer_role_keeps_an_inbox(client: postroom.Client, role: str) -> None:
    client.grant(role, "consumer")
    url = make_conninfo(client.conninfo, user=role)
    with postroom.connect(url) as consumer, psycopg.connect(url) as conn:
        assert consumer.inbox(conn).seen("x/0/0") is False
        conn.commit()
        assert consumer.prune_inbox(timedelta(0)) == 1
