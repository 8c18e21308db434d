"""Building the SparkSession -- only ever called from an entry point's ``main`` -- and
refusing a Spark Connect session where pcem-spark needs the classic API."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

if TYPE_CHECKING:  # no package import at run time: engine, model and ml import this module
    from .config import SparkSettings


def build_session(settings: SparkSettings) -> SparkSession:
    """Get or create the SparkSession described by ``settings``.

    Under spark-submit the master comes from the command line; ``master`` in
    the settings is only applied when the environment did not set one.
    """
    # spark-submit starts the JVM first and hands the gateway to Python; its
    # --master must win over the settings file.
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    # Refused before connecting: with a master in the settings pyspark would fail with
    # CANNOT_CONFIGURE_SPARK_CONNECT_MASTER, which reads like a transient Spark failure.
    asked = _connect_requested(settings)
    if asked:
        raise _connect_error(_COMMANDS, _COMMANDS_NEED, f"{asked} asks for a Spark Connect session")
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
    require_classic_session(spark, _COMMANDS, _COMMANDS_NEED)  # e.g. a Connect session made earlier
    spark.sparkContext.setLogLevel("WARN")
    return spark


_COMMANDS = "pcem (its commands and jobs/*.py)"
_COMMANDS_NEED = "the driver's JVM (Hadoop file system calls, RDDs, broadcast variables)"


def _connect_requested(settings: SparkSettings) -> str:
    """The setting that would make ``getOrCreate`` return a Spark Connect session ("" if none)."""
    conf = {k: str(v) for k, v in settings.conf.items()}
    if conf.get("spark.remote"):
        return f"spark.remote={conf['spark.remote']}"
    if os.environ.get("SPARK_REMOTE"):
        return f"SPARK_REMOTE={os.environ['SPARK_REMOTE']}"
    if conf.get("spark.api.mode", "").strip().lower() == "connect":
        return "spark.api.mode=connect"
    if os.environ.get("SPARK_API_MODE", "").strip().lower() == "connect":
        return "SPARK_API_MODE=connect"
    return ""


class SparkConnectError(ValueError):
    """pcem-spark code that needs the RDD API or the driver's JVM got a Spark Connect session.

    A ValueError: the deployment is wrong, retrying will not help (``pcem``
    exits with 2, not with the scheduler's "retry" code).
    """


def is_spark_connect(obj) -> bool:
    """True when ``obj`` (a SparkSession or a DataFrame) belongs to a Spark Connect client.

    Spark Connect sessions and DataFrames are their own classes, under
    ``pyspark.sql.connect``: no SparkContext, RDDs, broadcast variables or
    JVM. Checked by module name, so it works (and says False) where the
    Connect client packages (grpcio, ...) are not installed.
    """
    return type(obj).__module__.startswith("pyspark.sql.connect.")


def require_classic_session(obj, what: str, needs: str = "the RDD API") -> None:
    """Raise :class:`SparkConnectError` if ``obj`` (session or DataFrame) is Spark Connect.

    ``what`` names the caller ("PathEM.fit"), ``needs`` what it uses that
    Spark Connect lacks ("cached RDD blocks and broadcast parameters"). Called
    at the entry of everything that needs the classic API, so the user sees
    this instead of an AttributeError / PySparkNotImplementedError minutes
    into a job.
    """
    if is_spark_connect(obj):
        raise _connect_error(what, needs, "this is a Spark Connect session (sc://...)")


def _connect_error(what: str, needs: str, why: str) -> SparkConnectError:
    return SparkConnectError(
        f"{what} needs {needs}, which Spark Connect does not provide, and {why}. Use a classic "
        "SparkSession: run the job with spark-submit, or build the session with "
        "SparkSession.builder.master(...).getOrCreate() -- without .remote(...), SPARK_REMOTE or "
        "spark.api.mode=connect. Over Spark Connect, pcem-spark can only read and check documents "
        "(pcem_spark.documents.read_documents with fmt='json' or 'parquet', split_rejects) and featurise them "
        "(pcem_spark.features); see docs/CLUSTER.md, \"Spark Connect\".")


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)

