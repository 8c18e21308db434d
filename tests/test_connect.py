"""pcem-spark against a Spark Connect server: training, prediction, model files and the commands.

One Spark Connect server for the module: the installed pyspark's
``sbin/start-connect-server.sh``, ``local[2]``, bound to 127.0.0.1 on a free
port, its Python workers on this interpreter with this checkout on their path;
stopped (its process group, which this module started) at the end.

Over Connect the EM passes run on the DataFrame API alone
(:mod:`pcem_spark.engine.frame_sums`), the cross-validation tasks as a
broadcast join (:mod:`pcem_spark.model.sampled_cv`), and the atomic outputs
rename and mark from the client through ``pyarrow.fs``
(:mod:`pcem_spark.io.arrow_fs`). ``pcem train | predict | evaluate`` over
Connect must give the classic run's paths, and probabilities and log theta
within 1e-9; a kill at every write stage leaves the old or the new output.
What still needs the classic API (RDD-returning engine helpers, ``ingest-warc``,
``experiment``) fails at once with :class:`SparkConnectError`, exit 2.

Skipped only when the Connect client packages are missing (``pip install
grpcio grpcio-status googleapis-common-protos zstandard``).
"""

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

try:
    from pyspark.sql.connect.utils import check_dependencies

    check_dependencies()
except ImportError as exc:  # PySparkImportError is an ImportError
    pytest.skip(
        f"Spark Connect client packages missing ({exc}); install them with "
        "pip install grpcio grpcio-status googleapis-common-protos zstandard",
        allow_module_level=True,
    )

from pcem_spark.engine.session import SparkConnectError, is_spark_connect  # noqa: E402

# The slow tier (scripts/test.sh --slow, .ci/run). A Connect client has been seen to wait forever for a server's
# answer under a loaded CI machine (a test that takes 10-60 s here sat 66 minutes): such a test times out at
# 600 s with its stacks in the log, and runs once more; a second timeout, or any other failure, fails it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.flaky(reruns=1, only_rerun=["Timeout"])]

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(os.path.dirname(__file__), "data")
CATALOGUE = os.path.join(DATA, "malformed.jsonl")
# Environment variables the Connect client sets in this process; restored after the module
# so the classic sessions of the other test modules stay classic.
_CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    import pyspark

    log_dir = str(tmp_path_factory.mktemp("connect-server"))
    port = _free_port()
    script = os.path.join(os.path.dirname(pyspark.__file__), "sbin", "start-connect-server.sh")
    env = {k: v for k, v in os.environ.items() if k not in _CONNECT_ENV}
    env.update(
        SPARK_LOG_DIR=log_dir,
        SPARK_PID_DIR=log_dir,
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=os.pathsep.join([REPO] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
    )
    cmd = [
        "bash",
        script,
        "--wait",
        "--master",
        "local[2]",
        "--driver-memory",
        "1g",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
    ]
    log_path = os.path.join(log_dir, "server.out")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                with open(log_path) as fh:
                    pytest.fail(f"the Spark Connect server exited ({proc.returncode}):\n{fh.read()[-3000:]}")
            with socket.socket() as s:
                s.settimeout(1.0)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"the Spark Connect server did not listen on 127.0.0.1:{port} within 240 s")
            time.sleep(1.0)
        yield f"sc://127.0.0.1:{port}"
    finally:
        # Only the process group started above (the server's bash, spark-submit and JVM).
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue


@pytest.fixture(scope="module")
def remote(spark, connect_url):
    """A Spark Connect client session (``create``: a classic session may already exist in this process).

    After the worker's classic ``spark`` session: with the Connect client's variables set, pyspark's builder
    refuses to start a classic one (the in-process classic ``pcem`` runs below use it)."""
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in _CONNECT_ENV}
    session = SparkSession.builder.remote(connect_url).create()
    try:
        yield session
    finally:
        session.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def labelled_docs(remote):
    """Twelve tiny documents on two paths (half unlabelled), as a Connect DataFrame."""
    rows = []
    for i in range(12):
        topic = ("space", "rocket orbit launch moon") if i % 2 else ("hockey", "puck goal skate ice")
        labels = ["sci" if topic[0] == "space" else "rec", topic[0]] if i < 6 else None
        rows.append((f"d{i}", f"{topic[1]} document {i}", labels))
    return remote.createDataFrame(rows, "id string, text string, labels array<string>")


def _tiny_model():
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    taxonomy = Taxonomy.from_label_paths([["sci", "space"], ["rec", "hockey"]])
    vocabulary = ["rocket", "orbit", "puck", "goal"]
    log_theta = np.log(np.array([[0.4, 0.4, 0.1, 0.1], [0.1, 0.1, 0.4, 0.4]]))
    return PathModel(
        taxonomy,
        vocabulary,
        np.log([0.5, 0.5]),
        log_theta,
        FeatureSettings(min_df=1.0, max_df=1.0, stop_words="none"),
        ModelSettings(method="pcnb").resolved(smoothing=1.0),
    )


def _assert_clear(exc_info, what):
    message = str(exc_info.value)
    assert isinstance(exc_info.value, ValueError)  # pcem exits 2: retrying will not help
    assert what in message
    assert "Spark Connect" in message
    assert "spark-submit" in message and "SparkSession.builder.master" in message
    assert "docs/CLUSTER.md" in message


def test_the_session_is_recognised_as_spark_connect(remote, labelled_docs):
    assert is_spark_connect(remote) and is_spark_connect(labelled_docs)


@pytest.mark.parametrize("options", [{}, {"top_k": 2, "min_probability": 0.6, "node_probabilities": True}, {"beam": 1}])
def test_prediction_works_over_connect_with_the_dense_posterior(labelled_docs, options):
    """PathModel.transform over Connect: the parameters travel in the plan (engine.shipping), not a broadcast."""
    from pcem_spark.ml.estimator import PathEMModel

    model = _tiny_model()
    rows = {r["id"]: r for r in model.transform(labelled_docs, **options).collect()}
    texts = dict((r["id"], r["text"]) for r in labelled_docs.select("id", "text").collect())
    paths = [model.taxonomy.real_path(j) for j in range(model.taxonomy.n_paths)]
    for doc_id, text in texts.items():
        x = np.array([text.split().count(w) for w in model.vocabulary], dtype=float)
        jll = model.params.log_theta() @ x + model.params.log_prior
        post = np.exp(jll - jll.max()) / np.exp(jll - jll.max()).sum()
        best = int(np.argmax(jll))
        got = rows[doc_id]
        # (a beam of 1 scores one path per document: its probability is 1 over the paths it scored)
        assert got["probability"] == pytest.approx(1.0 if options.get("beam") else post[best], rel=1e-9)
        if not options.get("min_probability"):
            assert list(got["path"]) == paths[best]
        if options.get("top_k"):
            assert [list(t["path"]) for t in got["top_paths"]][0] == paths[best]
    assert PathEMModel(model).transform(labelled_docs).count() == len(texts)


def test_reading_and_checking_documents_works_over_connect(remote):
    """The strict reader and the reject split give the verdicts of tests/test_strict_input.py."""
    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.rejects import split_rejects

    with open(os.path.join(DATA, "malformed_expected.json"), encoding="utf-8") as fh:
        expected = {int(k): v for k, v in json.load(fh).items() if not k.startswith("_")}
    raw = read_documents(remote, CATALOGUE, "json")
    good, rejects = split_rejects(raw)
    got = {r["line"]: r for r in rejects.collect()}
    assert sorted(got) == sorted(expected)
    for line, want in expected.items():
        assert want["reason"] in got[line]["reason"], f"line {line}: {got[line]['reason']!r}"
        assert got[line]["id"] == want["id"]
    assert good.count() + len(got) == raw.count() == 39


def test_featurising_works_over_connect(labelled_docs):
    from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary

    settings = FeatureSettings(min_df=1.0, max_df=1.0, stop_words="english")
    vocabulary = fit_vocabulary(labelled_docs, settings)
    assert {"rocket", "orbit", "puck", "goal", "document"} <= set(vocabulary)
    rows = featurize(labelled_docs, vocabulary, settings).select("id", "features").collect()
    assert len(rows) == 12
    for r in rows:
        assert r["features"].size == len(vocabulary)
        assert r["features"].values.sum() == 5  # four topic words + "document" (the number is dropped)


def test_an_em_pass_runs_over_connect_with_the_local_pass_sums(labelled_docs):
    """The DataFrame-only pass (engine.frame_sums): packed blocks, the E-step and the summed chunks, over Connect."""
    from pcem_spark.core.methods import method_spec
    from pcem_spark.core.parameters import sparse_log_parameters
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.blocks import block_from_row, packed_label_frame
    from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary
    from pcem_spark.engine.frame_sums import frame_sufficient_stats
    from pcem_spark.engine.sums import PassOptions, local_sufficient_stats

    taxonomy = Taxonomy.from_label_paths([["sci", "space"], ["rec", "hockey"]])
    settings = FeatureSettings(min_df=1.0, max_df=1.0, stop_words="english")
    vocabulary = fit_vocabulary(labelled_docs, settings)
    feats = featurize(labelled_docs, vocabulary, settings)
    frame = packed_label_frame(feats, taxonomy.path_lookup(), taxonomy.path_node_matrix(), block_size=4)
    spec = method_spec(taxonomy, "pcem", 2, 1.0)
    n_nodes, V = taxonomy.path_node_matrix().shape[1], len(vocabulary)
    # The reference: the same partition code in this process, on the blocks brought to the client.
    blocks = [block_from_row(r, V, n_nodes) for r in frame.collect()]
    init = PassOptions(use_unlabeled=False)
    want = local_sufficient_stats(blocks, None, spec.score_matrix, V, init)
    got = frame_sufficient_stats(frame, None, spec.score_matrix, V, n_nodes, init)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    params = sparse_log_parameters(np.asarray(want[0]), want[1])
    want = local_sufficient_stats(blocks, params, spec.score_matrix, V, PassOptions())
    got = frame_sufficient_stats(frame, params, spec.score_matrix, V, n_nodes, PassOptions())
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9)
    assert got[2] == pytest.approx(want[2], rel=1e-9) and got[3:] == want[3:] == (6, 6)


def test_a_pcem_fit_runs_over_connect_as_in_this_process(labelled_docs):
    """engine.passes.fit on a DataFrame of packed blocks: every EM pass over Connect, no RDD, no broadcast."""
    from pcem_spark.core.methods import method_spec
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.blocks import block_from_row, packed_label_frame
    from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary
    from pcem_spark.engine.passes import EMSettings, fit

    taxonomy = Taxonomy.from_label_paths([["sci", "space"], ["rec", "hockey"]])
    settings = FeatureSettings(min_df=1.0, max_df=1.0, stop_words="english")
    vocabulary = fit_vocabulary(labelled_docs, settings)
    frame = packed_label_frame(
        featurize(labelled_docs, vocabulary, settings), taxonomy.path_lookup(), taxonomy.path_node_matrix(), 4
    ).cache()
    spec = method_spec(taxonomy, "pcem", 2, 1.0)
    em = EMSettings(smoothing=0.5, max_iter=3, unlabeled_weight=0.5)
    local = [block_from_row(r, len(vocabulary), spec.score_matrix.shape[1]) for r in frame.collect()]
    want = fit(local, spec.score_matrix, len(vocabulary), em)
    got = fit(frame, spec.score_matrix, len(vocabulary), em)
    np.testing.assert_allclose(got.params.log_theta(), want.params.log_theta(), rtol=1e-9, atol=1e-12)
    assert got.n_iter == want.n_iter == 3 and got.loglik_history == pytest.approx(want.loglik_history, rel=1e-9)


# ------------------------------------------------------------------ training and model files


def test_engine_helpers_that_return_rdds_still_fail_at_once_naming_spark_connect(labelled_docs):
    from pcem_spark import engine
    from pcem_spark.core.taxonomy import Taxonomy

    taxonomy = Taxonomy.from_label_paths([["sci", "space"], ["rec", "hockey"]])
    with pytest.raises(SparkConnectError) as info:
        engine.blocks_from_labels(labelled_docs, taxonomy.path_lookup(), taxonomy.path_node_matrix(), 4)
    _assert_clear(info, "engine.blocks_from_labels")
    # what the fits use instead over Connect: the packed DataFrame (an RDD on a classic session)
    from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary

    settings = FeatureSettings(min_df=1.0, max_df=1.0, stop_words="none")
    feats = featurize(labelled_docs, fit_vocabulary(labelled_docs, settings), settings)
    blocks = engine.label_blocks(feats, taxonomy.path_lookup(), taxonomy.path_node_matrix(), 10, 4)
    assert is_spark_connect(blocks) and sum(r["n"] for r in blocks.collect()) == 12


def test_pathem_in_a_pipeline_and_cross_validator_over_connect(remote, labelled_docs, tmp_path):
    """PathEM (automatic tuning and calibration included) inside a Pipeline and a CrossValidator on a remote
    session; the fitted model is saved and loaded back through the Connect persistence."""
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    from pcem_spark.evaluation.evaluator import HierarchicalF1Evaluator
    from pcem_spark.ml.estimator import PathEM

    rows = []
    for i in range(40):
        topic = ("space", "rocket orbit launch moon nasa") if i % 2 else ("hockey", "puck goal skate ice team")
        words = topic[1].split()
        text = " ".join(words[(i + k) % len(words)] for k in range(4)) + f" note{i % 5}"
        labels = ["sci" if topic[0] == "space" else "rec", topic[0]] if i < 24 else None
        rows.append((f"p{i}", text, labels))
    docs = remote.createDataFrame(rows, "id string, text string, labels array<string>")
    est = PathEM(method="pcem", maxIter=3, minDF=1.0, maxDF=1.0, stopWords="none")  # weights "auto": tuned
    model = Pipeline(stages=[est]).fit(docs)
    pm = model.stages[0].path_model
    assert pm.training_summary["tuning"]["sample"]["n_labeled"] == 24
    out = model.transform(docs).select("id", "path").collect()
    assert len(out) == 40
    hits = sum(list(r["path"])[1] == ("space" if int(r["id"][1:]) % 2 else "hockey") for r in out)
    assert hits >= 36
    path = str(tmp_path / "pipeline")
    model.save(path)
    again = PipelineModel.load(path)
    assert [list(r["path"]) for r in again.transform(docs).select("path").collect()] == [
        list(r["path"]) for r in model.transform(docs).select("path").collect()
    ]
    fixed = PathEM(
        method="pcem", maxIter=2, minDF=1.0, maxDF=1.0, stopWords="none", unlabeledWeight=0.5, pathWeight=1.0
    )
    grid = ParamGridBuilder().addGrid(fixed.smoothing, [0.1, 1.0]).build()
    cv = CrossValidator(
        estimator=fixed,
        estimatorParamMaps=grid,
        evaluator=HierarchicalF1Evaluator(metricName="microF1"),
        numFolds=2,
        seed=3,
    )
    cv_model = cv.fit(docs.where(docs.labels.isNotNull()))
    assert len(cv_model.avgMetrics) == 2 and all(0.5 <= m <= 1.0 for m in cv_model.avgMetrics)


def test_model_files_over_connect_round_trip_and_refuse_without_marker(remote, tmp_path):
    from pcem_spark.io.outputs import IncompleteOutputError
    from pcem_spark.model.path_model import PathModel

    model = _tiny_model()
    path = str(tmp_path / "model")
    model.save(path)
    loaded = PathModel.load(path)
    np.testing.assert_array_equal(loaded.params.log_theta(), model.params.log_theta())
    assert loaded.vocabulary == model.vocabulary
    with pytest.raises(FileExistsError, match="--overwrite"):
        model.save(path)
    os.remove(os.path.join(path, "_PCEM_COMPLETE"))
    with pytest.raises(IncompleteOutputError, match="no completion marker"):
        PathModel.load(path)


def test_format_detection_works_over_connect(remote):
    from pcem_spark.io.documents import detect_format, read_documents

    assert detect_format(remote, CATALOGUE) == "json"
    assert read_documents(remote, CATALOGUE).count() == 39


# ------------------------------------------------------------------ the commands, against classic
#
# A ``pcem`` command runs in this process (``main(argv)``: no process start, no JVM) unless the test is about the
# process itself: the runs SIGKILLed at a write stage (``PCEM_KILL_AT``) are real ``pcem`` processes (:func:`_pcem`).
# Classic runs use the worker's ``spark`` session, Connect runs a client session of their own on the module's server.

CONFIG = os.path.join(REPO, "conf", "pcem.toml")


@contextlib.contextmanager
def _as_a_pcem_process(remote_url=None, cwd=None):
    """This process, for one in-process ``main(argv)``, as the ``pcem`` process :func:`_pcem` starts.

    A classic run: the Connect client's variables out of the environment (with them pyspark would hand out
    Connect columns and refuse the classic builder). A Connect run: SPARK_REMOTE set, no Connect session yet
    (so the run creates its own, default and active, as in a fresh process; it is stopped afterwards), and
    ``cwd`` its working directory (a classic session's JVM keeps its own: classic runs get absolute paths).
    Everything is restored afterwards, so the module's ``remote`` session and the worker's classic ``spark``
    session go on as before."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    saved_env = {k: os.environ.get(k) for k in _CONNECT_ENV + ("PCEM_KILL_AT",)}
    saved_dir = os.getcwd()
    saved_sessions = (ConnectSession._default_session, getattr(ConnectSession._active_session, "session", None))
    for key in saved_env:
        os.environ.pop(key, None)
    if remote_url:
        os.environ["SPARK_REMOTE"] = remote_url
        ConnectSession._default_session = ConnectSession._active_session.session = None
    else:
        assert cwd is None, "a classic run's JVM resolves relative paths against its own directory"
    try:
        if cwd:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_dir)
        if remote_url:
            made = ConnectSession._default_session  # the run's own session (None if it made none)
            if made is not None and made is not saved_sessions[0]:
                made.stop()
            ConnectSession._default_session, ConnectSession._active_session.session = saved_sessions
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _main(args, spark=None, remote_url=None, cwd=None) -> int:
    """``pcem ARGS --config conf/pcem.toml`` in this process: on the classic ``spark`` session, or over Connect to
    ``remote_url``; its exit code (its stderr is the test's: capsys, caplog)."""
    from pcem_spark.cli import main

    assert (spark is None) != (remote_url is None)
    partitions = spark.conf.get("spark.sql.shuffle.partitions") if spark is not None else None
    try:
        with _as_a_pcem_process(remote_url, cwd):
            return main([*args, "--config", CONFIG])
    finally:
        if spark is not None:  # the run set pcem's default on the shared session
            spark.conf.set("spark.sql.shuffle.partitions", partitions)


def _pcem(args, remote_url=None, kill_at=None, cwd=None, timeout=900):
    """A real ``pcem`` process: only for the runs that are killed."""
    env = {k: v for k, v in os.environ.items() if k not in _CONNECT_ENV + ("PCEM_KILL_AT",)}
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([REPO] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
    )
    if remote_url:
        env["SPARK_REMOTE"] = remote_url
    if kill_at:
        env["PCEM_KILL_AT"] = kill_at
    return subprocess.run(
        [sys.executable, "-m", "pcem_spark.cli", *args, "--config", CONFIG],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def slice_20ng(tmp_path_factory):
    """Four 20NG leaves, 80 training and 40 test posts each (the archive of tests/conftest.py)."""
    from conftest import ARCHIVE_20NG

    from pcem_spark.io.newsgroups import iter_20ng

    if not os.path.exists(ARCHIVE_20NG):
        pytest.skip(f"20 Newsgroups archive not found at {ARCHIVE_20NG} (set PCEM_20NG_ARCHIVE)")
    leaves = ("rec.sport.hockey", "sci.space", "comp.graphics", "talk.politics.guns")
    taken = {(leaf, split): 0 for leaf in leaves for split in ("train", "test")}
    path = tmp_path_factory.mktemp("slice") / "docs.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for doc in iter_20ng(ARCHIVE_20NG):
            key = (doc["labels"][-1], doc["split"])
            if key in taken and taken[key] < (80 if doc["split"] == "train" else 40):
                taken[key] += 1
                fh.write(json.dumps(doc) + "\n")
    assert set(taken.values()) == {80, 40}
    return str(path)


def _parameters(model_dir):
    import pyarrow.parquet as pq

    table = pq.read_table(os.path.join(model_dir, "parameters")).sort_by("path_index").to_pydict()
    ratio = [np.frombuffer(b, "<f8") for b in table["log_ratio"]]
    index = [np.frombuffer(b, "<i4") for b in table["term_indices"]]
    return np.array(table["log_prior"]), np.array(table["log_base"]), index, ratio


def _predictions(out):
    import pyarrow.parquet as pq

    rows = pq.read_table(out).to_pylist()
    return {r["id"]: r for r in rows}


def test_train_predict_evaluate_over_connect_match_the_classic_run(spark, remote, connect_url, slice_20ng, tmp_path):
    """``SPARK_REMOTE=sc://... pcem train && pcem predict && pcem evaluate``, relative paths included, against
    the same commands on a classic local session: identical paths, probabilities and log theta within 1e-9.
    (Both in this process: the classic ones on the worker's session, with absolute paths since its JVM keeps
    its own working directory; the Connect ones from the run's directory, with relative paths.)"""
    runs = {}
    for kind in ("classic", "connect"):
        d = tmp_path / kind
        d.mkdir()
        # the classic run names its files absolutely, the Connect run relative to its directory
        base = str(d) if kind == "classic" else ""
        where = {"spark": spark} if kind == "classic" else {"remote_url": connect_url, "cwd": str(d)}
        train = ["train", "--docs", slice_20ng, "--split", "train", "--label-rate", "0.1", "--seed", "0"]
        model, pred, metrics = (os.path.join(base, name) for name in ("model", "pred", "m.json"))
        assert _main([*train, "--model", model], **where) == 0
        predict = ["predict", "--model", model, "--docs", slice_20ng, "--split", "test", "--top-k", "3"]
        assert _main([*predict, "--output", pred, "--node-probabilities"], **where) == 0
        evaluate = ["evaluate", "--predictions", pred, "--model", model, "--output", metrics]
        assert _main(evaluate, **where) == 0
        with open(d / "m.json", encoding="utf-8") as fh:
            runs[kind] = (d, json.load(fh))
    # pcem inspect over Connect: its local report folder, complete with the reliability diagram
    inspect = ["inspect", "--model", "model", "--predictions", "pred", "--output", "insp"]
    assert _main(inspect, remote_url=connect_url, cwd=str(d)) == 0
    assert {"_PCEM_COMPLETE", "model.md", "reliability.md", "reliability.png"} <= set(os.listdir(d / "insp"))
    (classic, m_classic), (connect, m_connect) = runs["classic"], runs["connect"]
    assert m_connect["micro_f1"] == m_classic["micro_f1"] and m_connect["macro_f1"] == m_classic["macro_f1"]
    assert m_connect["n_documents"] == 160
    a, b = _parameters(classic / "model"), _parameters(connect / "model")
    np.testing.assert_allclose(b[0], a[0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(b[1], a[1], rtol=0, atol=1e-9)
    for ia, ib, ra, rb in zip(a[2], b[2], a[3], b[3]):
        np.testing.assert_array_equal(ib, ia)
        np.testing.assert_allclose(rb, ra, rtol=0, atol=1e-9)
    pa_, pb_ = _predictions(str(classic / "pred")), _predictions(str(connect / "pred"))
    assert sorted(pa_) == sorted(pb_) and len(pa_) == 160
    for doc_id, want in pa_.items():
        got = pb_[doc_id]
        assert list(got["path"]) == list(want["path"]), doc_id
        assert got["probability"] == pytest.approx(want["probability"], abs=1e-9)
        np.testing.assert_allclose(got["node_probabilities"], want["node_probabilities"], rtol=0, atol=1e-9)
        assert [list(t["path"]) for t in got["top_paths"]] == [list(t["path"]) for t in want["top_paths"]]
    # the Connect model's training summary: the same tuning choice and calibration
    with open(os.path.join(str(connect / "model"), "_PCEM_COMPLETE"), encoding="utf-8") as fh:
        assert json.load(fh)["kind"] == "model"
    # pcem suggest-labels over Connect (density weight on): the classic session's suggestions, one model
    pool = tmp_path / "pool.jsonl"
    with open(slice_20ng, encoding="utf-8") as src, open(pool, "w", encoding="utf-8") as dst:
        for line in src:
            doc = json.loads(line)
            if doc.get("split") == "test":
                dst.write(json.dumps({"id": doc["id"], "text": doc["text"]}) + "\n")
    suggest = ["suggest-labels", "--model", str(classic / "model"), "--docs", str(pool), "--budget", "12"]
    suggest += ["--density-weight", "1", "--output"]
    assert _main([*suggest, str(tmp_path / "sugg-classic")], spark=spark) == 0
    assert _main([*suggest, "sugg-connect"], remote_url=connect_url, cwd=str(tmp_path)) == 0
    picks = {
        kind: sorted(_predictions(str(tmp_path / f"sugg-{kind}")).values(), key=lambda r: r["rank"])
        for kind in ("classic", "connect")
    }
    assert [r["id"] for r in picks["connect"]] == [r["id"] for r in picks["classic"]] and len(picks["classic"]) == 12
    for got, want in zip(picks["connect"], picks["classic"]):
        assert got["score"] == pytest.approx(want["score"], abs=1e-9)
        assert got["typicality"] == pytest.approx(want["typicality"], abs=1e-9) and got["typicality"] < 0


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """Twenty short documents on two leaves, half labelled: the kill and checkpoint tests' corpus."""
    return _small_corpus(tmp_path_factory.mktemp("small") / "docs.jsonl")


def test_train_over_connect_killed_at_each_write_stage_leaves_old_or_new_model(
    connect_url, remote, small_corpus, tmp_path
):
    """Each killed run is a real ``pcem`` process (SIGKILL at the stage); the first and the last run, not killed,
    run in this process."""
    from pcem_spark.model.path_model import PathModel

    model = str(tmp_path / "model")
    docs = small_corpus
    fixed = ["--set", "model.unlabeled_weight=0.5", "--set", "model.path_weight=1.0", "--set", "model.calibration=none"]
    fixed += ["--set", "model.family=generative"]  # fixed settings: family auto would cross-validate the family
    assert _main(["train", "--docs", docs, "--model", model, "--method", "pcnb", *fixed], remote_url=connect_url) == 0
    current = "pcnb"
    for point, replaced in (("staged", False), ("marked", False), ("old_moved", True), ("committed", True)):
        new = "flat-nb" if current == "pcnb" else "pcnb"
        proc = _pcem(
            ["train", "--docs", docs, "--model", model, "--method", new, "--overwrite", *fixed],
            connect_url,
            kill_at=f"model:{point}",
        )
        assert proc.returncode == -9, proc.stderr[-2000:]
        loaded = PathModel.load(model)  # over Connect: recover() finishes or rolls back, then the marker is read
        assert loaded.model_settings.method == (new if replaced else current), point
        current = loaded.model_settings.method
    parent = os.path.dirname(model)
    rerun = ["train", "--docs", docs, "--model", model, "--method", "pcnb", "--overwrite", *fixed]
    assert _main(rerun, remote_url=connect_url) == 0
    assert [n for n in os.listdir(parent) if n.startswith((".model.pcem-tmp-", ".model.pcem-old-"))] == []


def test_a_train_over_connect_killed_in_em_resumes_from_its_checkpoint(connect_url, small_corpus, tmp_path, caplog):
    """The checkpoint is written from the client through pyarrow.fs: a SIGKILL after EM iteration 2's checkpoint
    (a real ``pcem`` process), then the same command goes on at iteration 3, to the uninterrupted run's parameters
    (both in this process)."""
    docs = small_corpus
    fixed = ["--set", "model.unlabeled_weight=0.5", "--set", "model.path_weight=1.0", "--set", "model.calibration=none"]
    fixed += ["--set", "model.family=generative", "--set", "model.max_iter=6", "--set", "model.tol=0"]
    fixed += ["--set", "checkpoint.every_iterations=2"]
    assert _main(["train", "--docs", docs, "--model", str(tmp_path / "whole"), *fixed], remote_url=connect_url) == 0
    train = ["train", "--docs", docs, "--model", str(tmp_path / "model"), *fixed]
    killed = _pcem(train, connect_url, kill_at="checkpoint:em:2:done")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert os.listdir(tmp_path / ".model.pcem-checkpoint") == ["state-000000000003.ckpt"]  # stop words, vocabulary, EM
    caplog.clear()
    caplog.set_level(logging.INFO)
    assert _main(train, remote_url=connect_url) == 0
    again = caplog.text  # what the rerun logged (its stderr in a pcem process)
    assert "checkpoint: skipping vocabulary" in again
    assert "resumed from the checkpoint after EM iteration 2" in again and "EM iteration 3:" in again
    a, b = _parameters(str(tmp_path / "whole")), _parameters(str(tmp_path / "model"))
    np.testing.assert_allclose(b[0], a[0], rtol=0, atol=1e-9)
    for ra, rb in zip(a[3], b[3]):
        np.testing.assert_allclose(rb, ra, rtol=0, atol=1e-9)
    assert not os.path.exists(tmp_path / ".model.pcem-checkpoint")


def _small_corpus(path):
    rng = np.random.default_rng(0)
    vocab = {"space": "rocket orbit launch moon nasa shuttle", "hockey": "puck goal skate ice team season"}
    with open(path, "w", encoding="utf-8") as fh:
        for leaf, words in vocab.items():
            for i in range(10):
                labels = ["sci" if leaf == "space" else "rec", leaf] if i < 5 else None
                text = " ".join(rng.choice(words.split(), size=8))
                fh.write(json.dumps({"id": f"{leaf}-{i}", "text": text, "labels": labels}) + "\n")
    return str(path)


def test_the_malformed_catalogue_through_pcem_train_over_connect(connect_url, tmp_path, capsys):
    """Every bad line of the catalogue is a reject with its reason, written by the Connect persistence;
    valid + rejected = the lines read."""
    import pyarrow.parquet as pq

    with open(os.path.join(DATA, "malformed_expected.json"), encoding="utf-8") as fh:
        expected = {int(k): v for k, v in json.load(fh).items() if not k.startswith("_")}
    model = str(tmp_path / "model")
    _main(["train", "--docs", CATALOGUE, "--model", model, "--method", "pcnb"], remote_url=connect_url)
    # the valid rows may be too few to train on; the rejects are written before any fit either way
    rejects = {r["line"]: r for r in pq.read_table(model + "_rejects").to_pylist()}
    assert sorted(rejects) == sorted(expected), capsys.readouterr().err[-2000:]
    for line, want in expected.items():
        assert want["reason"] in rejects[line]["reason"], line
    assert os.path.exists(os.path.join(model + "_rejects", "_PCEM_COMPLETE"))


def test_commands_that_need_the_classic_api_exit_2_over_connect(connect_url, tmp_path, capsys):
    args = ["ingest-warc", "--input", str(tmp_path / "none.warc"), "--output", str(tmp_path / "o")]
    code = _main(args, remote_url=connect_url)
    stderr = capsys.readouterr().err
    assert code == 2, stderr[-2000:]
    assert f"SPARK_REMOTE={connect_url} asks for a Spark Connect session" in stderr
    assert "spark-submit" in stderr and not (tmp_path / "o").exists()


def test_dataless_training_from_label_descriptions_over_connect(remote):
    """train_weak over Connect: IDF and the description similarities on the server, the weak labels'
    tf-idf vectors shipped without a broadcast variable, then the DataFrame-only EM."""
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.ml.estimator import PathEM

    taxonomy = Taxonomy.from_label_paths([["sci", "space"], ["rec", "hockey"]])
    rows = []
    for i in range(30):
        words = "rocket orbit launch moon nasa" if i % 2 else "puck goal skate ice team"
        rows.append((f"w{i}", " ".join(words.split()[(i + k) % 5] for k in range(4))))
    docs = remote.createDataFrame(rows, "id string, text string")
    desc = {"sci": "science", "rec": "recreation", "space": "rocket orbit", "hockey": "puck ice"}
    est = PathEM(
        method="pcem",
        maxIter=3,
        minDF=1.0,
        maxDF=1.0,
        stopWords="none",
        taxonomy=taxonomy.to_json(),
        supervision="descriptions",
        descriptions=json.dumps(desc),
    )
    out = est.fit(docs).transform(docs).select("id", "leaf").collect()
    assert len(out) == 30
    assert sum(r["leaf"] == ("space" if int(r["id"][1:]) % 2 else "hockey") for r in out) >= 27


@pytest.mark.parametrize("weights", ["dense", "observed"])
def test_the_combined_family_trains_saves_and_predicts_over_connect(remote, tmp_path, weights):
    """The softmax regression's passes over Connect (engine.frame_softmax_pass) give the in-process fit of the
    same blocks; the model saves, loads and predicts through the Connect persistence."""
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.blocks import block_from_row, packed_label_frame
    from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary
    from pcem_spark.ml import train
    from pcem_spark.model.linear_family import fit_linear_blocks, fit_linear_local
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    rows = []
    for i in range(40):
        topic = ("space", "rocket orbit launch moon nasa") if i % 2 else ("hockey", "puck goal skate ice team")
        words = topic[1].split()
        text = " ".join(words[(i + k) % len(words)] for k in range(3)) + f" note{i % 7}"
        labels = ["sci" if topic[0] == "space" else "rec", topic[0]] if i < 16 else None
        rows.append((f"c{i}", text, labels))
    docs = remote.createDataFrame(rows, "id string, text string, labels array<string>")
    taxonomy = Taxonomy.from_label_paths([["sci", "space"], ["rec", "hockey"]])
    features = FeatureSettings(min_df=1.0, max_df=1.0, stop_words="none")
    ms = ModelSettings(
        method="pcem",
        smoothing=0.5,
        unlabeled_weight=0.5,
        path_weight=1.0,
        max_iter=3,
        calibration="none",
        names="off",
        family="combined",
        linear_weights=weights,
    )
    vocabulary = fit_vocabulary(docs, features)
    frame = packed_label_frame(
        featurize(docs, vocabulary, features), taxonomy.path_lookup(), taxonomy.path_node_matrix(), 8
    ).cache()
    local = [block_from_row(r, len(vocabulary), taxonomy.n_nodes) for r in frame.collect()]
    over_connect, info = fit_linear_blocks(frame, taxonomy, len(vocabulary), ms)
    in_process = fit_linear_local(local, taxonomy, len(vocabulary), ms)
    assert info["weights"] == weights and info["n_labeled"] == 16 and info["converged"]
    assert info["fitted_in"] == "one task"  # 16 labelled documents

    def dense(w):
        return w.toarray() if hasattr(w, "toarray") else np.asarray(w)

    np.testing.assert_allclose(dense(over_connect.weights_t), dense(in_process.weights_t), atol=1e-6)
    np.testing.assert_allclose(over_connect.idf, in_process.idf, rtol=1e-12)
    if weights == "dense":  # the route of a large labelled set: one Connect job per L-BFGS evaluation
        from pcem_spark.engine.frame_softmax_pass import fit_softmax_on_frame, labeled_frame
        from pcem_spark.model.linear_family import LINEAR_MAX_ITER, LINEAR_TOL, linear_l2

        labeled = labeled_frame(frame, len(vocabulary), taxonomy.n_nodes).cache()
        by_pass = fit_softmax_on_frame(
            labeled,
            in_process.idf,
            taxonomy.leaf_node_matrix(),
            linear_l2(ms.linear_c, 16),
            len(vocabulary),
            LINEAR_MAX_ITER,
            LINEAR_TOL,
        )
        labeled.unpersist()
        np.testing.assert_allclose(by_pass.W, dense(in_process.weights_t).T, atol=1e-6)
    frame.unpersist()
    model, _ = train(docs, taxonomy, features, ms)
    assert model.linear is not None and model.training_summary["linear"]["weights"] == weights
    path = str(tmp_path / f"combined-{weights}")
    model.save(path)
    loaded = PathModel.load(path)
    np.testing.assert_array_equal(dense(loaded.linear.weights_t), dense(model.linear.weights_t))
    got = {r["id"]: list(r["path"]) for r in loaded.transform(docs).select("id", "path").collect()}
    assert got == {r["id"]: list(r["path"]) for r in model.transform(docs).select("id", "path").collect()}
    assert sum(got[f"c{i}"][1] == ("space" if i % 2 else "hockey") for i in range(40)) >= 36
