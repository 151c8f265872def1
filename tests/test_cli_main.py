"""The ``postroom`` command's frame: version, help, and one clear line for every error."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import psycopg
import pytest
import typer
from psycopg import sql
from psycopg.conninfo import make_conninfo
from typer.core import TyperGroup
from typer.testing import CliRunner, Result

import postroom
from postroom.cli.main import COMMANDS, app

runner = CliRunner()


def run(dsn: str, *args: str) -> Result:
    return runner.invoke(app, ["--url", dsn, *args])


def one_error_line(result: Result, message: str) -> None:
    assert result.exit_code == 1, (result.stdout, result.stderr, result.exception)
    assert result.stderr.startswith("error: "), result.stderr
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.output


def test_version_prints_the_installed_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"postroom {metadata.version('postroom')}"


def test_dash_h_is_help_and_names_every_use() -> None:
    for args in (["-h"], ["topic", "-h"], ["job", "-h"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, args
        assert "Usage: postroom" in result.stdout
    top = " ".join(runner.invoke(app, ["-h"]).stdout.split())
    assert "a partitioned log" in top and "a job queue" in top and "outbox" in top


def test_license_matches_pyproject() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "LICENSE"), encoding="utf-8") as file:
        text = file.read()
    assert "Apache License" in text and "Version 2.0" in text
    assert metadata.metadata("postroom")["License"] == "Apache-2.0"


def test_init_check_on_a_mixed_case_schema(dsn: str) -> None:
    # to_regclass() on an unquoted name folded it to lower case: `init --check` never passed.
    assert run(dsn, "--schema", "MixedCase", "init").exit_code == 0
    result = run(dsn, "--schema", "MixedCase", "init", "--check")
    assert result.exit_code == 0, result.output
    assert "is up to date" in result.stdout


@pytest.fixture
def bare_role(dsn: str) -> Iterator[str]:
    """A LOGIN role granted nothing (cluster-wide, so uniquely named)."""
    name = f"postroom_cli_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_a_permission_error_is_one_line_not_a_traceback(dsn: str, bare_role: str) -> None:
    as_role = make_conninfo(dsn, user=bare_role)
    one_error_line(run(as_role, "topic", "list"), "permission denied")
    one_error_line(run(as_role, "job", "list"), "permission denied")


def test_a_producer_role_gets_one_line_for_what_it_may_not_do(
    client: postroom.Client, dsn: str, bare_role: str
) -> None:
    client.create_topic("orders")
    client.grant(bare_role, "producer")
    as_role = make_conninfo(dsn, user=bare_role)
    result = run(as_role, "topic", "delete", "orders", "--yes")
    assert result.exit_code == 1, result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.output
    assert [t.name for t in client.list_topics()] == ["orders"]


def test_the_installed_command_prints_one_line_on_a_permission_error(
    dsn: str, bare_role: str
) -> None:
    as_role = make_conninfo(dsn, user=bare_role)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "postroom"), "--url", as_role, "lag"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_help_lists_every_command_as_an_eagerly_built_app_does() -> None:
    # The root builds a command only when it runs or help lists it (COMMANDS); its help must be
    # what registering every command up front gives, word for word, at every level.
    eager = typer.Typer(
        name="postroom",
        cls=TyperGroup,
        no_args_is_help=True,
        add_completion=False,
        context_settings={"help_option_names": ["-h", "--help"]},
        help=app.info.help,
    )
    root = app.registered_callback
    assert root is not None and root.callback is not None
    eager.callback()(root.callback)
    for name, target in COMMANDS.items():
        module, attribute = target.split(":")
        found = getattr(importlib.import_module(f"postroom.cli.{module}"), attribute)
        if isinstance(found, typer.Typer):
            eager.add_typer(found, name=name)
        else:
            eager.command(name)(found)
    paths: list[list[str]] = [[]]
    for name, target in COMMANDS.items():
        paths.append([name])
        module, attribute = target.split(":")
        found = getattr(importlib.import_module(f"postroom.cli.{module}"), attribute)
        if isinstance(found, typer.Typer):
            paths += [[name, c.name or ""] for c in found.registered_commands]
    assert len(paths) > 40
    for path in paths:
        lazy, built = runner.invoke(app, [*path, "-h"]), runner.invoke(eager, [*path, "-h"])
        assert lazy.exit_code == built.exit_code == 0, (path, lazy.output)
        assert lazy.stdout == built.stdout, path
    listed = runner.invoke(app, ["-h"]).stdout
    assert all(f" {name} " in listed for name in COMMANDS)


def test_a_command_imports_its_own_module_only() -> None:
    # `postroom relay` (here stopped by its own argument check) imports no other command's
    # module, nor the dashboard, the benchmarks or the queue.
    probe = (
        "import json, sys\n"
        "from postroom.cli.main import main\n"
        "sys.argv = ['postroom', '--url', 'postgresql://nobody@127.0.0.1:1/x', 'relay', 't']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert "missing --to URL" in done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    others = {f"postroom.cli.{t.split(':')[0]}" for n, t in COMMANDS.items()} - {
        "postroom.cli.relay"
    }
    assert "postroom.cli.relay" in loaded
    assert not others & loaded
    assert not {"postroom.web", "postroom.benchmarks", "postroom.queue", "postroom.client"} & loaded
    # Nor typer 0.29's pydantic parsing (~100 ms at every start; pyproject bounds typer below).
    assert "pydantic" not in loaded


def test_a_mistyped_command_is_still_suggested() -> None:
    result = runner.invoke(app, ["topik"])
    assert result.exit_code == 2
    assert "Did you mean 'topic'?" in result.output


def test_every_command_has_a_one_line_summary() -> None:
    """The root's list shows each command's first help paragraph with its line breaks (typer's
    rich mode keeps them): a summary that spans lines lists as ragged lines. So every command
    opens its help with a one-line summary, details after a blank line."""
    ragged = []
    for name, target in COMMANDS.items():
        module, attribute = target.split(":")
        found = getattr(importlib.import_module(f"postroom.cli.{module}"), attribute)
        if isinstance(found, typer.Typer):
            commands = [(f"{name} {c.name}", c.callback) for c in found.registered_commands]
        else:
            commands = [(name, found)]
        for path, callback in commands:
            summary = inspect.cleandoc(getattr(callback, "__doc__", None) or "").split("\n\n")[0]
            if "\n" in summary:
                ragged.append(path)
    assert ragged == []
