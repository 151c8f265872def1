"""The group page and the workers page show, per member, the partitions it holds with their
epochs, since when it is a member and its last heartbeat ("N s ago" and the time), read in
real Chromium from a real database."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg

import postroom

from .conftest import DashboardServer
from .seed import Seeded

AGO_AND_TIME = re.compile(r"^\d+(\.\d)? s ago (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC$")


def _heartbeat(dsn: str, member: str) -> tuple[datetime, datetime]:
    """The member's joined time and last heartbeat as the table holds them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT joined_at, expires_at - session_timeout FROM postroom.members"
            " WHERE group_name = 'watchers' AND member_id = %s",
            (member,),
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def _shown(cell: str) -> datetime:
    match = AGO_AND_TIME.match(cell.strip())
    assert match, f"{cell!r} is not 'N s ago' and the time"
    return datetime.strptime(match[2], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def _second(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(microsecond=0)


def test_members_show_partitions_epochs_joined_and_last_heartbeat(
    serve: Callable[..., DashboardServer],
    seeded: Seeded,
    page: Any,
    client: postroom.Client,
    dsn: str,
) -> None:
    server = serve()
    with client.consumer("watchers", "orders", session_timeout=30) as consumer:
        assert consumer.poll(timeout=5, max_messages=1)
        joined, before = _heartbeat(dsn, consumer.member_id)
        for path, table in (("/groups/watchers", "#members"), ("/workers", "#all-members")):
            page.goto(server.url + path)
            row = page.locator(f"{table} tr:has-text('{consumer.member_id}')")
            assert row.count() == 1, page.inner_text(table)
            holds = row.locator("td").last.inner_text()
            assert re.fullmatch(r"orders/0@\d+, orders/1@\d+", holds), holds
            assert _shown(row.locator("td.joined").inner_text()) == _second(joined)
            shown = _shown(row.locator("td.heartbeat").inner_text())
            _, after = _heartbeat(dsn, consumer.member_id)
            # A heartbeat may land while the page renders: it shows one between the two reads.
            assert _second(before) <= shown <= _second(after), (shown, before, after)
            assert "yes" in row.inner_text()
