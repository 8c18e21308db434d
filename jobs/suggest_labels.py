"""spark-submit entry point for `pcem suggest-labels`.

    spark-submit jobs/suggest_labels.py [options of `pcem suggest-labels --help`]

The SparkSession is built inside main() (never at import time); settings come
from the package defaults, $PCEM_CONFIG and --config and spark-submit's own --master / --conf.
"""

import sys

from pcem_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["suggest-labels"] + sys.argv[1:]))
