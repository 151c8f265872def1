"""What every benchmark shares: figures (rates, percentiles), the run's context (server
settings, machine, load average), its schema, and its command line and output.

A benchmark module defines its ``Settings``, its phases, ``run(url, settings) -> dict``,
``format_report(result) -> str`` and ``main(argv)``, which calls :func:`parse_and_run`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql

# -- figures ----------------------------------------------------------------------------------


def rate(count: int, seconds: float) -> float:
    """Events per second (0 for an empty interval)."""
    return count / seconds if seconds > 0 else 0.0


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending sequence (0 when it is empty)."""
    if not ordered:
        return 0.0
    rank = max(1, round(fraction * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


# -- the run's context ------------------------------------------------------------------------


def rss_kb(pid: int | str = "self") -> dict[str, int]:
    """Resident set size now and at its peak (VmRSS, VmHWM) of a process, in KiB, from
    /proc (empty where there is no /proc)."""
    figures = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    figures[name] = int(value.split()[0])
    except OSError:
        pass
    return figures


def bounded(samples: Sequence[dict[str, Any]], keys: Sequence[str]) -> bool:
    """No unbounded growth: in each of ``keys``, the second half of the samples peaks at most
    1.5 times as high as the first half (too few samples: True)."""
    if len(samples) < 4:
        return True
    half = len(samples) // 2
    for key in keys:
        first = max(s[key] for s in samples[:half])
        second = max(s[key] for s in samples[half:])
        if second > 1.5 * max(first, 1):
            return False
    return True


def started_at() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def load_average() -> float | None:
    """The 1-minute load average: other work on the machine skews every figure, so it is
    recorded next to them (None where the OS has none)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def machine_info() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "loadavg_1m_at_start": load_average(),
    }


def server_info(url: str) -> dict[str, str]:
    """The server settings that decide what a commit costs."""
    with psycopg.connect(url, autocommit=True) as conn:
        settings = {}
        for name in ("server_version", "synchronous_commit", "fsync", "shared_buffers"):
            row = conn.execute(sql.SQL("SELECT current_setting({})").format(name)).fetchone()
            settings[name] = "" if row is None else str(row[0])
    return settings


def server_line(server: dict[str, str], machine: dict[str, Any]) -> str:
    """The report's second line: the server and the client stack."""
    return (
        f"PostgreSQL {server['server_version']} (synchronous_commit={server['synchronous_commit']},"
        f" fsync={server['fsync']}), {machine['cpus']} CPUs, Python {machine['python']}, "
        f"psycopg {machine['psycopg']}"
    )


def drop_schema(url: str, schema: str) -> None:
    """Drop a benchmark's own schema (never user data: each benchmark names its own)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# -- command line -----------------------------------------------------------------------------


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A benchmark's parser with the options every benchmark has: --url and --json (each
    benchmark adds --quick with its own meaning, and its own options)."""
    result = argparse.ArgumentParser(prog=prog, description=description)
    result.add_argument(
        "--url", help="PostgreSQL URL (default: POSTROOM_URL, DATABASE_URL, else embedded)"
    )
    result.add_argument("--json", action="store_true", help="print the figures as JSON")
    return result


def report(result: dict[str, Any], as_json: bool, format_report: Callable[[Any], str]) -> int:
    """Print the figures, as JSON or as the benchmark's report; the exit status."""
    if as_json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(result))
    return 0
