"""Every operation that takes ``conn`` works on every connection the docs name: psycopg (its
default and its client-side-binding cursors), SQLAlchemy (Connection, Session, AsyncConnection,
AsyncSession on psycopg 3) and Django's own connection (its psycopg 3 backend binds parameters
client-side). Each writes in the caller's transaction: committed with it, or rolled back with it.
The operations are listed in tests/callerconn.py."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import postroom
from tests import callerconn
from tests.blocking import Blocking, EventLoopThread
from tests.conftest import run_python

sqlalchemy = pytest.importorskip("sqlalchemy")

COMMITTED = (callerconn.MESSAGES, callerconn.JOBS, 1)


def test_every_conn_operation_on_a_client_side_binding_psycopg_connection(
    any_client: postroom.Client, any_connect: Any, dsn: str, client_flavour: str
) -> None:
    callerconn.prepare(any_client)
    factory = psycopg.ClientCursor if client_flavour == "sync" else psycopg.AsyncClientCursor
    with any_connect(cursor_factory=factory) as conn:
        with conn.transaction():
            callerconn.write_all(any_client, conn, "a")
        try:
            with conn.transaction():
                callerconn.write_all(any_client, conn, "b")
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
    assert callerconn.counts(dsn) == COMMITTED


def test_every_conn_operation_on_sqlalchemy_connection_and_session(
    client: postroom.Client, dsn: str
) -> None:
    from sqlalchemy.orm import Session

    callerconn.prepare(client)
    engine = sqlalchemy.create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=sqlalchemy.NullPool
    )
    with engine.begin() as connection:  # committed
        callerconn.write_all(client, connection, "a")
    with Session(engine) as session:  # rolled back
        callerconn.write_all(client, session, "b")
        session.rollback()
    with Session(engine) as session, session.begin():  # committed
        callerconn.write_all(client, session, "c")
    engine.dispose()
    assert callerconn.counts(dsn) == (2 * COMMITTED[0], 2 * COMMITTED[1], 2)


def test_every_conn_operation_on_sqlalchemy_async_connection_and_session(
    dsn: str, client_loop: EventLoopThread | None
) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    loop = client_loop or EventLoopThread()
    try:
        aclient = loop.run(postroom.connect_async(dsn))
        client: Any = Blocking(aclient, loop)
        callerconn.prepare(client)

        async def make_engine() -> Any:
            return create_async_engine(
                "postgresql+psycopg://",
                async_creator=lambda: psycopg.AsyncConnection.connect(dsn),
                poolclass=sqlalchemy.NullPool,
            )

        engine = loop.run(make_engine())
        with Blocking(AsyncSession(engine), loop) as session:  # committed
            callerconn.write_all(client, session, "a")
            session.commit()
        with Blocking(AsyncSession(engine), loop) as session:  # rolled back
            callerconn.write_all(client, session, "b")
            session.rollback()
        with Blocking(engine, loop).begin() as connection:  # AsyncConnection, committed
            callerconn.write_all(client, connection, "c")
        loop.run(engine.dispose())
        loop.run(aclient.close())
    finally:
        if client_loop is None:
            loop.close()
    assert callerconn.counts(dsn) == (2 * COMMITTED[0], 2 * COMMITTED[1], 2)


DJANGO = """
import sys
import django
from django.conf import settings
from psycopg.conninfo import conninfo_to_dict
import postroom
from tests import callerconn

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

with postroom.connect(dsn) as client:
    callerconn.prepare(client)
    with transaction.atomic():
        callerconn.write_all(client, connection, "a")
    try:
        with transaction.atomic():
            callerconn.write_all(client, connection, "b")
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    # Outside atomic() (Django's autocommit): each write commits at once.
    callerconn.write_all(client, connection, "c")
"""


def test_every_conn_operation_on_djangos_connection_in_atomic(dsn: str) -> None:
    pytest.importorskip("django")
    result = run_python(DJANGO, dsn)
    assert result.returncode == 0, result.stderr
    assert callerconn.counts(dsn) == (2 * COMMITTED[0], 2 * COMMITTED[1], 2)
