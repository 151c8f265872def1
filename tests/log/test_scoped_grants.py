"""Grants scoped to consumer groups and topics (issue 21 item 15, issue 23 item 4): a role of
another service cannot commit, seek, reset, claim, join or lock a group it has no grant for,
cannot stall that group's rebalances, and a producer role cannot publish to a topic it has no
grant for; the granted role still can. Each test logs in as the role and tries the escape."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom
from postroom import TopicPartition, _sql
from postroom.errors import InvalidArgument, InvalidName, PermissionDenied

from ..roles import login_role


@pytest.fixture
def billing(client: postroom.Client) -> Iterator[str]:
    """The billing service's role: consumer of group 'billing' only."""
    with login_role(client.conninfo, "postroom_billing") as name:
        client.grant(name, "consumer", groups=["billing"])
        yield name


@pytest.fixture
def shipping(client: postroom.Client) -> Iterator[str]:
    """Another service's role: consumer of group 'shipping', producer to topic 'shipments'."""
    with login_role(client.conninfo, "postroom_shipping") as name:
        client.grant(name, "consumer", groups=["shipping"])
        client.grant(name, "producer", topics=["shipments"])
        yield name


def as_role(client: postroom.Client, role: str) -> postroom.Client:
    return postroom.connect(make_conninfo(client.conninfo, user=role))


def sql_as(client: postroom.Client, role: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(make_conninfo(client.conninfo, user=role), autocommit=True)


def denied(action: Callable[[], object]) -> str:
    with pytest.raises(PermissionDenied) as info:
        action()
    return str(info.value)


def committed(client: postroom.Client, group: str) -> list[int | None]:
    return [p.committed for p in client.describe_group(group).partitions]


def test_a_consumer_role_cannot_touch_a_group_it_has_no_grant_for(
    client: postroom.Client, billing: str, shipping: str
) -> None:
    client.create_topic("orders", partitions=2)
    client.publish_batch("orders", [{"value": str(i), "partition": i % 2} for i in range(6)])
    with as_role(client, billing) as b, as_role(client, shipping) as s:
        with b.consumer("billing", "orders") as consumer:
            assert len(consumer.poll(timeout=5)) == 6
            consumer.commit({TopicPartition("orders", 0): 2, TopicPartition("orders", 1): 1})
        assert committed(client, "billing") == [2, 1]

        # Shipping's role: no grant for billing (nor for any group nobody holds yet).
        message = denied(lambda: s.consumer("billing", "orders").poll(timeout=1))
        assert "billing" in message and shipping in message
        with s.consumer("billing", "orders", partitions=[TopicPartition("orders", 0)]) as spy:
            assert [m.offset for m in spy.poll(timeout=5)] == [2]  # reading needs no group
            denied(lambda: spy.commit())
        denied(lambda: s.reset_group("billing", "orders", to="latest"))
        # A group nobody holds is not taken on first use without the grant '*'.
        message = denied(lambda: s.consumer("unclaimed", "orders").poll(timeout=1))
        assert "has no grant" in message and "--group" in message
        with sql_as(client, shipping) as conn:
            tid = conn.execute("SELECT id FROM postroom.topics WHERE name = 'orders'").fetchone()
            assert tid is not None
            for statement in (
                "SELECT postroom.commit('billing', 'orders', 0, 3)",
                "SELECT postroom.seek('billing', 'orders', 0, 0)",
                "SELECT * FROM postroom.consume('billing', 'orders', 0, 10)",
                "SELECT * FROM postroom.group_lock('billing')",
                "SELECT * FROM postroom.group_heartbeat('billing', 'm-s', %(tids)s, 1000, true)",
                "SELECT postroom.commit_cursors('billing', %(tids)s, '{0}', '{3}')",
                "SELECT * FROM postroom.claim_range('billing', %(tids)s, '{0}', 10)",
                "SELECT postroom.commit_offsets('billing', 'm-b', %(tids)s, '{0}', '{1}', '{3}')",
                "SELECT * FROM postroom.claim_batch('billing', 'm-b', %(tids)s, '{0}', '{1}', 0)",
                "SELECT postroom.group_release('billing', 'm-b', %(tids)s, '{0}', '{1}')",
                "SELECT * FROM postroom.consume('unclaimed', 'orders', 0, 10)",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="group"):
                    conn.execute(statement.encode(), {"tids": [tid[0]]})
        assert committed(client, "billing") == [2, 1]
        with pytest.raises(postroom.errors.GroupNotFound):
            client.describe_group("unclaimed")

        # The granted role goes on; shipping's own group works for shipping.
        with b.consumer("billing", "orders") as consumer:
            assert [m.offset for m in consumer.poll(timeout=5)] == [2, 1, 2]
            consumer.commit()
        with s.consumer("shipping", "orders") as consumer:
            assert len(consumer.poll(timeout=5)) == 6
            consumer.commit()
        denied(lambda: b.consumer("shipping", "orders").poll(timeout=1))


def test_a_foreign_role_cannot_hold_a_groups_lock_or_its_leases(
    client: postroom.Client, billing: str, shipping: str
) -> None:
    """The probe's escape: another service's consumer role held ``group_lock('billing')`` in
    an open transaction, and billing's rebalances stopped for as long. Now the call is refused
    before it locks anything, and so is a member-side claim naming billing's member and
    epochs (its FOR SHARE lease locks would stall the hand-over)."""
    client.create_topic("orders", partitions=2)
    client.publish_batch("orders", [{"value": str(i), "partition": i % 2} for i in range(4)])
    with as_role(client, billing) as b, sql_as(client, shipping) as foreign:
        with b.consumer("billing", "orders", session_timeout=2) as first:
            assert len(first.poll(timeout=5)) == 4
            first.commit()
            with psycopg.connect(client.conninfo) as admin:
                leases = admin.execute(
                    "SELECT owner, topic_id, partition, epoch FROM postroom.leases"
                    " WHERE group_name = 'billing' ORDER BY partition"
                ).fetchall()
            assert len(leases) == 2
            member, tid, _, epoch = leases[0]
            foreign.autocommit = False
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="billing"):
                foreign.execute("SELECT * FROM postroom.group_lock('billing')")
            foreign.rollback()
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="billing"):
                foreign.execute(
                    "SELECT * FROM postroom.claim_batch('billing', %s, %s, '{0}', %s, 0)",
                    [member, [tid], [epoch]],
                )
            foreign.rollback()
            # The foreign session now sits in an open transaction, as the probe's did.
            foreign.execute("SELECT 1")
            # A second billing member joins: the rebalance is not held up.
            with b.consumer("billing", "orders", session_timeout=2) as second:
                started = time.monotonic()
                deadline = started + 10
                while not second.assignment() and time.monotonic() < deadline:
                    second.poll(timeout=0.2)
                    first.poll(timeout=0)
                assert len(second.assignment()) == 1
            foreign.rollback()


def test_a_rebalance_never_waits_on_a_session_sitting_on_the_group_lock(
    client: postroom.Client, billing: str
) -> None:
    """Even a session allowed to take the lock (an admin's, the group's own role) cannot make
    a rebalance wait: the second ``group_lock`` fails at once (NOWAIT) instead of queueing
    behind it, whatever lock_timeout says, and the member tries again at its next
    heartbeat."""
    client.create_topic("orders")
    with as_role(client, billing) as b, sql_as(client, billing) as holder:
        with b.consumer("billing", "orders") as consumer:
            consumer.poll(timeout=1)  # the group row exists
        other = sql_as(client, billing)
        holder.autocommit = False
        holder.execute("SELECT * FROM postroom.group_lock('billing')")
        other.execute("SET lock_timeout = 0")  # wait forever, if it waited at all
        started = time.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable, match="being rebalanced"):
            other.execute("SELECT * FROM postroom.group_lock('billing')")
        assert time.monotonic() - started < 5
        # A member meanwhile keeps heartbeating and gets its partition once the lock goes.
        with b.consumer("billing", "orders", session_timeout=1) as consumer:
            consumer.poll(timeout=0.5)
            assert consumer.assignment() == set()
            holder.rollback()
            deadline = time.monotonic() + 10
            while not consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(timeout=0.2)
            assert consumer.assignment() == {TopicPartition("orders", 0)}
        other.close()


def test_a_producer_role_publishes_only_to_its_topics(
    client: postroom.Client, shipping: str
) -> None:
    client.create_topic("shipments")
    client.create_topic("payments")
    with as_role(client, shipping) as s:
        assert s.publish("shipments", "ok", key="k").offset == 0
        assert len(s.publish_batch("shipments", ["a", "b"])) == 2
        with s.producer() as producer:
            assert producer.send("shipments", "c").result(timeout=10).offset == 3
        message = denied(lambda: s.publish("payments", "forged"))
        assert "payments" in message and shipping in message and "--topic" in message
        denied(lambda: s.publish_batch("payments", ["forged"]))
        with s.producer() as producer:
            future = producer.send("payments", "forged")
            with pytest.raises(PermissionDenied):
                future.result(timeout=10)
    with sql_as(client, shipping) as conn:
        pid = conn.execute("SELECT id FROM postroom.topics WHERE name = 'payments'").fetchone()
        assert pid is not None
        for statement in (
            "SELECT * FROM postroom.publish('payments', 'forged')",
            "SELECT * FROM postroom.publish_batch('payments', ARRAY['forged'])",
            "SELECT * FROM postroom.reserve_offsets(%(pid)s, '{0}', '{1}')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="payments"):
                conn.execute(statement.encode(), {"pid": [pid[0]]})
        conn.execute(b"SELECT * FROM postroom.publish('shipments', 'by sql')")
    assert client.describe_topic("payments").high_water == 0
    assert client.describe_topic("shipments").high_water == 5
    # '*' grants every topic; revoking it takes it back.
    client.grant(shipping, "producer", topics=["*"])
    with as_role(client, shipping) as s:
        assert s.publish("payments", "now allowed").offset == 0
    assert client.revoke(shipping, topics=["*"]) == 1
    with as_role(client, shipping) as s:
        denied(lambda: s.publish("payments", "again forged"))
        assert s.publish("shipments", "still ok").offset == 5


def test_admins_manage_grants_and_others_cannot(
    client: postroom.Client, billing: str, shipping: str
) -> None:
    client.create_topic("orders")
    client.grant(billing, "consumer", groups=["billing-audit", "*"])
    found = {(g.role, g.resource, g.name) for g in client.grants()}
    assert {
        (billing, "group", "billing"),
        (billing, "group", "billing-audit"),
        (billing, "group", "*"),
        (shipping, "group", "shipping"),
        (shipping, "topic", "shipments"),
    } <= found
    assert [g.name for g in client.grants(billing)] == ["*", "billing", "billing-audit"]
    assert client.revoke(billing, groups=["*", "billing-audit", "never-granted"]) == 2
    assert [g.name for g in client.grants(billing)] == ["billing"]
    with as_role(client, billing) as b:
        denied(lambda: b.grant(billing, "consumer", groups=["shipping"]))
        denied(lambda: b.revoke(shipping, groups=["shipping"]))
        denied(lambda: b.grants())
    with sql_as(client, billing) as conn:
        for statement in (
            "SELECT postroom.grant_groups(current_user, '{shipping}')",
            "SELECT postroom.grant_topics(current_user, '{*}')",
            "SELECT postroom.revoke_groups('postroom', '{x}')",
            "SELECT * FROM postroom.role_grants()",
            "INSERT INTO postroom.group_roles VALUES ('shipping', 10)",
            "INSERT INTO postroom.topic_roles VALUES ('*', 10)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement.encode())
    with pytest.raises(InvalidArgument, match="producer"):
        client.grant(billing, "consumer", topics=["orders"])
    with pytest.raises(InvalidArgument, match="list"):
        client.grant(billing, "consumer", groups="billing")
    with pytest.raises(InvalidName, match="topic"):
        client.grant(billing, "producer", topics=["bad name"])
    with pytest.raises(InvalidArgument, match="name what"):
        client.revoke(billing)
    with pytest.raises(postroom.errors.RoleNotFound):
        client.revoke("nobody_at_all_here", groups=["x"])
    with sql_as(client, billing) as conn, pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute(b"SELECT * FROM postroom.consume('*', 'orders', 0, 1)")


def test_roles_granted_before_the_upgrade_keep_working(
    client: postroom.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upgrade path: a role that could consume and publish before migration 0024 (any
    group nobody held, taken on first use; every topic) keeps both, recorded as '*' grants
    an admin can see and revoke. A role granted afterwards without scopes gets neither."""
    every = _sql.migrations()
    monkeypatch.setattr(_sql, "migrations", lambda: [m for m in every if m.version < 24])
    url = client.conninfo
    with login_role(url, "postroom_legacy") as legacy, login_role(url, "postroom_new") as new:
        with postroom.connect(url, schema="legacy") as owner:
            owner.migrate()
            owner.create_topic("orders")
            owner.publish("orders", "a")
            owner.grant(legacy, "consumer", "producer")
            with postroom.connect(make_conninfo(url, user=legacy), schema="legacy") as old:
                with old.consumer("early", "orders") as consumer:
                    assert len(consumer.poll(timeout=5)) == 1
                    consumer.commit()
            monkeypatch.setattr(_sql, "migrations", lambda: every)
            assert [m.split("_")[0] for m in owner.migrate()] == [
                f"{m.version:04d}" for m in every if m.version >= 24
            ]
            assert {(g.resource, g.name, g.owner) for g in owner.grants(legacy)} == {
                ("group", "*", False),
                ("group", "early", True),
                ("topic", "*", False),
            }
            owner.grant(new, "consumer", "producer")
            assert owner.grants(new) == []
            with postroom.connect(make_conninfo(url, user=legacy), schema="legacy") as old:
                assert old.publish("orders", "b").offset == 1
                with old.consumer("early", "orders") as consumer:
                    assert [m.text() for m in consumer.poll(timeout=5)] == ["b"]
                with old.consumer("later", "orders") as consumer:
                    assert len(consumer.poll(timeout=5)) == 2
                    consumer.commit()
            with postroom.connect(make_conninfo(url, user=new), schema="legacy") as fresh:
                denied(lambda: fresh.publish("orders", "c"))
                denied(lambda: fresh.consumer("newer", "orders").poll(timeout=1))
                denied(lambda: fresh.consumer("early", "orders").poll(timeout=1))
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DROP SCHEMA legacy CASCADE")


def test_a_publish_in_the_callers_transaction_to_a_topic_without_a_grant_is_refused_by_the_call(
    client: postroom.Client, shipping: str
) -> None:
    """The publish call raises, not the caller's COMMIT (where the counter rows are touched)."""
    client.create_topic("shipments")
    client.create_topic("payments")
    with as_role(client, shipping) as s, sql_as(client, shipping) as conn:
        with conn.transaction():
            assert s.publish("shipments", "ok", conn=conn).offset is None  # staged: granted
        with pytest.raises(PermissionDenied) as info, conn.transaction():
            s.publish("payments", "forged", conn=conn)
        assert "payments" in str(info.value)
        with pytest.raises(PermissionDenied), conn.transaction():
            s.publish_batch("payments", ["forged"], conn=conn)
    assert client.describe_topic("shipments").high_water == 1
    assert client.describe_topic("payments").high_water == 0
