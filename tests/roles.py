"""Login roles for the least-privilege tests: created per test, dropped with what they own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql


@contextmanager
def login_role(conninfo: str, prefix: str) -> Iterator[str]:
    """A LOGIN role named ``<prefix>_<pid>`` (roles are cluster-wide, so the name is unique per
    test process), dropped after the block with everything it owns."""
    name = sql.Identifier(f"{prefix}_{os.getpid()}")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(name))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(name))
    try:
        yield f"{prefix}_{os.getpid()}"
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(name))
            conn.execute(sql.SQL("DROP ROLE {}").format(name))
