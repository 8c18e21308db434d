"""Airflow DAG ``pcem_20ng``: ingest -> train -> predict -> evaluate, each a ``spark-submit``.

Each task runs one of the repository's spark-submit entry points (``jobs/*.py``)
through the apache-spark provider's ``SparkSubmitOperator``:

    ingest    jobs/ingest_20ng.py  --archive A --output RUN/docs.jsonl.gz --overwrite
    train     jobs/train.py        --docs RUN/docs.jsonl.gz --split train --label-rate R --model RUN/model --overwrite
    predict   jobs/predict.py      --model RUN/model --docs ... --split test --output RUN/predictions --overwrite
    evaluate  jobs/evaluate.py     --predictions RUN/predictions --model RUN/model --output RUN/metrics.json --overwrite

where ``RUN = <data_root>/<logical date, YYYY-MM-DD>``. Every output is keyed by
the logical date and written atomically (a temporary sibling moved into place
with its ``_PCEM_COMPLETE`` marker, see ``pcem_spark/io/outputs.py``), and every
writer replaces what a failed or earlier try of the same date left, so a retry
or a cleared task of the same date is safe.

Settings. Each of the names below is read, in this order, from the run's params
(``airflow dags trigger pcem_20ng --conf '{"data_root": "/data/pcem"}'``), the
Airflow Variable ``pcem_<name>``, or the default:

    conn_id      Airflow connection of the Spark master           (pcem_spark)
    repo         checkout of pcem-spark on the Airflow worker     (the folder above dags/)
    jobs_dir     folder holding the entry points                 (<repo>/jobs)
    config       settings file passed as --config                 (<repo>/conf/20ng.toml)
    data_root    folder of the per-date outputs                   (<repo>/out/airflow)
    archive      20news-bydate.tar.gz                             (<repo>/../shared/data/20news-bydate.tar.gz)
    py_files     --py-files zip (scripts/package.sh: dist/pcem_spark.zip)          (empty: none)
    env_archive  executors' Python env (scripts/package.sh: dist/pcem_env.tar.gz)  (empty: none)
    driver_python  client-mode driver's Python   (empty: with env_archive the worker's own Python,
                 else Spark's choice: PYSPARK_DRIVER_PYTHON, PYSPARK_PYTHON, python3)
    spark_conf   JSON object of extra --conf settings             ({})

With ``env_archive`` set, tasks get ``--archives <env_archive>#environment``
and ``--conf spark.pyspark.python=./environment/bin/python`` (Spark's "Python
Package Management" recipe); left empty, neither is passed and the executors
use the cluster's own Python. The model settings ``method``, ``label_rate``,
``seed``, ``train_split`` and ``test_split`` are plain params.

The connection ``pcem_spark`` (UI, or ``AIRFLOW_CONN_PCEM_SPARK``): a Spark
connection whose master is built from it by the provider, e.g.
``spark://spark-master:7077?deploy-mode=client`` (standalone),
``{"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client", "queue": "etl"}}``
(YARN), ``{"conn_type": "spark", "host": "k8s://https://api:6443"}`` or
``{"conn_type": "spark", "host": "local[2]"}``. ``spark-submit`` must be on the
worker's PATH (the pip-installed pyspark provides one).

``data_root`` must be a path that the Airflow worker (the driver, in client
mode) and every executor see alike, e.g. a shared mount: ``ingest-20ng`` writes
its JSON Lines and ``evaluate`` its metrics with plain file I/O on the driver,
while ``train`` / ``predict`` read and write through Spark.

Retries and exit codes. ``pcem`` exits 2 for bad input or settings (a retry
cannot help) and 75 for transient runtime failures (a retry may). spark-submit
in client mode exits with the application's code, but ``SparkSubmitOperator``
only raises a generic failure; :class:`PcemSparkSubmitOperator` reads the exit
code of the spark-submit process and raises ``AirflowFailException`` for 2, so
Airflow fails the task at once instead of retrying, and so does 1 (a bug in
pcem-spark); every other failure (75, a lost connection) is retried ``retries`` times. In cluster deploy mode the
exit code of spark-submit is not the application's, so every failure is retried.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from datetime import datetime, timedelta

try:  # Airflow 3
    from airflow.sdk import DAG, Param
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.models.param import Param
try:  # Airflow >= 3.1 (the same classes the provider raises; airflow.exceptions re-exports them)
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:
    from airflow.exceptions import AirflowException, AirflowFailException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

DAG_ID = "pcem_20ng"
VARIABLE_PREFIX = "pcem_"
# pcem_spark.cli.failures: EXIT_BUG and EXIT_BAD_INPUT (do not retry), EXIT_TRANSIENT (retry).
EXIT_BUG, EXIT_BAD_INPUT, EXIT_TRANSIENT = 1, 2, 75
NOT_RETRIED = {EXIT_BUG: "a bug in pcem-spark", EXIT_BAD_INPUT: "bad input or settings"}

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A default that is a (setting, suffix) pair follows that setting: setting Variable pcem_repo
# moves jobs_dir, config, data_root and archive with it.
DEFAULTS = {
    "conn_id": "pcem_spark",
    "repo": _REPO,
    "jobs_dir": ("repo", "/jobs"),
    "config": ("repo", "/conf/20ng.toml"),
    "data_root": ("repo", "/out/airflow"),
    "archive": ("repo", "/../shared/data/20news-bydate.tar.gz"),
    "py_files": "",
    "env_archive": "",
    "driver_python": "",
    "spark_conf": "{}",
}


def describe_default(name: str) -> str:
    default = DEFAULTS[name]
    return f"<{default[0]}>{default[1]}" if isinstance(default, tuple) else repr(default)


def _expression(name: str) -> str:
    default = DEFAULTS[name]
    fallback = f"({_expression(default[0])}) ~ {default[1]!r}" if isinstance(default, tuple) else repr(default)
    return (
        f"(params.{name} if params.{name} not in (None, '') else var.value.get('{VARIABLE_PREFIX}{name}', {fallback}))"
    )


def setting(name: str) -> str:
    """Jinja for one setting: the run's param if given, else Variable ``pcem_<name>``, else the default."""
    return "{{ " + _expression(name) + " }}"


RUN_DIR = setting("data_root") + "/{{ ds }}"
DOCS = RUN_DIR + "/docs.jsonl.gz"
MODEL = RUN_DIR + "/model"
PREDICTIONS = RUN_DIR + "/predictions"
METRICS = RUN_DIR + "/metrics.json"
COMMON_ARGS = ["--config", setting("config")]


def job(name: str) -> str:
    return setting("jobs_dir") + "/" + name


def submit_returncode(hook, error: BaseException):
    """The exit code of the hook's spark-submit process, or None when it did not run to an exit.

    The provider keeps the process as ``hook._submit_sp`` (a Popen) and names
    the code in its error ("... Error code is: 2."); the message is the fallback.
    """
    proc = getattr(hook, "_submit_sp", None)
    code = getattr(proc, "returncode", None)
    if isinstance(code, int):
        return code
    match = re.search(r"Error code is: (-?\d+)", str(error))
    return int(match.group(1)) if match else None


def parse_spark_conf(value) -> dict:
    """The ``spark_conf`` setting (a JSON object, or a dict param rendered as a Python literal) as a dict."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    text = str(value or "").strip() or "{}"
    try:
        parsed = json.loads(text)
    except ValueError:
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            parsed = None
    if not isinstance(parsed, dict):
        raise AirflowFailException(f"spark_conf must be a JSON object of Spark settings, got {text!r}")
    return {str(k): str(v) for k, v in parsed.items()}


class PcemSparkSubmitOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` that takes its connection and env archive from templates and knows pcem's exit codes.

    * ``pcem_conn_id`` (templated) replaces ``conn_id``;
    * ``pcem_env_archive`` (templated): when not empty, adds
      ``--archives <it>#environment`` and ``spark.pyspark.python=./environment/bin/python``;
    * ``pcem_driver_python`` (templated): in client mode, ``spark.pyspark.driver.python``;
      with an env archive it defaults to this worker's Python (``./environment`` exists
      only on the executors), without one Spark's own choice applies
      (PYSPARK_DRIVER_PYTHON, PYSPARK_PYTHON, python3);
    * ``pcem_spark_conf`` (templated JSON object): extra ``--conf`` settings;
    * spark-submit exit code 2 (bad input) or 1 (a bug) -> ``AirflowFailException``: no retry.
    """

    template_fields = tuple(SparkSubmitOperator.template_fields) + (
        "pcem_conn_id",
        "pcem_env_archive",
        "pcem_driver_python",
        "pcem_spark_conf",
    )

    def __init__(
        self,
        *,
        pcem_conn_id: str = "pcem_spark",
        pcem_env_archive: str = "",
        pcem_driver_python: str = "",
        pcem_spark_conf: str = "{}",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.pcem_conn_id = pcem_conn_id
        self.pcem_env_archive = pcem_env_archive
        self.pcem_driver_python = pcem_driver_python
        self.pcem_spark_conf = pcem_spark_conf

    def _apply_rendered(self) -> None:
        """Fold the rendered pcem_* fields into what the parent operator hands its hook."""
        self._conn_id = str(self.pcem_conn_id or "").strip() or str(DEFAULTS["conn_id"])
        conf = dict(self.conf or {})
        conf.update(parse_spark_conf(self.pcem_spark_conf))
        # A driver JVM out of heap exits (the task fails and is retried) instead of hanging
        # with a dead result-getter thread until the task's timeout.
        conf.setdefault("spark.driver.extraJavaOptions", "-XX:+ExitOnOutOfMemoryError")
        env_archive = str(self.pcem_env_archive or "").strip()
        driver_python = str(self.pcem_driver_python or "").strip()
        if env_archive:
            self._archives = env_archive if "#" in env_archive else env_archive + "#environment"
            conf.setdefault("spark.pyspark.python", "./environment/bin/python")
            # ./environment exists only where the archive is unpacked (the executors; the driver
            # too in cluster deploy mode): a client-mode driver runs here, with this Python.
            driver_python = driver_python or sys.executable
        if driver_python:
            self.conf = conf
            if self._get_hook()._connection["deploy_mode"] != "cluster":
                conf.setdefault("spark.pyspark.driver.python", driver_python)
        self.conf = conf
        self._hook = None  # rebuilt by execute() from the values above

    def execute(self, context):
        self._apply_rendered()
        try:
            return super().execute(context)
        except AirflowFailException:
            raise
        except AirflowException as exc:
            code = submit_returncode(self._hook, exc)
            if code in NOT_RETRIED:
                raise AirflowFailException(
                    f"{self.task_id}: spark-submit exited {code} ({NOT_RETRIED[code]}; not retried): {exc}"
                ) from exc
            raise


with DAG(
    dag_id=DAG_ID,
    description="pcem-spark on 20 Newsgroups: ingest -> train -> predict -> evaluate (spark-submit)",
    schedule="@weekly",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5), "owner": "pcem"},
    params={
        # Paths and connection: empty = Variable pcem_<name>, else the default above.
        **{
            name: Param(
                "",
                type=["null", "string"] + (["object"] if name == "spark_conf" else []),
                description=f"empty: Variable {VARIABLE_PREFIX}{name}, else {describe_default(name)}",
            )
            for name in DEFAULTS
        },
        "method": Param("pcem", type="string", description="pcnb | pcem | flat-nb | flat-em | ..."),
        "label_rate": Param(
            0.01,
            type="number",
            exclusiveMinimum=0,
            maximum=1,
            description="fraction of each leaf's training documents whose labels are kept",
        ),
        "seed": Param(0, type="integer"),
        "train_split": Param("train", type="string"),
        "test_split": Param("test", type="string"),
    },
    tags=["pcem", "spark"],
    doc_md=__doc__,
) as dag:

    def submit(task_id: str, application: str, args: list) -> PcemSparkSubmitOperator:
        return PcemSparkSubmitOperator(
            task_id=task_id,
            name=f"pcem-{task_id}-{{{{ ds_nodash }}}}",
            application=application,
            application_args=args + COMMON_ARGS,
            pcem_conn_id=setting("conn_id"),
            py_files=setting("py_files"),
            pcem_env_archive=setting("env_archive"),
            pcem_driver_python=setting("driver_python"),
            pcem_spark_conf=setting("spark_conf"),
        )

    ingest = submit("ingest", job("ingest_20ng.py"), ["--archive", setting("archive"), "--output", DOCS, "--overwrite"])
    train = submit(
        "train",
        job("train.py"),
        [
            "--docs",
            DOCS,
            "--split",
            "{{ params.train_split }}",
            "--method",
            "{{ params.method }}",
            "--label-rate",
            "{{ params.label_rate }}",
            "--seed",
            "{{ params.seed }}",
            "--model",
            MODEL,
            "--overwrite",
        ],
    )
    predict = submit(
        "predict",
        job("predict.py"),
        [
            "--model",
            MODEL,
            "--docs",
            DOCS,
            "--split",
            "{{ params.test_split }}",
            "--output",
            PREDICTIONS,
            "--overwrite",
        ],
    )
    evaluate = submit(
        "evaluate",
        job("evaluate.py"),
        ["--predictions", PREDICTIONS, "--model", MODEL, "--output", METRICS, "--overwrite"],
    )

    ingest >> train >> predict >> evaluate
