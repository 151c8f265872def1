"""The import-linter contracts in pyproject.toml name every package and every module that is not
public API, so a new module is covered the day it appears (`lint-imports` enforces them)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "postroom"

# What the CLI may import: the public API (see pyproject's comment) and itself. The benchmarks
# behind `postroom bench` have a contract of their own.
CLI_MAY_IMPORT = {
    "postroom.cli",
    "postroom.errors",
    "postroom.embedded",
    "postroom.web",
    "postroom.benchmarks",
    "postroom.bench",
}
BENCHMARKS = {"postroom.benchmarks", "postroom.bench"}


def _contracts() -> dict[str, dict[str, Any]]:
    with open(ROOT / "pyproject.toml", "rb") as file:
        config = tomllib.load(file)["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def _top_level_modules() -> set[str]:
    names = set()
    for path in PACKAGE.iterdir():
        if path.is_dir() and any(path.glob("*.py")):
            names.add(f"postroom.{path.name}")
        elif path.suffix == ".py" and path.name != "__init__.py":
            names.add(f"postroom.{path.stem}")
    return names


def test_every_folder_of_python_code_is_a_package() -> None:
    # import-linter does not see a folder without __init__.py (the queue was invisible so).
    for folder in PACKAGE.rglob("*"):
        if folder.is_dir() and any(folder.glob("*.py")):
            assert (folder / "__init__.py").exists(), f"{folder} has no __init__.py"


def test_the_cli_contract_forbids_every_module_outside_the_public_api() -> None:
    forbidden = set(_contracts()["the CLI uses the public API only"]["forbidden_modules"])
    missing = _top_level_modules() - CLI_MAY_IMPORT - forbidden
    assert not missing, f"add {sorted(missing)} to the CLI contract's forbidden_modules"


def test_the_layers_name_every_package() -> None:
    layers = " ".join(_contracts()["adapters sit on top of the engines"]["layers"])
    named = {word.strip("()") for word in layers.replace("|", " ").split()}
    packages = {
        name
        for name in _top_level_modules()
        if (PACKAGE / name.removeprefix("postroom.")).is_dir()
        and name not in BENCHMARKS
        and not name.startswith("postroom._")  # private helpers, not engines or adapters
    }
    missing = packages - named
    assert not missing, f"add {sorted(missing)} to the layers contract"
    for engine in ("postroom.log", "postroom.queue"):
        assert engine in named and f"({engine})" not in layers, f"{engine} must not be optional"


def test_engines_may_not_import_the_adapters() -> None:
    contract = _contracts()["engines do not import adapters"]
    assert {"postroom.log", "postroom.queue"} <= set(contract["source_modules"])
    assert "postroom.cli" in contract["forbidden_modules"]


# What the web adapter may import: the public API and the loader of its named queries.
WEB_MAY_IMPORT = {"postroom.web", "postroom.errors", "postroom._sql"}


def test_the_web_contract_forbids_every_module_outside_the_public_api() -> None:
    forbidden = set(_contracts()["the web uses the public API only"]["forbidden_modules"])
    missing = _top_level_modules() - WEB_MAY_IMPORT - forbidden - {"postroom.bench"}
    assert not missing, f"add {sorted(missing)} to the web contract's forbidden_modules"
