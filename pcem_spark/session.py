"""Building the SparkSession -- only ever called from an entry point's ``main``."""

from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession

from .config import SparkSettings


def build_session(settings: SparkSettings) -> SparkSession:
    """Get or create the SparkSession described by ``settings``.

    Under spark-submit the master comes from the command line; ``master`` in
    the settings is only applied when the environment did not set one.
    """
    # spark-submit starts the JVM first and hands the gateway to Python; its
    # --master must win over the settings file.
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if not under_submit:
        # Local workers must run the driver's interpreter (where the package and
        # numpy/scipy are); on a cluster the executors' Python is the cluster's.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(settings.app_name)
    if settings.master and not under_submit:
        builder = builder.master(settings.master)
    for key, value in settings.conf.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
