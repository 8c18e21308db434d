"""Every path above P (``--multi-path``) and its evaluation by the union of the paths' nodes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from test_abstain import FS, SETTINGS, TAX, _corpus  # noqa: E402

from pcem_spark.core.calibration import apply_map, paths_at_least
from pcem_spark.engine.arrow_io import multi_paths_array
from pcem_spark.errors import InputError
from pcem_spark.evaluation import HierarchicalF1Evaluator
from pcem_spark.evaluation.metrics import evaluate_predictions, metric_nodes
from pcem_spark.ml import train
from pcem_spark.model.settings import ModelSettings


def test_paths_at_least_bounds_how_many_paths_reach_p():
    rng = np.random.default_rng(0)
    post = rng.dirichlet(np.full(40, 0.2), size=500)
    mapping = (np.array([0.0, 0.2, 0.6, 1.0]), np.array([0.0, 0.35, 0.8, 0.97]))
    for p in (0.05, 0.2, 0.3, 0.5, 0.9):
        assert (post >= p).sum(axis=1).max() <= paths_at_least(p, 40)
        assert (apply_map(post, mapping) >= p).sum(axis=1).max() <= paths_at_least(p, 40, mapping)
    assert paths_at_least(0.99, 40, mapping) == 1  # nothing maps that high: the predicted path only


def test_multi_paths_array_puts_the_predicted_path_first_and_keeps_the_rest_above_p():
    paths = pa.array([["a", "x"], ["a", "y"], ["b", "z"]], pa.list_(pa.string()))
    best = np.array([0, 2, 1])
    index = np.array([[0, 1, 2], [1, 2, -1], [2, 1, 0]])  # row 1: the decoder's best is not its top entry
    prob = np.array([[0.6, 0.3, 0.1], [0.5, 0.45, 0.0], [0.35, 0.3, 0.3]])
    got = multi_paths_array(paths, best, index, prob, 0.3).to_pylist()
    assert got == [
        [["a", "x"], ["a", "y"]],
        [["b", "z"], ["a", "y"]],
        [["a", "y"], ["b", "z"], ["a", "x"]],
    ]


@pytest.fixture(scope="module")
def model(spark):
    return train(_corpus(spark), TAX, FS, ModelSettings(method="pcem", **SETTINGS))[0]


@pytest.mark.parametrize("beam", [0, TAX.n_paths])
def test_transform_multi_path_is_every_path_at_least_p(spark, model, beam):
    docs = _corpus(spark, seed=1, all_labeled=True)
    p = 0.2
    multi = model.transform(docs, multi_path=p, beam=beam).select("id", "path", "paths").collect()
    ranked = {r.id: r.top_paths for r in model.transform(docs, top_k=TAX.n_paths, beam=beam).collect()}
    assert any(len(r.paths) > 1 for r in multi)
    for r in multi:
        assert r.paths[0] == r.path
        want = {tuple(t.path) for t in ranked[r.id] if t.probability >= p} | {tuple(r.path)}
        assert {tuple(x) for x in r.paths} == want and len(r.paths) == len(want)
    with pytest.raises(InputError, match="multi_path"):
        model.transform(docs, multi_path=1.5)


def test_evaluation_scores_the_union_of_the_paths_nodes(spark):
    rows = [
        (
            "1",
            ["sci", "space", "rockets"],
            [["sci", "space", "rockets"], ["rec", "sport", "hockey"]],
            ["rec", "sport", "hockey"],
        ),
        ("2", ["misc"], [["misc"]], ["misc"]),
        ("3", ["sci", "med"], [["sci", "med"], ["sci", "space", "planets"]], ["sci", "space", "planets"]),
        ("4", ["rec", "sport", "baseball"], [["rec", "sport", "baseball"]], ["sci", "med"]),
    ]
    df = spark.createDataFrame(rows, "id string, path array<string>, paths array<array<string>>, labels array<string>")
    real = set(metric_nodes(TAX))
    tp = fp = fn = 0
    for _, _, paths, labels in rows:  # hierarchical P/R over node sets (Kiritchenko et al.)
        pred = {n for q in paths for n in q} & real
        true = set(labels) & real
        tp, fp, fn = tp + len(pred & true), fp + len(pred - true), fn + len(true - pred)
    micro = 2 * tp / (2 * tp + fp + fn)
    m = evaluate_predictions(df, TAX)
    assert m["micro_f1"] == pytest.approx(micro) and m["scored_nodes"] == "union of paths"
    single = evaluate_predictions(df.drop("paths"), TAX)
    assert single["micro_f1"] < m["micro_f1"] and single["level_accuracy"] == m["level_accuracy"]
    ev = HierarchicalF1Evaluator(predictionCol="paths", labelCol="labels", metricName="microF1")
    assert ev.evaluate(df) == pytest.approx(micro)
    ev_tax = HierarchicalF1Evaluator(
        predictionCol="paths", labelCol="labels", metricName="microF1", taxonomy=TAX.to_json()
    )
    assert ev_tax.evaluate(df) == pytest.approx(micro)


def test_cli_refuses_a_bad_multi_path(tmp_path, capsys):
    from pcem_spark.cli import main

    argv = ["predict", "--model", "m", "--docs", "d", "--output", str(tmp_path / "p")]
    assert main(argv + ["--multi-path", "2"]) == 2
    assert "--multi-path must be a number in [0, 1]" in capsys.readouterr().err
    assert main(argv + ["--set", "predict.multi_path=-0.5"]) == 2
    assert "predict.multi_path must be a number in [0, 1]" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_multi_path_predict_and_evaluate(spark, model, tmp_path):
    import json

    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker

    model_dir, docs, pred = str(tmp_path / "model"), str(tmp_path / "docs"), str(tmp_path / "pred")
    model.save(model_dir)
    _corpus(spark, seed=1, all_labeled=True).write.parquet(docs)
    assert main(["predict", "--model", model_dir, "--docs", docs, "--output", pred, "--multi-path", "0.2"]) == 0
    out = spark.read.parquet(pred)
    assert "paths" in out.columns and read_marker(spark, pred)["multi_path"] == 0.2
    assert out.where("element_at(paths, 1) != path").count() == 0
    metrics = str(tmp_path / "m.json")
    assert main(["evaluate", "--predictions", pred, "--model", model_dir, "--output", metrics]) == 0
    got = json.loads(open(metrics).read())
    assert got["scored_nodes"] == "union of paths"
    assert got["micro_f1"] == pytest.approx(evaluate_predictions(out, TAX)["micro_f1"])
