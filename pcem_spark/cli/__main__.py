"""``python -m pcem_spark.cli``: the same as the ``pcem`` command."""

import sys

from pcem_spark.cli.app import main

sys.exit(main())
