"""``postroom grant``, ``revoke`` and ``grants``: scoped grants from the command line."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner, Result

import postroom
from postroom.cli.main import app

from .roles import login_role

runner = CliRunner()


def run(dsn: str, *args: str) -> Result:
    return runner.invoke(app, ["--url", dsn, *args])


def ok(dsn: str, *args: str) -> Result:
    result = run(dsn, *args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


@pytest.fixture
def role(client: postroom.Client) -> Iterator[str]:
    with login_role(client.conninfo, "postroom_cli_grant") as name:
        yield name


def test_grant_revoke_and_list_scoped_grants(client: postroom.Client, role: str) -> None:
    dsn = client.conninfo
    client.create_topic("orders")
    out = ok(dsn, "grant", role, "consumer", "producer", "--group", "billing", "--topic", "orders")
    assert f"granted consumer, producer to role {role!r} on group 'billing', topic 'orders'" in (
        out.stdout
    )
    listed = json.loads(ok(dsn, "grants", role, "--json").stdout)
    assert [(g["role"], g["resource"], g["name"], g["owner"]) for g in listed] == [
        (role, "group", "billing", False),
        (role, "topic", "orders", False),
    ]
    assert role in ok(dsn, "grants").stdout
    with postroom.connect(make_conninfo(dsn, user=role)) as as_role:
        assert as_role.publish("orders", "x").offset == 0
        with as_role.consumer("billing", "orders") as consumer:
            assert len(consumer.poll(timeout=5)) == 1
    assert "revoked 1 grant(s)" in ok(dsn, "revoke", role, "--topic", "orders").stdout
    with postroom.connect(make_conninfo(dsn, user=role)) as as_role:
        with pytest.raises(postroom.errors.PermissionDenied):
            as_role.publish("orders", "y")
    # Errors are one red line: a bad name, a missing role, a non-admin.
    result = run(dsn, "grant", role, "consumer", "--group", "bad name")
    assert result.exit_code == 1 and result.stderr.startswith("error: invalid group name")
    result = run(dsn, "grant", "nobody_at_all_here", "consumer", "--group", "g")
    assert result.exit_code == 1 and "does not exist" in result.stderr
    result = run(make_conninfo(dsn, user=role), "grants")
    assert result.exit_code == 1 and "only an admin" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_grant_scopes_an_enqueuer_to_the_queues_given_with_queue(
    client: postroom.Client, dsn: str
) -> None:
    with login_role(dsn, "cli_mailer") as role:
        assert "queue 'email'" in ok(dsn, "grant", role, "enqueuer", "--queue", "email").stdout
        as_role = postroom.connect(make_conninfo(dsn, user=role))
        with as_role:
            as_role.enqueue("send", {"to": "a"}, queue="email")
            with pytest.raises(postroom.errors.PermissionDenied):
                as_role.enqueue("send", {"to": "b"}, queue="billing")
    assert [j.queue for j in client.list_jobs()] == ["email"]


def test_queue_grants_are_listed_and_revoked_like_group_and_topic_grants(
    client: postroom.Client, dsn: str
) -> None:
    with login_role(dsn, "cli_queue_scope") as role:
        ok(dsn, "grant", role, "enqueuer", "--queue", "email", "--queue", "sms")
        listed = json.loads(ok(dsn, "grants", role, "--json").stdout)
        assert [(g["resource"], g["name"]) for g in listed] == [
            ("queue", "email"),
            ("queue", "sms"),
        ]
        assert "revoked 1 grant(s)" in ok(dsn, "revoke", role, "--queue", "sms").stdout
        assert [g.name for g in client.grants(role)] == ["email"]
        with postroom.connect(make_conninfo(dsn, user=role)) as as_role:
            as_role.enqueue("send", {"to": "a"}, queue="email")
            with pytest.raises(postroom.errors.PermissionDenied):
                as_role.enqueue("send", {"to": "b"}, queue="sms")
        # The every-queue grant is listed as '*' and revoked by that name; a role left with no
        # queue grant may use no queue.
        ok(dsn, "grant", role, "enqueuer")
        assert ("queue", "*") in [(g.resource, g.name) for g in client.grants(role)]
        assert client.revoke(role, queues=["*", "email"]) == 2
        assert client.grants(role) == []
        with postroom.connect(make_conninfo(dsn, user=role)) as as_role:
            with pytest.raises(postroom.errors.PermissionDenied):
                as_role.enqueue("send", {"to": "c"}, queue="email")
        result = run(dsn, "revoke", role, "--queue", "bad name")
        assert result.exit_code == 1 and result.stderr.startswith("error: invalid queue name")
