"""Connection strings in error messages: the target without its password, and connection
errors whose text never carries the password, even for a URL that does not parse.

libpq quotes the offending part of a malformed string in its error ("missing "=" after
"postgress://bob:secret@db/app""), so a parse error is never shown as is: it is classified and
described in postroom's own words. Other libpq errors are shown with any occurrence of the
password masked.
"""

from __future__ import annotations

import re

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .errors import DatabaseUnavailable

_SHOWN = ("host", "port", "dbname", "user")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_URL_HELP = (
    "use postgresql://user:password@host:port/dbname (or key=value pairs), with special "
    "characters in the password percent-encoded"
)


def redact(conninfo: str) -> str:
    """The connection target (host, port, dbname, user) without its password, for messages."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "<unparsable connection string>"
    shown = " ".join(f"{k}={params[k]}" for k in _SHOWN if params.get(k))
    return shown or "<default connection>"


def parse_problem(conninfo: str) -> str | None:
    """Why ``conninfo`` does not parse, in words that quote none of it; None if it parses."""
    try:
        conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        reason = str(exc)
    else:
        return None
    scheme = _SCHEME.match(conninfo)
    if scheme and scheme.group(1).lower() not in ("postgresql", "postgres"):
        return f"unknown URL scheme {scheme.group(1)!r}: {_URL_HELP}"
    if "unexpected spaces" in reason:
        return f"the connection URL contains a space: write it as %20 ({_URL_HELP})"
    if "percent-encoded" in reason:
        return f"the connection URL has an invalid %-escape: write a literal % as %25 ({_URL_HELP})"
    return f"the connection string does not parse: {_URL_HELP}"


def masked(text: str, conninfo: str) -> str:
    """``text`` with the password of ``conninfo`` (if any) replaced by ``***``."""
    try:
        password = conninfo_to_dict(conninfo).get("password")
    except psycopg.Error:
        return text
    if password:
        text = text.replace(str(password), "***")
    return text


def unavailable(conninfo: str, exc: BaseException) -> DatabaseUnavailable:
    """The error for a failed connection attempt to ``conninfo``: target and reason, no
    password. Raise it ``from None``: the chained driver error would quote the string."""
    problem = parse_problem(conninfo)
    if problem is not None:
        return DatabaseUnavailable(f"cannot connect to PostgreSQL: {problem}")
    lines = str(exc).strip().splitlines()
    reason = masked(lines[0], conninfo) if lines else type(exc).__name__
    return DatabaseUnavailable(f"cannot connect to PostgreSQL at {redact(conninfo)}: {reason}")
