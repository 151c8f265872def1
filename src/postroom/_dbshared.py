"""What both database handles (``_db_async.py`` and its twin) share, with no I/O of their own:
finding the psycopg connection in a caller's wrapper, the error boundary that turns database
errors into :mod:`postroom.errors` types at the API edge (``translate_errors``), and whether a
COMMIT's outcome is unknown (``commit_lost``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from .errors import (
    BacklogFull,
    Fenced,
    InstanceFenced,
    InvalidArgument,
    InvalidType,
    OffsetOutOfRange,
    PermissionDenied,
    SchemaNotReady,
)


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


def commit_lost(conn: psycopg.BaseConnection[Any], exc: BaseException) -> bool:
    """Whether ``exc``, raised by a COMMIT on ``conn``, leaves its outcome unknown: the
    connection was lost (no answer, or the server ended the session) rather than the server
    answering that it rolled back (a serialization failure, a deferred constraint)."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    sqlstate = exc.sqlstate
    return (
        conn.broken
        or conn.closed
        or sqlstate is None
        or sqlstate.startswith("08")  # connection exception
        or sqlstate in ("57P01", "57P02", "57P03")  # the server shut the session down
    )


class translate_errors:
    """Turn database errors that mean bad input or a missing schema into postroom errors.

    ``schema`` is the postroom schema in use: a missing relation or function in it means the
    schema is not installed (or older than this version), whatever its name.
    """

    def __init__(self, schema: str = "postroom", topic_names: dict[int, str] | None = None) -> None:
        self._schema = schema
        self._topic_names = topic_names or {}

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedFunction) and (
            f"{self._schema}." in str(exc) or "schema_migrations" in str(exc)
        ):
            why = (
                f"the postroom schema {self._schema!r} is not installed or out of date "
                f"({_first_line(exc)}): run `postroom init`"
            )
            raise SchemaNotReady(f"{why} or client.migrate()", cli=why) from exc
        if isinstance(exc, pg_errors.InvalidSchemaName):
            why = (
                f"{_first_line(exc)}: the postroom schema {self._schema!r} is not installed; "
                "run `postroom init`"
            )
            raise SchemaNotReady(f"{why} or client.migrate()", cli=why) from exc
        # A NULL argument refused by a postroom function names it (migration 0026).
        if isinstance(exc, pg_errors.NumericValueOutOfRange | pg_errors.NullValueNotAllowed):
            raise InvalidArgument(str(exc)) from exc
        if isinstance(exc, pg_errors.InsufficientPrivilege) and not isinstance(
            exc, PermissionDenied
        ):
            first_line = _first_line(exc)
            hint = exc.diag.message_hint  # postroom's own refusals say what to do instead
            if hint:
                raise PermissionDenied(f"{first_line}: {hint}") from exc
            lacks = f"{first_line}: the database role of this connection lacks the right; grant"
            raise PermissionDenied(
                f"{lacks} it the capability it needs as the schema owner (client.grant(role, "
                "'producer' | 'consumer' | 'enqueuer' | 'worker' | 'admin'))",
                cli=f"{lacks} it the capability it needs, connected as the schema owner: "
                "`postroom grant ROLE producer|consumer|enqueuer|worker|admin`",
            ) from exc
        # SQLSTATEs raised by postroom's own functions (migration 0004).
        sqlstate = getattr(exc, "sqlstate", None)
        if exc is None:
            return
        if sqlstate == "PRF01":
            raise Fenced(self._named(exc)) from exc
        if sqlstate == "PRF02":
            raise InstanceFenced(self._named(exc)) from exc
        if sqlstate == "PRB01":
            raise BacklogFull(self._named(exc)) from exc
        if sqlstate == "PRO01":
            raise OffsetOutOfRange(self._named(exc)) from exc
        if isinstance(exc, pg_errors.NotNullViolation) and exc.diag.schema_name == self._schema:
            # A postroom function given a NULL (a caller's own tables, in another schema, keep
            # their errors; CHECK violations are named by the engines' own translations).
            column = exc.diag.column_name or "a value"
            raise InvalidArgument(f"invalid {column}: {_first_line(exc)}") from exc

    def _named(self, exc: BaseException) -> str:
        """The error's first line, with "topic id N" as "topic 'name'" where the name is known
        (the SQL functions take topic ids; people know topics by name)."""

        def name(match: re.Match[str]) -> str:
            known = self._topic_names.get(int(match.group(1)))
            return match.group(0) if known is None else f"topic {known!r}"

        return _TOPIC_ID.sub(name, _first_line(exc))


_TOPIC_ID = re.compile(r"topic id (\d+)")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0]
