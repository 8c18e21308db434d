"""Cross-validation on a bounded sample: each (grid point, fold) fit is one task, the same EM code as a full fit."""

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from pyspark.sql import functions as F
from test_predict_evaluate import TAX  # noqa: E402 (the four-topic taxonomy)
from test_tuning import FS, _corpus, _features  # noqa: E402

from pcem_spark.core.methods import method_spec
from pcem_spark.engine import passes
from pcem_spark.engine.blocks import Block, blocks_from_labels
from pcem_spark.evaluation.metrics import f1_scores, metric_nodes
from pcem_spark.ml import PathEM
from pcem_spark.ml.tuning import TuneSettings, resolve_auto
from pcem_spark.model.fitting import em_settings
from pcem_spark.model.sampled_cv import (
    CVSample,
    fold_confusion,
    fold_metric,
    metric_indicator,
    rescaled_unlabeled_weight,
    sample_rows,
    true_paths,
)
from pcem_spark.model.settings import ModelSettings


def test_rescaled_weight_keeps_the_unlabelled_mass_per_labelled_document():
    # full fit: 0.3 x 10,000 / 100 = 30 per labelled document; sample: w x 2,000 / 100 = 30 -> w = 1.5
    assert rescaled_unlabeled_weight(0.3, 100, 10_000, 100, 2_000) == pytest.approx(1.5)
    # labelled documents sampled too: w x 2,000 / 50 = 30 -> w = 0.75
    assert rescaled_unlabeled_weight(0.3, 100, 10_000, 50, 2_000) == pytest.approx(0.75)
    assert rescaled_unlabeled_weight(0.3, 100, 10_000, 100, 10_000) == pytest.approx(0.3)  # nothing sampled
    assert rescaled_unlabeled_weight(0.3, 100, 0, 100, 0) == 0.3  # no unlabelled documents
    s = CVSample(100, 10_000, 100, 2_000, seed=0)
    assert s.unlabeled_scale == pytest.approx(5.0) and s.as_dict()["unlabeled_weight_scale"] == 5.0


def test_fold_confusion_counts_nodes_like_the_evaluator():
    """Against a hand count on the 2-level taxonomy: real nodes of true and predicted paths."""
    ind = metric_indicator(TAX)
    nodes = metric_nodes(TAX)
    assert ind.shape == (TAX.n_paths, len(nodes))
    true = np.array([0, 0, 1, 2])
    pred = np.array([0, 1, 1, 3])
    tp, fp, fn = fold_confusion(true, pred, ind)
    # by hand: node sets of the real paths
    exp_tp = np.zeros(len(nodes), int)
    exp_fp = np.zeros(len(nodes), int)
    exp_fn = np.zeros(len(nodes), int)
    for t, p in zip(true, pred):
        ts, ps = set(TAX.real_path(t)), set(TAX.real_path(p))
        for k, n in enumerate(nodes):
            exp_tp[k] += n in ts and n in ps
            exp_fp[k] += n in ps and n not in ts
            exp_fn[k] += n in ts and n not in ps
    assert tp.tolist() == exp_tp.tolist() and fp.tolist() == exp_fp.tolist() and fn.tolist() == exp_fn.tolist()
    f = f1_scores(tp, fp, fn)
    assert fold_metric(tp, fp, fn, "microF1") == f["micro_f1"]
    assert fold_metric(tp, fp, fn, "meanF1") == pytest.approx((f["micro_f1"] + f["macro_f1"]) / 2)


def test_true_paths_recovers_the_label_path_from_node_scores():
    pn = TAX.path_node_matrix(sparse=True)
    ns = sp.csr_matrix(pn.toarray()[[2, 0, 3]])
    assert true_paths(ns, pn).tolist() == [2, 0, 3]


def test_local_fit_equals_the_distributed_fit(spark):
    """The EM of a cross-validation task (a list of blocks, one process) is the distributed EM."""
    docs = _corpus(spark)
    feats, vocab = _features(spark, docs)
    rdd = blocks_from_labels(feats, TAX.path_lookup(), TAX.path_node_matrix(sparse=True), len(vocab), 7).cache()
    local_blocks = rdd.collect()  # a tiny test corpus
    ms = ModelSettings(method="pcem", smoothing=0.5, unlabeled_weight=0.7, path_weight=1.0, max_iter=6).resolved()
    spec = method_spec(TAX, ms.method, ms.components, ms.path_weight)
    dist = passes.fit(rdd, spec.score_matrix, len(vocab), em_settings(ms, spec), structure=spec.structure)
    local = passes.fit(local_blocks, spec.score_matrix, len(vocab), em_settings(ms, spec), structure=spec.structure)
    rdd.unpersist()
    assert isinstance(local_blocks[0], Block)
    assert local.n_iter == dist.n_iter and (local.n_labeled, local.n_unlabeled) == (dist.n_labeled, dist.n_unlabeled)
    np.testing.assert_allclose(local.loglik_history, dist.loglik_history, rtol=1e-12)
    np.testing.assert_allclose(local.log_theta, dist.log_theta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(local.log_prior, dist.log_prior, rtol=1e-9, atol=1e-12)


def test_sample_rows_is_seeded_and_bounded(spark):
    df = spark.range(20_000).select(F.col("id").cast("string").alias("id"))
    a = sample_rows(df, 20_000, 2_000, seed=3)
    b = sample_rows(df, 20_000, 2_000, seed=3)
    c = sample_rows(df, 20_000, 2_000, seed=4)
    ids_a = sorted(r.id for r in a.collect())
    assert ids_a == sorted(r.id for r in b.collect())
    assert ids_a != sorted(r.id for r in c.collect())
    assert 1_800 <= len(ids_a) <= 2_200
    assert sample_rows(df, 20_000, 50_000, seed=3).count() == 20_000  # under the cap: everything


@pytest.mark.slow
def test_sampled_cv_without_sampling_scores_every_grid_point_as_the_exhaustive_cv(spark, caplog):
    """With caps above the corpus nothing is sampled: the task fits score exactly as CrossValidator's fits.

    The exhaustive strategy does not compare families: under family auto it cross-validates the
    generative family's grid, which is the sampled strategy's grid with the family set to generative.
    """
    docs = _corpus(spark, seed=1)
    feats, vocab = _features(spark, docs)
    ms = ModelSettings(method="pcem", max_iter=5)
    assert ms.family == "auto"
    common = dict(folds=3, unlabeled_weights=[0.3, 1.0, 0.0], path_weights=[0.0, 1.0])
    s1, sampled, model = resolve_auto(
        feats,
        TAX,
        vocab,
        FS,
        replace(ms, family="generative"),
        TuneSettings(strategy="sampled", **common),
        seed=5,
        estimator_class=PathEM,
    )
    with caplog.at_level("WARNING", logger="pcem_spark"):
        s2, exhaustive, _ = resolve_auto(
            feats, TAX, vocab, FS, ms, TuneSettings(strategy="exhaustive", **common), seed=5, estimator_class=PathEM
        )
    assert "does not compare model families" in caplog.text
    assert "family" not in exhaustive["chosen"] and s2.family == "generative"
    assert model is None  # the caller's refit is the only fit on every document
    assert sampled["strategy"] == "sampled" and exhaustive["strategy"] == "exhaustive"
    n_unl = docs.where(F.col("labels").isNull()).count()
    assert sampled["sample"] == {
        "n_held_out": 24,  # every leaf has several labelled documents: each can be held out
        "n_labeled": 24,
        "n_unlabeled": n_unl,
        "n_labeled_sampled": 24,
        "n_unlabeled_sampled": n_unl,
        "seed": 5,
        "unlabeled_weight_scale": 1.0,
    }
    keys = ("unlabeled_weight", "path_weight")
    assert [tuple(g[k] for k in keys) for g in sampled["grid"]] == [
        tuple(g[k] for k in keys) for g in exhaustive["grid"]
    ]
    np.testing.assert_allclose(
        [g["cv_score"] for g in sampled["grid"]], [g["cv_score"] for g in exhaustive["grid"]], atol=1e-9
    )
    np.testing.assert_allclose(
        [g["cv_std"] for g in sampled["grid"]], [g["cv_std"] for g in exhaustive["grid"]], atol=1e-9
    )
    assert sampled["chosen"] == exhaustive["chosen"] and s1 == s2


@pytest.mark.slow
def test_sampled_cv_is_deterministic_for_a_seed_and_records_the_sample(spark):
    docs = _corpus(spark, n_per_leaf=40, n_labeled=10)
    feats, vocab = _features(spark, docs)
    ms = ModelSettings(method="pcem", max_iter=4, family="generative")  # EM's sample; the families: test_linear_family
    tune = TuneSettings(folds=2, max_labeled=30, max_unlabeled=60, unlabeled_weights=[0.3, 1.0], path_weights=[0.0])
    runs = [resolve_auto(feats, TAX, vocab, FS, ms, tune, seed=11, estimator_class=PathEM)[1] for _ in range(2)]
    a, b = runs

    def scores(info):  # every recorded number but the fits' wall time
        return [{k: v for k, v in g.items() if k != "fit_seconds"} for g in info["grid"]]

    assert scores(a) == scores(b) and a["sample"] == b["sample"] and a["chosen"] == b["chosen"]
    s = a["sample"]
    assert (s["n_labeled"], s["n_unlabeled"]) == (40, 120)
    assert 15 <= s["n_labeled_sampled"] < 40 and 30 <= s["n_unlabeled_sampled"] < 120
    expected = (120 / s["n_unlabeled_sampled"]) * (s["n_labeled_sampled"] / 40)
    assert s["unlabeled_weight_scale"] == pytest.approx(expected, rel=1e-5)
    for g in a["grid"]:  # every grid point's score, per fold, and its fits' iterations
        assert len(g["fold_scores"]) == 2 and len(g["n_iter"]) == 2
        assert g["cv_score"] == pytest.approx(np.mean(g["fold_scores"]), abs=1e-6)
    other = resolve_auto(feats, TAX, vocab, FS, ms, tune, seed=12, estimator_class=PathEM)[1]
    assert other["sample"] != a["sample"] or scores(other) != scores(a)


@pytest.mark.slow
def test_cv_fits_stop_at_tune_max_iter_and_the_choice_leaves_the_models_max_iter(spark):
    docs = _corpus(spark, n_per_leaf=30, n_labeled=10)
    feats, vocab = _features(spark, docs)
    # tol 0: every fit runs to its iteration cap (EM fits: the generative family, whose every point runs EM)
    ms = ModelSettings(method="pcem", max_iter=6, tol=0.0, family="generative")
    common = dict(folds=2, unlabeled_weights=[0.3, 1.0], path_weights=[0.0])
    capped_settings, capped, _ = resolve_auto(
        feats, TAX, vocab, FS, ms, TuneSettings(max_iter=2, **common), seed=3, estimator_class=PathEM
    )
    full_settings, full, _ = resolve_auto(
        feats, TAX, vocab, FS, ms, TuneSettings(max_iter=0, **common), seed=3, estimator_class=PathEM
    )
    assert capped["fit_max_iter"] == 2 and full["fit_max_iter"] == 6
    assert {n for g in capped["grid"] for n in g["n_iter"]} == {2}
    assert {n for g in full["grid"] for n in g["n_iter"]} == {6}
    assert capped_settings.max_iter == full_settings.max_iter == 6  # the refit converges as configured


def test_sample_caps_shrink_with_the_paths_within_their_bounds():
    tune = TuneSettings(max_labeled=5000, max_unlabeled=20000, max_doc_paths=2_000_000)
    assert [tune.sample_caps(p) for p in (1, 20, 100, 101, 400, 1000, 2000, 10000)] == [
        (5000, 20000),
        (5000, 20000),
        (5000, 20000),
        (5000, 19801),
        (5000, 5000),
        (2000, 2000),
        (1000, 1000),
        (1000, 1000),
    ]
    assert TuneSettings(max_labeled=300, max_unlabeled=500).sample_caps(10000) == (300, 500)  # the user's bounds stand
    with pytest.raises(ValueError, match="max_doc_paths"):
        TuneSettings(max_doc_paths=0).validate()


def _terms_per_top_numpy(feats):
    """The same count in plain Python: distinct term indices of the labelled rows per level-1 node."""
    seen = {}
    for r in feats.where(F.col("labels").isNotNull()).collect():
        seen.setdefault(r.labels[0], set()).update(int(i) for i in r.features.indices)
    return {top: len(terms) for top, terms in seen.items()}


def test_labelled_terms_per_top_counts_distinct_terms(spark):
    from pcem_spark.model.path_spread import labelled_terms_per_top, spread_parameters

    feats, vocab = _features(spark, _corpus(spark, n_per_leaf=12, n_labeled=4))
    counted = labelled_terms_per_top(feats.repartition(3), len(vocab))
    assert counted == _terms_per_top_numpy(feats) and set(counted) == {"sport", "tech"}
    assert spread_parameters(counted, TAX) == 2 * (counted["sport"] + counted["tech"])  # two paths under each


@pytest.mark.slow
def test_tuning_leaves_path_weight_out_above_the_parameter_bound(spark):
    """A bound below the labelled words' spread keeps path_weight 0 only, and says so in the summary."""
    from pcem_spark.model.path_spread import spread_parameters

    feats, vocab = _features(spark, _corpus(spark, n_per_leaf=12, n_labeled=4))
    estimate = spread_parameters(_terms_per_top_numpy(feats), TAX)
    ms = ModelSettings(method="pcem", max_iter=3, family="generative")
    common = dict(folds=2, unlabeled_weights=[0.3, 1.0], path_weights=[0.0, 1.0])
    _, tight_info, _ = resolve_auto(
        feats, TAX, vocab, FS, ms, TuneSettings(max_parameters=estimate - 1, **common), estimator_class=PathEM
    )
    assert tight_info["path_weight_budget"] == {
        "estimated_parameters": estimate,
        "max_parameters": estimate - 1,
        "left_out": [1.0],
    }
    assert {g["path_weight"] for g in tight_info["grid"]} == {0.0}
    _, roomy_info, _ = resolve_auto(
        feats, TAX, vocab, FS, ms, TuneSettings(max_parameters=estimate, **common), estimator_class=PathEM
    )
    assert roomy_info["path_weight_budget"]["left_out"] == []
    assert {g["path_weight"] for g in roomy_info["grid"]} == {0.0, 1.0}
    # no bound, or one no (paths x terms) table can exceed: no estimate at all
    for bound in (0, TAX.n_paths * len(vocab)):
        info = resolve_auto(
            feats, TAX, vocab, FS, ms, TuneSettings(max_parameters=bound, **common), estimator_class=PathEM
        )[1]
        assert "path_weight_budget" not in info
