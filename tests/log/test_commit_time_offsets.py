"""Publishes in the caller's transaction take their offsets at its commit (issue 22, item 1;
migration 0017): writers never deadlock, whatever the number and order of their publishes,
and offsets stay gapless, in commit order, and in call order within a transaction."""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import postroom
from postroom._acompat import Event
from postroom._retention import RetentionRunner
from postroom.errors import BacklogFull

from ..roles import login_role as make_login_role
from ..signals import wait_for

WRITERS = 4
ROUNDS = 12
PARTITIONS = 4


def rows(dsn: str, statement: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(statement.encode(), params or []).fetchall()


def log_of(dsn: str) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """Every stored message: (topic, partition) -> [(offset, value)] in offset order."""
    found: dict[tuple[str, int], list[tuple[int, bytes]]] = defaultdict(list)
    for topic, partition, offset, value in rows(
        dsn,
        'SELECT t.name, m.partition, m."offset", m.value FROM postroom.messages m'
        " JOIN postroom.topics t ON t.id = m.topic_id ORDER BY 1, 2, 3",
    ):
        found[(topic, partition)].append((offset, bytes(value)))
    return found


def staged_count(dsn: str) -> int:
    return int(rows(dsn, "SELECT count(*) FROM postroom.staged_messages")[0][0])


def install_commit_witness(dsn: str) -> None:
    """A table whose row for a transaction gets a number from a sequence AT COMMIT, after
    postroom's own deferred trigger (queued at the transaction's first publish, so fired
    first) has locked the counter rows: of two transactions writing one partition, the one
    that takes its offsets first commits first and gets the smaller number."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE witness (tx integer PRIMARY KEY, seq bigint);"
            " CREATE SEQUENCE commit_seq;"
            " CREATE FUNCTION note_commit() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN UPDATE witness SET seq = nextval('commit_seq') WHERE tx = NEW.tx;"
            " RETURN NULL; END $$;"
            " CREATE CONSTRAINT TRIGGER witness_commit AFTER INSERT ON witness"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION note_commit()"
        )


class Writers:
    """WRITERS threads, each running ROUNDS transactions of several publish, publish_batch,
    publish_event and SQL publish() calls to partitions in random order, a quarter rolled back
    on purpose. Every writer holds its first partition (a different one each) before any goes
    on, so on a write path that locks a counter row from publish to commit they deadlock."""

    def __init__(
        self,
        client: postroom.Client,
        connect: Callable[..., psycopg.Connection[Any]],
        kinds: tuple[str, ...] = ("publish", "batch", "event", "sql"),
    ) -> None:
        self.client = client
        self.connect = connect
        self.kinds = kinds
        # A key of "orders" for each partition, for the SQL publish() (no partition argument).
        keys = rows(
            client.conninfo,
            "SELECT DISTINCT ON (p) p, k FROM (SELECT postroom.partition_for_key(k::bytea, %s)"
            " AS p, k FROM (SELECT 'key-' || g AS k FROM generate_series(1, 200) g) a) b"
            " ORDER BY p, k",
            [PARTITIONS],
        )
        self.key_for = dict(keys)
        assert len(self.key_for) == PARTITIONS
        self.barrier = threading.Barrier(WRITERS, timeout=60)
        self.errors: list[BaseException] = []
        self.committed: dict[int, list[tuple[str, int]]] = {}  # tx -> [(topic, index)]
        self.rolled_back: set[int] = set()
        self.lock = threading.Lock()

    def run(self) -> None:
        threads = [threading.Thread(target=self.writer, args=(w,)) for w in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)

    def writer(self, w: int) -> None:
        rng = random.Random(w)
        try:
            with self.connect() as conn:
                for r in range(ROUNDS):
                    self.transaction(conn, rng, r * WRITERS + w, w)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            self.errors.append(exc)
            self.barrier.abort()

    def transaction(
        self, conn: psycopg.Connection[Any], rng: random.Random, tx: int, w: int
    ) -> None:
        client = self.client
        written = [("orders", 0)]
        if "publish" in self.kinds:
            client.publish("orders", {"tx": tx, "i": 0}, partition=w % PARTITIONS, conn=conn)
        else:
            self.sql_publish(conn, {"tx": tx, "i": 0}, w % PARTITIONS)
        self.barrier.wait()
        for _ in range(rng.randint(2, 5)):
            index = len(written)
            value = {"tx": tx, "i": index}
            kind = rng.choice(self.kinds)
            if kind == "publish":
                partition = rng.randrange(PARTITIONS)
                client.publish("orders", value, partition=partition, conn=conn)
                written.append(("orders", index))
            elif kind == "batch":
                partition = rng.randrange(PARTITIONS)
                items = [{"tx": tx, "i": index + k} for k in range(2)]
                client.publish_batch(
                    "orders", [{"value": v, "partition": partition} for v in items], conn=conn
                )
                written += [("orders", index), ("orders", index + 1)]
            elif kind == "event":
                aggregate = rng.randrange(1000)
                client.publish_event(conn, "order", aggregate, "Created", value, topic="outbox")
                written.append(("outbox", index))
            else:
                self.sql_publish(conn, value, rng.randrange(PARTITIONS))
                written.append(("orders", index))
        conn.execute("INSERT INTO witness (tx) VALUES (%s)", [tx])
        if rng.random() < 0.25:
            conn.rollback()
            with self.lock:
                self.rolled_back.add(tx)
        else:
            conn.commit()
            with self.lock:
                self.committed[tx] = written

    def sql_publish(self, conn: psycopg.Connection[Any], value: Any, partition: int) -> None:
        conn.execute(
            "SELECT * FROM postroom.publish('orders', %s::jsonb, %s)",
            [json.dumps(value), self.key_for[partition]],
        )


def check_log(dsn: str, committed: dict[int, list[tuple[str, int]]]) -> None:
    """Every partition gapless from 0; its messages in commit order (the witness's numbers)
    and, within a transaction, in call order; each committed message once, nothing else."""
    seq = dict(rows(dsn, "SELECT tx, seq FROM witness"))
    assert set(seq) == set(committed)
    found: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for (topic, _partition), messages in log_of(dsn).items():
        assert [offset for offset, _ in messages] == list(range(len(messages)))
        order = []
        for _offset, raw in messages:
            body = json.loads(raw)
            found[body["tx"]].append((topic, body["i"]))
            order.append((seq[body["tx"]], body["i"]))
        assert order == sorted(order)
    assert set(found) == set(committed)  # rolled-back transactions left nothing
    for tx, written in committed.items():
        assert sorted(found[tx]) == sorted(written)  # each message exactly once


def run_writers(
    client: postroom.Client, connect: Callable[..., psycopg.Connection[Any]], **options: Any
) -> Writers:
    client.create_topic("orders", partitions=PARTITIONS)
    client.create_topic("outbox", partitions=PARTITIONS)
    install_commit_witness(client.conninfo)
    writers = Writers(client, connect, **options)
    writers.run()
    return writers


def test_concurrent_transactions_publishing_in_any_order_never_deadlock(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    writers = run_writers(any_client, any_connect)
    real = [e for e in writers.errors if not isinstance(e, threading.BrokenBarrierError)]
    assert not real, f"writers failed: {real!r}"
    assert not writers.errors
    assert len(writers.committed) + len(writers.rolled_back) == WRITERS * ROUNDS
    assert writers.committed and writers.rolled_back
    check_log(any_client.conninfo, writers.committed)
    assert staged_count(any_client.conninfo) == 0


def test_concurrent_transactions_publishing_through_sql_never_deadlock(
    client: postroom.Client,
) -> None:
    """The same with the SQL publish() function alone, as a service in another language
    would write."""
    writers = run_writers(client, lambda: psycopg.connect(client.conninfo), kinds=("sql",))
    assert not writers.errors, f"writers failed: {writers.errors!r}"
    assert writers.committed and writers.rolled_back
    check_log(client.conninfo, writers.committed)
    assert staged_count(client.conninfo) == 0


def test_publish_in_a_transaction_returns_its_partition_and_no_offset(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    any_client.create_topic("t", partitions=3)
    any_client.create_topic("outbox", partitions=3)
    keyed = postroom.Published(
        rows(any_client.conninfo, "SELECT postroom.partition_for_key('k', 3)")[0][0], None
    )
    any_client.create_topic("u")
    with any_connect() as conn:
        assert any_client.publish("t", "a", partition=2, conn=conn) == (2, None)
        assert any_client.publish("t", "b", key="k", conn=conn) == keyed
        batch = any_client.publish_batch("t", [b"c", b"d"], conn=conn)
        assert len({p.partition for p in batch}) == 1 and [p.offset for p in batch] == [None] * 2
        batch = any_client.publish_batch("t", ["e", {"value": "f", "partition": 1}], conn=conn)
        assert [p.offset for p in batch] == [None, None] and batch[1].partition == 1
        event = any_client.publish_event(conn, "order", 7, "Created", {}, topic="outbox")
        assert event.offset is None and 0 <= event.partition < 3
        assert any_client.publish("u", "a", conn=conn) == (0, None)
        conn.commit()
    assert sum(len(messages) for messages in log_of(any_client.conninfo).values()) == 8
    # Without conn postroom commits itself, and so the offset is known.
    assert any_client.publish("u", "g") == (0, 1)
    assert any_client.publish_event(None, "order", 7, "Created", {}, topic="outbox") == (
        event.partition,
        1,
    )
    # So it is with a caller's autocommit connection outside a transaction, but not inside one.
    with any_connect(autocommit=True) as conn:
        assert any_client.publish("u", "h", conn=conn) == (0, 2)
        with conn.transaction():
            assert any_client.publish("u", "i", conn=conn) == (0, None)
    assert log_of(any_client.conninfo)[("u", 0)] == [(0, b"a"), (1, b"g"), (2, b"h"), (3, b"i")]


def test_a_rollback_leaves_nothing_staged_and_a_savepoint_rollback_only_its_part(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    any_client.create_topic("t")
    dsn = any_client.conninfo
    with any_connect() as conn:
        any_client.publish_batch("t", ["x", "y"], conn=conn)
        conn.rollback()
        assert staged_count(dsn) == 0
        # The transaction's first publish is rolled back to a savepoint (with the commit-time
        # write it queued); a later one must still be written at commit.
        with conn.transaction():
            with pytest.raises(RuntimeError), conn.transaction():
                any_client.publish("t", "undone", conn=conn)
                raise RuntimeError
            any_client.publish("t", "kept", conn=conn)
            with pytest.raises(RuntimeError), conn.transaction():
                any_client.publish("t", "undone too", conn=conn)
                raise RuntimeError
        assert staged_count(dsn) == 0
    assert log_of(dsn)[("t", 0)] == [(0, b"kept")]
    assert any_client.publish("t", "next") == (0, 1)  # no gap


def test_set_constraints_immediate_writes_at_once_and_later_publishes_stage_again(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    any_client.create_topic("t")

    def own_view(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
        return conn.execute('SELECT "offset", value FROM postroom.messages ORDER BY 1').fetchall()

    with any_connect() as conn:
        any_client.publish("t", "a", conn=conn)
        assert own_view(conn) == []
        conn.execute("SET CONSTRAINTS ALL IMMEDIATE")  # fires the pending write now
        assert own_view(conn) == [(0, b"a")]
        any_client.publish("t", "b", conn=conn)  # immediate: written by its own statement
        assert own_view(conn) == [(0, b"a"), (1, b"b")]
        conn.execute("SET CONSTRAINTS ALL DEFERRED")
        any_client.publish_batch("t", ["c", "d"], conn=conn)
        assert len(own_view(conn)) == 2  # staged again, written at commit
        conn.commit()
    assert log_of(any_client.conninfo)[("t", 0)] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert staged_count(any_client.conninfo) == 0


def test_a_transaction_mixing_publish_and_publish_batch_keeps_call_order(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    any_client.create_topic("t", partitions=2)
    any_client.publish("t", "before", partition=1)
    with any_connect() as conn:
        any_client.publish("t", "a", partition=1, conn=conn)
        any_client.publish_batch("t", [{"value": v, "partition": 1} for v in "bc"], conn=conn)
        any_client.publish("t", "x", partition=0, conn=conn)
        any_client.publish("t", "d", partition=1, conn=conn)
        conn.execute("SELECT * FROM postroom.publish_batch('t', ARRAY['e', 'f'], ARRAY['k', 'k'])")
        any_client.publish("t", "g", partition=1, conn=conn)
        conn.commit()
    log = log_of(any_client.conninfo)
    key_partition = rows(any_client.conninfo, "SELECT postroom.partition_for_key('k', 2)")[0][0]
    expected = {0: [b"x"], 1: [b"before", b"a", b"b", b"c", b"d"]}
    expected[key_partition] += [b"e", b"f"]
    expected[1].append(b"g")
    assert {p: [v for _, v in log[("t", p)]] for p in (0, 1)} == expected
    for p in (0, 1):
        assert [o for o, _ in log[("t", p)]] == list(range(len(expected[p])))


def test_backlog_full_is_raised_at_publish_and_enforced_at_commit(
    any_client: postroom.Client, any_connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    any_client.create_topic("t", max_lag=2)
    any_client.publish("t", 0)
    any_client.reset_group("slow", "t", to="earliest")  # 1 behind: one more may pass
    with any_connect() as first, any_connect() as second:
        # Both pass the check at publish time (nothing committed yet)...
        any_client.publish("t", "first", conn=first)
        any_client.publish("t", "second", conn=second)
        first.commit()
        # ... the commit checks again, under the counter row lock: now 2 behind.
        with pytest.raises(psycopg.Error, match="backlog full on topic 't'") as caught:
            second.commit()
        assert caught.value.sqlstate == "PRB01"
        # A publish that the backlog refuses now is refused at once, as BacklogFull.
        with pytest.raises(BacklogFull, match="group 'slow' is 2 messages behind"):
            any_client.publish("t", "refused", conn=second)
        second.rollback()
    assert [v for _, v in log_of(any_client.conninfo)[("t", 0)]] == [b"0", b"first"]
    assert staged_count(any_client.conninfo) == 0


def test_producer_role_publishes_in_its_own_transaction_with_functions_only(
    client: postroom.Client,
) -> None:
    client.create_topic("orders", partitions=2)
    client.create_topic("outbox")
    with make_login_role(client.conninfo, "postroom_stage_role") as role:
        client.grant(role, "producer", topics=["orders", "outbox"])
        url = make_conninfo(client.conninfo, user=role)
        with postroom.connect(url) as producer, psycopg.connect(url) as conn:
            for statement in (
                "SELECT * FROM postroom.staged_messages",
                "INSERT INTO postroom.staged_messages VALUES"
                " (pg_current_xact_id(), 1, 1, 0, NULL, 'planted', NULL)",
                "DELETE FROM postroom.staged_messages",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement.encode())
                conn.rollback()
            assert producer.publish("orders", "a", partition=1, conn=conn).offset is None
            producer.publish_batch("orders", [{"value": "b", "partition": 0}], conn=conn)
            producer.publish_event(conn, "order", 1, "Created", {"n": 1})
            conn.execute("SELECT * FROM postroom.publish('orders', 'c', 'k')")
            conn.commit()
    log = log_of(client.conninfo)
    assert sum(len(messages) for messages in log.values()) == 4
    assert log[("orders", 1)][0] == (0, b"a") and log[("outbox", 0)][0][0] == 0


def test_roles_granted_before_0017_may_stage(client: postroom.Client) -> None:
    """An install upgraded from 0016 had producers with EXECUTE on reserve_offsets and not
    stage_messages: migration 0017 grants it, so their publishes in a transaction work."""
    from postroom import _sql

    schema = sql.Identifier("upgraded17")
    with make_login_role(client.conninfo, "postroom_stage_old") as role:
        with psycopg.connect(client.conninfo, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {}.schema_migrations (version integer PRIMARY KEY, name text"
                    " NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
                ).format(schema)
            )
            for migration in [m for m in _sql.migrations() if m.version < 17]:
                conn.execute(_sql.render(migration.statement, "upgraded17"))
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.schema_migrations (version, name) VALUES (%s, %s)"
                    ).format(schema),
                    [migration.version, migration.name],
                )
            conn.execute(
                sql.SQL(
                    "GRANT USAGE ON SCHEMA {s} TO {r}; GRANT SELECT ON {s}.topics TO {r};"
                    " GRANT INSERT ON {s}.messages TO {r};"
                    " GRANT EXECUTE ON FUNCTION {s}.reserve_offsets(integer[], integer[],"
                    " bigint[]) TO {r}"
                ).format(s=schema, r=sql.Identifier(role))
            )
        with postroom.connect(client.conninfo, schema="upgraded17") as owner:
            assert owner.migrate()[0] == "0017_commit_time_offsets"
            owner.create_topic("t")
        url = make_conninfo(client.conninfo, user=role)
        with postroom.connect(url, schema="upgraded17") as as_role, psycopg.connect(url) as conn:
            assert as_role.publish("t", "staged", conn=conn) == (0, None)
            conn.commit()
            assert as_role.publish("t", "direct") == (0, 1)
        with psycopg.connect(client.conninfo, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))


def test_the_retention_runner_vacuums_staged_messages(client: postroom.Client) -> None:
    """Each staged message leaves a dead row in staged_messages; with autovacuum off (as on the
    test server) the retention runner's round, as the owner, vacuums it."""
    client.create_topic("t")
    with psycopg.connect(client.conninfo) as conn:
        for n in range(3):
            client.publish("t", n, conn=conn)
            conn.commit()

    def vacuums() -> int:
        return int(
            rows(
                client.conninfo,
                "SELECT vacuum_count FROM pg_stat_user_tables"
                " WHERE schemaname = 'postroom' AND relname = 'staged_messages'",
            )[0][0]
        )

    before = vacuums()
    runner = RetentionRunner(client._db, interval=60, stopping=Event())
    assert runner.run_once() == 0  # nothing to expire: staged_messages is vacuumed all the same
    wait_for(lambda: vacuums() > before, 10, "the runner's VACUUM of staged_messages")
