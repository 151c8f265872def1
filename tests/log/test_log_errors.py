"""Bad input to the log API gives one postroom error naming what was wrong, never a raw
psycopg error (issue 10, item 13, log side). One test per input."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

import postroom
from postroom.cli.main import app
from postroom.errors import InvalidArgument, PermissionDenied, PostroomError, RoleNotFound


@pytest.fixture
def topic(any_client: postroom.Client) -> str:
    any_client.create_topic("t")
    return "t"


def test_nul_in_a_header_value(any_client: postroom.Client, topic: str) -> None:
    with pytest.raises(InvalidArgument, match=r"header 'h'.*NUL"):
        any_client.publish(topic, "v", headers={"h": "a\x00b"})


def test_nul_in_a_header_name(any_client: postroom.Client, topic: str) -> None:
    with pytest.raises(InvalidArgument, match=r"header name.*NUL"):
        any_client.publish(topic, "v", headers={"a\x00": "v"})


def test_lone_surrogate_in_a_header_value(any_client: postroom.Client, topic: str) -> None:
    with pytest.raises(InvalidArgument, match=r"value of header 'h'.*lone surrogate"):
        any_client.publish(topic, "v", headers={"h": "x\udc80"})


def test_lone_surrogate_in_a_header_name(any_client: postroom.Client, topic: str) -> None:
    with pytest.raises(InvalidArgument, match=r"header name.*lone surrogate"):
        any_client.publish(topic, "v", headers={"\ud800": "v"})


def test_lone_surrogate_in_a_key(any_client: postroom.Client, topic: str) -> None:
    with pytest.raises(InvalidArgument, match=r"invalid key.*lone surrogate"):
        any_client.publish(topic, "v", key="k\udc80")


def test_lone_surrogate_in_a_value(any_client: postroom.Client, topic: str) -> None:
    with pytest.raises(InvalidArgument, match=r"invalid value.*lone surrogate"):
        any_client.publish_batch(topic, ["ok", "bad\udc80"])
    assert any_client.describe_topic(topic).high_water == 0


def test_nul_in_a_key_or_value_is_fine(any_client: postroom.Client, topic: str) -> None:
    # Keys and values are bytes (bytea): NUL is data there, not an error.
    assert any_client.publish(topic, "a\x00b", key="k\x00").offset == 0


def test_grant_to_a_missing_role(any_client: postroom.Client) -> None:
    with pytest.raises(RoleNotFound, match="role 'nobody_here_at_all' does not exist"):
        any_client.grant("nobody_here_at_all", "producer")


@pytest.fixture
def consumer_role(any_client: postroom.Client) -> Iterator[str]:
    name = f"postroom_err_role_{os.getpid()}"
    with psycopg.connect(any_client.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    any_client.grant(name, "consumer")
    yield name
    with psycopg.connect(any_client.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_permission_denied_for_a_least_privilege_role(
    any_client: postroom.Client, topic: str, consumer_role: str
) -> None:
    with postroom.connect(make_conninfo(any_client.conninfo, user=consumer_role)) as as_consumer:
        with pytest.raises(PermissionDenied, match=r"permission denied.*grant") as caught:
            as_consumer.create_topic("other")
        with pytest.raises(PermissionDenied):
            as_consumer.publish(topic, "forged")
        with pytest.raises(PermissionDenied):
            as_consumer.apply_retention()
    assert isinstance(caught.value, PostroomError)
    assert isinstance(caught.value, psycopg.errors.InsufficientPrivilege)


def test_permission_denied_in_the_cli_is_one_line(
    any_client: postroom.Client, topic: str, consumer_role: str
) -> None:
    url = make_conninfo(any_client.conninfo, user=consumer_role)
    result = CliRunner().invoke(app, ["--url", url, "topic", "create", "other"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: permission denied")
    assert len(result.stderr.strip().splitlines()) == 1
