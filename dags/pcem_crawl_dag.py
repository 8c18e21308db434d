"""Airflow DAG ``pcem_crawl``: each day's crawl -> ingest -> train (warm start) -> predict -> inspect.

Every task is one ``spark-submit`` of ``pcem <command>`` (the entry point, see
``entry_point`` below, takes the command as its first argument):

    ingest   pcem ingest-warc --input CRAWL --output RUN/docs --overwrite
    train    pcem train --docs RUN/docs --init-model PREVIOUS --model RUN/model --overwrite
    predict  pcem predict --model RUN/model --docs RUN/docs --output RUN/predictions
                 --keep-columns url,crawl_date --partition-by crawl_date --overwrite
    inspect  pcem inspect --model RUN/model --output REPORTS/inspect --overwrite

each followed by ``--config <config>`` when that setting is set, where

* ``DAY`` = the start of the run's data interval, YYYY-MM-DD; for this ``@daily``
  schedule it is also the logical date, ``{{ ds }}``;
* ``RUN`` = ``<data_root>/DAY``: the run's outputs (``docs`` and its rejects
  ``docs_rejects``, ``model``, ``predictions`` with ``predictions_rejects``);
* ``REPORTS`` = ``<inspect_root>/DAY``, by default ``RUN``: ``inspect/model.md`` ...;
* ``CRAWL`` = the ``crawl_input`` setting: the day's WARC or WET files as
  ``pcem ingest-warc --input`` takes them -- paths, globs or folders,
  comma-separated, local or any Hadoop URI (``hdfs://``, ``s3a://``). Its value
  is rendered with the run's context, so a Variable or param may hold Airflow
  templates: ``s3a://crawl/{{ ds }}/*.warc.gz``,
  ``/crawl/CC-MAIN-{{ data_interval_start | ds_nodash }}-*.warc.wet.gz``.
  Default: ``<crawl_root>/DAY``, one folder per day under ``crawl_root``;
* ``PREVIOUS`` = the model of the last successful run of this DAG before this
  one, ``<data_root>/<its data interval start>/model``
  (``prev_data_interval_start_success``), else ``seed_model`` -- the model the
  team trained on labelled pages, which the first day warm-starts from. With
  neither, ``train`` fails at once, not retried, naming the ``seed_model``
  setting. Since it warm-starts, ``train`` accepts a day without any labelled
  page; the crawl has none, so there is no ``evaluate``.

Every output is written atomically (a hidden sibling moved into place with its
``_PCEM_COMPLETE`` marker) and every task passes ``--overwrite``, so a retry, a
cleared task or a rerun of the same day replaces what an earlier try left.

Settings. Each name below is read, in this order, from the run's params
(``airflow dags trigger pcem_crawl --conf '{"seed_model": "/data/models/seed"}'``),
the Airflow Variable ``pcem_<name>``, or the default. None is derived from this
file's location (a copy of it in Airflow's DAG folder would point into $AIRFLOW_HOME):

    conn_id        Airflow connection of the Spark master                (pcem_spark)
    data_root      folder of the per-day outputs RUN                      (none: required)
    inspect_root   local folder of the per-day inspection reports         (<data_root>)
    crawl_root     folder of the daily crawl folders <crawl_root>/DAY     (none)
    crawl_input    the day's WARC/WET input, templated                     (<crawl_root>/DAY; required)
    seed_model     model the first day warm-starts from                    (none: required until a run succeeds)
    config         settings file passed as --config                        (none: the package defaults)
    entry_point    the .py application spark-submit runs as `pcem <command> ...`
                   (the installed package's pcem_spark/cli/__main__.py, found on the worker)
    py_files       --py-files zip (scripts/package.sh: dist/pcem_spark.zip)          (none)
    env_archive    executors' Python env (scripts/package.sh: dist/pcem_env.tar.gz)  (none)
    driver_python  client-mode driver's Python (none: with env_archive the worker's own Python,
                   else Spark's choice: PYSPARK_DRIVER_PYTHON, PYSPARK_PYTHON, python3)
    spark_conf     JSON object of extra --conf settings                   ({})

A task whose required setting is empty fails at once, not retried
(``AirflowFailException``), naming the setting and its Variable. Plain params:
``keep_columns`` (``url,crawl_date``) and ``partition_by`` (``crawl_date``), the
predict options. ``crawl_date`` is the UTC day of the page's ``WARC-Date`` (the
full time is the ``crawl_time`` column, which ``keep_columns`` may add), so a
day's predictions land in one folder ``crawl_date=YYYY-MM-DD`` (a crawl file
spanning midnight gives two).

``pcem inspect`` writes plain files on the driver (the Airflow worker, in client
deploy mode): when ``data_root`` is a Hadoop URI (``hdfs://``, ``s3a://``), set
``inspect_root`` to a local folder there.

``entry_point``'s default is located from the ``pcem_spark`` package this
Python imports (``importlib.util.find_spec``), so no checkout is needed on the
workers; set it to a copy of that file (or to any script that runs
``pcem_spark.cli.main()`` on its arguments) when spark-submit must find it
elsewhere, e.g. on ``hdfs://`` in cluster deploy mode. (``jobs/*.py`` take no
command argument, and there is no ``jobs/inspect.py``.)

What goes where:

* Airflow workers: the package with its ``airflow`` and ``warc`` extras (Airflow's Spark
  provider, FastWARC and Resiliparse); it is not on PyPI: ``pip install ".[airflow,warc]"``
  in a checkout, or the wheel ``python -m build`` makes. Each task runs ``spark-submit`` there and,
  in client deploy mode, the Spark driver; ``spark-submit`` must be on the PATH (pyspark's).
  The scheduler and DAG processor need the package too: this file imports its operator
  (``pcem_spark/ops/airflow_submit.py``, shared with ``dags/pcem_dag.py``).
* Spark executors: the package and the ``warc`` extra, installed there or shipped
  with ``py_files`` plus ``env_archive`` (``scripts/package.sh``).
* Airflow's DAG folder: this file, alone.
* Variables (``airflow variables set pcem_data_root /shared/pcem/crawl`` ...):
  ``pcem_data_root``, ``pcem_crawl_root`` or ``pcem_crawl_input``, ``pcem_seed_model``,
  usually ``pcem_config``; the connection ``pcem_spark`` (e.g.
  ``AIRFLOW_CONN_PCEM_SPARK='spark://spark-master:7077?deploy-mode=client'``).
* ``data_root``, ``crawl_input`` and ``seed_model`` must be paths that the worker
  (the driver) and every executor see alike: a shared mount or a Hadoop URI;
  ``inspect_root`` a local path on the worker.

Retries and exit codes. Tasks retry twice, 5 minutes apart; ``pcem`` exits 2
for bad input or settings and 1 for a bug in pcem-spark: the operator reads
spark-submit's exit code and fails the task at once on either
(``AirflowFailException``, no retry); 75 (a transient failure) and every other
failure (a lost connection) are retried. In cluster deploy mode spark-submit's
exit code is not the application's, so every failure is retried.
"""

from __future__ import annotations

from datetime import datetime, timedelta

try:  # Airflow 3
    from airflow.sdk import DAG, Param
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.models.param import Param

from pcem_spark.ops.airflow_submit import (
    DEFAULT_CONN_ID,
    Follows,
    PcemSparkSubmitOperator,
    Settings,
    installed_cli_main,
    template_filters,
)

DAG_ID = "pcem_crawl"

SETTINGS = Settings(
    {
        "conn_id": DEFAULT_CONN_ID,
        "data_root": "",
        "inspect_root": Follows("data_root", ""),
        "crawl_root": "",
        "crawl_input": Follows("crawl_root", "/{{ data_interval_start | ds }}"),
        "seed_model": "",
        "config": "",
        "entry_point": installed_cli_main(),
        "py_files": "",
        "env_archive": "",
        "driver_python": "",
        "spark_conf": "{}",
    }
)
setting = SETTINGS.template

# Keyed by the data interval's start, which prev_data_interval_start_success names for the last
# successful run: the two always agree (and equal {{ ds }} for this @daily schedule).
DAY = "{{ data_interval_start | ds }}"
RUN_DIR = setting("data_root") + "/" + DAY
DOCS = RUN_DIR + "/docs"
MODEL = RUN_DIR + "/model"
PREDICTIONS = RUN_DIR + "/predictions"
INSPECT = setting("inspect_root") + "/" + DAY + "/inspect"
CRAWL = setting("crawl_input", expand=True)
PREVIOUS_MODEL = (
    "{% if prev_data_interval_start_success %}"
    + setting("data_root")
    + "/{{ prev_data_interval_start_success | ds }}/model"
    + "{% else %}"
    + setting("seed_model")
    + "{% endif %}"
)
NO_PREVIOUS_MODEL = (
    "no model to warm-start from: this DAG has no earlier successful run and the seed_model setting "
    "is empty; set the Airflow Variable pcem_seed_model (or the run param seed_model) to the model "
    "trained on labelled pages"
)

with DAG(
    dag_id=DAG_ID,
    description="pcem-spark on a daily web crawl: ingest-warc -> train (warm start) -> predict -> inspect",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5), "owner": "pcem"},
    params={
        # Paths and connection: empty = Variable pcem_<name>, else the default above.
        **SETTINGS.params(),
        "keep_columns": Param("url,crawl_date", type="string", description="pcem predict --keep-columns"),
        "partition_by": Param(
            "crawl_date", type="string", description='pcem predict --partition-by (level1, or "" for none)'
        ),
    },
    user_defined_filters=template_filters(),
    tags=["pcem", "spark", "crawl"],
    doc_md=__doc__,
) as dag:

    def submit(task_id: str, command: str, args: list, required: dict) -> PcemSparkSubmitOperator:
        return PcemSparkSubmitOperator(
            task_id=task_id,
            name=f"pcem-{task_id}-{{{{ ds_nodash }}}}",
            application=setting("entry_point"),
            application_args=[command] + args,
            pcem_conn_id=setting("conn_id"),
            py_files=setting("py_files"),
            pcem_env_archive=setting("env_archive"),
            pcem_driver_python=setting("driver_python"),
            pcem_spark_conf=setting("spark_conf"),
            pcem_optional_args={"--config": setting("config")},
            pcem_required={**SETTINGS.required("data_root", "entry_point"), **required},
        )

    ingest = submit(
        "ingest",
        "ingest-warc",
        ["--input", CRAWL, "--output", DOCS, "--overwrite"],
        SETTINGS.required("crawl_input"),
    )
    train = submit(
        "train",
        "train",
        ["--docs", DOCS, "--init-model", PREVIOUS_MODEL, "--model", MODEL, "--overwrite"],
        {NO_PREVIOUS_MODEL: PREVIOUS_MODEL},
    )
    predict = submit(
        "predict",
        "predict",
        [
            "--model",
            MODEL,
            "--docs",
            DOCS,
            "--output",
            PREDICTIONS,
            "--keep-columns",
            "{{ params.keep_columns }}",
            "--partition-by",
            "{{ params.partition_by }}",
            "--overwrite",
        ],
        {},
    )
    inspect = submit(
        "inspect", "inspect", ["--model", MODEL, "--output", INSPECT, "--overwrite"], SETTINGS.required("inspect_root")
    )

    ingest >> train >> predict >> inspect
