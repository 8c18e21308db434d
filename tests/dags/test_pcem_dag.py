"""dags/pcem_dag.py under real Airflow, against a real Spark standalone cluster on 127.0.0.1.

* the DAG folder imports with no errors (DagBag) and ``pcem_20ng`` is
  ingest -> train -> predict -> evaluate; no default names the checkout or
  $AIRFLOW_HOME (``repo`` is a Variable the deployment sets);
* the operator (``pcem_spark/ops/airflow_submit.py``) leaves out an option
  whose value is empty and fails a task whose required setting is empty;
* the spark-submit command lines: ``--archives ...#environment`` and
  ``spark.pyspark.python`` only when an env archive is configured;
* exit codes: a job exiting 2 fails the task for good (``AirflowFailException``),
  one exiting 75 raises a retryable error;
* ``dag.test()`` runs the DAG end to end on a standalone master and a 1-core
  worker (:mod:`standalone`) over a small generated 20news-bydate-format
  archive; ``train`` fails its first try on an injected transient executor
  fault (exit 75) and Airflow's retry completes it; the outputs are complete
  (``_PCEM_COMPLETE``); running predict and evaluate again for the same logical
  date, with the leftover of a killed try in place, replaces their outputs with
  the same metrics; a missing archive (exit 2) fails ``ingest`` at its first
  try although the task has retries left.

Run with ``bash scripts/test_airflow.sh`` (a separate venv with the ``airflow``
extra); the main suite, without Airflow, skips this file.
"""

from __future__ import annotations

import io
import json
import os
import random
import sys
import tarfile
from datetime import datetime, timedelta, timezone

import pytest

# The slow tier (scripts/test_airflow.sh, in its own venv): Airflow, a standalone cluster, the DAG end to end.
pytestmark = pytest.mark.slow

if getattr(pytest.importorskip("airflow"), "__file__", None) is None:  # tests/dags itself, see conftest
    pytest.skip("apache-airflow is not installed", allow_module_level=True)
pytest.importorskip("airflow.providers.apache.spark")

from standalone import LOOPBACK, StandaloneCluster, loopback_env  # noqa: E402  (tests/, see conftest)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DAGS = os.path.join(REPO, "dags")
DAG_ID = "pcem_20ng"
TASKS = ["ingest", "train", "predict", "evaluate"]
GROUPS = ["comp.graphics", "comp.sys.mac.hardware", "rec.autos", "rec.sport.hockey"]
N_TRAIN, N_TEST = 30, 10
MARKER = "_PCEM_COMPLETE"

# Fixed settings: the "auto" ones (the stop list, the names, the family, the calibration's map) cross-validate,
# minutes on the test's 1-core executor; min_df 2 suits ~160 documents.
CONFIG_TOML = """
[spark]
app_name = "pcem-airflow-test"

[spark.conf]
"spark.ui.showConsoleProgress" = "false"
"spark.sql.shuffle.partitions" = "2"

[features]
min_df = 2.0
max_df = 0.9
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

LOOPBACK_CONF = {
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.executor.memory": "768m",
    "spark.executor.cores": "1",
    "spark.ui.enabled": "false",
    "spark.default.parallelism": "2",
}


def utc(*args):
    return datetime(*args, tzinfo=timezone.utc)


def load_dagbag():
    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow >= 3.1
    except ImportError:  # Airflow 2 and 3.0
        from airflow.models import DagBag
    return DagBag(dag_folder=DAGS)


def airflow_exceptions():
    try:  # Airflow >= 3.1
        from airflow.sdk.exceptions import AirflowException, AirflowFailException
    except ImportError:
        from airflow.exceptions import AirflowException, AirflowFailException
    return AirflowException, AirflowFailException


def states(dag_run):
    return {
        ti.task_id: (str(getattr(ti.state, "value", ti.state)), ti.try_number) for ti in dag_run.get_task_instances()
    }


def read_marker(path):
    with open(os.path.join(path, MARKER), encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def dag():
    bag = load_dagbag()
    assert bag.import_errors == {}, bag.import_errors
    return bag.dags[DAG_ID]


@pytest.fixture(scope="module")
def operator_class(dag):
    return type(dag.get_task("ingest"))


@pytest.fixture
def exit_script(tmp_path):
    path = tmp_path / "exit_with.py"
    path.write_text("import sys\nsys.exit(int(sys.argv[1]))\n")
    return str(path)


@pytest.fixture
def spark_env(monkeypatch):
    """This venv's spark-submit first on PATH; Spark on loopback; the venv's Python for driver and executors."""
    for key, value in loopback_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    monkeypatch.delenv("PCEM_INJECT_FAULT", raising=False)


# -- the DAG file -------------------------------------------------------------


def test_dagbag_imports_and_task_order(dag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    assert [t.task_id for t in dag.topological_sort()] == TASKS
    for upstream, downstream in zip(TASKS, TASKS[1:]):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    for task_id, job in zip(TASKS, ["ingest_20ng.py", "train.py", "predict.py", "evaluate.py"]):
        task = dag.get_task(task_id)
        assert isinstance(task, SparkSubmitOperator)
        assert task.application.endswith("/" + job)
        args = " ".join(task.application_args)
        assert "{{ ds }}" in args, f"{task_id}: outputs must be keyed by the logical date"
        assert task.retries == 2
    assert "--overwrite" in dag.get_task("train").application_args
    assert "--overwrite" in dag.get_task("predict").application_args
    # No default is derived from the DAG file's location (a copy in Airflow's DAG folder would point into
    # $AIRFLOW_HOME): repo has none, and the paths that follow it are empty until it is set.
    texts = [json.dumps(dag.params.dump(), default=str)] + [str(p.description) for p in dag.params.values()]
    for task in dag.tasks:
        texts += [json.dumps(getattr(task, field), default=str) for field in task.template_fields]
    for text in texts:
        assert REPO not in text and os.environ["AIRFLOW_HOME"] not in text, text


def _command(operator_class, monkeypatch, conn, **fields):
    monkeypatch.setenv("AIRFLOW_CONN_PCEM_CMDTEST", conn)
    values = {
        "pcem_conn_id": "pcem_cmdtest",
        "pcem_env_archive": "",
        "pcem_driver_python": "",
        "pcem_spark_conf": "{}",
        "py_files": "",
    }
    values.update(fields)
    op = operator_class(task_id="cmd", application="/repo/jobs/train.py", application_args=["--overwrite"])
    for key, value in values.items():  # as the templates would render them
        setattr(op, key, value)
    op._apply_rendered()
    return op._get_hook()._build_spark_submit_command(op.application)


def test_submit_command_ships_env_archive_only_when_set(operator_class, monkeypatch):
    client = "spark://127.0.0.1:7077?deploy-mode=client"
    bare = _command(operator_class, monkeypatch, client)
    assert bare[:3] == ["spark-submit", "--master", "spark://127.0.0.1:7077"]
    assert "--archives" not in bare and "--py-files" not in bare
    assert not any("spark.pyspark" in arg for arg in bare)
    # a driver out of heap exits (a failed, retried task) instead of hanging until the timeout
    assert "spark.driver.extraJavaOptions=-XX:+ExitOnOutOfMemoryError" in bare
    assert bare[-2:] == ["/repo/jobs/train.py", "--overwrite"]

    shipped = _command(
        operator_class,
        monkeypatch,
        client,
        py_files="/dist/pcem_spark.zip",
        pcem_env_archive="/dist/pcem_env.tar.gz",
        pcem_spark_conf=json.dumps({"spark.executor.memory": "2g"}),
    )
    assert shipped[shipped.index("--py-files") + 1] == "/dist/pcem_spark.zip"
    assert shipped[shipped.index("--archives") + 1] == "/dist/pcem_env.tar.gz#environment"
    assert "spark.pyspark.python=./environment/bin/python" in shipped
    assert f"spark.pyspark.driver.python={sys.executable}" in shipped  # client mode: the driver is here
    assert "spark.executor.memory=2g" in shipped
    assert shipped[shipped.index("--deploy-mode") + 1] == "client"

    driver_only = _command(operator_class, monkeypatch, client, pcem_driver_python="/opt/py/bin/python")
    assert "spark.pyspark.driver.python=/opt/py/bin/python" in driver_only
    assert "--archives" not in driver_only and "spark.pyspark.python=./environment/bin/python" not in driver_only

    cluster = _command(
        operator_class,
        monkeypatch,
        "spark://127.0.0.1:7077?deploy-mode=cluster",
        pcem_env_archive="/dist/pcem_env.tar.gz",
        pcem_driver_python="/opt/py/bin/python",
    )
    assert "spark.pyspark.python=./environment/bin/python" in cluster
    assert not any(arg.startswith("spark.pyspark.driver.python") for arg in cluster)

    _, AirflowFailException = airflow_exceptions()
    with pytest.raises(AirflowFailException, match="spark_conf"):
        _command(operator_class, monkeypatch, client, pcem_spark_conf="[1, 2]")

    # an option whose value renders empty is left out; a required value that renders empty fails for good
    with_config = _command(operator_class, monkeypatch, client, pcem_optional_args={"--config": "/conf/pcem.toml"})
    assert with_config[-3:] == ["--overwrite", "--config", "/conf/pcem.toml"]
    assert _command(operator_class, monkeypatch, client, pcem_optional_args={"--config": ""})[-1] == "--overwrite"
    with pytest.raises(AirflowFailException, match="cmd: the setting repo is empty"):
        _command(operator_class, monkeypatch, client, pcem_required={"the setting repo is empty": " "})


def test_exit_code_2_is_not_retried_75_is(operator_class, spark_env, exit_script, monkeypatch):
    """The spark-submit exit code decides: 2 -> AirflowFailException (no retry), 75 -> retryable failure."""
    AirflowException, AirflowFailException = airflow_exceptions()
    monkeypatch.setenv("AIRFLOW_CONN_PCEM_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))

    def run(code):
        op = operator_class(
            task_id=f"exit{code}", application=exit_script, application_args=[str(code)], pcem_conn_id="pcem_local"
        )
        op.execute({})

    with pytest.raises(AirflowFailException, match="exited 2"):
        run(2)
    with pytest.raises(AirflowFailException, match="exited 1 .a bug"):
        run(1)
    with pytest.raises(AirflowException) as transient:
        run(75)
    assert not isinstance(transient.value, AirflowFailException)
    assert "Error code is: 75" in str(transient.value)
    run(0)


# -- end to end on a standalone cluster --------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A 20news-bydate-format archive: 4 groups x (30 train + 10 test) generated messages."""
    path = str(tmp_path_factory.mktemp("corpus") / "20news-small.tar.gz")
    rng = random.Random(11)
    common = ["the", "and", "people", "think", "know", "good", "time", "question", "thanks", "read"]
    with tarfile.open(path, "w:gz") as out:
        for split, n, first in (("train", N_TRAIN, 0), ("test", N_TEST, 1000)):  # ids unique across splits
            for g, group in enumerate(GROUPS):
                topic = [f"{part}{k}" for part in group.split(".") for k in range(6)]
                for i in range(n):
                    words = rng.choices(topic, k=25) + rng.choices(common, k=25)
                    rng.shuffle(words)
                    text = f"From: poster{i}@example.org\nSubject: {' '.join(words[:4])}\n\n{' '.join(words)}\n"
                    data = text.encode("latin-1")
                    info = tarfile.TarInfo(f"20news-bydate-{split}/{group}/{10000 * (g + 1) + first + i}")
                    info.size = len(data)
                    out.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    logs = str(tmp_path_factory.mktemp("cluster-logs"))
    # One 1-core worker: every spark-submit starts one executor JVM (tests/test_cluster.py covers two workers).
    with StandaloneCluster(workers=1, cores_per_worker=1, memory="1g", log_dir=logs) as running:
        yield running


@pytest.fixture(scope="module")
def py_files(tmp_path_factory):
    """dist/pcem_spark.zip as scripts/package.sh builds it."""
    from pcem_spark.ops import packaging

    return packaging.build_py_files(str(tmp_path_factory.mktemp("dist")))


@pytest.fixture
def deployment(tmp_path, cluster, py_files, spark_env, airflow_db, monkeypatch):
    """The connection and Variables an operator would set: AIRFLOW_CONN_* / AIRFLOW_VAR_* here."""
    config = tmp_path / "pcem-test.toml"
    config.write_text(CONFIG_TOML)
    data_root = str(tmp_path / "data")
    monkeypatch.setenv("AIRFLOW_CONN_PCEM_SPARK", f"{cluster.master_url}?deploy-mode=client")
    monkeypatch.setenv("AIRFLOW_VAR_PCEM_REPO", REPO)  # jobs_dir: <repo>/jobs
    monkeypatch.setenv("AIRFLOW_VAR_PCEM_DATA_ROOT", data_root)
    monkeypatch.setenv("AIRFLOW_VAR_PCEM_CONFIG", str(config))
    monkeypatch.setenv("AIRFLOW_VAR_PCEM_PY_FILES", py_files)
    monkeypatch.setenv("AIRFLOW_VAR_PCEM_SPARK_CONF", json.dumps(LOOPBACK_CONF))
    assert cluster.master_url.startswith(f"spark://{LOOPBACK}:")
    return {"data_root": data_root, "tmp": tmp_path}


def test_dag_runs_end_to_end_retries_and_reruns_idempotently(dag, deployment, corpus):
    run_dir = os.path.join(deployment["data_root"], "2024-01-01")
    model, predictions = os.path.join(run_dir, "model"), os.path.join(run_dir, "predictions")
    for task in dag.tasks:  # the DAG waits 5 minutes before a retry; the test need not
        task.retry_delay = timedelta(seconds=0)

    # train's first try hits a transient executor fault in its first EM pass (Spark gives up at
    # once: maxFailures 1), exits 75 and is retried by Airflow over what the failed try left.
    fault_dir = deployment["tmp"] / "faults"
    fault_dir.mkdir()
    conf = {
        "archive": corpus,
        "label_rate": 0.2,
        "seed": 0,
        "spark_conf": {
            **LOOPBACK_CONF,
            "spark.task.maxFailures": "1",
            "spark.executorEnv.PCEM_INJECT_FAULT": f"em_pass:once:{fault_dir}",
        },
    }
    first = dag.test(logical_date=utc(2024, 1, 1), run_conf=conf)
    got = states(first)
    assert os.path.exists(fault_dir / "fault-em_pass"), "the fault was never injected"
    assert got == {
        "ingest": ("success", 1),
        "train": ("success", 2),
        "predict": ("success", 1),
        "evaluate": ("success", 1),
    }, got
    assert str(getattr(first.state, "value", first.state)) == "success"

    assert os.path.exists(os.path.join(run_dir, "docs.jsonl.gz"))
    model_marker, pred_marker = read_marker(model), read_marker(predictions)
    assert model_marker["kind"] == "model" and pred_marker["kind"] == "predictions"
    assert pred_marker["rows"] == len(GROUPS) * N_TEST
    import pyarrow.parquet as pq

    assert pq.read_table(predictions).num_rows == len(GROUPS) * N_TEST
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as fh:
        metrics = json.load(fh)
    assert metrics["n_documents"] == len(GROUPS) * N_TEST
    assert metrics["micro_f1"] > 0.5, metrics["micro_f1"]

    # The same logical date again (a cleared task / a rerun): predict and evaluate run over their
    # own outputs, with the leftover of a killed try (a half-written temporary sibling) in place.
    stale = os.path.join(run_dir, ".predictions.pcem-tmp-20240101T000000-deadbeef")
    os.makedirs(stale)
    open(os.path.join(stale, "part-00000.parquet"), "wb").close()
    second = dag.test(
        logical_date=utc(2024, 1, 1), run_conf=dict(conf, spark_conf=LOOPBACK_CONF), mark_success_pattern="ingest|train"
    )
    got = states(second)
    assert got["predict"] == ("success", 1) and got["evaluate"] == ("success", 1), got
    assert read_marker(model)["run_id"] == model_marker["run_id"]  # marked success, not rerun
    assert read_marker(predictions)["run_id"] != pred_marker["run_id"]
    assert not os.path.exists(stale), "the leftover of the killed try was not cleaned up"
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as fh:
        again = json.load(fh)
    for key in ("micro_f1", "macro_f1", "n_documents"):
        assert again[key] == pytest.approx(metrics[key], abs=1e-9), key


def test_bad_input_fails_at_once_despite_retries(dag, deployment):
    missing = str(deployment["tmp"] / "no-such-archive.tar.gz")
    for task in dag.tasks:  # were exit 2 retried, the retries would follow at once and show
        task.retry_delay = timedelta(seconds=0)
    dag_run = dag.test(logical_date=utc(2024, 1, 8), run_conf={"archive": missing})
    got = states(dag_run)
    assert dag.get_task("ingest").retries == 2
    assert got["ingest"] == ("failed", 1), got  # exit 2: AirflowFailException, no retry
    assert got["train"][0] == "upstream_failed", got
    assert not os.path.exists(os.path.join(deployment["data_root"], "2024-01-08", "docs.jsonl.gz"))
