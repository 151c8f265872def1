"""docs/roles.md's table of what each log role may do, enforced: log in as each role and try
every row (issue 23: "docs state, per role, what it can and cannot do, and the tests enforce
that table"). A row the test does not know, or a cell other than yes/no, fails."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import postroom
from postroom import TopicPartition
from postroom.errors import PermissionDenied

from .roles import login_role

DOC = Path(__file__).parent.parent / "docs" / "roles.md"
ROLES = ("producer", "consumer", "admin")


def documented() -> dict[str, dict[str, bool]]:
    """The log table of docs/roles.md: operation -> role -> allowed."""
    text = DOC.read_text(encoding="utf-8")
    header = "| operation | " + " | ".join(ROLES) + " |"
    lines = text[text.index(header) :].splitlines()[2:]
    table: dict[str, dict[str, bool]] = {}
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        operation = re.sub(r"\s*\(.*\)$", "", cells[0])
        assert all(c in ("yes", "no") for c in cells[1:]), line
        table[operation] = dict(zip(ROLES, (c == "yes" for c in cells[1:]), strict=True))
    return table


Action = Callable[[postroom.Client, str], object]


def in_group(group: str) -> Action:
    def act(client: postroom.Client, _: str) -> None:
        with client.consumer(group, "granted") as consumer:
            consumer.poll(timeout=5)
            consumer.commit()

    return act


def sql(client: postroom.Client, statement: str) -> None:
    with psycopg.connect(client.conninfo) as conn:
        conn.execute(statement.encode()).fetchall()


def lock_group(client: postroom.Client, _: str) -> None:
    sql(client, "SELECT * FROM postroom.group_lock('theirs')")


def read_manually(client: postroom.Client, _: str) -> None:
    with client.consumer(None, "granted", partitions=[TopicPartition("granted", 0)]) as c:
        assert c.poll(timeout=5)


def read_status(client: postroom.Client, _: str) -> None:
    assert [s.group for s in client.relay_status(["theirs"])] == ["theirs"]
    assert "theirs" in {g.name for g in client.list_groups()}
    assert client.describe_group("theirs").partitions


ACTIONS: dict[str, Action] = {
    "publish to a granted topic": lambda c, _: c.publish("granted", "x"),
    "publish to a topic without a grant": lambda c, _: c.publish("theirs", "x"),
    "read a topic": read_manually,
    "consume and commit in a granted group": in_group("mine"),
    "consume in a group without a grant": in_group("theirs"),
    "lock a group without a grant": lock_group,
    "reset a group": lambda c, _: c.reset_group("theirs", "granted", to="earliest"),
    "create a topic": lambda c, _: c.create_topic("fresh"),
    "delete a topic": lambda c, _: c.delete_topic("doomed"),
    "grant or list scopes": lambda c, _: c.grants(),
    "run the retention round": lambda c, _: sql(c, "SELECT postroom.run_retention()"),
    "read relay and group status": read_status,
    "record a relay's sink error in a granted group": lambda c, _: sql(
        c, "SELECT postroom.relay_sink_error('mine', 'relay-1', 'SinkUnavailable: down')"
    ),
    "record a sink error in a group without a grant": lambda c, _: sql(
        c, "SELECT postroom.relay_sink_error('theirs', 'relay-1', 'SinkUnavailable: down')"
    ),
}


@pytest.fixture
def roles(client: postroom.Client) -> Iterator[dict[str, str]]:
    """One LOGIN role per column, granted its capability with the scopes the table means."""
    url = client.conninfo
    with (
        login_role(url, "postroom_tbl_producer") as producer,
        login_role(url, "postroom_tbl_consumer") as consumer,
        login_role(url, "postroom_tbl_admin") as admin,
    ):
        client.grant(producer, "producer", topics=["granted"])
        client.grant(consumer, "consumer", groups=["mine"])
        client.grant(admin, "admin")
        yield {"producer": producer, "consumer": consumer, "admin": admin}


def test_the_documented_table_names_every_operation_tested() -> None:
    assert sorted(documented()) == sorted(ACTIONS)


@pytest.mark.parametrize("role", ROLES)
def test_each_role_may_do_what_the_table_says_and_nothing_more(
    client: postroom.Client, roles: dict[str, str], role: str
) -> None:
    client.create_topic("granted")
    client.create_topic("theirs")
    client.publish("granted", "first")
    client.reset_group("theirs", "granted", to="earliest")
    for operation, allowed in documented().items():
        if "doomed" not in {t.name for t in client.list_topics()}:
            client.create_topic("doomed")
        with postroom.connect(make_conninfo(client.conninfo, user=roles[role])) as as_role:
            if allowed[role]:
                ACTIONS[operation](as_role, roles[role])
            else:
                with pytest.raises((PermissionDenied, psycopg.errors.InsufficientPrivilege)):
                    ACTIONS[operation](as_role, roles[role])
