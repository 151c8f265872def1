"""The job queue benchmark; see ``postroom.benchmarks.queue`` (also ``postroom bench queue``)."""

import sys

from postroom.benchmarks.queue import main

sys.exit(main())
