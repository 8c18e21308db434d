"""Runs that overlap, as a scheduler makes them: real ``pcem`` processes, each with its own JVM.

``pcem predict`` runs again and again while ``pcem train --overwrite`` replaces the model, and then
again while two ``train --overwrite`` of the model, started a second apart, replace it once more. Every
predictions table must equal, row for row, what the one model version it names (``model_version`` in its
marker) predicts; every exit code is 0 or 75 (of the two overlapping trains, at most one 75); the model
left at the end loads. The runs that do not overlap anything (the first model, the expected predictions)
run in this process.
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from test_outputs import QUICK, ROOT, WORDS

from pcem_spark.cli import main
from pcem_spark.io.outputs import read_marker
from pcem_spark.io.versions import version_path
from pcem_spark.model.path_model import PathModel

pytestmark = pytest.mark.slow


def _corpus(path, n_per_leaf=60, seed=3):
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for (parent, leaf), words in WORDS.items():
            pool = words.split() + ["common", "shared", "other", "words"]
            for i in range(n_per_leaf):
                text = " ".join(rng.choice(pool, size=10))
                labels = [parent, leaf] if i < 6 else None
                fh.write(json.dumps({"id": f"{leaf}-{i}", "text": text, "labels": labels}) + "\n")
    return str(path)


def _start(args):
    env = {k: v for k, v in os.environ.items() if k not in ("PCEM_KILL_AT", "PCEM_INJECT_FAULT")}
    env["PYSPARK_PYTHON"] = sys.executable
    return subprocess.Popen(
        [sys.executable, "-m", "pcem_spark.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _paths(spark, predictions):
    return {r["id"]: tuple(r["path"]) for r in spark.read.parquet(predictions).select("id", "path").collect()}


def test_predicts_during_retrains_each_read_one_model_and_two_trains_never_mix(spark, tmp_path):
    docs = _corpus(tmp_path / "docs.jsonl")
    model = str(tmp_path / "model")
    train = ["train", "--docs", docs, "--model", model, *QUICK]
    assert main([*train, "--method", "pcnb"]) == 0

    # Predicts (at most two at a time) while the model is replaced: first by one train, then by two trains
    # started a second apart (each process is a cold JVM, ~35 s: the predicts overlap both replacements).
    first = _start([*train, "--overwrite", "--method", "flat-nb"])
    pair, readers, n = [], [], 0
    while True:
        if first.poll() is not None and not pair:
            assert first.returncode == 0, first.stderr.read()[-3000:]
            pair.append(_start([*train, "--overwrite", "--method", "pcnb"]))
            time.sleep(1.0)
            pair.append(_start([*train, "--overwrite", "--method", "flat-nb"]))
        if pair and all(w.poll() is not None for w in pair):
            break
        if len([r for r in readers if r[1].poll() is None]) < 2 and n < 6:
            out = str(tmp_path / f"pred{n}")
            readers.append((out, _start(["predict", "--model", model, "--docs", docs, "--output", out, *QUICK])))
            n += 1
        time.sleep(0.5)
    # the two overlapping trains: one after the other, or the second one exits 75 at the first one's lease
    results = sorted(w.returncode for w in pair)
    assert results in ([0, 0], [0, 75]), (results, [w.stderr.read()[-3000:] for w in pair])
    print(f"two overlapping train --overwrite: exit codes {results}")

    codes = [(out, proc.wait(600), proc.stderr.read()) for out, proc in readers]
    assert all(code in (0, 75) for _, code, _ in codes), [(o, c, e[-2000:]) for o, c, e in codes if c not in (0, 75)]
    versions = {}
    for out, code, _ in codes:
        if code == 0:
            versions.setdefault(read_marker(spark, out)["model_version"], []).append(out)
    assert len(versions) >= 2, versions  # the predicts did overlap the replacements
    print(
        f"{len(codes)} predicts during the replacements: exit codes "
        f"{sorted(code for _, code, _ in codes)}, {len(versions)} model versions read: "
        + ", ".join(f"{v}: {len(o)}" for v, o in versions.items())
    )
    for version, outs in versions.items():
        # the version it read: the current model, or the replaced one retained beside it
        where = model if read_marker(spark, model)["run_id"] == version else version_path(model, version)
        expected = str(tmp_path / f"expected-{version}")
        assert main(["predict", "--model", where, "--docs", docs, "--output", expected, *QUICK]) == 0
        for out in outs:
            assert _paths(spark, out) == _paths(spark, expected), (out, version)

    loaded = PathModel.load(model)
    assert loaded.model_settings.method in ("pcnb", "flat-nb")
    assert len(loaded.vocabulary) == loaded.log_theta.shape[1]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".model.pcem-tmp-")]
