# Generated from src/postroom/_db_async.py by tools/async_to_sync.py: do not edit.
# Change the async module and run `python tools/async_to_sync.py`.
"""The database handle shared by the engines: a connection pool, the schema, the named queries."""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq, sql
from psycopg_pool import ConnectionPool

from . import _sql
from ._acompat import to_thread
from ._conninfo import unavailable
from .embedded import resolve_url
from .errors import (
    BacklogFull,
    Fenced,
    InvalidArgument,
    InvalidType,
    OffsetOutOfRange,
    PermissionDenied,
    SchemaNotReady,
)

_QUERIES = _sql.all_queries()


class Database:
    """A pool of connections to one postroom schema, with its queries rendered for that schema."""

    def __init__(self, pool: ConnectionPool, conninfo: str, schema: str) -> None:
        self.pool = pool
        self.conninfo = conninfo
        self.schema = schema
        # Statements with placeholders other than {schema} (grants) are rendered per call.
        self._rendered = {
            name: _sql.render(text, schema)
            for name, text in _QUERIES.items()
            if "{role}" not in text
        }

    def q(self, name: str) -> sql.Composed:
        return self._rendered[name]

    def q_for_role(self, name: str, role: str) -> sql.Composed:
        """A statement with ``{role}`` rendered as a quoted identifier (never spliced text)."""
        return _sql.render(_QUERIES[name], self.schema, role=role)

    @contextmanager
    def connection(self, conn: object = None) -> Iterator[psycopg.Connection[Any]]:
        """A connection whose work commits when the block ends.

        With ``conn`` (the caller's connection, or a SQLAlchemy/Django wrapper of one) the work
        joins the caller's transaction instead: nothing commits here. In autocommit mode the
        block runs in a transaction of its own so a batch is still all or nothing.
        """
        with self.writing(conn) as (raw, _own):
            yield raw

    @contextmanager
    def writing(self, conn: object = None) -> Iterator[tuple[psycopg.Connection[Any], bool]]:
        """As ``connection``, with whether the block's work is a transaction of its own that
        commits when the block ends (a pooled connection, or the caller's in autocommit mode
        with no transaction open): True; or joins the caller's transaction: False."""
        if conn is None:
            with translate_errors(self.schema):
                with self.pool.connection() as pooled:
                    yield pooled, True
            return
        raw = caller_connection(conn)
        with translate_errors(self.schema):
            if raw.autocommit:
                own = raw.info.transaction_status == pq.TransactionStatus.IDLE
                with raw.transaction():
                    yield raw, own
            else:
                yield raw, False


def open_database(url: str | None, schema: str, min_size: int, max_size: int) -> Database:
    """A database handle on ``url`` (else ``POSTROOM_URL``, ``DATABASE_URL``, the embedded
    server), its pool open. Raises :class:`DatabaseUnavailable` at once, without the password,
    if the server cannot be reached or the URL does not parse."""
    conninfo = to_thread(resolve_url, url)
    try:
        # Fail now with the server's reason, not after the pool's 30 s of retries.
        probe = psycopg.Connection.connect(conninfo, connect_timeout=10)
    except psycopg.Error as exc:
        # from None: the driver's error quotes the connection string, password included.
        raise unavailable(conninfo, exc) from None
    probe.close()
    pool = ConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        open=False,
        name="postroom",
        # A connection cut while idle in the pool (server restart, proxy, failover) is
        # replaced before it is handed out, instead of failing the caller's next statement.
        check=check_pooled,
    )
    pool.open(wait=True)
    return Database(pool, conninfo, schema)


def check_pooled(conn: psycopg.Connection[Any]) -> None:
    """The pool's check of a connection before it is handed out. An idle connection receives
    nothing unless the server closed it (a FATAL at shutdown or a terminated backend, then
    EOF) or something cut it (EOF from a proxy): only a connection whose socket is readable
    gets psycopg's full check, an empty query that raises if it is broken, so the pool replaces
    it. The others are handed out without that round trip, which was 4-9% of a relay's time
    (bench/RESULTS.md). A peer gone without a word (no FIN) is found by neither check."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    if readable:
        ConnectionPool.check_connection(conn)


def caller_connection(conn: object) -> psycopg.Connection[Any]:
    """The psycopg connection of the caller's ``conn``: a psycopg connection; a SQLAlchemy
    ``Connection``, ``Session``, ``AsyncConnection`` or ``AsyncSession`` (on the psycopg
    driver); or Django's ``connection``. A session's transaction is begun if it was not yet, so
    the write joins it; Django's connection is opened if it was not yet."""
    # hasattr() first: SQLAlchemy's AsyncConnection raises on reading ``.connection``.
    if hasattr(conn, "get_bind") and callable(getattr(conn, "connection", None)):
        conn = conn.connection()  # type: ignore[attr-defined] # SA (Async)Session
    if hasattr(conn, "sync_connection") and hasattr(conn, "get_raw_connection"):
        conn = conn.get_raw_connection()  # SQLAlchemy AsyncConnection
    if hasattr(conn, "vendor") and hasattr(conn, "ensure_connection"):
        conn.ensure_connection()  # Django: opens its connection if not yet open
    raw: psycopg.Connection[Any] = unwrap_connection(conn, psycopg.Connection)
    return raw


def unwrap_connection(conn: object, expected: type[Any]) -> Any:
    """The psycopg connection inside ``conn``: psycopg itself, SQLAlchemy or Django wrappers."""
    # Looked up one at a time, first match wins: reading a wrapper's deprecated attribute
    # (SQLAlchemy's ``_ConnectionFairy.connection``) would warn.
    candidates: tuple[Callable[[object], object], ...] = (
        lambda c: c,
        lambda c: getattr(c, "driver_connection", None),  # SQLAlchemy pool proxy / raw conn
        lambda c: getattr(getattr(c, "connection", None), "driver_connection", None),  # SA
        lambda c: getattr(c, "connection", None),  # Django's DatabaseWrapper
    )
    for candidate in candidates:
        found = candidate(conn)
        if isinstance(found, expected):
            return found
    raise InvalidType(
        f"conn must be a {expected.__module__}.{expected.__name__} (or a SQLAlchemy/Django "
        f"connection wrapping one), got {type(conn).__name__}"
    )


class translate_errors:
    """Turn database errors that mean bad input or a missing schema into postroom errors.

    ``schema`` is the postroom schema in use: a missing relation or function in it means the
    schema is not installed (or older than this version), whatever its name.
    """

    def __init__(self, schema: str = "postroom") -> None:
        self._schema = schema

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedFunction) and (
            f"{self._schema}." in str(exc) or "schema_migrations" in str(exc)
        ):
            first_line = str(exc).strip().splitlines()[0]
            raise SchemaNotReady(
                f"the postroom schema {self._schema!r} is not installed or out of date "
                f"({first_line}): run `postroom init` or client.migrate()"
            ) from exc
        if isinstance(exc, pg_errors.InvalidSchemaName):
            raise SchemaNotReady(f"{exc}: run `postroom init` or client.migrate()") from exc
        if isinstance(exc, pg_errors.NumericValueOutOfRange):
            raise InvalidArgument(str(exc)) from exc
        if isinstance(exc, pg_errors.InsufficientPrivilege) and not isinstance(
            exc, PermissionDenied
        ):
            first_line = str(exc).strip().splitlines()[0]
            hint = exc.diag.message_hint  # postroom's own refusals say what to do instead
            raise PermissionDenied(
                f"{first_line}: {hint}"
                if hint
                else f"{first_line}: the database role of this connection lacks the right; grant "
                "it the capability it needs as the schema owner (client.grant(role, 'producer' | "
                "'consumer' | 'enqueuer' | 'worker' | 'admin'))"
            ) from exc
        # SQLSTATEs raised by postroom's own functions (migration 0004).
        sqlstate = getattr(exc, "sqlstate", None)
        if exc is None:
            return
        if sqlstate == "PRF01":
            raise Fenced(_first_line(exc)) from exc
        if sqlstate == "PRB01":
            raise BacklogFull(_first_line(exc)) from exc
        if sqlstate == "PRO01":
            raise OffsetOutOfRange(_first_line(exc)) from exc


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0]
