"""spark-submit entry point for `pcem ingest-20ng`.

    spark-submit jobs/ingest_20ng.py [options of `pcem ingest-20ng --help`]

The SparkSession is built inside main() (never at import time); settings come
from the package defaults, $PCEM_CONFIG and --config and spark-submit's own --master / --conf.
"""

import sys

from pcem_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["ingest-20ng"] + sys.argv[1:]))
