"""Atomic outputs and scheduler-friendly exit codes.

Kill tests start the real ``pcem`` command in a subprocess and SIGKILL it at
each write stage (``PCEM_KILL_AT``, pcem_spark.faults): the output is then the
old complete one or the new complete one, loads or is refused, and a plain
rerun succeeds. Only the killed runs, and the run whose failed task Spark must
retry (``local[2,3]``; the test session's ``local[2]`` never retries), are
processes: every other run is ``pcem_spark.cli.main`` in this process.
"""

import json
import os
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import pytest
from chispa import assert_df_equality
from saved_outputs import drop_manifest

from pcem_spark.cli import main
from pcem_spark.cli.failures import EXIT_BAD_INPUT, EXIT_TRANSIENT, classify_failure, root_cause
from pcem_spark.io.outputs import (
    MARKER,
    IncompleteOutputError,
    atomic_output,
    atomic_write_text,
    read_marker,
    recover,
    require_complete,
)
from pcem_spark.model.path_model import PathModel

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FAST = [
    "--set",
    "model.smoothing=1.0",
    "--set",
    "model.unlabeled_weight=1.0",
    "--set",
    "model.path_weight=1.0",
    "--set",
    "model.max_iter=3",
    "--set",
    "model.family=generative",  # fixed settings: family auto would cross-validate the family
    "--set",
    "features.min_df=1",
    "--log-level",
    "WARNING",
]

# The runs of the slow tests below (the processes they kill or fault above all): FAST, and none of the stages
# that are not their point (the stop-word choice, the names' decision, the calibration's out-of-fold fits), so a
# ``pcem`` process spends its time on its JVM and the write stages, not on training.
QUICK = [
    *FAST,
    "--set",
    "model.calibration=none",
    "--set",
    "features.stop_words=english",
    "--set",
    "model.names=off",
]

WORDS = {
    ("sport", "football"): "goal keeper striker league pitch referee",
    ("sport", "tennis"): "serve racket volley court deuce wimbledon",
    ("tech", "phones"): "android screen battery camera apps mobile",
    ("tech", "chips"): "silicon transistor wafer foundry nanometer cpu",
}


def _write_corpus(path, n_per_leaf=10, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for (parent, leaf), words in WORDS.items():
            for i in range(n_per_leaf):
                text = " ".join(rng.choice(words.split(), size=8))
                labels = [parent, leaf] if i < 4 else None
                fh.write(json.dumps({"id": f"{leaf}-{i}", "text": text, "labels": labels}) + "\n")
    return str(path)


def _pcem(args, kill_at=None, fault=None, check=None):
    env = {k: v for k, v in os.environ.items() if k not in ("PCEM_KILL_AT", "PCEM_INJECT_FAULT")}
    env["PYSPARK_PYTHON"] = sys.executable
    if kill_at:
        env["PCEM_KILL_AT"] = kill_at
    if fault:
        env["PCEM_INJECT_FAULT"] = fault
    proc = subprocess.run(
        [sys.executable, "-m", "pcem_spark.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    if check is not None:
        assert proc.returncode == check, proc.stderr[-3000:]
    return proc


def _run(args):
    """A run that is not killed: in this process, on the test session's SparkSession (no JVM start)."""
    assert main(list(args)) == 0


def _leftovers(path):
    """What killed or failed runs left beside ``path`` (temporary and old copies), not its lease or the
    versions retained for readers."""
    parent, name = os.path.split(path.rstrip("/"))
    return sorted(n for n in os.listdir(parent) if n.startswith((f".{name}.pcem-tmp-", f".{name}.pcem-old-")))


# ----------------------------------------------------------------- unit level


def test_atomic_output_replaces_only_when_complete(spark, tmp_path):
    out = str(tmp_path / "out")
    with atomic_output(spark, out, "predictions") as staged:
        spark.range(3).write.parquet(staged.tmp)
        staged.info["rows"] = 3
    marker = require_complete(spark, out, "predictions")
    assert marker["rows"] == 3 and marker["complete"] is True
    with pytest.raises(FileExistsError, match="--overwrite"):
        with atomic_output(spark, out, "predictions"):
            pass
    # a failure while writing the new one leaves the old one, and no temporary directory
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_output(spark, out, "predictions", overwrite=True) as staged:
            spark.range(5).write.parquet(staged.tmp)
            raise RuntimeError("boom")
    assert spark.read.parquet(out).count() == 3 and _leftovers(out) == []
    with atomic_output(spark, out, "predictions", overwrite=True) as staged:
        spark.range(5).write.parquet(staged.tmp)
    assert_df_equality(spark.read.parquet(out), spark.range(5), ignore_row_order=True, ignore_nullable=True)
    assert _leftovers(out) == []
    with pytest.raises(IncompleteOutputError, match="is a pcem-spark predictions output, expected model"):
        require_complete(spark, out, "model")


def test_readers_refuse_a_directory_without_the_marker(spark, tmp_path):
    out = str(tmp_path / "plain")
    spark.range(3).write.parquet(out)  # Spark's own write: _SUCCESS but no pcem marker
    with pytest.raises(IncompleteOutputError, match="no completion marker"):
        require_complete(spark, out)
    marker_file = tmp_path / "plain" / MARKER
    marker_file.write_text("{not json")
    assert read_marker(spark, out) is None


def test_recover_finishes_an_interrupted_swap_or_restores_the_old_output(spark, tmp_path):
    out = str(tmp_path / "o")
    with atomic_output(spark, out, "rejects") as staged:
        spark.range(2).write.parquet(staged.tmp)
    # killed between the two renames: the old output aside, the new complete one not yet in place
    os.rename(out, str(tmp_path / ".o.pcem-old-1"))
    with atomic_output(spark, str(tmp_path / "new"), "rejects") as staged:
        spark.range(7).write.parquet(staged.tmp)
    os.rename(str(tmp_path / "new"), str(tmp_path / ".o.pcem-tmp-2"))
    recover(spark, out)
    assert spark.read.parquet(out).count() == 7
    # only the old copy left: it comes back
    os.rename(out, str(tmp_path / ".o.pcem-old-3"))
    recover(spark, out, cleanup=False)
    assert spark.read.parquet(out).count() in (2, 7)
    recover(spark, out, cleanup=True)
    assert _leftovers(out) == []


def test_atomic_write_text_replaces_whole_files(tmp_path):
    path = str(tmp_path / "sub" / "a.md")
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert open(path).read() == "two" and os.listdir(tmp_path / "sub") == ["a.md"]


@pytest.mark.parametrize("umask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_local_files_respect_the_umask(tmp_path, umask, file_mode, dir_mode):
    """metrics.json, the experiment's CSV / markdown, inspect folders and the --py-files zip: 0o666 & ~umask
    (0o777 & ~umask for folders), also when they replace a file with another mode."""
    import stat

    from pcem_spark.ops import packaging
    from pcem_spark.ops.inspection import write_inspection

    def mode(path):
        return stat.S_IMODE(os.stat(path).st_mode)

    old = os.umask(umask)
    try:
        metrics = str(tmp_path / "metrics.json")
        atomic_write_text(metrics, "{}")
        assert mode(metrics) == file_mode
        os.chmod(metrics, 0o640)
        atomic_write_text(metrics, "{}")  # a replacement takes the umask too, not the old mode
        assert mode(metrics) == file_mode
        insp = write_inspection(str(tmp_path / "insp"), {"model.md": b"x"})
        assert mode(insp) == dir_mode and mode(os.path.join(insp, "model.md")) == file_mode
        assert mode(os.path.join(insp, MARKER)) == file_mode
        assert mode(packaging.build_py_files(str(tmp_path / "dist"))) == file_mode
    finally:
        os.umask(old)


def test_umask_is_read_without_proc(monkeypatch):
    import builtins

    from pcem_spark.util import filemodes

    real_open = builtins.open

    def no_proc(path, *a, **k):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)

    old = os.umask(0o027)
    try:
        assert filemodes.current_umask() == 0o027
        monkeypatch.setattr(builtins, "open", no_proc)
        assert filemodes.current_umask() == 0o027 and filemodes.file_mode() == 0o640
        assert filemodes.dir_mode() == 0o750
        assert os.umask(0o027) == 0o027  # restored
    finally:
        os.umask(old)


def test_exit_code_classification_and_root_cause():
    from py4j.protocol import Py4JNetworkError
    from pyspark.errors import AnalysisException, PythonException

    from pcem_spark.io.documents import DocumentsError

    assert classify_failure(DocumentsError("x.jsonl: bad"))[0] == EXIT_BAD_INPUT
    assert classify_failure(FileExistsError("output exists"))[0] == EXIT_BAD_INPUT
    assert classify_failure(AnalysisException("[PATH_NOT_FOUND] Path does not exist: /nope."))[0] == EXIT_BAD_INPUT
    assert classify_failure(Py4JNetworkError("gone"))[0] == EXIT_TRANSIENT
    worker = (
        "An exception was thrown from the Python worker. Please see the stack trace below.\n"
        'Traceback (most recent call last):\n  File "engine.py", line 3, in _pass_partition\n'
        "    maybe_fail()\npcem_spark.faults.InjectedFault: injected permanent fault in em_pass\n"
    )
    code, message = classify_failure(PythonException(worker))
    assert code == EXIT_TRANSIENT
    assert message == "Spark job failed: pcem_spark.faults.InjectedFault: injected permanent fault in em_pass"

    class FakeJava(Exception):
        pass

    java = FakeJava(
        "An error occurred while calling o6650.count.\norg.apache.spark.SparkException: Job aborted\n"
        "\tat org.apache...\nCaused by: java.io.IOException: No space left on device\n\tat x"
    )
    assert root_cause(java) == "java.io.IOException: No space left on device"
    assert classify_failure(KeyError("bug"))[0] == 1


# ------------------------------------------------------- kill at every stage


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A corpus and a complete model (method pcnb) to be replaced by the kill tests."""
    d = tmp_path_factory.mktemp("kill")
    docs = _write_corpus(d / "docs.jsonl")
    model = str(d / "model")
    _run(["train", "--docs", docs, "--model", model, "--method", "pcnb", *QUICK])
    return d, docs, model


@pytest.mark.slow
def test_train_killed_at_each_write_stage_leaves_old_or_new_model(spark, trained):
    d, docs, model = trained
    current = "pcnb"
    stages = [("lease:taken", False)] + [
        (f"model:{point}", replaced)
        for point, replaced in (("staged", False), ("marked", False), ("old_moved", True), ("committed", True))
    ]
    for point, replaced in stages:
        new = "flat-nb" if current == "pcnb" else "pcnb"
        # each run after a kill takes the killed run's lease over at once (same host, its process gone)
        proc = _pcem(["train", "--docs", docs, "--model", model, "--method", new, "--overwrite", *QUICK], kill_at=point)
        assert proc.returncode == -9, proc.stderr[-2000:]
        loaded = PathModel.load(model)  # complete, whichever it is (recover() runs first)
        assert loaded.model_settings.method == (new if replaced else current), point
        assert len(loaded.vocabulary) == loaded.log_theta.shape[1]
        current = loaded.model_settings.method
    # a plain rerun works and leaves no temporary siblings behind
    _run(["train", "--docs", docs, "--model", model, "--method", "pcnb", "--overwrite", *QUICK])
    assert PathModel.load(model).model_settings.method == "pcnb" and _leftovers(model) == []


@pytest.mark.slow
def test_predict_killed_at_each_write_stage_then_rerun(spark, trained):
    """The first predict of an output, killed once staged, leaves nothing there, and its plain rerun needs no
    --overwrite; then predict --overwrite killed at each write stage leaves the old or the new predictions."""
    d, docs, model = trained
    out = str(d / "pred")
    predict = ["predict", "--model", model, "--docs", docs, "--output", out, *QUICK]
    proc = _pcem(predict, kill_at="predictions:staged")
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert not os.path.exists(out)
    # leftovers (rejects of the killed run, its temporary directory) do not block the plain rerun
    assert os.path.exists(out + "_rejects")
    _run(predict)
    assert _leftovers(out) == []
    old_run = read_marker(spark, out)["run_id"]
    for point, same in (("staged", True), ("marked", True), ("old_moved", False), ("committed", False)):
        proc = _pcem([*predict, "--overwrite"], kill_at=f"predictions:{point}")
        assert proc.returncode == -9, proc.stderr[-2000:]
        marker = require_complete(spark, out, "predictions")
        assert (marker["run_id"] == old_run) == same, point
        assert spark.read.parquet(out).count() == marker["rows"] == 40
        old_run = marker["run_id"]
    # evaluate reads it; a plain rerun with --overwrite works and cleans up
    _run(["evaluate", "--predictions", out, "--model", model, *QUICK])
    _run([*predict, "--overwrite"])
    assert _leftovers(out) == [] and _leftovers(out + "_rejects") == []


@pytest.mark.slow
def test_evaluate_and_predict_refuse_outputs_without_the_marker(spark, trained, tmp_path, capsys):
    d, docs, model = trained
    # Spark-written predictions, e.g. a partial or foreign write: refused, exit 2
    pred = spark.createDataFrame(
        [("a", ["sport", "tennis"], ["sport", "tennis"])], "id string, path array<string>, labels array<string>"
    )
    plain = str(tmp_path / "plain")
    pred.write.parquet(plain)
    assert main(["evaluate", "--predictions", plain, "--model", model]) == EXIT_BAD_INPUT
    assert "no completion marker" in capsys.readouterr().err
    # a half-replaced model (issue: new metadata beside old parameters) has no marker: refused
    broken = str(tmp_path / "broken")
    import shutil

    shutil.copytree(model, broken)
    os.remove(os.path.join(broken, MARKER))
    assert main(["predict", "--model", broken, "--docs", docs, "--output", str(tmp_path / "p")]) == EXIT_BAD_INPUT
    assert "no completion marker" in capsys.readouterr().err
    # corrupt metadata: a clear error, not a traceback
    corrupt = str(tmp_path / "corrupt")
    shutil.copytree(model, corrupt)
    meta_dir = os.path.join(corrupt, "metadata")
    for name in os.listdir(meta_dir):
        if name.endswith(".crc"):
            os.remove(os.path.join(meta_dir, name))  # an edited file, not a bit flip (that is below)
        elif name.startswith("part-"):
            with open(os.path.join(meta_dir, name), "w") as fh:
                fh.write('{"format_version": 1}\n')
    # the file no longer matches the marker's manifest: damaged, exit 2
    assert main(["predict", "--model", corrupt, "--docs", docs, "--output", str(tmp_path / "p2")]) == 2
    assert (
        "is damaged" in capsys.readouterr().err and "the manifest says" in capsys.readouterr().err + "the manifest says"
    )
    # ... and as an older version wrote it (no manifest): its content is refused
    drop_manifest(corrupt)
    assert main(["predict", "--model", corrupt, "--docs", docs, "--output", str(tmp_path / "p2")]) == 2
    assert "damaged model" in capsys.readouterr().err
    # a bit flip, with Hadoop's .crc beside it: the marker's SHA-256 finds it first, exit 2 (a retry reads the
    # same bytes), naming the file and both checksums
    flipped = str(tmp_path / "flipped")
    shutil.copytree(model, flipped)
    part = next(n for n in os.listdir(os.path.join(flipped, "metadata")) if n.startswith("part-"))
    with open(os.path.join(flipped, "metadata", part), "r+b") as fh:
        fh.seek(5)
        fh.write(b"#")
    assert main(["predict", "--model", flipped, "--docs", docs, "--output", str(tmp_path / "p3")]) == 2
    err = capsys.readouterr().err
    assert f"{part} is damaged" in err and err.count("sha256:") == 2
    # predictions without labels cannot be scored
    unlabeled = str(tmp_path / "unl_docs.jsonl")
    with open(unlabeled, "w") as fh:
        fh.write(json.dumps({"id": "x", "text": "goal keeper striker"}) + "\n")
    out = str(tmp_path / "unl_pred")
    assert main(["predict", "--model", model, "--docs", unlabeled, "--output", out]) == 0
    assert main(["evaluate", "--predictions", out, "--model", model]) == EXIT_BAD_INPUT
    assert "none of the 1 predictions has true labels" in capsys.readouterr().err


@pytest.mark.slow
def test_experiment_outputs_survive_a_kill_and_resume(spark, tmp_path):
    docs = _write_corpus(tmp_path / "docs.jsonl", n_per_leaf=12)
    out = str(tmp_path / "exp")
    args = [
        "experiment",
        "--docs",
        docs,
        "--output-dir",
        out,
        "--methods",
        "pcnb",
        "--rates",
        "0.5",
        "--seeds",
        "1",
        *QUICK,
    ]
    _run(args)
    before = open(os.path.join(out, "results.csv")).read()
    proc = _pcem(args + ["--no-resume"], kill_at="rejects:old_moved")
    assert proc.returncode == -9
    assert open(os.path.join(out, "results.csv")).read() == before  # untouched: complete
    _run(args)  # rerun recovers and resumes
    assert require_complete(spark, os.path.join(out, "rejects"), "rejects")["rows_read"] == 48
    assert _leftovers(os.path.join(out, "rejects")) == []


# ------------------------------------------------------------- retries, codes


@contextmanager
def _executors_env(spark, name, value):
    """``name=value`` in the environment of the Python workers this session's jobs start from now on (what a
    ``pcem`` process's workers inherit from its driver): pyspark hands ``SparkContext.environment`` to each
    job's function, and the JVM keeps one worker daemon per environment."""
    env = spark.sparkContext.environment
    env[name] = value
    try:
        yield
    finally:
        env.pop(name, None)


@pytest.mark.slow
def test_worker_failure_is_retried_to_the_identical_model_and_a_permanent_one_exits_75(
    spark, trained, tmp_path, capsys
):
    d, docs, _ = trained
    em = ["--method", "pcem", *QUICK]
    ref, retried, failed = (str(tmp_path / n) for n in ("ref", "retried", "failed"))
    _run(["train", "--docs", docs, "--model", ref, *em])  # the same partitions as the process below
    # A process: its local[2,3] tries a failed task again; the test session's local[2] never does.
    proc = _pcem(["train", "--docs", docs, "--model", retried, *em], fault=f"em_pass:once:{tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.path.exists(tmp_path / "fault-em_pass")  # the fault did fire once
    a, b = PathModel.load(ref), PathModel.load(retried)
    np.testing.assert_array_equal(a.log_theta, b.log_theta)
    np.testing.assert_array_equal(a.log_prior, b.log_prior)
    # Every try fails: no retry is needed to show it, so in this process.
    capsys.readouterr()
    with _executors_env(spark, "PCEM_INJECT_FAULT", "em_pass:always:"):
        code = main(["train", "--docs", docs, "--model", failed, *em])
    err = capsys.readouterr().err
    assert code == EXIT_TRANSIENT, err[-3000:]
    assert "runtime failure (retry)" in err
    assert "InjectedFault: injected permanent fault in em_pass" in err
    assert not os.path.exists(failed) and _leftovers(failed) == []


def test_cheap_checks_run_before_reading(tmp_path, capsys):
    docs = _write_corpus(tmp_path / "docs.jsonl")
    assert main(["train", "--docs", docs, "--model", str(tmp_path / "m"), "--label-rate", "1.5"]) == 2
    assert "--label-rate must be in (0, 1]" in capsys.readouterr().err
    assert (
        main(["train", "--docs", docs, "--model", str(tmp_path / "m"), "--taxonomy", str(tmp_path / "missing.tsv")])
        == 2
    )
    assert not os.path.exists(str(tmp_path / "m_rejects"))  # failed before any read or write


def test_progress_is_logged_while_a_long_job_runs(spark, caplog):
    import logging
    import time as _time

    from pcem_spark.engine.progress import log_progress

    def slow(rows):
        for r in rows:
            _time.sleep(0.02)
            yield r

    with caplog.at_level(logging.INFO, logger="pcem_spark.engine.progress"):
        with log_progress(spark, "predict", n_rows=100, interval=0.2):
            assert spark.sparkContext.parallelize(range(100), 4).mapPartitions(slow).count() == 100
    lines = [r.getMessage() for r in caplog.records if r.name == "pcem_spark.engine.progress"]
    assert lines and all(line.startswith("predict: ") and "of 100 rows" in line for line in lines)
    # the job group is cleared afterwards: later jobs are not counted as predict's
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None


# ------------------------------------------------------- outputs written by the release before this one
RELEASE_0_1 = os.path.join(ROOT, "tests", "data", "release_0_1")


@pytest.mark.slow
def test_a_model_and_predictions_of_the_previous_release_load_and_predict_identically(spark, tmp_path):
    """tests/data/release_0_1: a model and its predictions (node probabilities, top 2 paths) written by
    pcem-spark 0.1.0 before manifests, leases and retained versions; read by folder, as then."""
    model_dir = os.path.join(RELEASE_0_1, "model")
    assert "manifest" not in read_marker(spark, model_dir)
    model = PathModel.load(model_dir)
    assert model.version == read_marker(spark, model_dir)["run_id"]
    out = str(tmp_path / "pred")
    docs = os.path.join(RELEASE_0_1, "docs.jsonl")
    _run(["predict", "--model", model_dir, "--docs", docs, "--output", out, "--node-probabilities", "--top-k", "2"])
    columns = ["id", "path", "probability", "node_probabilities", "top_paths"]
    old = {r.id: r for r in spark.read.parquet(os.path.join(RELEASE_0_1, "predictions")).select(*columns).collect()}
    new = {r.id: r for r in spark.read.parquet(out).select(*columns).collect()}
    assert sorted(new) == sorted(old)
    # The same paths exactly; the probabilities to the last few bits (a CPU's vector units may round a sum of
    # logarithms differently from the machine that wrote the release).
    for i, r in new.items():
        assert r.path == old[i].path and [t.path for t in r.top_paths] == [t.path for t in old[i].top_paths]
        got = [r.probability, *r.node_probabilities, *(t.probability for t in r.top_paths)]
        want = [old[i].probability, *old[i].node_probabilities, *(t.probability for t in old[i].top_paths)]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    # and the old predictions are read as they are, by folder (evaluate)
    assert main(["evaluate", "--predictions", os.path.join(RELEASE_0_1, "predictions"), "--model", model_dir]) == 0
