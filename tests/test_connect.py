"""pcem-spark against a Spark Connect server (issue 11): what works, and a clear error for what does not.

One Spark Connect server for the module: the installed pyspark's
``sbin/start-connect-server.sh``, ``local[2]``, bound to 127.0.0.1 on a free
port, its Python workers on this interpreter with this checkout on their path;
stopped (its process group, which this module started) at the end.

Fitting, prediction, model files and the ``pcem`` commands need the RDD API,
broadcast variables or the driver's JVM, which Spark Connect does not have:
they must fail at once with :class:`pcem_spark.engine.session.SparkConnectError`
(a ValueError, so ``pcem`` exits 2 and a scheduler does not retry), naming
Spark Connect and the way out. Reading, checking and featurising documents
is plain DataFrame work and must give the classic results.

Skipped only when the Connect client packages are missing (``pip install
grpcio grpcio-status googleapis-common-protos zstandard``).
"""

import json
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

pytestmark = pytest.mark.slow  # the slow tier (scripts/test.sh --slow, .ci/run)

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
def remote(connect_url):
    """A Spark Connect client session (``create``: a classic session may already exist in this process)."""
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


def test_fit_fails_at_once_naming_spark_connect(labelled_docs):
    from pcem_spark.ml.estimator import PathEM

    est = PathEM(method="pcem", maxIter=2, smoothing=1.0, unlabeledWeight=1.0, pathWeight=1.0, minDF=1.0, maxDF=1.0)
    with pytest.raises(SparkConnectError) as info:
        est.fit(labelled_docs)
    _assert_clear(info, "PathEM.fit")
    assert "RDD" in str(info.value)
    # Refused at the entry, before any Spark job: it used to fail in engine.blocks_from_labels,
    # after the taxonomy, label-check and vocabulary jobs (9.5 s on 2,000 documents).
    frames = {entry.name for entry in info.traceback}
    assert "_fit" in frames
    assert not frames & {"fit_vocabulary", "infer_taxonomy", "check_label_paths", "blocks_from_labels", "train"}


def test_library_training_entry_points_fail_the_same_way(labelled_docs):
    from pcem_spark import engine
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.ml import train
    from pcem_spark.model.settings import ModelSettings

    taxonomy = Taxonomy.from_label_paths([["sci", "space"], ["rec", "hockey"]])
    with pytest.raises(SparkConnectError) as info:
        train(labelled_docs, taxonomy, FeatureSettings(min_df=1.0, max_df=1.0), ModelSettings())
    _assert_clear(info, "model.train")
    with pytest.raises(SparkConnectError) as info:
        engine.blocks_from_labels(labelled_docs, taxonomy.path_lookup(), taxonomy.path_node_matrix(), 4)
    _assert_clear(info, "engine.blocks_from_labels")


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


def test_model_files_and_format_detection_fail_naming_the_way_out(remote, tmp_path):
    from pcem_spark.io.documents import read_documents
    from pcem_spark.model.path_model import PathModel

    with pytest.raises(SparkConnectError) as info:
        PathModel.load(str(tmp_path / "model"))
    _assert_clear(info, "loading models")
    with pytest.raises(SparkConnectError) as info:
        read_documents(remote, CATALOGUE)  # no fmt: the format is detected with Hadoop FileSystem calls
    _assert_clear(info, "Detecting the documents format")
    assert "fmt='json'" in str(info.value)


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


def test_pcem_train_against_spark_connect_exits_2_with_the_reason(connect_url, tmp_path):
    """``SPARK_REMOTE=sc://... pcem train``: a bad-input exit (2), not the scheduler's retry code (75)."""
    env = {k: v for k, v in os.environ.items() if k not in _CONNECT_ENV}
    env.update(
        SPARK_REMOTE=connect_url,
        PYTHONPATH=os.pathsep.join([REPO] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pcem_spark.cli", "train", "--docs", CATALOGUE, "--model", str(tmp_path / "model")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "pcem train: error: pcem (its commands and jobs/*.py) needs the driver's JVM" in proc.stderr
    assert f"SPARK_REMOTE={connect_url} asks for a Spark Connect session" in proc.stderr
    assert "Spark Connect" in proc.stderr and "spark-submit" in proc.stderr
    assert not (tmp_path / "model").exists()


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
