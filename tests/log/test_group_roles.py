"""Consumer groups belong to roles (issue 10, item 2): a consumer role cannot commit, claim,
seek, reset or join another role's group, through the Python API or the SQL functions; an admin
shares a group with ``grant(role, "consumer", groups=[...])``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import postroom
from postroom import TopicPartition
from postroom.errors import InvalidArgument, PermissionDenied


@pytest.fixture
def roles(client: postroom.Client) -> Iterator[tuple[str, str]]:
    """Two LOGIN roles granted "consumer" with every group nobody holds yet ('*': they take
    groups on first use; cluster-wide, so uniquely named), dropped after."""
    names = (f"postroom_grp_a_{os.getpid()}", f"postroom_grp_b_{os.getpid()}")
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    for name in names:
        client.grant(name, "consumer", groups=["*"])
    yield names
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def as_role(client: postroom.Client, role: str) -> postroom.Client:
    return postroom.connect(make_conninfo(client.conninfo, user=role))


def denied(action: Callable[[], object]) -> str:
    with pytest.raises(PermissionDenied) as info:
        action()
    return str(info.value)


def committed(client: postroom.Client, group: str) -> list[int | None]:
    return [p.committed for p in client.describe_group(group).partitions]


def test_a_group_belongs_to_the_role_that_first_used_it(
    client: postroom.Client, roles: tuple[str, str]
) -> None:
    role_a, role_b = roles
    client.create_topic("orders", partitions=2)
    client.publish_batch("orders", [{"value": str(i), "partition": i % 2} for i in range(6)])
    with as_role(client, role_a) as a, as_role(client, role_b) as b:
        with a.consumer("billing", "orders") as consumer:
            assert len(consumer.poll(timeout=5)) == 6
            consumer.commit({TopicPartition("orders", 0): 2, TopicPartition("orders", 1): 1})
        assert committed(client, "billing") == [2, 1]

        # Role B: joining, polling, committing, seeking and claiming all need the group.
        message = denied(lambda: b.consumer("billing", "orders").poll(timeout=1))
        assert "billing" in message and role_a in message and role_b in message
        assert "groups=[...]" in message  # what to do about it
        with b.consumer("billing", "orders") as intruder:
            denied(lambda: intruder.commit({TopicPartition("orders", 0): 3}))
        with b.consumer("billing", "orders") as intruder:
            denied(lambda: intruder.seek(TopicPartition("orders", 0), 0))
        with b.consumer("billing", "orders") as intruder:

            def claim() -> None:
                with intruder.transaction(timeout=1):
                    pass

            denied(claim)
        # Manual assignment (no membership) reads like any consumer, but cannot commit.
        with b.consumer("billing", "orders", partitions=[TopicPartition("orders", 0)]) as intruder:
            assert [m.offset for m in intruder.poll(timeout=5)] == [2]
            denied(lambda: intruder.commit())
        denied(lambda: b.reset_group("billing", "orders", to="earliest"))
        # The SQL functions refuse it alike: commit, seek, consume (claim), low-level claim.
        with psycopg.connect(make_conninfo(client.conninfo, user=role_b), autocommit=True) as c:
            for statement in (
                "SELECT postroom.commit('billing', 'orders', 0, 3)",
                "SELECT postroom.seek('billing', 'orders', 0, 0)",
                "SELECT * FROM postroom.consume('billing', 'orders', 0, 10)",
                "SELECT postroom.commit_cursors('billing',"
                " ARRAY[(SELECT id FROM postroom.topics WHERE name = 'orders')], '{0}', '{3}')",
                "SELECT * FROM postroom.claim_range('billing',"
                " ARRAY[(SELECT id FROM postroom.topics WHERE name = 'orders')], '{0}', 10)",
                "SELECT * FROM postroom.group_heartbeat('billing', 'm-b', '{}', 1000, true)",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="billing"):
                    c.execute(statement.encode())
        assert committed(client, "billing") == [2, 1]

        # Role A goes on as before, and its own SQL calls work.
        with a.consumer("billing", "orders") as consumer:
            assert [m.offset for m in consumer.poll(timeout=5)] == [2, 1, 2]
            consumer.commit()
        with psycopg.connect(make_conninfo(client.conninfo, user=role_a), autocommit=True) as c:
            c.execute(b"SELECT postroom.seek('billing', 'orders', 0, 1)")
            assert c.execute(
                b"SELECT \"offset\" FROM postroom.consume('billing', 'orders', 0, 1)"
            ).fetchall() == [(1,)]
        # Role B's own groups work as usual.
        with b.consumer("audit", "orders") as consumer:
            assert len(consumer.poll(timeout=5)) == 6
            consumer.commit()
        with a.consumer("audit", "orders") as intruder:
            denied(lambda: intruder.poll(timeout=1))
        assert client.describe_group("audit").lag == 0


def test_an_admin_shares_a_group_with_grant(
    client: postroom.Client, roles: tuple[str, str]
) -> None:
    role_a, role_b = roles
    client.create_topic("orders")
    client.publish_batch("orders", ["a", "b", "c", "d"])
    with as_role(client, role_a) as a, as_role(client, role_b) as b:
        with a.consumer("shared", "orders") as consumer:
            assert [m.text() for m in consumer.poll(timeout=5)] == ["a", "b", "c", "d"]
            consumer.commit({TopicPartition("orders", 0): 1})
        denied(lambda: b.consumer("shared", "orders").poll(timeout=1))
        client.grant(role_b, "consumer", groups=["shared"])
        with b.consumer("shared", "orders") as consumer:
            with consumer.transaction(timeout=5) as batch:
                assert [m.text() for m in batch] == ["b", "c", "d"]
        assert committed(client, "shared") == [4]
        with a.consumer("shared", "orders") as consumer:
            consumer.seek(TopicPartition("orders", 0), 0)
            assert [m.text() for m in consumer.poll(timeout=5)] == ["a", "b", "c", "d"]
        # A group reserved before anyone used it belongs to the role it was granted to.
        client.grant(role_b, "consumer", groups=["reserved"])
        denied(lambda: a.consumer("reserved", "orders").poll(timeout=1))
        with b.consumer("reserved", "orders") as consumer:
            assert len(consumer.poll(timeout=5)) == 4
    # The admin (here the schema owner) uses every group and claims none.
    client.reset_group("shared", "orders", to="earliest")
    assert committed(client, "shared") == [0]
    with pytest.raises(InvalidArgument, match="consumer"):
        client.grant(role_a, "producer", groups=["shared"])
    with pytest.raises(postroom.errors.InvalidName, match="group"):
        client.grant(role_a, "consumer", groups=["bad name"])
