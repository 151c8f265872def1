"""Least-privilege roles: a producer can publish and nothing else, a consumer can consume."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom
from postroom._grants import applicable
from postroom.errors import InvalidArgument, InvalidName, RoleNotFound

from .roles import login_role


@pytest.fixture
def role(client: postroom.Client) -> Iterator[str]:
    """A LOGIN role, dropped after the test."""
    with login_role(client.conninfo, "postroom_role") as name:
        yield name


def as_role(client: postroom.Client, role: str) -> postroom.Client:
    return postroom.connect(make_conninfo(client.conninfo, user=role))


def test_producer_role_publishes_and_nothing_more(client: postroom.Client, role: str) -> None:
    client.create_topic("orders", partitions=2)
    client.grant(role, "producer", topics=["orders"])
    with as_role(client, role) as producer:
        assert producer.publish("orders", "x", key="k").offset == 0
        assert len(producer.publish_batch("orders", ["a", "b"])) == 2
        with producer.producer() as batching:
            assert batching.send("orders", "c").result(timeout=10).offset is not None
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            producer.delete_topic("orders")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            producer.consumer("g", "orders").poll(timeout=0)
    assert client.describe_topic("orders").high_water == 4


def test_consumer_role_consumes_and_cannot_publish(client: postroom.Client, role: str) -> None:
    client.create_topic("orders")
    client.publish_batch("orders", ["a", "b", "c"])
    client.grant(role, "consumer", groups=["billing"])
    with as_role(client, role) as consumer_client:
        with consumer_client.consumer("billing", "orders") as consumer:
            assert [m.text() for m in consumer.poll(timeout=1)] == ["a", "b", "c"]
            consumer.commit()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            consumer_client.publish("orders", "forged")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            consumer_client.create_topic("other")
    assert client.describe_group("billing").lag == 0


def test_grant_checks_its_input(client: postroom.Client) -> None:
    with pytest.raises(InvalidArgument, match="use one or more of"):
        client.grant("someone", "superuser")
    with pytest.raises(InvalidName, match="invalid role name"):
        client.grant("", "producer")
    # A hostile role name is an identifier, never SQL text: it names a role that does not exist.
    with pytest.raises(RoleNotFound, match="does not exist"):
        client.grant('x"; DROP SCHEMA postroom CASCADE; --', "producer")
    assert client.list_topics() == []


def test_enqueuer_and_worker_roles(client: postroom.Client, role: str) -> None:
    client.grant(role, "enqueuer")
    with as_role(client, role) as app:

        @app.job("note")
        def note(n: int) -> int:
            return n * 2

        job = note.enqueue(n=21)
        assert client.get_job(job.id).state == "ready"  # the enqueuer may not read jobs
        # An enqueuer cannot claim: its worker's claims are refused and the job stays ready.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with psycopg.connect(app.conninfo) as conn:
                conn.execute("UPDATE postroom.jobs SET state = 'running'")
    client.grant(role, "worker")
    with as_role(client, role) as app:

        @app.job("note")
        def note_again(n: int) -> int:
            return n * 2

        app.worker(concurrency=1, poll_interval=0.05).run(burst=True, handle_signals=False)
        assert app.job_handle(job.id).result(timeout=10) == 42


def test_a_grant_of_a_migration_not_applied_is_skipped() -> None:
    names = ("grant_consumer", "grant_inbox", "grant_consumer_0021", "grant_consumer_0037")
    assert applicable(names, {1, 21}) == ["grant_consumer", "grant_inbox", "grant_consumer_0021"]
    assert applicable(names, {21, 37}) == list(names)


def test_consumer_grants_before_and_after_migration_0037(
    client: postroom.Client, role: str
) -> None:
    """On a schema without 0037 the consumer grant skips what 0037 creates; migrating then
    gives the consumer roles granted before it the new rights."""
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        conn.execute("DROP FUNCTION postroom.relay_sink_error(text, text, text)")
        conn.execute("DROP TABLE postroom.relay_sink_errors")
        conn.execute("DELETE FROM postroom.schema_migrations WHERE version = 37")
    client.grant(role, "consumer", groups=["relay.s"])  # no error on the missing function
    assert client.migrate() == ["0037_relay_sink_errors"]
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        rights = conn.execute(
            "SELECT has_function_privilege(%(r)s,"
            "  'postroom.relay_sink_error(text, text, text)', 'EXECUTE'),"
            " has_table_privilege(%(r)s, 'postroom.leases', 'SELECT'),"
            " has_table_privilege(%(r)s, 'postroom.relay_sink_errors', 'SELECT'),"
            " has_column_privilege(%(r)s, 'postroom.members', 'expires_at', 'SELECT'),"
            " has_column_privilege(%(r)s, 'postroom.members', 'instance', 'SELECT')",
            {"r": role},
        ).fetchone()
    assert rights == (True, True, True, True, False)  # never the instance token


def test_worker_grants_before_and_after_migration_0038(client: postroom.Client, role: str) -> None:
    """On a schema without 0038 the worker grant skips the registry's functions; migrating
    then gives the worker roles granted before it the registry's functions, and a role that
    reads jobs (a dashboard's) SELECT on the registry."""
    with login_role(client.conninfo, "postroom_reader") as reader:
        _migrate_0038(client, role, reader)


def _migrate_0038(client: postroom.Client, role: str, reader: str) -> None:
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        conn.execute("DROP TABLE postroom.workers")
        for function in (
            "register_worker(text, text, integer, text[], integer, interval)",
            "worker_heartbeat(text, interval)",
            "unregister_worker(text)",
            "prune_workers(interval)",
        ):
            conn.execute(f"DROP FUNCTION postroom.{function}")
        conn.execute("DELETE FROM postroom.schema_migrations WHERE version = 38")
        conn.execute(f"GRANT SELECT ON postroom.jobs TO {reader}")
    client.grant(role, "worker")  # no error on the missing functions
    assert client.migrate() == ["0038_worker_registry"]
    with psycopg.connect(client.conninfo, autocommit=True) as conn:
        rights = conn.execute(
            "SELECT has_function_privilege(%(r)s, 'postroom.register_worker(text, text,"
            "  integer, text[], integer, interval)', 'EXECUTE'),"
            " has_function_privilege(%(r)s, 'postroom.prune_workers(interval)', 'EXECUTE'),"
            " has_table_privilege(%(r)s, 'postroom.workers', 'SELECT'),"
            " has_table_privilege(%(r)s, 'postroom.workers', 'UPDATE'),"
            " has_table_privilege(%(ro)s, 'postroom.workers', 'SELECT'),"
            " has_function_privilege(%(ro)s, 'postroom.unregister_worker(text)', 'EXECUTE')",
            {"r": role, "ro": reader},
        ).fetchone()
    assert rights == (True, True, False, False, True, False)
