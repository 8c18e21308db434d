"""On a real Spark standalone cluster (127.0.0.1): same predictions as local mode, shipped dependencies,
a lost executor.

A master and two 1-core workers are started from the installed pyspark
(``spark-class ...Master`` / ``...Worker``, :mod:`tests.standalone`). The
workers run with a bare Python (a venv without numpy, scipy, pyarrow, pandas
or this package) first on their PATH, like a fresh cluster node: the jobs only
work because ``spark-submit`` ships ``dist/pcem_spark.zip`` (--py-files) and
``dist/pcem_env.tar.gz`` (--archives ...#environment) from
``scripts/package.sh`` / :mod:`pcem_spark.ops.packaging`.

One spark-submit per job (ingest, train, predict: each ``jobs/*.py`` as an operator runs it); the train loses
an executor mid-EM, so the one training on the cluster serves both the comparison with local mode and the
lost-executor check. The local-mode train and predict run ``pcem`` in this process, on the test session.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import threading
import time

import numpy as np
import pytest
from cli_args import set_args
from standalone import LOOPBACK, StandaloneCluster, loopback_env, spark_bin

from pcem_spark.ops import packaging

pytestmark = pytest.mark.slow  # the slow tier (scripts/test.sh --slow, .ci/run)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# Fixed, fast settings (the "auto" ones -- the stop list, the names, the family, the calibration's map --
# cross-validate: minutes on the 1-core executors); tol 0 runs every iteration, so the kill below lands mid-EM.
TRAIN_SETTINGS = [
    "model.smoothing=0.1",
    "model.unlabeled_weight=1",
    "model.path_weight=1",
    "model.family=generative",
    "model.names=off",
    "model.calibration=none",
    "model.max_iter=6",
    "model.tol=0",
    "features.min_df=2",
    "features.stop_words=english",
]
# The training documents and labels of every train (cluster and local mode).
LABELLED_SPLIT = ["--split", "train", "--label-rate", "0.1", "--seed", "3"]
GROUPS = ["comp.graphics", "comp.sys.mac.hardware", "rec.autos", "rec.sport.hockey", "sci.med", "sci.space"]


# -- fixtures ----------------------------------------------------------------


@pytest.fixture(scope="module")
def artifacts():
    """dist/ artifacts, cached under build/ (the env archive is rebuilt only when the pins change)."""
    out = os.environ.get("PCEM_TEST_DIST", os.path.join(REPO, "build", "cluster-test-dist"))
    packaging.build_py_files(out)
    env_archive = packaging.build_env_archive(out)
    return {"py_files": os.path.join(out, packaging.PY_FILES_NAME), "env": env_archive}


@pytest.fixture(scope="module")
def bare_worker_env(tmp_path_factory):
    """A worker environment whose ``python3`` has no numpy/scipy/pyarrow/pandas/pcem_spark."""
    bare = str(tmp_path_factory.mktemp("bare") / "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", bare], check=True)
    probe = subprocess.run([os.path.join(bare, "bin", "python3"), "-c", "import numpy"], capture_output=True, text=True)
    assert probe.returncode != 0, "the bare worker Python must not import numpy"
    java_bin = os.path.dirname(os.path.realpath(shutil.which("java") or "/usr/bin/java"))
    return {
        "PATH": os.pathsep.join([os.path.join(bare, "bin"), java_bin, "/usr/bin", "/bin"]),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
    }


@pytest.fixture(scope="module")
def cluster(bare_worker_env, tmp_path_factory):
    logs = str(tmp_path_factory.mktemp("cluster-logs"))
    with StandaloneCluster(
        workers=2, cores_per_worker=1, memory="1g", worker_env=bare_worker_env, log_dir=logs
    ) as running:
        yield running


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A small 20news-bydate-format archive: 6 groups x (40 train + 15 test) messages.

    Taken from the real archive when it is there, otherwise generated (same
    member layout, topic words per group), so the test always runs.
    """
    # As conftest.py finds it (not imported: with tests/dags/conftest.py also
    # collected, the module name "conftest" is ambiguous).
    archive_20ng = os.environ.get(
        "PCEM_20NG_ARCHIVE", os.path.join(REPO, "..", "shared", "data", "20news-bydate.tar.gz")
    )
    path = str(tmp_path_factory.mktemp("corpus") / "20news-small.tar.gz")
    wanted = {"train": 40, "test": 15}
    taken = {(split, g): 0 for split in wanted for g in GROUPS}
    with tarfile.open(path, "w:gz") as out:
        if os.path.exists(archive_20ng):
            with tarfile.open(archive_20ng, "r:*") as src:
                for member in src:
                    parts = member.name.split("/")
                    if not member.isfile() or len(parts) != 3:
                        continue
                    split, group = parts[0].rsplit("-", 1)[1], parts[1]
                    if group in GROUPS and taken[(split, group)] < wanted[split]:
                        taken[(split, group)] += 1
                        out.addfile(member, src.extractfile(member))
        else:
            rng = random.Random(0)
            common = ["the", "and", "people", "think", "know", "good", "time", "question", "thanks", "read"]
            for split, n in wanted.items():
                for g in GROUPS:
                    topic = [f"{w}{k}" for w in g.split(".") for k in range(8)]
                    for i in range(n):
                        words = rng.choices(topic, k=30) + rng.choices(common, k=30)
                        rng.shuffle(words)
                        data = (f"Subject: {' '.join(words[:5])}\n\n{' '.join(words)}\n").encode()
                        number = 1000 * (GROUPS.index(g) + 1) + i + (500 if split == "test" else 0)
                        info = tarfile.TarInfo(f"20news-bydate-{split}/{g}/{number}")
                        info.size = len(data)
                        out.addfile(info, io.BytesIO(data))
    return path


def submit_args(cluster, artifacts, ship_env=True):
    args = [
        spark_bin("spark-submit"),
        "--master",
        cluster.master_url,
        "--conf",
        f"spark.driver.host={LOOPBACK}",
        "--conf",
        f"spark.driver.bindAddress={LOOPBACK}",
        "--conf",
        "spark.executor.memory=768m",
        "--conf",
        "spark.executor.cores=1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=4",
        "--conf",
        "spark.default.parallelism=2",
        "--conf",
        "spark.task.maxFailures=4",
    ]
    if ship_env:
        args += [
            "--py-files",
            artifacts["py_files"],
            "--archives",
            f"{artifacts['env']}#environment",
            "--conf",
            "spark.pyspark.python=./environment/bin/python",
            "--conf",
            f"spark.pyspark.driver.python={sys.executable}",
        ]
    return args


def submit_env():
    env = loopback_env()
    # Nothing of this process's Python leaks to the executors: they get what
    # spark-submit ships or the worker's bare python3.
    for key in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH"):
        env.pop(key, None)
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def run(args, timeout=900, env=None):
    proc = subprocess.run(args, cwd=REPO, env=env or submit_env(), capture_output=True, text=True, timeout=timeout)
    return proc


def check(proc, what):
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


def settings_args():
    return set_args(*TRAIN_SETTINGS)


def read_table(spark, path):
    return spark.read.parquet(path)


def submit_losing_an_executor(cluster, args):
    """spark-submit ``args``; when the job logs "EM iteration 2:" (iteration 3 running), SIGKILL worker 0's
    executors. Returns (exit code, the job's output -- its log, which spark-submit's Python runner sends to
    stdout -- and the executor PIDs killed)."""
    proc = subprocess.Popen(
        args, cwd=REPO, env=submit_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines, killed = [], []

    def watch():
        for line in proc.stdout:
            lines.append(line)
            # "PCEM EM iteration 2: ..." -- iteration 3 is running: kill worker 0's executor.
            if not killed and "EM iteration 2:" in line:
                for pid in cluster.executor_pids(0):
                    os.kill(pid, 9)
                    killed.append(pid)

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    return proc.returncode, "".join(lines), killed


@pytest.fixture(scope="module")
def cluster_run(cluster, artifacts, corpus, tmp_path_factory):
    """ingest -> train -> predict, each a spark-submit to the standalone cluster.

    The train loses an executor mid-EM (:func:`submit_losing_an_executor`): its model is the one the cluster's
    predictions come from, compared with local mode's (test_cluster_predictions_equal_local_mode), and what
    the kill did is checked by test_killing_an_executor_mid_em_gives_the_same_model."""
    out = tmp_path_factory.mktemp("cluster-run")
    docs, model, preds = str(out / "docs"), str(out / "model"), str(out / "predictions")
    base = submit_args(cluster, artifacts)
    check(run(base + ["jobs/ingest_20ng.py", "--archive", corpus, "--output", docs]), "ingest on the cluster")
    # Rows shipped inside the tasks (no driver-local file the executors would need), committed atomically.
    assert os.path.exists(os.path.join(docs, "_PCEM_COMPLETE"))
    train = ["jobs/train.py", "--docs", docs, "--model", model, *LABELLED_SPLIT, *settings_args()]
    code, log, killed = submit_losing_an_executor(cluster, base + train)
    assert code == 0, f"train on the cluster failed ({code}):\n{log[-4000:]}"
    check(
        run(base + ["jobs/predict.py", "--model", model, "--docs", docs, "--output", preds, "--split", "test"]),
        "predict on the cluster",
    )
    return {"docs": docs, "model": model, "predictions": preds, "dir": out, "train_log": log, "killed": killed}


@pytest.fixture(scope="module")
def local_run(spark, cluster_run):
    """The same train and predict in local mode: ``pcem`` in this process, on the test session (local[2])."""
    from pcem_spark.cli import main

    out = cluster_run["dir"]
    model, preds = str(out / "local-model"), str(out / "local-predictions")
    local = ["--set", "spark.master=local[2]"]
    train = ["train", "--docs", cluster_run["docs"], "--model", model, *LABELLED_SPLIT, *settings_args()]
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        assert main([*train, *local]) == 0, "local train"
        predict = ["predict", "--model", model, "--docs", cluster_run["docs"], "--output", preds, "--split", "test"]
        assert main([*predict, *local]) == 0, "local predict"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)  # the runs set pcem's default on the shared session
    return {"model": model, "predictions": preds}


# -- tests -------------------------------------------------------------------


def test_cluster_predictions_equal_local_mode(spark, cluster_run, local_run):
    from pcem_spark.model.path_model import PathModel

    model, preds = local_run["model"], local_run["predictions"]
    on_cluster = read_table(spark, cluster_run["predictions"]).toPandas().set_index("id").sort_index()
    local = read_table(spark, preds).toPandas().set_index("id").sort_index()
    assert len(on_cluster) == len(local) == 6 * 15
    assert list(on_cluster.index) == list(local.index)
    assert [list(p) for p in on_cluster["path"]] == [list(p) for p in local["path"]]
    np.testing.assert_allclose(
        on_cluster["probability"].to_numpy(dtype=float), local["probability"].to_numpy(dtype=float), rtol=0, atol=1e-9
    )
    # And the parameters themselves.
    a, b = PathModel.load(cluster_run["model"]), PathModel.load(model)
    assert a.vocabulary == b.vocabulary
    np.testing.assert_allclose(a.log_theta, b.log_theta, rtol=0, atol=1e-9)


def test_executors_without_shipped_env_cannot_run_it(cluster, artifacts, cluster_run):
    """The workers' own Python lacks the dependencies: without --archives the job fails, and says why."""
    out = cluster_run["dir"]
    proc = run(
        submit_args(cluster, artifacts, ship_env=False)
        + [
            "--py-files",
            artifacts["py_files"],
            "jobs/train.py",
            "--docs",
            cluster_run["docs"],
            "--model",
            str(out / "no-env-model"),
            "--split",
            "train",
            "--label-rate",
            "0.1",
        ]
        + settings_args()
    )
    # spark-submit's Python runner sends the driver's stderr (our log) to its stdout.
    ours = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines() if "pcem" in line)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "No module named" in ours, ours
    assert "pcem_env.tar.gz#environment" in ours, ours  # the fix is named
    assert not os.path.exists(out / "no-env-model")


def test_killing_an_executor_mid_em_gives_the_same_model(spark, cluster, cluster_run, local_run):
    """The cluster's train (cluster_run) lost worker 0's executor in EM iteration 3 and still ran every
    iteration, to the parameters of the uninterrupted local-mode run."""
    from pcem_spark.model.path_model import PathModel

    log = cluster_run["train_log"]
    assert cluster_run["killed"], "no executor of worker 0 was running at EM iteration 2:\n" + log[-3000:]
    assert "EM iteration 6:" in log
    # The master gave the application a new executor on that worker (or the
    # other one carried on); either way EM converged to the same parameters.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not cluster.state():
        time.sleep(0.5)
    a, b = PathModel.load(cluster_run["model"]), PathModel.load(local_run["model"])
    assert a.vocabulary == b.vocabulary
    np.testing.assert_allclose(a.log_theta, b.log_theta, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a.log_prior, b.log_prior, rtol=0, atol=1e-9)
