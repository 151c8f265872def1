"""A URL that cannot be used never shows its password: not in ``connect()``'s error, not in its
traceback, not in the CLI's error line (issue 10, item 11).

libpq quotes the malformed part of a connection string in its own errors, so these use real
malformed URLs, each with a password in it.
"""

from __future__ import annotations

import asyncio
import traceback

import pytest
from typer.testing import CliRunner

import postroom
from postroom.cli.main import app
from postroom.errors import DatabaseUnavailable

PASSWORD = "Hunter2xyz"

MALFORMED = {
    "scheme typo": (f"postgress://bob:{PASSWORD}@127.0.0.1:5432/app", "unknown URL scheme"),
    "space in the password": (f"postgresql://bob:{PASSWORD} x@127.0.0.1:5432/app", "%20"),
    "space in the database name": (f"postgresql://bob:{PASSWORD}@127.0.0.1:5432/my app", "%20"),
    "bad percent escape": (f"postgresql://bob:{PASSWORD}%zz@127.0.0.1:5432/app", "%25"),
    "one slash": (f"postgresql:/bob:{PASSWORD}@127.0.0.1/app", "does not parse"),
    "key=value with a space": (f"host=127.0.0.1 password={PASSWORD} x user=bob", "does not parse"),
}
UNREACHABLE = {
    "refused port": f"postgresql://bob:{PASSWORD}@127.0.0.1:1/app",
    "bad port number": f"postgresql://bob:{PASSWORD}@127.0.0.1:54x32/app",
    "bad sslmode": f"postgresql://bob:{PASSWORD}@127.0.0.1:1/app?sslmode=sometimes",
}


def _shown(exc: BaseException) -> str:
    """Everything a person could see of the error: message and full traceback with causes."""
    return "".join(traceback.format_exception(exc))


@pytest.mark.parametrize("url,hint", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_url_is_refused_without_its_password(url: str, hint: str) -> None:
    with pytest.raises(DatabaseUnavailable, match="cannot connect to PostgreSQL") as caught:
        postroom.connect(url)
    assert hint in str(caught.value)
    assert PASSWORD not in _shown(caught.value)


@pytest.mark.parametrize("url,hint", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_url_is_refused_without_its_password_async(url: str, hint: str) -> None:
    with pytest.raises(DatabaseUnavailable, match="cannot connect to PostgreSQL") as caught:
        asyncio.run(postroom.connect_async(url))
    assert hint in str(caught.value)
    assert PASSWORD not in _shown(caught.value)


@pytest.mark.parametrize("url", UNREACHABLE.values(), ids=UNREACHABLE.keys())
def test_an_unreachable_target_is_named_without_its_password(url: str) -> None:
    with pytest.raises(DatabaseUnavailable, match=r"at host=127\.0\.0\.1 port=") as caught:
        postroom.connect(url)
    assert "user=bob" in str(caught.value)
    assert PASSWORD not in _shown(caught.value)


@pytest.mark.parametrize(
    "url", [*(u for u, _ in MALFORMED.values()), *UNREACHABLE.values()], ids=str
)
def test_the_cli_error_line_never_shows_the_password(url: str) -> None:
    result = CliRunner().invoke(app, ["--url", url, "topic", "list"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot connect to PostgreSQL")
    assert len(result.stderr.strip().splitlines()) == 1
    assert PASSWORD not in result.output
    assert result.exception is None or PASSWORD not in _shown(result.exception)
