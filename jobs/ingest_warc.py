"""spark-submit entry point for `pcem ingest-warc`.

    spark-submit jobs/ingest_warc.py [options of `pcem ingest-warc --help`]

The SparkSession is built inside main() (never at import time); settings come
from the package defaults, $PCEM_CONFIG and --config and spark-submit's own --master / --conf. The
executors need FastWARC and Resiliparse (the warc extra: pip install fastwarc resiliparse) and
memory for one whole input file per core (see pcem_spark/warc.py).
"""

import sys

from pcem_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["ingest-warc"] + sys.argv[1:]))
