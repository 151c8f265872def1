"""A long history-checking run (issue 18, docs/guarantees.md): the workload of
tests/history/ with its nemesis against a throwaway PostgreSQL, then the checker.

    PYTHONPATH=$PWD/src python tools/history.py --minutes 30 [--seed S] [--workdir DIR]

Prints the seed first (a random one unless given; the same seed gives the same fault schedule),
then the faults, the allowed counts (redeliveries, reruns) and every anomaly with its history
excerpt. Exits 1 if the checker found an anomaly, 0 if not. The history stays in the workdir
(``history.jsonl``) for ``--check-only``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.history.checker import check
from tests.history.recorder import read_history
from tests.history.workload import run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--url", default=None, help="your server: runs in a database of its own, without restarts"
    )
    parser.add_argument("--check-only", type=Path, default=None, metavar="HISTORY")
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="ROLE=BUG",
        help="inject a bug into a role's processes (tests/history/clients.py)",
    )
    args = parser.parse_args()
    if args.check_only is not None:
        report = check(read_history(args.check_only))
        print(report.render())
        return 0 if report.valid else 1
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"seed {seed}", flush=True)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"postroom-history-{seed}-"))
    faults = dict(item.split("=", 1) for item in args.fault)
    result = run(
        args.minutes * 60,
        seed,
        workdir,
        faults=faults,
        log=lambda line: print(line, flush=True),
        server_url=args.url,
    )
    kinds: dict[str, int] = {}
    for fault in result.faults:
        kinds[fault.kind] = kinds.get(fault.kind, 0) + 1
    print(f"faults: {kinds}")
    print(f"operations: {result.operations}, drained: {result.drained}")
    for note in result.notes:
        print(f"note: {note}")
    print(result.report.render())
    print(f"history: {result.history}")
    return 0 if result.report.valid else 1


if __name__ == "__main__":
    sys.exit(main())
