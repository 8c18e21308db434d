"""spark-submit entry point for `pcem train`.

    spark-submit jobs/train.py [options of `pcem train --help`]

The SparkSession is built inside main() (never at import time); settings come
from the package defaults, $PCEM_CONFIG and --config and spark-submit's own --master / --conf.
"""

import sys

from pcem_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["train"] + sys.argv[1:]))
