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
    repo         checkout of pcem-spark on the Airflow worker     (none: set it)
    jobs_dir     folder holding the entry points                 (<repo>/jobs)
    config       settings file passed as --config                 (<repo>/conf/20ng.toml)
    data_root    folder of the per-date outputs                   (<repo>/out/airflow)
    archive      20news-bydate.tar.gz                             (<repo>/../shared/data/20news-bydate.tar.gz)
    py_files     --py-files zip (scripts/package.sh: dist/pcem_spark.zip)          (empty: none)
    env_archive  executors' Python env (scripts/package.sh: dist/pcem_env.tar.gz)  (empty: none)
    driver_python  client-mode driver's Python   (empty: with env_archive the worker's own Python,
                 else Spark's choice: PYSPARK_DRIVER_PYTHON, PYSPARK_PYTHON, python3)
    spark_conf   JSON object of extra --conf settings             ({})

``repo`` has no default. Not the folder above this file: the DAG file is
usually copied into Airflow's DAG folder, where that folder is $AIRFLOW_HOME
and every path under it would be wrong without a word; nor the worker's
current folder, which says no more. Set the Variable ``pcem_repo`` to the
checkout on the workers (``airflow variables set pcem_repo /opt/pcem-spark``),
or set ``jobs_dir``, ``config``, ``data_root`` and ``archive`` each. A task
that needs a setting which is still empty fails at once, not retried
(``AirflowFailException``), naming the setting and its Variable.

The package with its ``airflow`` extra (``pip install ".[airflow]"`` in a checkout) is installed on the Airflow
workers, where each task runs spark-submit and, in client deploy mode, the
Spark driver; the executors get it from ``py_files`` / ``env_archive`` or their
own installation. The operator comes from the package
(``pcem_spark/ops/airflow_submit.py``), shared with ``dags/pcem_crawl_dag.py``.

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
pcem-spark); every other failure (75, a lost connection) is retried ``retries``
times (2, 5 minutes apart). In cluster deploy mode the exit code of
spark-submit is not the application's, so every failure is retried.
"""

from __future__ import annotations

from datetime import datetime, timedelta

try:  # Airflow 3
    from airflow.sdk import DAG, Param
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.models.param import Param

from pcem_spark.ops.airflow_submit import DEFAULT_CONN_ID, Follows, PcemSparkSubmitOperator, Settings

DAG_ID = "pcem_20ng"

# A Follows default moves with the setting it follows: setting Variable pcem_repo moves jobs_dir,
# config, data_root and archive with it. No default is derived from this file's location: a copy of
# it in Airflow's DAG folder would point them into $AIRFLOW_HOME.
SETTINGS = Settings(
    {
        "conn_id": DEFAULT_CONN_ID,
        "repo": "",
        "jobs_dir": Follows("repo", "/jobs"),
        "config": Follows("repo", "/conf/20ng.toml"),
        "data_root": Follows("repo", "/out/airflow"),
        "archive": Follows("repo", "/../shared/data/20news-bydate.tar.gz"),
        "py_files": "",
        "env_archive": "",
        "driver_python": "",
        "spark_conf": "{}",
    }
)
setting = SETTINGS.template

RUN_DIR = setting("data_root") + "/{{ ds }}"
DOCS = RUN_DIR + "/docs.jsonl.gz"
MODEL = RUN_DIR + "/model"
PREDICTIONS = RUN_DIR + "/predictions"
METRICS = RUN_DIR + "/metrics.json"
COMMON_ARGS = ["--config", setting("config")]
REQUIRED = ("jobs_dir", "config", "data_root")


def job(name: str) -> str:
    return setting("jobs_dir") + "/" + name


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
        **SETTINGS.params(),
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

    def submit(task_id: str, application: str, args: list, required=()) -> PcemSparkSubmitOperator:
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
            pcem_required=SETTINGS.required(*REQUIRED, *required),
        )

    ingest = submit(
        "ingest",
        job("ingest_20ng.py"),
        ["--archive", setting("archive"), "--output", DOCS, "--overwrite"],
        required=("archive",),
    )
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
