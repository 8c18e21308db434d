"""``PathEM.fit`` with a checkpoint directory (its Param, or the SparkContext's): a fit that dies in EM is
taken up by the same fit at the iteration saved, to the parameters of a fit that never stopped."""

import json
import os

import numpy as np
import pytest

from pcem_spark.util import faults

ITERATIONS = 8


class Killed(Exception):
    pass


@pytest.fixture(scope="module")
def docs(spark, tmp_path_factory):
    rng = np.random.default_rng(3)
    words = {"space": "rocket orbit launch moon nasa", "hockey": "puck goal skate ice team", "med": "doctor pill"}
    path = tmp_path_factory.mktemp("pathem_ck") / "docs.jsonl"
    with open(path, "w") as fh:
        for leaf, vocab in words.items():
            for i in range(12):
                labels = ["top", leaf] if i < 4 else None
                fh.write(
                    json.dumps({"id": f"{leaf}{i}", "text": " ".join(rng.choice(vocab.split(), 6)), "labels": labels})
                )
                fh.write("\n")
    return spark.read.schema("id string, text string, labels array<string>").json(str(path))


def _estimator(**extra):
    from pcem_spark.ml import PathEM

    settings = dict(maxIter=ITERATIONS, tol=0.0, unlabeledWeight=0.5, pathWeight=1.0, smoothing=0.1)
    # Fixed settings: the checkpoint of EM is the point, not the choice of the family (auto would cross-validate it).
    settings.update(calibration="none", names="off", family="generative", stopWords="none", minDF=1.0, maxDF=1.0)
    return PathEM(**{**settings, **extra})


def _fit_recording(estimator, docs, kill_at=None):
    ran = []
    removers = [
        faults.on_point(f"checkpoint:em:{i}:start", lambda i=i: ran.append(i)) for i in range(1, ITERATIONS + 1)
    ]
    if kill_at:
        removers.append(faults.on_point(kill_at, lambda: (_ for _ in ()).throw(Killed(kill_at))))
    try:
        return estimator.fit(docs), ran
    finally:
        for remove in removers:
            remove()


@pytest.mark.slow
def test_a_fit_killed_in_em_resumes_at_the_saved_iteration(spark, docs, tmp_path):
    where = str(tmp_path / "ck")
    estimator = _estimator(checkpointDir=where, checkpointInterval=2)
    with pytest.raises(Killed):
        _fit_recording(estimator, docs, kill_at="checkpoint:em:4:done")
    (left,) = os.listdir(where)
    assert left.startswith("pathem-") and left.endswith(".pcem-checkpoint")
    resumed, ran = _fit_recording(estimator, docs)
    assert ran == list(range(5, ITERATIONS + 1))  # only the iterations after the checkpoint
    assert os.listdir(where) == []  # deleted when the fit returned
    whole, ran = _fit_recording(_estimator(), docs)
    assert ran == []  # no checkpoint directory: no hook, nothing written
    a, b = whole.path_model.params, resumed.path_model.params
    assert np.abs(a.log_prior - b.log_prior).max() <= 1e-9
    assert np.abs(a.log_theta() - b.log_theta()).max() <= 1e-9


@pytest.mark.slow
def test_another_fit_does_not_share_the_checkpoint_and_the_context_dir_is_the_default(spark, docs, tmp_path):
    where = str(tmp_path / "context")
    with pytest.raises(Killed):
        _fit_recording(_estimator(checkpointDir=where, checkpointInterval=2), docs, kill_at="checkpoint:em:2:done")
    other = _estimator(checkpointDir=where, checkpointInterval=2, smoothing=0.2)  # another Param: another fit
    with pytest.raises(Killed):
        _fit_recording(other, docs, kill_at="checkpoint:em:2:done")
    assert len(os.listdir(where)) == 2
    previous = spark.sparkContext.getCheckpointDir()
    spark.sparkContext.setCheckpointDir(str(tmp_path / "sc"))
    try:
        _, ran = _fit_recording(_estimator(checkpointInterval=3), docs)
        assert ran == list(range(1, ITERATIONS + 1))  # the context's directory makes the hook run
    finally:
        # The session is shared by the other tests: put the context's directory back as it was (unset).
        jsc = spark.sparkContext._jsc.sc()
        getattr(jsc, "checkpointDir_$eq")(spark.sparkContext._jvm.scala.Option.apply(previous))
    assert spark.sparkContext.getCheckpointDir() == previous
