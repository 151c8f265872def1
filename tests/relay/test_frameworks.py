"""Outbox writes from SQLAlchemy (Connection, Session, AsyncSession on psycopg 3) and Django
(transaction.atomic() on its psycopg 3 backend), against real PostgreSQL: the event commits
and rolls back with the framework's transaction."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import postroom
from tests.conftest import run_python

sqlalchemy = pytest.importorskip("sqlalchemy")


def setup_tables(client: postroom.Client, dsn: str) -> None:
    client.create_topic("outbox", partitions=2)
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")


def state(client: postroom.Client, dsn: str) -> tuple[list[int], list[Any]]:
    """The committed orders and events."""
    with psycopg.connect(dsn) as conn:
        orders = [r[0] for r in conn.execute("SELECT id FROM orders ORDER BY id").fetchall()]
    with client.consumer("check", "outbox") as consumer:
        events = [m.json() for m in consumer.poll(timeout=0.5)]
    return orders, sorted(events, key=lambda e: e["id"])


def sync_engine(dsn: str) -> Any:
    return sqlalchemy.create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=sqlalchemy.NullPool
    )


def test_sqlalchemy_connection_and_session(client: postroom.Client, dsn: str) -> None:
    from sqlalchemy.orm import Session

    setup_tables(client, dsn)
    engine = sync_engine(dsn)
    insert = sqlalchemy.text("INSERT INTO orders (id) VALUES (:id)")
    with engine.begin() as connection:  # Connection: commits at the end of the block
        connection.execute(insert, {"id": 1})
        client.publish_event(connection, "Order", 1, "Created", {"id": 1})
    with Session(engine) as session:  # Session: rolled back
        session.execute(insert, {"id": 2})
        client.publish_event(session, "Order", 2, "Created", {"id": 2})
        session.rollback()
    with Session(engine) as session, session.begin():  # Session: committed
        client.publish_event(session, "Order", 3, "Created", {"id": 3})  # first: begins it
        session.execute(insert, {"id": 3})
    engine.dispose()
    assert state(client, dsn) == ([1, 3], [{"id": 1}, {"id": 3}])


def test_sqlalchemy_async_session(client: postroom.Client, dsn: str) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    setup_tables(client, dsn)

    async def main() -> None:
        engine = create_async_engine(
            "postgresql+psycopg://",
            async_creator=lambda: psycopg.AsyncConnection.connect(dsn),
            poolclass=sqlalchemy.NullPool,
        )
        insert = sqlalchemy.text("INSERT INTO orders (id) VALUES (:id)")
        async with await postroom.connect_async(dsn) as aclient:
            async with AsyncSession(engine) as session:
                await session.execute(insert, {"id": 1})
                await aclient.publish_event(session, "Order", 1, "Created", {"id": 1})
                await session.commit()
            async with AsyncSession(engine) as session:
                await session.execute(insert, {"id": 2})
                await aclient.publish_event(session, "Order", 2, "Created", {"id": 2})
                await session.rollback()
            async with engine.begin() as connection:  # AsyncConnection
                await connection.execute(insert, {"id": 3})
                await aclient.publish("outbox", {"id": 3}, key="3", conn=connection)
        await engine.dispose()

    asyncio.run(main())
    assert state(client, dsn) == ([1, 3], [{"id": 1}, {"id": 3}])


DJANGO = """
import sys
import django
from django.conf import settings
from psycopg.conninfo import conninfo_to_dict
import postroom

dsn = sys.argv[1]
params = conninfo_to_dict(dsn)
settings.configure(DATABASES={"default": {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": params["dbname"], "USER": params.get("user", "postgres"),
    "PASSWORD": params.get("password", ""), "HOST": params.get("host", ""),
    "PORT": params.get("port", ""),
}})
django.setup()
from django.db import connection, transaction

assert connection.vendor == "postgresql"
import psycopg
with postroom.connect(dsn) as client:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO orders (id) VALUES (1)")
        client.publish_event(connection, "Order", 1, "Created", {"id": 1})
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO orders (id) VALUES (2)")
            client.publish_event(connection, "Order", 2, "Created", {"id": 2})
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    # Outside atomic() (Django's autocommit): the event commits at once.
    client.publish_event(connection, "Order", 3, "Created", {"id": 3})
    print(type(connection.connection).__module__)
"""


def test_django_atomic(client: postroom.Client, dsn: str) -> None:
    pytest.importorskip("django")
    setup_tables(client, dsn)
    result = run_python(DJANGO, dsn)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("psycopg")  # Django's psycopg 3 backend
    orders, events = state(client, dsn)
    assert orders == [1]
    assert events == [{"id": 1}, {"id": 3}]
