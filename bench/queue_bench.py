"""The job queue benchmark; see ``postroom.benchmarks.queue`` (also ``postroom bench queue``)."""

import sys

from postroom.benchmarks.queue import main

# Guarded: the benchmark spawns worker processes, which import this file again.
if __name__ == "__main__":
    sys.exit(main())
