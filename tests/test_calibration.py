"""Calibrated probabilities: the temperature fit, its out-of-fold data, and prediction with it.

The math against dense numpy references (softmax over every path, marginals
as sums over the paths through a node); the Spark side with chispa: the
calibration changes probabilities, never paths.
"""

import json
import logging
import os

import numpy as np
import pytest
import scipy.sparse as sp
from chispa import assert_df_equality
from saved_outputs import drop_manifest
from test_predict_evaluate import TAX  # noqa: E402 (the four-topic taxonomy)
from test_tuning import FS, _corpus, _features  # noqa: E402

from pcem_spark.core.beam import beam_path_details, beam_scorer, beam_tables
from pcem_spark.core.calibration import (
    Calibration,
    OutOfFold,
    apply_map,
    calibration_report,
    concat_out_of_fold,
    expected_calibration_error,
    fit_temperature,
    isotonic_map,
    out_of_fold,
    predicted_node_events,
    reliability_bins,
    scaled_posteriors,
    true_path_log_loss,
)
from pcem_spark.core.decoding import (
    predict_path_details,
    predict_paths,
)
from pcem_spark.core.estep import scoring_tables
from pcem_spark.core.methods import method_spec
from pcem_spark.core.parameters import PathParameters
from pcem_spark.core.path_nodes import node_marginals, path_node_table
from pcem_spark.engine import passes
from pcem_spark.engine.blocks import blocks_from_labels
from pcem_spark.model.fitting import em_settings
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.sampled_cv import cv_task, true_paths
from pcem_spark.model.settings import ModelSettings


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _overconfident(n=3000, M=12, scale=4.0, seed=0):
    """Joint log-likelihoods ``scale`` times too sharp: the true paths are drawn from softmax(z)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, M)) * 2.0
    p = _softmax(z)
    true = (p.cumsum(axis=1) > rng.random(n)[:, None]).argmax(axis=1)
    return scale * z, true


def test_out_of_fold_keeps_the_best_paths_sorted_and_always_the_true_one():
    jll, true = _overconfident(n=200, M=30)
    oof = out_of_fold(jll, true, k=5)
    rows = np.arange(200)
    assert oof.paths.shape == (200, 5)
    assert (oof.paths[rows, oof.true] == true).all()
    assert np.allclose(oof.scores, jll[rows[:, None], oof.paths])
    best = np.argsort(-jll, axis=1)[:, :4]
    assert (oof.paths[:, 0] == best[:, 0]).all()  # the argmax first
    assert (np.diff(oof.scores[:, :4], axis=1) <= 0).all()  # sorted (the true path may replace the 5th)
    whole = out_of_fold(jll, true, k=100)
    assert whole.paths.shape == (200, 30) and (np.sort(whole.paths, axis=1) == np.arange(30)).all()
    both = concat_out_of_fold([oof, whole])
    assert both.n == 400 and both.paths.shape[1] == 30 and (both.paths[:200, 5:] == -1).all()
    assert np.isneginf(both.scores[:200, 5:]).all()
    assert true_path_log_loss(both) == pytest.approx((true_path_log_loss(oof) + true_path_log_loss(whole)) / 2)


def test_fit_temperature_recovers_the_overconfidence():
    jll, true = _overconfident(scale=4.0)
    oof = out_of_fold(jll, true, k=12)  # every path: the loss is exact
    t = fit_temperature(oof)
    assert t == pytest.approx(4.0, rel=0.06)
    grid = np.exp(np.linspace(np.log(0.5), np.log(30), 400))
    losses = [true_path_log_loss(oof, g) for g in grid]
    assert true_path_log_loss(oof, t) <= min(losses) + 1e-6
    # the loss against a dense reference: -log softmax(jll / T)[true]
    ref = -np.log(_softmax(jll / t)[np.arange(len(true)), true]).mean()
    assert true_path_log_loss(oof, t) == pytest.approx(ref, rel=1e-10)


def test_node_events_equal_dense_marginals_along_the_predicted_path():
    M = TAX.n_paths
    rng = np.random.default_rng(3)
    jll = rng.normal(size=(50, M)) * 3
    true = rng.integers(M, size=50)
    pn = TAX.path_node_matrix(sparse=True)
    nodes = path_node_table(pn, TAX.is_dummy)
    for t in (1.0, 2.5):
        prob, correct = predicted_node_events(out_of_fold(jll, true), nodes, t)
        marg = node_marginals(_softmax(jll / t), pn)
        best = jll.argmax(axis=1)
        exp_p, exp_c = [], []
        for d in range(nodes.shape[1]):
            for i in range(50):
                node = nodes[best[i], d]
                if node >= 0:
                    exp_p.append(marg[i, node])
                    exp_c.append(nodes[true[i], d] == node)
        order = np.lexsort((np.array(exp_p), np.array(exp_c)))
        got = np.lexsort((prob, correct))
        assert np.allclose(np.sort(prob), np.sort(exp_p)) and np.allclose(prob[got], np.array(exp_p)[order])
        assert correct.sum() == sum(exp_c)


def test_ece_and_reliability_bins_by_hand():
    p = np.array([0.05, 0.1, 0.55, 0.6, 0.95, 1.0])
    c = np.array([0, 0, 1, 0, 1, 1])
    bins = reliability_bins(p, c, n_bins=2)
    assert bins["count"] == [2, 4]
    assert bins["mean_probability"][0] == pytest.approx(0.075)
    assert bins["precision"][1] == pytest.approx(0.75)
    # |0.075 - 0| * 2/6 + |(0.55+0.6+0.95+1)/4 - 0.75| * 4/6
    assert expected_calibration_error(p, c, n_bins=2) == pytest.approx(0.075 / 3 + abs(0.775 - 0.75) * 4 / 6)
    report = calibration_report(
        out_of_fold(*_overconfident(M=TAX.n_paths)),
        path_node_table(TAX.path_node_matrix(sparse=True), TAX.is_dummy),
        4.0,
    )
    assert report["ece_calibrated"] < report["ece_uncalibrated"]
    assert report["log_loss_calibrated"] < report["log_loss_uncalibrated"]


def _isotonic_reference(p, c):
    """Isotonic regression by the min-max formula over the distinct probabilities (weighted means)."""
    values = np.unique(p)
    hits = np.array([c[p == v].sum() for v in values], dtype=float)
    counts = np.array([(p == v).sum() for v in values], dtype=float)
    n = len(values)
    return np.array(
        [
            max(min(hits[j : k + 1].sum() / counts[j : k + 1].sum() for k in range(i, n)) for j in range(i + 1))
            for i in range(n)
        ]
    )


def test_isotonic_map_levels_are_the_isotonic_regression_and_the_map_is_monotone():
    rng = np.random.default_rng(4)
    p = np.round(rng.random(300), 2)  # ties on purpose
    c = rng.random(300) < p**2
    x, y = isotonic_map(p, c)
    assert (np.diff(x) > 0).all() and (np.diff(y) >= 0).all()
    levels = set(np.round(_isotonic_reference(p, c), 12))
    got = set(np.round(y, 12))
    assert levels <= got <= levels | {0.0, 1.0}  # the isotonic levels, pinned at (0, 0) and (1, 1)
    assert (x[0], y[0], x[-1], y[-1]) == (0.0, 0.0, 1.0, 1.0)
    # each breakpoint is its block's weighted mean probability: the map is exact on the block means
    q = np.linspace(0, 1, 101)
    mapped = apply_map(q, (x, y))
    assert (np.diff(mapped) >= -1e-15).all() and mapped.min() >= 0 and mapped.max() <= 1
    assert np.isnan(apply_map(np.array([np.nan]), (x, y))).all()
    assert apply_map(q, None) is q
    cal = Calibration(2.0, (x, y))
    assert Calibration.from_record(json.loads(json.dumps(cal.as_record())))[0] == 2.0
    with pytest.raises(ValueError):
        Calibration.from_record({"temperature": 2.0, "map": {"x": [0.5, 0.2], "y": [0.1, 0.2]}})


def _model_parts(seed=5, M=None, V=40):
    M = M or TAX.n_paths
    rng = np.random.default_rng(seed)
    theta = rng.dirichlet(np.full(V, 0.3), size=M)
    params = PathParameters.from_log_theta(np.log(rng.dirichlet(np.ones(M))), np.log(theta))
    X = sp.csr_matrix(rng.poisson(0.6, size=(64, V)).astype(float))
    return params, X


def test_decoders_with_a_temperature_keep_the_path_and_soften_the_probabilities():
    params, X = _model_parts()
    tables = scoring_tables(params)
    pn = TAX.path_node_matrix(sparse=True)
    nodes = path_node_table(pn, TAX.is_dummy)
    jll = X @ params.log_theta().T + params.log_prior
    best0, p0 = predict_paths(X, None, None, tables=tables)
    for t in (0.5, 3.0):
        best, p = predict_paths(X, None, None, tables=tables, temperature=t)
        assert np.array_equal(p, predict_paths(X, None, None, tables=tables._replace(temperature=t))[1])
        post = _softmax(np.asarray(jll) / t)
        assert (best == best0).all()
        assert np.allclose(p, post[np.arange(64), best], atol=1e-9)
        det = predict_path_details(X, None, 0.0, tables._replace(temperature=t), nodes, 0.6, 3, True)
        assert (det.best == best0).all()
        assert np.allclose(det.top_probability, -np.sort(-post, axis=1)[:, :3], atol=1e-9)
        marg = node_marginals(post, pn)
        last = nodes[det.best, np.maximum(det.kept - 1, 0)]
        assert np.allclose(det.kept_probability, np.where(det.kept > 0, marg[np.arange(64), last], 1.0), atol=1e-9)
        # a beam as wide as the tree is the exact decoder, temperature included
        scorer = beam_scorer(beam_tables(params, pn))
        wide = beam_path_details(X, scorer._replace(temperature=t), TAX.n_paths, 0.0, nodes, 0.6, 3, True)
        assert (wide.best == best0).all() and np.allclose(wide.probability, p, atol=1e-9)
        assert (wide.kept == det.kept).all()
        real = nodes[det.best] >= 0
        want = np.take_along_axis(marg, np.maximum(nodes[det.best], 0), axis=1)
        assert np.allclose(det.node_probability[real], want[real], atol=1e-9)
        assert np.isnan(det.node_probability[~real]).all()
        assert np.allclose(wide.node_probability[real], want[real], atol=1e-9)
    assert (predict_paths(X, None, None, tables=tables, temperature=3.0)[1] < p0 + 1e-12).all()
    # a probability map: every reported probability goes through it, the paths and the cut stay consistent
    mapping = (np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.3, 0.9]))
    mapped = tables._replace(temperature=2.0, probability_map=mapping)
    best, p = predict_paths(X, None, None, tables=mapped)
    post = _softmax(np.asarray(jll) / 2.0)
    assert (best == best0).all() and np.allclose(p, apply_map(post[np.arange(64), best], mapping), atol=1e-9)
    det = predict_path_details(X, None, 0.0, mapped, nodes, 0.25, 2, True)
    marg = apply_map(node_marginals(post, pn), mapping)
    want = np.take_along_axis(marg, np.maximum(nodes[det.best], 0), axis=1)
    real = nodes[det.best] >= 0
    assert np.allclose(det.node_probability[real], want[real], atol=1e-9)
    assert (det.kept == np.cumprod(real & (want >= 0.25), axis=1).sum(axis=1)).all()
    assert np.allclose(det.top_probability, apply_map(-np.sort(-post, axis=1)[:, :2], mapping), atol=1e-9)
    scorer = beam_scorer(beam_tables(params, pn))._replace(temperature=2.0, probability_map=mapping)
    wide = beam_path_details(X, scorer, TAX.n_paths, 0.0, nodes, 0.25, 2, True)
    assert np.allclose(wide.probability, p, atol=1e-9) and (wide.kept == det.kept).all()


def test_cv_task_keeps_only_held_out_predictions_of_a_fit_without_them(spark):
    """Each out-of-fold row is scored by a fit on the other folds: no label of the held-out fold reaches it."""
    docs = _corpus(spark)
    feats, vocab = _features(spark, docs)
    lookup, pn = TAX.path_lookup(), TAX.path_node_matrix(sparse=True)
    blocks = blocks_from_labels(feats, lookup, pn, len(vocab), 5).collect()
    labelled = [b for b in blocks if b.node_scores.nnz]
    parts = [(i % 2, b) for i, b in enumerate(labelled)] + [(-1, b) for b in blocks if not b.node_scores.nnz]
    ms = ModelSettings(
        method="pcem", smoothing=0.5, unlabeled_weight=0.5, path_weight=1.0, family="generative", max_iter=4
    ).resolved()
    out = cv_task(parts, 1, TAX, len(vocab), ms, keep_out_of_fold=True)
    spec = method_spec(TAX, ms.method, ms.components, ms.path_weight)
    alone = passes.fit([b for p, b in parts if p != 1], spec.score_matrix, len(vocab), em_settings(ms, spec))
    held = [b for p, b in parts if p == 1]
    from pcem_spark.core.estep import length_normalize

    # Only the held-out rows with a true path are scored (these blocks also hold unlabelled rows).
    labelled_rows = [np.diff(b.node_scores.indptr) > 0 for b in held]
    X = sp.vstack([length_normalize(b.X[m], ms.doc_length) for b, m in zip(held, labelled_rows)])
    jll = np.asarray(X @ alone.params.log_theta().T) + alone.params.log_prior
    true = np.concatenate([true_paths(b.node_scores[m], pn) for b, m in zip(held, labelled_rows)])
    oof = out["out_of_fold"]
    assert isinstance(oof, OutOfFold) and oof.n == X.shape[0]
    rows = np.arange(oof.n)
    assert (oof.paths[rows, oof.true] == true).all()
    assert np.allclose(oof.scores, jll[rows[:, None], oof.paths], atol=1e-8)
    assert "out_of_fold" not in cv_task(parts, 1, TAX, len(vocab), ms)


@pytest.fixture(scope="module")
def small_model(spark):
    """A calibrated model, trained once; a test that changes its calibration works on a copy (``_copy``)."""
    docs = _corpus(spark, n_per_leaf=20, n_labeled=12)  # 48 labelled: enough out-of-fold documents for a map
    from pcem_spark.ml.training import TrainOptions, train

    ms = ModelSettings(
        method="pcem", smoothing=0.5, unlabeled_weight=0.5, path_weight=1.0, family="generative", max_iter=5
    )
    model, _ = train(docs, TAX, FS, ms, TrainOptions())
    return docs, model


def _copy(model):
    """A copy whose temperature and probability map can be set without touching the shared model."""
    import copy

    return copy.copy(model)


@pytest.mark.slow
def test_train_calibrates_and_the_paths_stay_the_same(small_model):
    docs, model = small_model
    model = _copy(model)
    summary = model.training_summary["calibration"]
    assert summary["method"] in ("temperature+isotonic", "temperature+logistic", "temperature+logistic-depth")
    assert set(summary["map_held_out_log_loss"]) == {"isotonic", "logistic", "logistic-depth"}
    assert model.temperature == pytest.approx(summary["temperature"], rel=1e-5) and model.probability_map is not None
    assert summary["documents"] > 0 and {"ece_calibrated", "log_loss_uncalibrated", "sample"} <= set(summary)
    assert 0 < summary["probability_spread"] < 0.5  # a bootstrap of its documents (test_calibration_spread.py)
    calibrated = model.transform(docs, top_k=2)
    calibration = model.temperature, model.probability_map
    model.temperature = None
    raw = model.transform(docs, top_k=2)
    model.temperature, model.probability_map = calibration
    assert_df_equality(calibrated.select("id", "path", "leaf"), raw.select("id", "path", "leaf"), ignore_row_order=True)
    a = {r.id: r.probability for r in calibrated.collect()}
    b = {r.id: r.probability for r in raw.collect()}
    assert any(abs(a[k] - b[k]) > 1e-6 for k in a)


def test_calibration_none_and_unknown_values(spark):
    from pcem_spark.errors import InputError
    from pcem_spark.ml.training import TrainOptions, train

    docs = _corpus(spark)
    ms = ModelSettings(
        method="pcnb", smoothing=0.5, unlabeled_weight=1.0, path_weight=1.0, family="generative", calibration="none"
    )
    model, _ = train(docs, TAX, FS, ms, TrainOptions())
    assert model.temperature is None and model.training_summary["calibration"]["method"] == "none"
    with pytest.raises(InputError, match="calibration"):
        ModelSettings(calibration="platt").validate()


def test_temperature_is_saved_and_older_models_load_uncalibrated(spark, tmp_path, caplog):
    params, _ = _model_parts()
    vocab = [f"w{i}" for i in range(40)]
    ms = ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, family="generative")
    model = PathModel(TAX, vocab, None, params, FS, ms)
    model.temperature, model.probability_map = 2.75, (np.array([0.1, 0.6]), np.array([0.05, 0.7]))
    path = str(tmp_path / "m")
    model.save(path)
    loaded = PathModel.load(path)
    assert loaded.temperature == 2.75 and np.allclose(loaded.probability_map[1], [0.05, 0.7])
    # the same directory as a format-2 model wrote it: no calibration entry, loads uncalibrated with a warning
    meta_dir = os.path.join(path, "metadata")
    part = [f for f in os.listdir(meta_dir) if f.startswith("part-")][0]
    with open(os.path.join(meta_dir, part)) as fh:
        meta = json.loads(fh.readline())
    meta["format_version"] = 2
    meta.pop("calibration")
    with open(os.path.join(meta_dir, part), "w") as fh:
        fh.write(json.dumps(meta) + "\n")
    for name in os.listdir(meta_dir):  # the rewritten part no longer matches Hadoop's checksum
        if name.endswith(".crc"):
            os.remove(os.path.join(meta_dir, name))
    drop_manifest(path)  # ... nor the manifest, which older versions had not
    with caplog.at_level(logging.WARNING):
        old = PathModel.load(path)
    assert old.temperature is None and "uncalibrated" in caplog.text
    assert scaled_posteriors(np.array([[0.0, -np.inf]]), 3.0).tolist() == [[1.0, 0.0]]


def test_logistic_map_recovers_a_logit_linear_calibration():
    from pcem_spark.core.calibration import apply_map, logistic_map

    rng = np.random.default_rng(2)
    p = rng.beta(5, 1, size=20000)
    z = np.log(p) - np.log1p(-p)
    truth = 1 / (1 + np.exp(-(0.6 * z - 0.3)))
    correct = rng.random(len(p)) < truth
    x, y = logistic_map(p, correct)
    assert x[0] == 0 and x[-1] == 1 and y[0] == 0 and y[-1] > 0.99 and np.all(np.diff(y) >= 0)
    grid = np.array([0.3, 0.6, 0.9, 0.99])
    want = 1 / (1 + np.exp(-(0.6 * np.log(grid / (1 - grid)) - 0.3)))
    np.testing.assert_allclose(apply_map(grid, (x, y)), want, atol=0.02)


def test_choose_map_prefers_the_kind_that_predicts_held_out_events():
    from pcem_spark.core.calibration import choose_map

    rng = np.random.default_rng(4)
    # Few events from a smooth curve: the two-parameter map predicts the held-out half better.
    p = rng.beta(4, 1, size=300)
    correct = rng.random(len(p)) < p**2
    kind, _, losses = choose_map(p, correct, np.arange(len(p)))
    assert kind == "logistic" and losses["logistic"] < losses["isotonic"]
    # Many events from a step the logit-linear family cannot follow: isotonic.
    p = rng.uniform(0, 1, size=20000)
    correct = rng.random(len(p)) < np.where(p > 0.5, 0.95, 0.05)
    kind, maps, _ = choose_map(p, correct, np.arange(len(p)) // 2)
    assert kind == "isotonic" and set(maps) == {"isotonic", "logistic", "logistic-depth"}
    kind, _, losses = choose_map(p, correct, np.arange(len(p)), kinds=("logistic",))
    assert kind == "logistic" and set(losses) == {"logistic"}


def test_logistic_map_on_saturated_marginals_stays_sane():
    from pcem_spark.core.calibration import apply_map, logistic_map

    p = np.array([1.0] * 80 + [0.6] * 20)
    correct = np.array([1] * 64 + [0] * 16 + [1] * 10 + [0] * 10)
    x, y = logistic_map(p, correct)
    assert np.all(np.isfinite(y)) and np.all(np.diff(y) >= 0)
    mapped = apply_map(np.array([0.6, 1.0]), (x, y))
    # both groups pulled toward their precisions (0.5 and 0.8), not to 0 or 1
    assert 0.3 < mapped[0] < 0.75 and 0.7 < mapped[1] < 0.95


def test_depth_maps_calibrate_each_depth_and_never_raise_a_node_above_its_parent():
    from pcem_spark.core.calibration import (
        DepthMaps,
        apply_map,
        choose_map,
        map_nodes,
        map_paths,
        path_depths,
        paths_at_least,
    )

    rng = np.random.default_rng(7)
    n = 4000
    p = rng.beta(4, 1, size=n)
    depth = np.arange(n) % 2  # each document: its level-1 node, then its leaf
    z = np.log(p) - np.log1p(-p)
    # level-1 nodes are calibrated as they are; leaves are over-confident (right far less often)
    truth = np.where(depth == 0, p, 1 / (1 + np.exp(-(0.5 * z - 1.0))))
    correct = rng.random(n) < truth
    kind, maps, losses = choose_map(p, correct, np.arange(n) // 2, depth=depth)
    assert kind == "logistic-depth" and losses["logistic-depth"] < min(losses["logistic"], losses["isotonic"])
    dm = maps["logistic-depth"]
    grid = np.array([0.7, 0.85, 0.95])
    np.testing.assert_allclose(apply_map(grid, dm.at(0)), grid, atol=0.04)
    np.testing.assert_allclose(
        apply_map(grid, dm.at(1)), 1 / (1 + np.exp(-(0.5 * np.log(grid / (1 - grid)) - 1.0))), atol=0.04
    )
    assert dm.at(5) is dm.maps[-1]  # deeper nodes: the last depth's map
    # saved and read back
    cal = Calibration(1.5, dm)
    back = Calibration.from_record(json.loads(json.dumps(cal.as_record())))
    assert isinstance(back.probability_map, DepthMaps) and len(back.probability_map.maps) == 2
    np.testing.assert_allclose(back.probability_map.maps[1][1], dm.maps[1][1])
    # nodes along a path: each column its depth's map, then never above the parent
    along = np.array([[0.9, 0.9], [0.6, 0.55]])
    got = map_nodes(along, dm)
    want = np.column_stack([apply_map(along[:, 0], dm.at(0)), apply_map(along[:, 1], dm.at(1))])
    np.testing.assert_allclose(got, np.minimum.accumulate(want, axis=1))
    assert (got[:, 1] <= got[:, 0]).all()
    # paths: the map of each path's leaf depth (path 0 ends at depth 0, path 1 at depth 1)
    path_nodes = np.array([[3, -1], [1, 2]])
    np.testing.assert_array_equal(path_depths(path_nodes), [0, 1])
    with_depths = dm._replace(path_depth=path_depths(path_nodes))
    prob = np.array([[0.8, 0.8]])
    np.testing.assert_allclose(
        map_paths(prob, with_depths, np.array([[0, 1]])),
        [[apply_map(np.array([0.8]), dm.at(0))[0], apply_map(np.array([0.8]), dm.at(1))[0]]],
    )
    assert paths_at_least(0.3, 1000, dm) == max(paths_at_least(0.3, 1000, m) for m in dm.maps)


@pytest.mark.slow
def test_a_model_with_depth_maps_predicts_the_mapped_dense_marginals(small_model):
    """transform with per-depth maps: node probabilities = each depth's map of the dense Eq. 5 marginals,
    never above the parent's; the path's probability = its leaf depth's map of its posterior."""
    from pcem_spark.core.calibration import DepthMaps, apply_map, logistic_map

    docs, model = small_model
    model = _copy(model)
    rng = np.random.default_rng(1)
    p = rng.beta(3, 1, size=400)
    level1 = logistic_map(p, rng.random(400) < p)
    leaf = logistic_map(p, rng.random(400) < p**3)
    model.probability_map = DepthMaps((level1, leaf))
    rows = model.transform(docs, node_probabilities=True, top_k=2).collect()
    model.probability_map = None
    raw = {r.id: r for r in model.transform(docs, node_probabilities=True, top_k=2).collect()}
    for r in rows:
        marg = np.array(raw[r.id].node_probabilities)
        want = np.minimum.accumulate([apply_map(marg[:1], level1)[0], apply_map(marg[1:2], leaf)[0]])
        np.testing.assert_allclose(r.node_probabilities, want, atol=1e-12)
        assert list(r.path) == list(raw[r.id].path)
        assert r.probability == pytest.approx(apply_map(np.array([raw[r.id].probability]), leaf)[0], abs=1e-12)
