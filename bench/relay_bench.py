"""The relay benchmark; see ``postroom.benchmarks.relay`` (also ``postroom bench relay``)."""

import sys

from postroom.benchmarks.relay import main

# Guarded: the benchmark starts relay processes.
if __name__ == "__main__":
    sys.exit(main())
