"""Who may see and do what: loopback only without a token, the token beyond it, CSRF on every
action, read-only sessions and the access hook, the audit log, no password on any page."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

import postroom
import postroom.web
from postroom.cli.main import app as cli

from ..roles import login_role
from .conftest import DashboardServer, outside_address
from .seed import Seeded
from .test_browser import PAGES


def _csrf(html: str) -> str:
    match = re.search(r'"X-CSRF-Token": "([0-9a-f]+)"', html)  # every page's htmx header
    assert match, "no CSRF field on the page"
    return match.group(1)


def test_the_cli_refuses_to_bind_beyond_loopback_without_a_token(dsn: str) -> None:
    result = CliRunner().invoke(cli, ["--url", dsn, "dashboard", "--host", "0.0.0.0"])
    assert result.exit_code == 1
    assert "refusing to serve the dashboard on '0.0.0.0' without a token" in result.output
    result = CliRunner().invoke(cli, ["--url", dsn, "metrics", "--serve", "9", "--host", "::"])
    assert result.exit_code == 1 and "without a token" in result.output
    postroom.web.check_exposure("127.0.0.1", None)
    postroom.web.check_exposure("::1", None)
    postroom.web.check_exposure("0.0.0.0", "secret")


def test_beyond_loopback_the_token_is_required(
    serve: Callable[..., DashboardServer], seeded: Seeded, page: Any
) -> None:
    address = outside_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to serve on")
    open_server = serve(host=address)  # an app without token nor hook, reached from outside
    assert httpx.get(open_server.url + "/").status_code == 403
    server = serve(host=address, token="s3cret-token")
    assert httpx.get(server.url + "/").status_code == 401
    assert httpx.get(server.url + "/metrics").status_code == 401
    assert httpx.get(server.url + "/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = httpx.get(server.url + "/metrics", headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200 and "postroom_up 1.0" in ok.text
    # In the browser: ?token= once sets the session cookie (not the token itself).
    assert page.goto(server.url + "/queues").status == 401
    assert page.goto(server.url + "/?token=s3cret-token").status == 200
    cookies = page.context.cookies()
    assert cookies and all("s3cret-token" not in c["value"] for c in cookies)
    assert all(c["httpOnly"] and c["sameSite"] == "Strict" for c in cookies)
    assert page.goto(server.url + "/queues").status == 200


def test_a_post_without_the_csrf_token_is_refused(
    serve: Callable[..., DashboardServer], seeded: Seeded, client: postroom.Client
) -> None:
    server = serve()
    job = {"id": str(seeded.failed_job), "next": "/"}
    refused = httpx.post(server.url + "/actions/retry", data=job)
    assert refused.status_code == 403 and "CSRF" in refused.text
    wrong = httpx.post(server.url + "/actions/retry", data={**job, "csrf": "0" * 64})
    assert wrong.status_code == 403
    csrf = _csrf(httpx.get(server.url + f"/jobs/{seeded.failed_job}").text)
    cross_site = httpx.post(
        server.url + "/actions/retry",
        data={**job, "csrf": csrf},
        headers={"Origin": "https://evil.example"},
    )
    assert cross_site.status_code == 403
    assert httpx.get(server.url + "/actions/retry").status_code == 405  # actions are POST only
    assert client.get_job(seeded.failed_job).state == "failed"
    done = httpx.post(server.url + "/actions/retry", data={**job, "csrf": csrf})
    assert done.status_code == 303
    assert client.get_job(seeded.failed_job).state == "ready"


def test_a_read_only_session_cannot_act(
    serve: Callable[..., DashboardServer], seeded: Seeded, client: postroom.Client, page: Any
) -> None:
    server = serve(read_only=True)
    page.goto(server.url + f"/jobs/{seeded.failed_job}")
    assert page.locator("button").count() == 0
    page.goto(server.url + "/queues")
    assert page.locator("button:text('Pause'), button:text('Run now')").count() == 0
    page.goto(server.url + "/deadletters?topic=orders.dlq")
    assert page.locator("#letters").count() == 1
    assert page.locator("button, input[name=letter]").count() == 1  # the filter's button only
    html = httpx.get(server.url + "/groups/billing?topic=orders&to=earliest").text
    assert "Reset as shown" not in html and 'id="preview"' in html  # the dry run still shows
    csrf = page.evaluate("JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token']")
    for path, data in [
        ("/actions/retry", {"id": str(seeded.failed_job)}),
        ("/actions/pause", {"queue": "default"}),
        ("/actions/replay", {"topic": "orders", "all": "1"}),
        ("/actions/replay", {"topic": "orders", "letter": "0:0"}),
        ("/actions/reset-group", {"group": "billing", "topic": "orders", "to": "earliest"}),
    ]:
        response = httpx.post(server.url + path, data={**data, "csrf": csrf, "next": "/"})
        assert response.status_code == 403 and "may not" in response.text, path
    assert client.get_job(seeded.failed_job).state == "failed"
    assert "default" not in client.job_stats().paused


def test_the_access_hook_allows_listed_actions_and_names_the_user(
    serve: Callable[..., DashboardServer], seeded: Seeded, client: postroom.Client
) -> None:
    audited: list[dict[str, Any]] = []

    def access(request: Any) -> postroom.web.Access | None:
        user = request.headers.get("x-user")
        if user is None:
            return None
        return postroom.web.Access(frozenset({"retry_job"}), user=user)

    server = serve(access=access, audit=audited.append)
    assert httpx.get(server.url + "/").status_code == 403
    me = {"x-user": "ada"}
    csrf = _csrf(httpx.get(server.url + f"/jobs/{seeded.failed_job}", headers=me).text)
    form = {"id": str(seeded.failed_job), "csrf": csrf, "next": "/"}
    cancel = httpx.post(server.url + "/actions/cancel", data=form, headers=me)
    assert cancel.status_code == 403
    assert httpx.post(server.url + "/actions/retry", data=form, headers=me).status_code == 303
    assert client.get_job(seeded.failed_job).state == "ready"
    [entry] = audited
    assert entry["user"] == "ada" and entry["action"] == "retry_job" and entry["rows"] == 1
    assert entry["target"] == f"jobs {seeded.failed_job}" and entry["at"]
    assert "ada" in httpx.get(server.url + "/audit", headers=me).text


def test_no_page_shows_the_password_and_values_can_be_hidden(
    serve: Callable[..., DashboardServer], seeded: Seeded, dsn: str
) -> None:
    server = serve(show_values=False)
    pages = ["/", "/topics/orders?offset=0", f"/jobs/{seeded.failed_job}", "/deadletters"]
    for path in pages:
        html = httpx.get(server.url + path).text
        assert "OrderCreated" not in html and '"n": 1' not in html, path
        assert "hidden" in html or path == "/"
        assert dsn not in html and "password" not in html.lower()


def test_access_hook_answers_are_checked() -> None:
    from postroom.errors import InvalidArgument
    from postroom.web._security import coerce_access

    assert coerce_access("read-only", "u") == postroom.web.Access(frozenset(), "u")
    assert coerce_access("full", "u") == postroom.web.Access(postroom.web.ACTIONS, "u")
    assert coerce_access(["retry_job"], "u") == postroom.web.Access(frozenset({"retry_job"}), "u")
    assert coerce_access(None, "u") is None
    with pytest.raises(InvalidArgument, match="unknown actions"):
        coerce_access(["drop_database"], "u")
    with pytest.raises(InvalidArgument, match="'full', 'read-only'"):
        coerce_access("admin", "u")


def test_a_read_only_database_role_gives_a_read_only_dashboard(
    serve: Callable[..., DashboardServer], seeded: Seeded, dsn: str, client: postroom.Client
) -> None:
    with login_role(dsn, "dash_ro") as role:
        with psycopg.connect(dsn, autocommit=True) as conn:
            # The grants docs/dashboard.md gives for a read-only dashboard.
            conn.execute(
                sql.SQL(
                    "GRANT USAGE ON SCHEMA postroom TO {role};"
                    " GRANT SELECT ON ALL TABLES IN SCHEMA postroom TO {role}"
                ).format(role=sql.Identifier(role))
            )
        url = make_conninfo(dsn, user=role)
        server = DashboardServer(postroom.web.app(url=url, sample_interval=0.5))
        try:
            for path in [*PAGES, f"/jobs/{seeded.failed_job}"]:
                assert httpx.get(server.url + path).status_code == 200, path
            page = httpx.get(server.url + f"/jobs/{seeded.failed_job}").text
            form = {"id": str(seeded.failed_job), "csrf": _csrf(page), "next": "/"}
            refused = httpx.post(server.url + "/actions/retry", data=form)
            assert refused.status_code == 303  # tried, and the count says it did nothing
            assert "retry%3A+0+of+1" in refused.headers["location"]
            pause = httpx.post(server.url + "/actions/pause", data={**form, "queue": "x"})
            assert pause.status_code == 400 and "grant" in pause.text, pause.text
        finally:
            server.stop()
    assert client.get_job(seeded.failed_job).state == "failed"


def test_bad_input_is_a_clear_error_not_a_traceback(
    serve: Callable[..., DashboardServer], seeded: Seeded
) -> None:
    server = serve()
    for path, status, text in [
        ("/topics/no-such-topic", 404, "no topic"),
        ("/groups/no-such-group", 404, "no-such-group"),
        ("/jobs/999999", 404, "999999"),
        ("/jobs?state=bogus", 400, "use one of"),
        ("/topics/orders?partition=9", 400, "no partition 9"),
        ("/topics/orders?offset=x", 400, "not a whole number"),
        ("/topics/orders?at=yesterday", 400, "not an ISO time"),
        ("/topics/orders?contains={bad", 400, "not JSON"),
        ("/groups/billing?topic=orders&to=time&value=soon", 400, "not an ISO time"),
        ("/api/series?pick=nope", 400, "use one of rate, lag"),
    ]:
        response = httpx.get(server.url + path)
        assert response.status_code == status and text in response.text, (path, response.text)
    csrf = _csrf(httpx.get(server.url + "/groups/billing").text)
    form = {"group": "billing", "topic": "orders", "to": "offset", "value": "abc", "csrf": csrf}
    response = httpx.post(server.url + "/actions/reset-group", data=form)
    assert response.status_code == 400 and "cannot reset billing on orders" in response.text
