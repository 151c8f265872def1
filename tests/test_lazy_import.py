"""``import postroom`` imports nothing heavy: each public name is imported on first use (PEP
562), and every name of ``postroom.__all__`` resolves to the object its module defines. No
database."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import postroom


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


# What `import postroom` used to pull in (~150-300 ms); none of it may load until used.
HEAVY = ("psycopg", "psycopg_pool", "asyncio", "opentelemetry", "rich", "typer")


def test_import_postroom_imports_no_submodule_and_nothing_heavy() -> None:
    loaded = modules_after("import postroom")
    assert not {m for m in loaded if m.startswith("postroom.")}
    assert not {m for m in loaded if m.split(".")[0] in HEAVY}


def test_one_name_imports_its_part_only() -> None:
    # The relay's names need the relay and the log engine, never the queue's worker or the client.
    loaded = modules_after("import postroom\npostroom.Route")
    assert "postroom.relay" in loaded
    assert not {"postroom.client", "postroom.client_async", "postroom.queue.worker"} & loaded


def test_every_public_name_resolves_to_its_module_s_object() -> None:
    assert set(postroom._PUBLIC) == set(postroom.__all__)
    assert len(postroom.__all__) == len(set(postroom.__all__))
    for name in postroom.__all__:
        module = importlib.import_module(postroom._PUBLIC[name])
        expected = module if name == "errors" else getattr(module, name)
        assert getattr(postroom, name) is expected, name


def test_star_import_and_dir_give_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from postroom import *", namespace)
    assert set(postroom.__all__) <= set(namespace)
    assert set(postroom.__all__) <= set(dir(postroom))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="'postroom' has no attribute 'Nope'"):
        postroom.Nope  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(postroom, "Nope")
