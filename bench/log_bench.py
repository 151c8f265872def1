"""The log benchmark; see ``postroom.benchmarks.log`` (also ``postroom bench log``)."""

import sys

from postroom.benchmarks.log import main

# Guarded: the benchmark spawns worker processes, which import this file again.
if __name__ == "__main__":
    sys.exit(main())
