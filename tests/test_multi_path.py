"""Every path above P (``--multi-path``) and its evaluation by the union of the paths' nodes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from test_abstain import FS, SETTINGS, TAX, _corpus  # noqa: E402

from pcem_spark.core.calibration import apply_map, paths_at_least
from pcem_spark.core.multi_path import PAIR_CANDIDATES, PAIR_PRIOR
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
def test_transform_multi_path_is_every_path_whose_membership_is_at_least_p(spark, model, beam, staged_shipping):
    import pyarrow as pa

    from pcem_spark.core.decoding import predict_path_details
    from pcem_spark.core.estep import scoring_tables
    from pcem_spark.core.multi_path import with_membership
    from pcem_spark.core.path_nodes import path_node_table

    docs = _corpus(spark, seed=1, all_labeled=True)
    p = 0.2
    multi = model.transform(docs, multi_path=p, beam=beam).select("id", "path", "paths").collect()
    texts = dict(docs.select("id", "text").collect())
    # The same decision on the driver, from the model's tables and the core functions (tested above).
    X = model.text_featurizer().matrix(pa.array([texts[r.id] for r in multi]))
    tables = scoring_tables(model.params)._replace(temperature=model.effective_temperature)
    path_nodes = path_node_table(TAX.path_node_matrix(sparse=True), TAX.is_dummy)
    doc_length = model.model_settings.doc_length
    out = with_membership(
        predict_path_details(X, None, doc_length, tables, path_nodes, 0.0, TAX.n_paths), X, tables, doc_length
    )
    assert any(len(r.paths) > 1 for r in multi)
    for i, r in enumerate(multi):
        assert r.paths[0] == r.path
        want = {tuple(TAX.real_path(j)) for j, m in zip(out.top_index[i], out.member_probability[i]) if m >= p}
        assert {tuple(x) for x in r.paths} == want | {tuple(r.path)} and len(r.paths) == len(set(map(tuple, r.paths)))
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


def _ref_membership(x, log_theta, log_prior, T, rho=PAIR_PRIOR, C=PAIR_CANDIDATES):
    """Dense brute force of one row: every single-path and (best, runner-up) pair hypothesis, pi by a fine grid."""
    from scipy.optimize import minimize_scalar
    from scipy.special import logsumexp

    jll = log_theta @ x + log_prior
    order = sorted(range(len(jll)), key=lambda j: (-jll[j], j))
    a = order[0]
    hyp, members = [], []
    for j in range(len(jll)):
        hyp.append((np.log(1 - rho) + jll[j]) / T)
        members.append({j})
    theta = np.exp(log_theta)
    for b in order[1 : 1 + C]:
        res = minimize_scalar(
            lambda pi, b=b: -(x * np.log(pi * theta[b] + (1 - pi) * theta[a])).sum(),
            bounds=(0, 1),
            method="bounded",
            options={"xatol": 1e-10},
        )
        ll = -res.fun + (log_prior[a] + log_prior[b]) / 2
        hyp.append((np.log(rho / C) + ll) / T)
        members.append({a, b})
    post = np.exp(np.array(hyp) - logsumexp(hyp))
    return {j: sum(p for p, m in zip(post, members) if j in m) for j in range(len(jll))}


def test_membership_matches_a_brute_force_over_every_hypothesis():
    import scipy.sparse as sp

    from pcem_spark.core.decoding import predict_path_details
    from pcem_spark.core.estep import scoring_tables
    from pcem_spark.core.multi_path import with_membership
    from pcem_spark.core.parameters import sparse_log_parameters

    rng = np.random.default_rng(5)
    M, V = 7, 30
    counts = sp.csr_matrix(rng.poisson(0.6, size=(M, V)).astype(float) * rng.integers(1, 5, size=(M, 1)))
    params = sparse_log_parameters(counts, rng.uniform(1, 5, size=M), smoothing=0.3)
    T = 2.5
    dense = rng.poisson(0.5, size=(12, V)).astype(float)
    dense[3] = 0  # a document with no known word
    X = sp.csr_matrix(dense)
    for dtype in ("float64", "float32"):
        tables = scoring_tables(params, dtype)._replace(temperature=T)
        path_nodes = np.arange(M)[:, None]
        out = predict_path_details(X, None, 0.0, tables, path_nodes, 0.0, M)
        out = with_membership(out, X, tables)
        lt, lp = params.log_theta(), params.log_prior
        for i in range(X.shape[0]):
            ref = _ref_membership(X[i].toarray().ravel(), lt, lp, T)
            got = {int(j): float(p) for j, p in zip(out.top_index[i], out.member_probability[i])}
            tol = 1e-5 if dtype == "float64" else 1e-4  # EM stops after MIXTURE_ITERATIONS steps
            for j in range(M):
                assert got[j] == pytest.approx(ref[j], abs=tol), (i, j)
    # A document of two paths' words: the second path's membership is high, its Eq. 5 posterior is not.
    theta = np.exp(params.log_theta())
    a, b = 0, 1
    x = np.round(60 * theta[a] + 60 * theta[b])
    tables = scoring_tables(params)._replace(temperature=1.0)
    out = with_membership(
        predict_path_details(sp.csr_matrix(x), None, 0.0, tables, np.arange(M)[:, None], 0.0, M),
        sp.csr_matrix(x),
        tables,
    )
    row = dict(zip(out.top_index[0].tolist(), out.member_probability[0].tolist()))
    post = dict(zip(out.top_index[0].tolist(), out.top_posterior[0].tolist()))
    assert min(row[a], row[b]) > 0.9 and min(post[a], post[b]) < 0.01


def test_membership_of_long_documents_stays_exact():
    """Gains far beyond exp's range (raw counts, a low temperature) keep the definition's ratios."""
    from pcem_spark.core.multi_path import membership_probabilities

    index = np.array([[0, 1, 2, 3, 4]])
    q = np.array([[0.97, 0.01, 0.01, 0.005, 0.005]])
    got = membership_probabilities(index, q, np.array([[2000.0, 1000.0, 0.0, 0.0]]), np.zeros(5), 1.0)
    assert got[0, 0] == pytest.approx(1.0) and got[0, 1] == pytest.approx(1.0) and got[0, 2] < 1e-300
    small = membership_probabilities(index, q, np.array([[3.0, 1.0, 0.0, 0.0]]), np.zeros(5), 1.0)
    assert np.all(np.isfinite(small)) and small[0, 1] > small[0, 2] > 0


def test_membership_builds_pairs_on_the_predicted_path_even_when_ranked_second():
    import scipy.sparse as sp

    from pcem_spark.core.decoding import PathPredictions
    from pcem_spark.core.estep import scoring_tables
    from pcem_spark.core.multi_path import with_membership
    from pcem_spark.core.parameters import sparse_log_parameters

    rng = np.random.default_rng(1)
    params = sparse_log_parameters(sp.csr_matrix(rng.poisson(1.0, size=(4, 12)).astype(float)), np.ones(4))
    tables = scoring_tables(params)
    X = sp.csr_matrix(rng.poisson(1.0, size=(1, 12)).astype(float))
    out = PathPredictions(
        best=np.array([2]),
        probability=np.array([0.4]),
        top_index=np.array([[1, 2, 0, 3]]),
        top_probability=np.array([[0.41, 0.4, 0.1, 0.09]]),
        top_posterior=np.array([[0.4, 0.4, 0.1, 0.1]]),
    )
    got = with_membership(out, X, tables)
    assert got.top_index[0].tolist() == [2, 1, 0, 3] and got.top_probability[0].tolist() == [0.4, 0.41, 0.1, 0.09]
    assert got.member_probability[0, 0] >= got.member_probability[0, 1:].max()
