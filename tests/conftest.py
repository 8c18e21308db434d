"""One SparkSession for the whole test session (local[2], small shuffles)."""

import os
import sys

import pytest

SHARED_DATA = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
ARCHIVE_20NG = os.environ.get("PCEM_20NG_ARCHIVE", os.path.join(SHARED_DATA, "20news-bydate.tar.gz"))


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pcem-spark-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def archive_20ng():
    if not os.path.exists(ARCHIVE_20NG):
        pytest.skip(f"20 Newsgroups archive not found at {ARCHIVE_20NG} (set PCEM_20NG_ARCHIVE)")
    return ARCHIVE_20NG
