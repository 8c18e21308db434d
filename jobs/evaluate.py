"""spark-submit entry point for `pcem evaluate`.

    spark-submit jobs/evaluate.py [options of `pcem evaluate --help`]

The SparkSession is built inside main() (never at import time); settings come
from the package defaults, $PCEM_CONFIG and --config and spark-submit's own --master / --conf.
"""

import sys

from pcem_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate"] + sys.argv[1:]))
