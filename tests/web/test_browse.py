"""What the topic and job pages show, from a real database's rendered HTML: a partition seeked
by time starts at the first message written at or after it, a header filter keeps only the
messages whose headers contain it, a job's page lists its parents and dependents, and a
group's reset dry run to an offset or a time shows where each cursor would move."""

from __future__ import annotations

import html as markup
import re
from collections.abc import Callable
from urllib.parse import quote

import httpx
import psycopg

import postroom

from .conftest import DashboardServer
from .seed import Seeded


def _created_at(dsn: str, topic: str, offset: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT m.created_at FROM postroom.messages m JOIN postroom.topics t"
            ' ON t.id = m.topic_id WHERE t.name = %s AND m."offset" = %s',
            (topic, offset),
        ).fetchone()
    assert row is not None
    return str(row[0].isoformat())


def test_seek_a_partition_by_time(
    serve: Callable[..., DashboardServer], client: postroom.Client, dsn: str
) -> None:
    client.create_topic("ticks")
    for n in range(5):  # one transaction each: five distinct times
        client.publish("ticks", {"n": n})
    server = serve()
    at = _created_at(dsn, "ticks", 3)
    html = markup.unescape(httpx.get(f"{server.url}/topics/ticks?partition=0&at={quote(at)}").text)
    assert "from offset 3" in html
    assert '"n": 3' in html and '"n": 2' not in html
    later = httpx.get(f"{server.url}/topics/ticks?partition=0&at=2999-01-01T00:00:00%2B00:00")
    assert "from offset 5" in later.text


def test_filter_a_partition_by_header(
    serve: Callable[..., DashboardServer], seeded: Seeded
) -> None:
    server = serve()
    wanted = quote('{"type": "OrderCreated"}')
    shown = 0
    for partition in (0, 1):
        html = httpx.get(
            f"{server.url}/topics/orders?partition={partition}&offset=0&headers={wanted}"
        ).text
        rows = re.findall(r"<tr>.*?</tr>", html.split('id="messages"')[1], re.S)
        shown += sum("OrderCreated" in row for row in rows)
        assert not any("OrderPaid" in row for row in rows)
    assert shown == 10  # the odd-numbered of the 20 seeded orders


def test_a_jobs_page_shows_its_parents_and_dependents(
    serve: Callable[..., DashboardServer], seeded: Seeded, client: postroom.Client
) -> None:
    parent = client.enqueue("fine")
    child = client.enqueue("fine", after=[parent])
    server = serve()

    def workflow(job_id: int) -> str:
        html = httpx.get(f"{server.url}/jobs/{job_id}").text
        return html.split('id="workflow"')[1].split("</table>")[0]

    assert re.search(
        rf"parent</td><td><a href=\"/jobs/{parent.id}\">{parent.id}</a>", workflow(child.id)
    )
    assert re.search(
        rf"dependent</td><td><a href=\"/jobs/{child.id}\">{child.id}</a></td><td>fine</td>"
        r"<td>waiting",
        workflow(parent.id),
    )


def _preview(html: str) -> list[list[str]]:
    table = html.split('id="preview"')[1].split("</table>")[0]
    rows = re.findall(r"<tr><td>(.*?)</td></tr>", table, re.S)
    return [row.split("</td><td>") for row in rows]


def test_reset_dry_runs_to_an_offset_and_a_time_then_the_reset_to_an_offset(
    serve: Callable[..., DashboardServer], client: postroom.Client, dsn: str
) -> None:
    client.create_topic("ticks")
    for n in range(5):
        client.publish("ticks", {"n": n})
    with client.consumer("readers", "ticks") as consumer:
        assert len(consumer.poll(timeout=5, max_messages=4)) == 4
        consumer.commit()
    server = serve()
    base = f"{server.url}/groups/readers?topic=ticks&partition=0"
    assert _preview(httpx.get(f"{base}&to=offset&value=1").text) == [["0", "4", "1", "-3"]]
    at = quote(_created_at(dsn, "ticks", 2))
    assert _preview(httpx.get(f"{base}&to=time&value={at}").text) == [["0", "4", "2", "-2"]]
    assert client.describe_group("readers").partitions[0].committed == 4  # a dry run
    with httpx.Client(base_url=server.url) as http:
        page = http.get("/groups/readers?topic=ticks&to=offset&value=1&partition=0").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf
        form = {"csrf": csrf[1], "next": "/groups/readers", "group": "readers", "topic": "ticks"}
        http.post("/actions/reset-group", data={**form, "to": "offset", "value": "1"})
    assert client.describe_group("readers").partitions[0].committed == 1
