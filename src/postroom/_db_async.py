"""The database handle shared by the engines: a connection pool, the schema, the named queries."""

from __future__ import annotations

import asyncio
import logging
import select
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from time import monotonic
from typing import Any

import psycopg
from psycopg import pq, sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from . import _sql
from ._acompat import asleep, ato_thread
from ._conninfo import unavailable
from ._dbshared import commit_lost as commit_lost
from ._dbshared import translate_errors as translate_errors
from ._dbshared import unwrap_connection as unwrap_connection
from ._listener_async import AsyncWakeups
from ._maintenance import ClientOptions
from ._reconnect import ReconnectAttempt
from .embedded import resolve_url
from .errors import (
    CommitUnknown,
)

_QUERIES = _sql.all_queries()

log = logging.getLogger("postroom")


DEFAULT_OPTIONS = ClientOptions()


class AsyncDatabase:
    """A pool of connections to one postroom schema, with its queries rendered for that schema."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        conninfo: str,
        schema: str,
        options: ClientOptions = DEFAULT_OPTIONS,
        wakeups: AsyncWakeups | None = None,
    ) -> None:
        self.pool = pool
        self.conninfo = conninfo
        self.schema = schema
        self.options = options
        """The client's options (``connect(retention_interval=..., pause_gc=...)``), for the
        engines' background units and fast paths."""
        self.topic_names: dict[int, str] = {}
        """Names of the topics looked up through this handle, by id: errors raised by SQL
        functions name a topic by its id, and ``translate_errors`` puts the name back."""
        # Statements with placeholders other than {schema} (grants) are rendered per call.
        self._rendered = {
            name: _sql.render(text, schema)
            for name, text in _QUERIES.items()
            if "{role}" not in text
        }

        self.wakeups = (
            AsyncWakeups(conninfo, schema, self._rendered) if wakeups is None else wakeups
        )
        """The client's one listener (``_listener_async``), shared by handles on its pools."""

    def q(self, name: str) -> sql.Composed:
        return self._rendered[name]

    def q_for_role(self, name: str, role: str) -> sql.Composed:
        """A statement with ``{role}`` rendered as a quoted identifier (never spliced text)."""
        return _sql.render(_QUERIES[name], self.schema, role=role)

    @asynccontextmanager
    async def connection(
        self, conn: object = None, *, committing: str | Callable[[], str] = "a transaction"
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection whose work commits when the block ends.

        If the connection is lost while that COMMIT is in flight, raises
        :class:`CommitUnknown` naming ``committing`` (what the block wrote, or a function that
        says it once the block ran): the server may have committed it or not.

        With ``conn`` (the caller's connection, or a SQLAlchemy/Django wrapper of one) the work
        joins the caller's transaction instead: nothing commits here. In autocommit mode the
        block runs in a transaction of its own so a batch is still all or nothing.
        """
        async with self.writing(conn, committing=committing) as (raw, _own):
            yield raw

    @asynccontextmanager
    async def writing(
        self, conn: object = None, *, committing: str | Callable[[], str] = "a transaction"
    ) -> AsyncIterator[tuple[psycopg.AsyncConnection[Any], bool]]:
        """As ``connection``, with whether the block's work is a transaction of its own that
        commits when the block ends (a pooled connection, or the caller's in autocommit mode
        with no transaction open): True; or joins the caller's transaction: False."""
        if conn is None:
            with translate_errors(self.schema, self.topic_names):
                pooled = await self.pool.getconn()
                try:
                    try:
                        yield pooled, True
                    except BaseException:
                        await _rollback_quietly(pooled)
                        raise
                    await commit_or_unknown(pooled, committing)
                finally:
                    await return_connection(self.pool, pooled)
            return
        raw = await caller_connection_async(conn)
        with translate_errors(self.schema, self.topic_names), server_side_binding(raw):
            if raw.autocommit:
                own = raw.info.transaction_status == pq.TransactionStatus.IDLE
                async with raw.transaction():
                    yield raw, own
            else:
                yield raw, False


async def return_connection(pool: AsyncConnectionPool, conn: psycopg.AsyncConnection[Any]) -> None:
    """Give ``conn`` back to ``pool``. In asyncio, to the end even if the task is cancelled
    meanwhile (the cancellation is raised after): psycopg_pool's return may wait (its lock,
    the hand-over to a client waiting for a connection, a reset) and is not safe to interrupt.
    Cancelled there, it lost the connection and the client it was handing it to, which then
    waited out the pool's 30 s timeout: a relay stopped as its poll gave a connection back to
    the commit waiting for it took 30 s to stop (tests/test_pool.py)."""
    if True:  # ASYNC
        await _to_the_end(pool.putconn(conn))
    else:
        pool.putconn(conn)


if True:  # ASYNC

    async def _to_the_end(coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` to its end in this task, whatever cancels the task meanwhile; then
        raise the cancellation, if any. Driven by hand (``send``), as a task drives it, so the
        usual case, a return that never waits, costs no task and no loop round trip."""
        cancelled: asyncio.CancelledError | None = None
        while True:
            try:
                waited = coro.send(None)
            except StopIteration:
                break
            except BaseException as exc:
                if cancelled is not None:
                    raise cancelled from exc  # the task's cancellation comes first
                raise
            # coro waits on ``waited``: an asyncio future, or None for a bare yield.
            while True:
                try:
                    if waited is None:
                        await asyncio.sleep(0)
                    elif not waited.done():
                        await asyncio.wait({waited})  # a cancellation of ours leaves it be
                    break
                except asyncio.CancelledError as exc:
                    cancelled = exc
                    if waited is None:
                        break
        if cancelled is not None:
            raise cancelled


async def commit_or_unknown(
    conn: psycopg.AsyncConnection[Any], committing: str | Callable[[], str]
) -> None:
    """Commit ``conn``'s transaction; raise :class:`CommitUnknown` naming ``committing`` if
    the connection was lost while the COMMIT was in flight (see ``commit_lost``). A
    connection already lost before is a plain error: no COMMIT was sent, nothing committed."""
    if conn.closed or conn.broken:
        await conn.commit()  # raises the driver's error: the transaction is gone
        return
    try:
        await conn.commit()
    except psycopg.Error as exc:
        if commit_lost(conn, exc):
            if callable(committing):
                committing = committing()
            raise CommitUnknown(
                f"the connection was lost while committing {committing}: the server may have "
                "committed it or not (retry it idempotently: see CommitUnknown)",
                committing=committing,
            ) from exc
        raise


async def _rollback_quietly(conn: psycopg.AsyncConnection[Any]) -> None:
    """Roll back after the block raised; a connection too broken for that is left to the
    pool, which replaces it (the block's own error is the one to report)."""
    if conn.closed:
        return
    try:
        await conn.rollback()
    except psycopg.Error as exc:
        log.debug("rollback after an error failed: %s", exc)


class AsyncReconnectingPool(AsyncConnectionPool):
    """psycopg_pool's pool with postroom's reconnect policy (``_reconnect``): after the server
    went away it tries again within half a second at most, instead of psycopg_pool's delays
    of 1, 2, 4, 8, 16 s ... (its ``AttemptWithBackoff`` has no cap but ``reconnect_timeout``).

    Both places where the pool waits between attempts take a ``ReconnectAttempt``: adding a
    connection after a failed connect, and getting one after a pooled connection failed its
    ``check``. These are psycopg_pool internals (3.2 to 3.3); tests/test_reconnect.py fails
    if a new version ignores them."""

    async def _add_connection(self, attempt: Any, growing: bool = False) -> None:
        if attempt is None:
            attempt = ReconnectAttempt(timeout=self.reconnect_timeout)
        await super()._add_connection(attempt, growing=growing)

    async def _getconn_with_check_loop(self, deadline: float) -> Any:
        # psycopg_pool's loop, with a ReconnectAttempt: the first connection that fails its
        # check is replaced at once, the next ones after reconnect_delay.
        attempt: ReconnectAttempt | None = None
        while True:
            conn = await self._getconn_unchecked(deadline - monotonic())
            try:
                await self._check_connection(conn)
            except Exception:  # noqa: BLE001 - a failed check: the pool replaces the connection
                await self._putconn(conn, from_getconn=True)
            except BaseException:
                await self._putconn(conn, from_getconn=True)
                raise
            else:
                return conn
            now = monotonic()
            if attempt is None:
                attempt = ReconnectAttempt(timeout=deadline - now)
            else:
                attempt.update_delay(now)
            if attempt.time_to_give_up(now):
                raise PoolTimeout()
            await asleep(attempt.delay)


async def open_database(
    url: str | None,
    schema: str,
    min_size: int,
    max_size: int,
    options: ClientOptions = DEFAULT_OPTIONS,
) -> AsyncDatabase:
    """A database handle on ``url`` (else ``POSTROOM_URL``, ``DATABASE_URL``, the embedded
    server), its pool open. Raises :class:`DatabaseUnavailable` at once, without the password,
    if the server cannot be reached or the URL does not parse."""
    conninfo = await ato_thread(resolve_url, url)
    try:
        # Fail now with the server's reason, not after the pool's 30 s of retries.
        probe = await psycopg.AsyncConnection.connect(conninfo, connect_timeout=10)
    except psycopg.Error as exc:
        # from None: the driver's error quotes the connection string, password included.
        raise unavailable(conninfo, exc) from None
    await probe.close()
    pool = AsyncReconnectingPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        open=False,
        name="postroom",
        # A connection cut while idle in the pool (server restart, proxy, failover) is
        # replaced before it is handed out, instead of failing the caller's next statement.
        check=check_pooled,
    )
    await pool.open(wait=True)
    return AsyncDatabase(pool, conninfo, schema, options)


async def check_pooled(conn: psycopg.AsyncConnection[Any]) -> None:
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
        await AsyncConnectionPool.check_connection(conn)


async def caller_connection_async(conn: object) -> psycopg.AsyncConnection[Any]:
    """The psycopg connection of the caller's ``conn``: a psycopg connection; a SQLAlchemy
    ``Connection``, ``Session``, ``AsyncConnection`` or ``AsyncSession`` (on the psycopg
    driver); or Django's ``connection``. A session's transaction is begun if it was not yet, so
    the write joins it; Django's connection is opened if it was not yet."""
    # hasattr() first: SQLAlchemy's AsyncConnection raises on reading ``.connection``.
    if hasattr(conn, "get_bind") and callable(getattr(conn, "connection", None)):
        conn = await conn.connection()  # type: ignore[attr-defined] # SA (Async)Session
    if hasattr(conn, "sync_connection") and hasattr(conn, "get_raw_connection"):
        conn = await conn.get_raw_connection()  # SQLAlchemy AsyncConnection
    if hasattr(conn, "vendor") and hasattr(conn, "ensure_connection"):
        conn.ensure_connection()  # Django: opens its connection if not yet open
    raw: psycopg.AsyncConnection[Any] = unwrap_connection(conn, psycopg.AsyncConnection)
    return raw


@contextmanager
def server_side_binding(raw: psycopg.AsyncConnection[Any]) -> Iterator[None]:
    """The caller's connection with psycopg's own cursors while postroom uses it. A connection
    made with client-side binding cursors (``cursor_factory=ClientCursor``: Django's psycopg
    backend does so unless ``server_side_binding`` is set) cannot run postroom's statements,
    which send binary parameters (``%b``) and read binary results; its factory is put back when
    the block ends, so the caller's own cursors are as it made them. The caller must not use
    the connection from another thread or task meanwhile (psycopg forbids that anyway)."""
    factory = raw.cursor_factory
    if not issubclass(factory, psycopg.AsyncClientCursor):
        yield
        return
    raw.cursor_factory = psycopg.AsyncCursor
    try:
        yield
    finally:
        raw.cursor_factory = factory
