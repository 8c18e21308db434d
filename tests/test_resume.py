"""A default ``pcem train`` killed at every stage, then run again: it resumes, and its model is the
uninterrupted one's (paths equal, probabilities and parameters within 1e-9).

In-process, a "kill" is an exception raised at the checkpoint's named step (nothing after it runs: the
same state on storage as a SIGKILL there). In the middle of the same chain of runs, two real ``pcem``
processes are killed in EM, with SIGKILL and with SIGTERM (the graceful stop: exit 75, a checkpoint, and
the rerun resumes): they resume past the stop words, the vocabulary and the cross-validation that the
in-process runs completed, so they pay for their JVM and EM only. One chain, one uninterrupted reference."""

import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from pcem_spark.util import faults

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_ITER = 16
SETTINGS = [
    "--set",
    f"model.max_iter={MAX_ITER}",
    "--set",
    "model.tol=0",  # exactly MAX_ITER refit iterations: a count to add up
    "--set",
    "checkpoint.every_iterations=2",
]
LEAVES = {"sport": ["football", "tennis"], "tech": ["phones", "laptops"]}
WORDS = {
    "football": "goal striker pitch league referee penalty",
    "tennis": "serve racket court set match deuce",
    "phones": "android screen call battery app signal",
    "laptops": "keyboard cpu ram laptop trackpad hinge",
    "sport": "team win score season coach fans",
    "tech": "device chip software update price review",
}
COMMON = "the a and of to in is it that for on with this was".split()


def _corpus(path, n=240, extra=0):
    rng = random.Random(7)
    with open(path, "w") as out:
        for i in range(n + extra):
            top = rng.choice(sorted(LEAVES))
            leaf = rng.choice(LEAVES[top])
            words = (WORDS[leaf].split() * 2) + WORDS[top].split() + COMMON * 2
            text = " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))
            out.write(json.dumps({"id": f"d{i}", "text": text, "labels": [top, leaf]}) + "\n")
    return str(path)


class Killed(Exception):
    """Stands for a SIGKILL at a checkpoint step (in-process)."""


def _train(docs, model, *extra, kill_at=None):
    """``pcem train`` in this process; ``(exit code, refit EM iterations it ran)``."""
    from pcem_spark.cli import main

    ran = []
    removers = [faults.on_point(f"checkpoint:em:{i}:start", lambda i=i: ran.append(i)) for i in range(1, MAX_ITER + 1)]
    if kill_at:

        def kill():
            raise Killed(kill_at)

        removers.append(faults.on_point(kill_at, kill))
    try:
        code = main(["train", "--docs", docs, "--model", model, "--label-rate", "0.25", *SETTINGS, *extra])
    finally:
        for remove in removers:
            remove()
    return code, ran


def _same_model(spark, left, right, docs):
    from pcem_spark.model.path_model import PathModel

    a, b = PathModel.load(left), PathModel.load(right)
    assert np.abs(a.params.log_prior - b.params.log_prior).max() <= 1e-9
    assert abs(a.params.log_ratio - b.params.log_ratio).max() <= 1e-9
    assert a.vocabulary == b.vocabulary and a.model_settings == b.model_settings
    frame = spark.read.json(docs)
    pa = {r.id: (r.path, r.probability) for r in a.transform(frame).select("id", "path", "probability").collect()}
    pb = {r.id: (r.path, r.probability) for r in b.transform(frame).select("id", "path", "probability").collect()}
    assert pa.keys() == pb.keys()
    assert all(pa[k][0] == pb[k][0] for k in pa)
    assert max(abs(pa[k][1] - pb[k][1]) for k in pa) <= 1e-9


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return _corpus(tmp_path_factory.mktemp("resume") / "docs.jsonl")


@pytest.fixture(scope="module")
def uninterrupted(spark, corpus, tmp_path_factory):
    model = str(tmp_path_factory.mktemp("base") / "model")
    code, ran = _train(corpus, model)
    assert code == 0 and ran == list(range(1, MAX_ITER + 1))
    assert not os.path.exists(os.path.join(os.path.dirname(model), ".model.pcem-checkpoint"))  # deleted at commit
    return model


# Each run is killed one step further on; the next one must skip what the killed ones completed. In-process
# before the real processes (which go on from EM iteration 2, see the test) and after them.
STAGES = ["stop_words", "vocabulary", "cross_validation"]
KILLS_BEFORE_THE_PROCESSES = [
    ("checkpoint:stop_words:done", []),
    ("checkpoint:vocabulary:done", ["stop_words"]),
    ("checkpoint:cross_validation:start", ["stop_words", "vocabulary"]),  # during the cross-validation
    ("checkpoint:em:2:done", ["stop_words", "vocabulary"]),  # cross-validates, then EM to its first checkpoint
]


def _runs_that_start_afresh_or_wait(spark, corpus, model, tmp_path, caplog):
    """With a checkpoint of two stages there: another setting, another content of --docs and --no-resume each
    start afresh saying why (each killed before its first write, so the checkpoint stays); a second writer
    while a live run holds the model exits 75 at the lease, before it reads the checkpoint."""
    from pcem_spark.io import leases
    from pcem_spark.io.hadoop_fs import HadoopFS

    folder = os.path.join(os.path.dirname(model), ".model.pcem-checkpoint")
    before = {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)}
    caplog.clear()
    assert _train(corpus, model, "--set", "model.max_iter=7", kill_at="checkpoint:stop_words:start")[0] != 0
    assert "settings.model.max_iter: 16 before, 7 now); starting afresh" in caplog.text
    assert "skipping" not in caplog.text
    _corpus(str(tmp_path / "grown.jsonl"), extra=1)
    os.replace(corpus, corpus + ".orig")
    os.replace(str(tmp_path / "grown.jsonl"), corpus)  # the same path, another content: its size differs
    try:
        spark.catalog.refreshByPath(corpus)  # this session listed the file before: a new process would not have
        caplog.clear()
        assert _train(corpus, model, kill_at="checkpoint:stop_words:start")[0] != 0
        assert "is of another run (inputs.--docs[0][1]:" in caplog.text and "starting afresh" in caplog.text
    finally:
        os.replace(corpus + ".orig", corpus)
        spark.catalog.refreshByPath(corpus)
    caplog.clear()
    assert _train(corpus, model, "--no-resume", kill_at="checkpoint:stop_words:start")[0] != 0
    assert "--no-resume: starting afresh" in caplog.text and "skipping" not in caplog.text
    live = leases.acquire(HadoopFS(spark, model), model, "a-live-run", "pcem train")
    try:
        caplog.clear()
        assert _train(corpus, model, kill_at="checkpoint:stop_words:start")[0] == 75
        assert "a-live-run" in caplog.text and "checkpoint:" not in caplog.text
    finally:
        live.release()
    assert {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)} == before


# ----------------------------------------------------------------- real processes
def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PCEM_KILL_AT", "PCEM_INJECT_FAULT")}
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def _command(docs, model):
    return [sys.executable, "-m", "pcem_spark.cli", "train", "--docs", docs, "--model", model, "--label-rate", "0.25"]


def _run(docs, model, kill_at=None):
    env = dict(_env(), PCEM_KILL_AT=kill_at) if kill_at else _env()
    return subprocess.run(_command(docs, model) + SETTINGS, env=env, capture_output=True, text=True, timeout=600)


def _refit_iterations(log):
    """The refit's EM iterations a ``pcem train`` process logged (what the in-process runs count by hook)."""
    return [int(i) for i in re.findall(r"EM iteration (\d+): log-likelihood", log)]


def _sigkill_then_sigterm_in_em(corpus, model):
    """Real processes, resuming the chain's checkpoint of EM iteration 2: SIGKILL after EM iteration 4's
    checkpoint; the same command resumes at iteration 5 and is sent SIGTERM during EM: it stops at the end of
    that iteration with a checkpoint, exit 75. Returns (the iteration it stopped after, the refit iterations
    the two processes ran)."""
    killed = _run(corpus, model, kill_at="checkpoint:em:4:done")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert "resumed from the checkpoint after EM iteration 2" in killed.stderr, killed.stderr[-3000:]
    proc = subprocess.Popen(
        _command(corpus, model) + SETTINGS, env=_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    lines = []
    for line in proc.stderr:  # the first iteration after the resume: EM is under way
        lines.append(line)
        if "EM iteration 5:" in line:
            break
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    code = proc.wait(timeout=120)
    log = "".join(lines) + rest
    assert "resumed from the checkpoint after EM iteration 4" in log
    assert code == 75, log[-3000:]
    assert time.monotonic() - sent < 60  # the documented bound is stop_grace_seconds (60) + 30
    assert "SIGTERM: stopping at the end of the current stage or EM iteration" in log
    stopped_after = int(log.split("stopped on request after EM iteration ")[1].split(";")[0])
    assert 5 <= stopped_after < MAX_ITER
    assert f"checkpoint: EM iteration {stopped_after} written" in log
    for stage in STAGES:  # both processes went on from the in-process runs' stages
        for output in (killed.stderr, log):
            assert f"checkpoint: skipping {stage} (completed by an earlier run)" in output, stage
    return stopped_after, _refit_iterations(killed.stderr) + _refit_iterations(log)


def test_a_train_killed_at_every_stage_and_by_sigkill_and_sigterm_resumes_to_the_uninterrupted_model(
    spark, corpus, uninterrupted, tmp_path, caplog
):
    caplog.set_level(logging.INFO)
    model = str(tmp_path / "model")
    iterations = []
    for step, skipped in KILLS_BEFORE_THE_PROCESSES:
        if step == "checkpoint:cross_validation:start":  # a checkpoint with two stages: runs that must not use it
            _runs_that_start_afresh_or_wait(spark, corpus, model, tmp_path, caplog)
        caplog.clear()
        code, ran = _train(corpus, model, kill_at=step)
        assert code != 0, step
        for stage in skipped:  # after _runs_that_start..., this also shows that they left the checkpoint alone
            assert f"checkpoint: skipping {stage} (completed by an earlier run)" in caplog.text, (step, stage)
        iterations += ran

    # Real processes: SIGKILL after EM iteration 4, then SIGTERM during EM (exit 75 after iteration N).
    stopped_after, ran = _sigkill_then_sigterm_in_em(corpus, model)
    iterations += ran

    # In-process again: the run after the SIGTERM resumes there and is killed late in EM, at the last
    # checkpoint before the end (every 2 iterations from N: iteration 14 or 15 of 16) ...
    late = stopped_after + 2 * ((MAX_ITER - 1 - stopped_after) // 2)
    assert stopped_after < late < MAX_ITER
    # ... then at the start of the calibration; each skips the stages done before it.
    for step in (f"checkpoint:em:{late}:done", "checkpoint:calibration:start"):
        caplog.clear()
        code, ran = _train(corpus, model, kill_at=step)
        assert code != 0, step
        for stage in STAGES:
            assert f"checkpoint: skipping {stage} (completed by an earlier run)" in caplog.text, (step, stage)
        if step.startswith("checkpoint:em:"):
            assert f"resumed from the checkpoint after EM iteration {stopped_after}" in caplog.text
            assert f"EM iteration {stopped_after + 1}:" in caplog.text
        iterations += ran
    caplog.clear()
    code, ran = _train(corpus, model)
    assert code == 0
    assert "checkpoint: skipping calibration" not in caplog.text  # killed before it completed: fitted again
    assert "EM had finished: no iteration to run" in caplog.text
    iterations += ran
    # Every refit iteration ran exactly once over the killed runs (processes included) and the last one.
    assert sorted(iterations) == list(range(1, MAX_ITER + 1))
    _same_model(spark, uninterrupted, model, corpus)
    assert not os.path.exists(tmp_path / ".model.pcem-checkpoint")
