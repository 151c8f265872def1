"""The log benchmark; see ``postroom.benchmarks.log`` (also ``postroom bench log``)."""

import sys

from postroom.benchmarks.log import main

sys.exit(main())
