"""dags/pcem_crawl_dag.py under real Airflow, against a real Spark standalone cluster on 127.0.0.1.

* the DAG folder imports with no errors (DagBag) and ``pcem_crawl`` is
  ingest -> train -> predict -> inspect, each a spark-submit of the installed
  package's ``pcem_spark/cli/__main__.py <command>``, scheduled ``@daily``; no
  default names the DAG folder or $AIRFLOW_HOME;
* ``dag.test()`` runs two consecutive days over small generated WARC files (HTML
  pages about four topics, a 404 and an image per day): every task succeeds at
  its first try; day 1's train warm-starts from the seed model (trained here
  once with ``pcem train`` on labelled JSON Lines of the same topics) and day 2's
  from day 1's model, as Airflow's ``prev_data_interval_start_success`` names
  it; day 1 reads the default input ``<crawl_root>/<day>``, day 2 a param
  holding a template (``.../{{ ds }}/*.warc.gz``); the predictions are
  partitioned by ``crawl_date``, keep ``url`` and ``crawl_date`` and have one row
  per ingested document, the rejects counted apart; ``inspect`` wrote ``model.md``;
* with no seed model and no earlier successful run, ``train`` fails at its first
  try although it has retries left, and says to set ``seed_model``.

Spark: the standalone master and one 1-core worker of :mod:`standalone`, as
tests/dags/test_pcem_dag.py uses, rather than ``local[1]``: measured on this
2-core machine, a spark-submit of ``ingest-warc`` took 35 s on ``local[1]`` and
35-44 s on the cluster (plus 7 s to start it once), not enough of a difference
to give up the driver/executor split the DAG meets in production (the
executors import pcem-spark from the ``--py-files`` zip, FastWARC runs there).
Fixed model settings (nothing cross-validated) keep each task to about half a
minute; the whole file takes a few minutes.

Run with ``bash scripts/test_airflow.sh`` (its own venv with the ``airflow`` extra);
the main suite, without Airflow, skips this file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from datetime import timedelta

import pytest

pytestmark = pytest.mark.slow

if getattr(pytest.importorskip("airflow"), "__file__", None) is None:  # tests/dags itself, see conftest
    pytest.skip("apache-airflow is not installed", allow_module_level=True)
pytest.importorskip("airflow.providers.apache.spark")

from standalone import LOOPBACK, loopback_env  # noqa: E402  (tests/, see conftest)
from test_pcem_dag import (  # noqa: E402, F401  (cluster, py_files, spark_env: fixtures)
    LOOPBACK_CONF,
    cluster,
    load_dagbag,
    py_files,
    read_marker,
    spark_env,
    states,
    utc,
)
from warc_fixtures import PARENT, TOPIC_WORDS, http_response, topic_pages, write_warc  # noqa: E402

from pcem_spark.io.warc_records import record_bytes  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DAGS = os.path.join(REPO, "dags")
DAG_ID = "pcem_crawl"
TASKS = ["ingest", "train", "predict", "inspect"]
COMMANDS = ["ingest-warc", "train", "predict", "inspect"]
DAYS = {"2024-03-01": ("T10:00:00Z", "T11:30:00Z"), "2024-03-02": ("T09:15:00Z", "T18:45:00Z")}
PAGES_PER_TOPIC = 5
REJECTS_PER_DAY = 2  # a 404 and an image
COMMON = ["the", "and", "today", "news", "report", "week", "more", "first"]

# Fixed settings: the "auto" ones (the stop list, the names, the family, the calibration's map) cross-validate,
# minutes on the test's 1-core executor.
CONFIG_TOML = """
[spark]
app_name = "pcem-crawl-airflow-test"

[spark.conf]
"spark.ui.showConsoleProgress" = "false"
"spark.sql.shuffle.partitions" = "2"

[features]
min_df = 1.0
max_df = 1.0
stop_words = "none"

[model]
method = "pcem"
smoothing = 0.1
unlabeled_weight = 1.0
path_weight = 1.0
max_iter = 5
family = "generative"
names = "off"
calibration = "none"
"""


def _text(rng, words):
    picked = rng.choices(words, k=10) + rng.choices(COMMON, k=4)
    rng.shuffle(picked)
    return " ".join(picked)


def installed_cli_main():
    spec = importlib.util.find_spec("pcem_spark")
    return os.path.join(list(spec.submodule_search_locations)[0], "cli", "__main__.py")


def model_summary(model):
    """The ``training_summary`` of a saved model: its metadata file, found through the marker's manifest."""
    (meta,) = [name for name in read_marker(model)["manifest"] if name.startswith("metadata/part-")]
    with open(os.path.join(model, meta), encoding="utf-8") as fh:
        return json.loads(fh.readline())["training_summary"]


@pytest.fixture(scope="module")
def dag():
    bag = load_dagbag()
    assert bag.import_errors == {}, bag.import_errors
    return bag.dags[DAG_ID]


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("conf") / "pcem-crawl-test.toml"
    path.write_text(CONFIG_TOML)
    return str(path)


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    """<root>/<day>/crawl-<day>.warc.gz for both days: 4 topics x 5 pages, a 404 and an image, a warcinfo."""
    root = tmp_path_factory.mktemp("crawl")
    rng = random.Random(5)
    for n, (day, times) in enumerate(DAYS.items()):
        folder = root / day
        folder.mkdir()
        info = b"software: test\r\n"
        records = [record_bytes("warcinfo", f"uuid:info-{n}", content=info, content_type="application/warc-fields")]
        records += topic_pages(PAGES_PER_TOPIC, lambda words: _text(rng, words), [day + t for t in times], f"d{n}-")
        gone = http_response(b"<html><body><p>gone</p></body></html>", status="404 Not Found")
        image = http_response(b"\xff\xd8\xff\xe0JFIF", "image/jpeg")
        first = day + times[0]
        records += [
            record_bytes("response", f"uuid:gone-{n}", "http://gone.example/", gone, http=True, date=first),
            record_bytes("response", f"uuid:img-{n}", "http://img.example/a.jpg", image, http=True, date=first),
        ]
        write_warc(folder / f"crawl-{day}.warc.gz", records)
    # not a WARC file: day 2 reads "<day>/*.warc.gz" and so never sees it (day 1 has none)
    (root / "2024-03-02" / "README.txt").write_text("fetched by the test crawler\n")
    return str(root)


@pytest.fixture(scope="module")
def seed_model(tmp_path_factory, config):
    """The team's model trained on labelled pages: ``pcem train`` once, on local[1]."""
    d = tmp_path_factory.mktemp("seed")
    rng = random.Random(9)
    with open(d / "labelled.jsonl", "w", encoding="utf-8") as fh:
        for leaf, words in TOPIC_WORDS.items():
            for i in range(6):
                doc = {"id": f"seed-{leaf}-{i}", "text": _text(rng, words.split()), "labels": [PARENT[leaf], leaf]}
                fh.write(json.dumps(doc) + "\n")
    model = str(d / "seed_model")
    argv = ["train", "--docs", str(d / "labelled.jsonl"), "--model", model, "--config", config]
    argv += ["--set", "spark.master=local[1]"]
    proc = subprocess.run(
        [sys.executable, "-m", "pcem_spark.cli", *argv],
        env=loopback_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_marker(model)["kind"] == "model"
    return model


@pytest.fixture
def deployment(tmp_path, cluster, py_files, spark_env, airflow_db, config, crawl, monkeypatch):
    """The connection and Variables an operator would set (AIRFLOW_CONN_* / AIRFLOW_VAR_* here); no seed model."""
    data_root = str(tmp_path / "data")
    monkeypatch.setenv("AIRFLOW_CONN_PCEM_SPARK", f"{cluster.master_url}?deploy-mode=client")
    monkeypatch.setenv("AIRFLOW_VAR_PCEM_DATA_ROOT", data_root)
    monkeypatch.setenv("AIRFLOW_VAR_PCEM_CRAWL_ROOT", crawl)
    monkeypatch.setenv("AIRFLOW_VAR_PCEM_CONFIG", config)
    monkeypatch.setenv("AIRFLOW_VAR_PCEM_PY_FILES", py_files)
    monkeypatch.setenv("AIRFLOW_VAR_PCEM_SPARK_CONF", json.dumps(LOOPBACK_CONF))
    monkeypatch.delenv("AIRFLOW_VAR_PCEM_SEED_MODEL", raising=False)
    assert cluster.master_url.startswith(f"spark://{LOOPBACK}:")
    return {"data_root": data_root, "crawl": crawl}


# -- the DAG file -------------------------------------------------------------


def test_dagbag_imports_task_order_and_defaults(dag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    assert [t.task_id for t in dag.topological_sort()] == TASKS
    for upstream, downstream in zip(TASKS, TASKS[1:]):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    assert dag.catchup is False and dag.max_active_runs == 1
    assert dag.schedule == "@daily"
    main = installed_cli_main()
    for task_id, command in zip(TASKS, COMMANDS):
        task = dag.get_task(task_id)
        assert isinstance(task, SparkSubmitOperator)
        assert task.retries == 2
        assert main in task.application, task.application  # the default entry point: no checkout needed
        assert task.application_args[0] == command
        args = task.application_args
        assert "--overwrite" in args and "data_interval_start" in " ".join(args)
    train_args = dag.get_task("train").application_args
    assert "prev_data_interval_start_success" in train_args[train_args.index("--init-model") + 1]
    assert "evaluate" not in dag.task_ids

    # No default points at the DAG folder or $AIRFLOW_HOME (a copy of the file there must not pick them).
    airflow_home = os.environ["AIRFLOW_HOME"]
    texts = [json.dumps(dag.params.dump(), default=str)]
    texts += [str(p.description) for p in dag.params.values()]
    assert main in dag.params.get_param("entry_point").description
    for task in dag.tasks:
        texts += [json.dumps(getattr(task, field), default=str) for field in task.template_fields]
    for text in texts:
        assert DAGS not in text and airflow_home not in text, text


# -- two days end to end ------------------------------------------------------


def test_two_days_warm_start_from_the_seed_then_from_the_previous_day(dag, deployment, seed_model):
    import pyarrow.parquet as pq

    for task in dag.tasks:  # were a task retried, the retry would follow at once and show in try_number
        task.retry_delay = timedelta(seconds=0)
    data_root, crawl = deployment["data_root"], deployment["crawl"]
    day1, day2 = DAYS
    # day 1: the default input <crawl_root>/<day>; day 2: a param holding a template, a glob.
    # Both get seed_model: day 2 must prefer day 1's model, the last successful run's.
    first = dag.test(logical_date=utc(2024, 3, 1), run_conf={"seed_model": seed_model})
    second = dag.test(
        logical_date=utc(2024, 3, 2),
        run_conf={"seed_model": seed_model, "crawl_input": crawl + "/{{ ds }}/*.warc.gz"},
    )
    for run in (first, second):
        assert states(run) == {task: ("success", 1) for task in TASKS}, states(run)
        assert str(getattr(run.state, "value", run.state)) == "success"

    models = {day: os.path.join(data_root, day, "model") for day in DAYS}
    assert model_summary(models[day1])["init_model"] == seed_model
    assert model_summary(models[day2])["init_model"] == models[day1]
    for day in DAYS:
        assert model_summary(models[day])["warm_start"]["terms_kept"] > 0

    for day, times in DAYS.items():
        run_dir = os.path.join(data_root, day)
        docs = read_marker(os.path.join(run_dir, "docs"))
        assert docs["documents"] == len(TOPIC_WORDS) * PAGES_PER_TOPIC, docs
        assert docs["files"] == 1 and docs["rejected"] == REJECTS_PER_DAY, docs  # day 2: README.txt not read
        assert read_marker(os.path.join(run_dir, "docs_rejects"))["kind"] == "rejects"

        predictions = os.path.join(run_dir, "predictions")
        marker = read_marker(predictions)
        assert marker["kind"] == "predictions" and marker["rows"] == docs["documents"], marker
        assert marker["partition_by"] == "crawl_date" and marker["keep_columns"] == ["url", "crawl_date"]
        folders = sorted(n for n in os.listdir(predictions) if not n.startswith(("_", ".")))
        # crawl_date is the UTC day of WARC-Date: the day's pages at different times share one folder.
        assert len(times) > 1 and folders == ["crawl_date=" + day], folders
        table = pq.read_table(predictions)
        assert {"id", "url", "crawl_date", "leaf"} <= set(table.column_names)
        rows = table.to_pylist()
        assert len(rows) == docs["documents"]  # one row per ingested document
        assert all(f"-{r['url'].split('/')[2].split('.')[0]}-" in r["id"] for r in rows)  # the page's own url
        correct = sum(r["leaf"] in r["id"] for r in rows)
        assert correct >= 0.8 * len(rows), (day, correct)
        assert marker["input"]["rows_read"] == docs["documents"] and marker["input"]["rejected"] == 0
        assert read_marker(os.path.join(run_dir, "predictions_rejects"))["rejected"] == 0

        assert os.path.getsize(os.path.join(run_dir, "inspect", "model.md")) > 0


def test_no_seed_model_and_no_earlier_success_fails_train_at_once(deployment, monkeypatch):
    # A DAG object of its own: dag.test() runs the tasks in this process, where Airflow's process_params
    # leaves an earlier run's conf (seed_model) in the DAG's Param objects; a worker parses the file afresh.
    dag = load_dagbag().dags[DAG_ID]
    operator = type(dag.get_task("train"))
    raised = []
    execute = operator.execute

    def recording(self, context):  # what each task raised (Airflow logs it where the test cannot rely on)
        try:
            return execute(self, context)
        except Exception as exc:
            raised.append((self.task_id, type(exc).__name__, str(exc)))
            raise

    monkeypatch.setattr(operator, "execute", recording)
    for task in dag.tasks:
        task.retry_delay = timedelta(seconds=0)
    # Before every other run of the file: no earlier successful run. ingest is marked done, not run.
    run = dag.test(logical_date=utc(2024, 2, 20), mark_success_pattern="^ingest$")
    got = states(run)
    assert dag.get_task("train").retries == 2
    assert got["train"] == ("failed", 1), got  # AirflowFailException: no retry
    assert got["predict"][0] == "upstream_failed" and got["inspect"][0] == "upstream_failed", got
    ((task_id, kind, message),) = raised
    assert (task_id, kind) == ("train", "AirflowFailException"), raised
    assert "no earlier successful run" in message and "Variable pcem_seed_model" in message, message
    assert not os.path.exists(os.path.join(deployment["data_root"], "2024-02-20", "model"))
