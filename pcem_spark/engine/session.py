"""Building the SparkSession -- only ever called from an entry point's ``main`` -- and
refusing a Spark Connect session where pcem-spark needs the classic API."""

from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from pyspark.sql import SparkSession

from pcem_spark.errors import InputError

__all__ = [
    "SparkSettings",
    "build_session",
    "is_local_master",
    "SparkConnectError",
    "is_spark_connect",
    "require_classic_session",
    "connect_requested",
    "setup_logging",
    "paths_are_local",
]


@dataclass
class SparkSettings:
    master: Optional[str] = None  # None: whatever spark-submit / the environment says
    app_name: str = "pcem-spark"
    conf: Dict[str, str] = field(default_factory=dict)


def build_session(settings: SparkSettings, connect_ok: bool = False) -> SparkSession:
    """Get or create the SparkSession described by ``settings``.

    Under spark-submit the master comes from the command line; ``master`` in
    the settings is only applied when the environment did not set one.
    ``connect_ok``: the caller runs on the DataFrame API alone (``pcem
    train|predict|evaluate|inspect``), so ``spark.remote`` / ``SPARK_REMOTE``
    / ``--remote`` give a Spark Connect client session; other callers refuse
    them with :class:`SparkConnectError` saying what they need.
    """
    # spark-submit starts the JVM first and hands the gateway to Python; its
    # --master must win over the settings file.
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    # Refused before connecting: with a master in the settings pyspark would fail with
    # CANNOT_CONFIGURE_SPARK_CONNECT_MASTER, which reads like a transient Spark failure.
    asked = connect_requested(settings)
    if asked and not connect_ok:
        raise _connect_error(_COMMANDS, _COMMANDS_NEED, f"{asked} asks for a Spark Connect session")
    if asked:
        return _connect_session(settings, asked)
    if not under_submit:
        # Local workers must run the driver's interpreter (where the package and
        # numpy/scipy are); on a cluster the executors' Python is the cluster's.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(settings.app_name)
    if settings.master and not under_submit:
        builder = builder.master(settings.master)
    for key, value in _loopback_binding(settings, under_submit).items():
        builder = builder.config(key, value)
    for key, value in settings.conf.items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    if not connect_ok:
        require_classic_session(spark, _COMMANDS, _COMMANDS_NEED)  # e.g. a Connect session made earlier
    if not is_spark_connect(spark):
        spark.sparkContext.setLogLevel("WARN")
        _quiet_loggers(spark)
        _register_session_secrets(spark, settings)
    return spark


log = logging.getLogger(__name__)

# Spark loggers whose warnings are about pcem's own hidden paths, not about the run: DataSource says "All paths
# were ignored" whenever a table is read back from its staged ".NAME.pcem-tmp-*" folder (a hidden name to Spark).
QUIET_LOGGERS = ("org.apache.spark.sql.execution.datasources.DataSource",)


def _quiet_loggers(spark) -> None:
    try:
        jvm = spark.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.ERROR
        for name in QUIET_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    except Exception as exc:  # noqa: BLE001 - a logging nicety never fails a run (another log backend)
        log.debug("could not quieten %s: %s", QUIET_LOGGERS, exc)


def _connect_session(settings: SparkSettings, asked: str) -> SparkSession:
    """A Spark Connect client session: the server decides master, memory and every static setting.

    Only ``spark.sql.*`` settings can be set by a client (per session); the
    others in ``[spark.conf]`` are the server's and are named in a warning.
    """
    conf = {k: str(v) for k, v in settings.conf.items()}
    url = conf.pop("spark.remote", "") or os.environ.get("SPARK_REMOTE", "")
    conf.pop("spark.api.mode", None)
    ignored = sorted(k for k in conf if not k.startswith("spark.sql."))
    if settings.master:
        ignored.insert(0, f"master={settings.master}")
    if ignored:
        logging.getLogger(__name__).warning(
            "%s: a Spark Connect session; these settings are the server's and are not applied: %s",
            asked,
            ", ".join(ignored),
        )
    builder = SparkSession.builder.appName(settings.app_name)
    builder = builder.remote(url) if url else builder.config("spark.api.mode", "connect")
    for key, value in conf.items():
        if key.startswith("spark.sql."):
            builder = builder.config(key, value)
    if url.startswith("sc://"):
        # What getOrCreate() does in a process without a session (a pcem process); in one that already runs a
        # classic SparkContext (main() called from a notebook or a test), getOrCreate() refuses a remote
        # session (SESSION_ALREADY_EXIST). A "local" remote starts its own server: getOrCreate() only.
        return builder.create()
    return builder.getOrCreate()


LOOPBACK = "127.0.0.1"
# Spark's local masters: local, local[N], local[*], local[N,F], local[*,F]. Not local-cluster[...]
# (a test mode with worker JVMs) nor any cluster master.
_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?")
_DRIVER_ADDRESS_KEYS = ("spark.driver.host", "spark.driver.bindAddress")


def is_local_master(master) -> bool:
    """True for a master URL that runs the whole job in the driver's JVM (``local``, ``local[2,3]``...)."""
    return bool(master) and _LOCAL_MASTER.fullmatch(str(master).strip()) is not None


def _effective_master(settings: SparkSettings) -> str:
    """The master the JVM will run with when pcem launches it ("" when something else may decide it).

    No master in the settings means pyspark's default, ``local[*]``, unless the
    environment can still name one: PYSPARK_SUBMIT_ARGS or MASTER, or a
    spark-defaults.conf (which may name a cluster whose executors must reach the driver).
    """
    master = settings.master or str(settings.conf.get("spark.master", "") or "")
    if master:
        return master
    if os.environ.get("PYSPARK_SUBMIT_ARGS") or os.environ.get("MASTER"):
        return ""
    spark_home = os.environ.get("SPARK_HOME", "")
    conf_dirs = [os.environ.get("SPARK_CONF_DIR", ""), os.path.join(spark_home, "conf") if spark_home else ""]
    if any(d and os.path.exists(os.path.join(d, "spark-defaults.conf")) for d in conf_dirs):
        return ""
    return "local[*]"


def paths_are_local(settings: SparkSettings) -> bool:
    """True when a path without a scheme names a local file for this run: pcem launches a local-master JVM
    itself (not spark-submit, not Spark Connect) and nothing names another default file system. Then such
    paths can be checked before the JVM starts (``cli.inputs.preflight``)."""
    if "PYSPARK_GATEWAY_PORT" in os.environ or connect_requested(settings):
        return False
    if os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR"):
        return False  # core-site.xml may name hdfs:// as the default file system
    if any(key.endswith("fs.defaultFS") or key.endswith("fs.default.name") for key in settings.conf):
        return False
    return is_local_master(_effective_master(settings))


def _jvm_state() -> Tuple[bool, bool]:
    """(a SparkContext is active, this process already has a JVM gateway)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None, SparkContext._gateway is not None


def _loopback_binding(settings: SparkSettings, under_submit: bool) -> Dict[str, str]:
    """Keep a local run's listening sockets on 127.0.0.1; returns the Spark settings to add.

    A local master has no executor elsewhere that needs to reach the driver, yet
    Spark listens beyond the machine: its web UI on SPARK_LOCAL_IP, else on every
    interface (``WebUI.initServer``; no Spark setting moves it), and the driver's
    RPC and block manager on ``spark.driver.bindAddress`` (default:
    ``spark.driver.host``, default: the machine's address). So, for a local master
    named by the settings (not under spark-submit, whose JVM and master are
    already chosen), this sets SPARK_LOCAL_IP=127.0.0.1 in the environment the
    JVM is launched with, and returns spark.driver.host / bindAddress =
    127.0.0.1. The UI stays on, reachable from the machine or an ssh tunnel.

    What the user set is kept: SPARK_LOCAL_IP in the environment (Spark then
    derives the driver's address from it, so the driver keys are not added
    either, unless it is 127.0.0.1), SPARK_LOCAL_HOSTNAME, and spark.driver.host
    or spark.driver.bindAddress in ``[spark.conf]`` (then neither key is added:
    Spark's fallback from one to the other applies). No master at all is
    pyspark's ``local[*]`` (:func:`_effective_master`). Cluster masters, a
    master the environment may still choose, and spark-submit are left
    entirely as configured.
    """
    if under_submit or not is_local_master(_effective_master(settings)):
        return {}
    active, jvm_running = _jvm_state()
    if active:
        return {}  # getOrCreate returns the running session: its sockets are already bound
    conf = {k: str(v) for k, v in settings.conf.items()}
    local_ip = os.environ.get("SPARK_LOCAL_IP", "")
    added: Dict[str, str] = {}
    if (
        not any(k in conf for k in _DRIVER_ADDRESS_KEYS)
        and local_ip in ("", LOOPBACK)
        and not os.environ.get("SPARK_LOCAL_HOSTNAME")
    ):
        added = {key: LOOPBACK for key in _DRIVER_ADDRESS_KEYS}
    if not local_ip:
        if jvm_running:
            # A session was stopped and another is made: the JVM's environment is fixed, so
            # the UI would listen on every interface. Off, unless the user asked for it.
            if "spark.ui.enabled" not in conf:
                added["spark.ui.enabled"] = "false"
                logging.getLogger(__name__).warning(
                    "the Spark UI is off: this process's JVM was started without SPARK_LOCAL_IP, "
                    "so the UI could not be bound to %s",
                    LOOPBACK,
                )
        else:
            os.environ["SPARK_LOCAL_IP"] = LOOPBACK  # read by the JVM launch_gateway starts
    return added


_COMMANDS = "pcem (its commands and jobs/*.py)"
_COMMANDS_NEED = "the driver's JVM (Hadoop file system calls, RDDs, broadcast variables)"


def connect_requested(settings: SparkSettings) -> str:
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


class SparkConnectError(InputError):
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
        "spark.api.mode=connect. Over Spark Connect, pcem-spark reads and checks documents, trains "
        "(PathEM, pcem_spark.ml.train), predicts, saves and loads models, and runs pcem train, predict, "
        'evaluate and inspect; see docs/CLUSTER.md, "Spark Connect".'
    )


def setup_logging(level: str = "INFO") -> None:
    """Log to stderr at ``level``; every handler of the root logger redacts what it writes, tracebacks
    included (:class:`pcem_spark.util.redaction.RedactingFormatter`): no secret reaches a task log."""
    from pcem_spark.util.redaction import redact_log_handlers

    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    redact_log_handlers(logging.getLogger())
    logging.getLogger("py4j").setLevel(logging.WARNING)


def _register_session_secrets(spark, settings: SparkSettings) -> None:
    """Redact the secrets of the session's own Spark settings too (spark-submit's ``--conf``, spark-defaults.conf),
    and follow its ``spark.redaction.regex`` when the settings name none."""
    from pcem_spark.util.redaction import REDACTION_REGEX_KEY, configure_redaction, register_secrets

    try:
        conf = dict(spark.sparkContext.getConf().getAll())
    except Exception as exc:  # noqa: BLE001 - never fails a run (a session without a SparkContext)
        log.debug("could not read the session's Spark settings for redaction: %s", exc)
        return
    if conf.get(REDACTION_REGEX_KEY) and REDACTION_REGEX_KEY not in settings.conf:
        try:
            configure_redaction(regex=conf[REDACTION_REGEX_KEY])
        except InputError as exc:  # Java syntax Python's re lacks: the current pattern stays
            log.warning("%s", exc)
    register_secrets(conf=conf)
