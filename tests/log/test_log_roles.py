"""The producer and consumer roles can do their part through postroom's functions and nothing
more (issue 10, item 2). Each test logs in AS the role and tries every table-level escape."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import postroom
from postroom._acompat import Event
from postroom._retention import RetentionRunner
from postroom.errors import PermissionDenied

from ..roles import login_role as make_login_role
from .test_retention import age_messages

DENIED = psycopg.errors.InsufficientPrivilege
NOT_RESERVED = psycopg.errors.CheckViolation


@pytest.fixture
def login_role(client: postroom.Client) -> Iterator[str]:
    """A LOGIN role, dropped after the test."""
    with make_login_role(client.conninfo, "postroom_log_role") as name:
        yield name


def role_url(client: postroom.Client, role: str) -> str:
    return make_conninfo(client.conninfo, user=role)


@contextmanager
def refused(kind: type[Exception], conn: psycopg.Connection) -> Iterator[None]:
    """The statement in the block fails with ``kind``; the session goes on afterwards."""
    with pytest.raises(kind), conn.transaction():
        yield


def counters(client: postroom.Client) -> list[tuple[int, int]]:
    with psycopg.connect(client.conninfo) as conn:
        return conn.execute(
            "SELECT partition, next_offset FROM postroom.partitions ORDER BY partition"
        ).fetchall()


def test_producer_role_cannot_rewrite_counters_or_plant_messages(
    client: postroom.Client, login_role: str
) -> None:
    client.create_topic("orders", partitions=2)
    client.publish_batch("orders", [{"value": "a", "partition": 0}, {"value": "b", "partition": 0}])
    client.create_topic("other")
    client.grant(login_role, "producer", topics=["*"])
    with psycopg.connect(client.conninfo) as conn:  # as retention does: offset 0 is gone
        conn.execute('DELETE FROM postroom.messages WHERE "offset" = 0')
    before = counters(client)
    with psycopg.connect(role_url(client, login_role), autocommit=True) as conn:
        row = conn.execute("SELECT id FROM postroom.topics WHERE name = 'orders'").fetchone()
        assert row is not None
        tid = row[0]
        # Counter rows: no UPDATE, DELETE or INSERT.
        with refused(DENIED, conn):
            conn.execute("UPDATE postroom.partitions SET next_offset = 0")
        with refused(DENIED, conn):
            conn.execute("DELETE FROM postroom.partitions")
        with refused(DENIED, conn):
            conn.execute("INSERT INTO postroom.partitions VALUES (%s, 5, 0)", [tid])
        # A planted message at an offset of its choosing: where retention deleted one, at the
        # counter (the next publish would then fail), past it (consumers would skip to it).
        for offset in (0, 2, 7):
            with refused(NOT_RESERVED, conn):
                conn.execute(
                    'INSERT INTO postroom.messages (topic_id, partition, "offset", value)'
                    " VALUES (%s, 0, %s, 'forged')",
                    [tid, offset],
                )
        # The same through COPY, the write path's statement.
        with refused(NOT_RESERVED, conn):
            with conn.cursor().copy(
                'COPY postroom.messages (topic_id, partition, "offset", value) FROM STDIN'
            ) as copy:
                copy.write_row((tid, 0, 9, b"forged"))
        # A reservation covers its own range only: one row past it fails the statement.
        with refused(NOT_RESERVED, conn):
            reserved = conn.execute(
                "SELECT first_offset FROM postroom.reserve_offsets(%s, %s, %s)",
                [[tid], [0], [1]],
            ).fetchone()
            assert reserved is not None
            first = reserved[0]
            conn.execute(
                'INSERT INTO postroom.messages (topic_id, partition, "offset", value)'
                " VALUES (%s, 0, %s, 'mine'), (%s, 0, %s, 'not mine')",
                [tid, first, tid, first + 1],
            )
        # A reservation on one partition does not cover another.
        with refused(NOT_RESERVED, conn):
            conn.execute("SELECT * FROM postroom.reserve_offsets(%s, %s, %s)", [[tid], [0], [1]])
            conn.execute(
                'INSERT INTO postroom.messages (topic_id, partition, "offset", value)'
                " VALUES (%s, 1, 0, 'wrong partition')",
                [tid],
            )
        # Rewinding or flooding the counter through the function.
        for count in (-2, 0, 10**12):
            with refused(psycopg.errors.InvalidParameterValue, conn):
                conn.execute(
                    "SELECT * FROM postroom.reserve_offsets(%s, %s, %s)", [[tid], [0], [count]]
                )
        # Nothing else to read or write.
        for statement in (
            "SELECT * FROM postroom.messages",
            "SELECT * FROM postroom.cursors",
            "SELECT * FROM postroom.messages_view",
            "UPDATE postroom.messages SET value = 'x'",
            "DELETE FROM postroom.messages",
            "INSERT INTO postroom.cursors VALUES ('g', 1, 0, 0)",
            "UPDATE postroom.topics SET partitions = 1",
            "SELECT * FROM postroom.ensure_cursors('g', '{1}', '{0}', 'earliest')",
            "SELECT postroom.commit_cursors('g', '{1}', '{0}', '{0}')",
            "SELECT * FROM postroom.claim_range('g', '{1}', '{0}', 10)",
        ):
            with refused(DENIED, conn):
                conn.execute(statement)
    assert counters(client) == before
    # What a producer is for still works, as that role: the Python API and SQL.
    with postroom.connect(role_url(client, login_role)) as producer:
        assert producer.publish("orders", "c", partition=0).offset == 2
        assert len(producer.publish_batch("orders", ["d", "e"], conn=None)) == 2
        with producer.producer() as batching:
            assert batching.send("orders", "f", key="k").result(timeout=10).offset is not None
    with psycopg.connect(role_url(client, login_role)) as conn:
        conn.execute("SELECT * FROM postroom.publish('orders', '{\"id\": 1}')")
        conn.execute("SELECT * FROM postroom.publish('orders', 'raw'::bytea)")
    assert client.describe_topic("orders").high_water == 2 + 4 + 2


def test_consumer_role_cannot_move_cursors_or_write(
    client: postroom.Client, login_role: str
) -> None:
    client.create_topic("orders")
    client.publish_batch("orders", ["a", "b", "c"])
    client.reset_group("other-group", "orders", to=2)
    client.grant(login_role, "consumer", groups=["billing", "audit"])
    with psycopg.connect(role_url(client, login_role), autocommit=True) as conn:
        row = conn.execute("SELECT id FROM postroom.topics WHERE name = 'orders'").fetchone()
        assert row is not None
        tid = row[0]
        for statement in (
            "UPDATE postroom.cursors SET next_offset = 0",
            "UPDATE postroom.cursors SET next_offset = 3 WHERE group_name = 'other-group'",
            "DELETE FROM postroom.cursors",
            "INSERT INTO postroom.cursors VALUES ('planted', %(tid)s, 0, 3)",
            "UPDATE postroom.partitions SET next_offset = 0",
            'INSERT INTO postroom.messages (topic_id, partition, "offset", value)'
            " VALUES (%(tid)s, 0, 3, 'forged')",
            "DELETE FROM postroom.messages",
            "SELECT * FROM postroom.reserve_offsets('{1}', '{0}', '{1}')",
            "SELECT * FROM postroom.publish('orders', 'forged')",
            "SELECT * FROM postroom.publish_batch('orders', ARRAY['forged'])",
            "SELECT postroom.create_topic('planted')",
        ):
            with refused(DENIED, conn):
                conn.execute(statement, {"tid": tid})
        # Through the function a cursor only moves forward, and only a granted group's.
        conn.execute("SELECT postroom.commit_cursors('billing', %s, '{0}', '{0}')", [[tid]])
        with refused(DENIED, conn):
            conn.execute("SELECT postroom.commit_cursors('other-group', %s, '{0}', '{0}')", [[tid]])
    assert client.describe_group("other-group").partitions[0].committed == 2
    # What a consumer is for still works, as that role: poll/commit and transactions.
    with postroom.connect(role_url(client, login_role)) as consumer_client:
        with consumer_client.consumer("billing", "orders") as consumer:
            assert [m.text() for m in consumer.poll(timeout=1)] == ["a", "b", "c"]
            consumer.commit()
        with consumer_client.consumer("audit", "orders") as consumer:
            with consumer.transaction(timeout=1) as batch:
                assert [m.text() for m in batch] == ["a", "b", "c"]
        with pytest.raises(PermissionDenied, match="permission denied"):
            consumer_client.publish("orders", "forged")
    assert client.describe_group("billing").lag == 0
    assert client.describe_group("audit").lag == 0
    assert client.describe_topic("orders").high_water == 3


def test_roles_granted_before_0003_lose_their_table_rights(
    client: postroom.Client, login_role: str
) -> None:
    """An install upgraded from 0002 had producers with UPDATE on counters and consumers with
    INSERT/UPDATE on cursors; migrating takes those back and grants the functions."""
    schema = "upgraded"
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        from postroom import _sql

        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for migration in _sql.migrations()[:2]:
            conn.execute(_sql.render(migration.statement, schema))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {s}.schema_migrations (version integer PRIMARY KEY, name text NOT"
                " NULL, applied_at timestamptz NOT NULL DEFAULT now());"
                " INSERT INTO {s}.schema_migrations (version, name)"
                " VALUES (1, 'log'), (2, 'queue');"
                # The grants of postroom 0.x (grants.sql before migration 0003):
                " GRANT USAGE ON SCHEMA {s} TO {r};"
                " GRANT SELECT ON {s}.topics TO {r};"
                " GRANT SELECT, UPDATE (next_offset) ON {s}.partitions TO {r};"
                " GRANT INSERT ON {s}.messages TO {r};"
                " GRANT SELECT ON {s}.partitions, {s}.messages, {s}.messages_view TO {r};"
                " GRANT SELECT, INSERT, UPDATE (next_offset, updated_at) ON {s}.cursors TO {r};"
            ).format(s=sql.Identifier(schema), r=sql.Identifier(login_role))
        )
    with postroom.connect(client.conninfo, schema=schema) as owner:
        assert owner.migrate()[0].startswith("0003_")
        owner.create_topic("orders")
    with psycopg.connect(role_url(client, login_role), autocommit=True) as conn:
        with refused(DENIED, conn):
            conn.execute(
                sql.SQL("UPDATE {}.partitions SET next_offset = 0").format(sql.Identifier(schema))
            )
        with refused(DENIED, conn):
            conn.execute(
                sql.SQL("UPDATE {}.cursors SET next_offset = 0").format(sql.Identifier(schema))
            )
        with refused(DENIED, conn):
            conn.execute(
                sql.SQL("INSERT INTO {}.cursors VALUES ('g', 1, 0, 0)").format(
                    sql.Identifier(schema)
                )
            )
    with postroom.connect(role_url(client, login_role), schema=schema) as role_client:
        role_client.publish("orders", "still publishes")
        with role_client.consumer("g", "orders") as consumer:
            assert [m.text() for m in consumer.poll(timeout=1)] == ["still publishes"]
            consumer.commit()


def test_the_write_path_of_older_versions_still_works_for_the_owner(
    client: postroom.Client,
) -> None:
    """During a rolling upgrade, processes still running the pre-0003 write path (advance the
    counter row, then write at the offsets it gave) keep working as the schema owner: moving
    the counter forward records the reservation, whoever moves it."""
    client.create_topic("orders")
    with psycopg.connect(client.conninfo) as conn:
        row = conn.execute(
            "UPDATE postroom.partitions p SET next_offset = p.next_offset + 2"
            " FROM postroom.topics t WHERE t.id = p.topic_id AND t.name = 'orders'"
            " RETURNING p.topic_id, p.next_offset - 2"
        ).fetchone()
        assert row is not None
        tid, first = row
        with conn.cursor().copy(
            'COPY postroom.messages (topic_id, partition, "offset", value) FROM STDIN'
        ) as copy:
            copy.write_row((tid, 0, first, b"a"))
            copy.write_row((tid, 0, first + 1, b"b"))
    with client.consumer("g", "orders") as consumer:
        assert [m.text() for m in consumer.poll(timeout=1)] == ["a", "b"]


@pytest.mark.parametrize("capability", ["producer", "consumer"])
def test_producer_and_consumer_roles_run_retention_without_table_rights(
    client: postroom.Client, login_role: str, capability: str
) -> None:
    client.create_topic("t", retention=timedelta(hours=1))
    client.publish_batch("t", list(range(5)))
    age_messages(client.conninfo, 2)
    client.grant(login_role, capability)
    with psycopg.connect(role_url(client, login_role), autocommit=True) as conn:
        for right in ("DELETE", "UPDATE", "TRUNCATE"):
            row = conn.execute(
                "SELECT has_table_privilege('postroom.messages', %s)", [right]
            ).fetchone()
            assert row == (False,), right
        with refused(DENIED, conn):
            conn.execute("DELETE FROM postroom.messages")
        with refused(DENIED, conn):  # the defaults only: no shorter group expiry of its own
            conn.execute("SELECT postroom.expire_messages(interval '1 second', 10)")
        with refused(DENIED, conn):
            conn.execute("UPDATE postroom.topics SET retention = interval '1 second'")
    with postroom.connect(role_url(client, login_role)) as as_role:
        runner = RetentionRunner(as_role._db, interval=60, stopping=Event())
        assert runner.run_once() == 5  # through run_retention (SECURITY DEFINER)
        assert runner.vacuums == 0  # not the owner of messages: VACUUM left to autovacuum
    assert client.describe_topic("t").partition_info[0].messages == 0


def test_roles_granted_before_0011_may_run_retention(
    client: postroom.Client, login_role: str
) -> None:
    """An install upgraded from 0010 had consumers with EXECUTE on claim_range and no
    run_retention: migration 0011 grants it, so their retention runners work at once."""
    from postroom import _sql

    schema = sql.Identifier("upgraded11")
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.schema_migrations (version integer PRIMARY KEY, name text NOT"
                " NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(schema)
        )
        for migration in [m for m in _sql.migrations() if m.version < 11]:
            conn.execute(_sql.render(migration.statement, "upgraded11"))
            conn.execute(
                sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES (%s, %s)").format(
                    schema
                ),
                [migration.version, migration.name],
            )
        conn.execute(
            sql.SQL(
                "GRANT USAGE ON SCHEMA {s} TO {r};"
                " GRANT EXECUTE ON FUNCTION {s}.claim_range(text, integer[], integer[], integer)"
                " TO {r}"
            ).format(s=schema, r=sql.Identifier(login_role))
        )
    with postroom.connect(client.conninfo, schema="upgraded11") as owner:
        assert owner.migrate()[0] == "0011_retention_runner"
    with psycopg.connect(role_url(client, login_role), autocommit=True) as conn:
        assert conn.execute(sql.SQL("SELECT {}.run_retention()").format(schema)).fetchone() == (0,)
