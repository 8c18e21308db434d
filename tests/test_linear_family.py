"""The combined and discriminative families end to end on a real SparkSession: training, prediction, persistence.

The pooled scores are recomputed here with dense numpy from the model's own parameters
(tf-idf written out term by term), and the regression's weights against a local fit of the
same objective; settings are fixed (no cross-validation) so the test is fast.
"""

import os

import numpy as np
import pytest
import scipy.sparse as sp
from dense_reference import dense_counts, dense_tfidf

from pcem_spark.core.logistic import fit_softmax, one_hot_targets, softmax_terms
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.features import FeatureSettings
from pcem_spark.errors import InputError
from pcem_spark.ml import train
from pcem_spark.model.linear_family import linear_l2
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import ModelSettings
from pcem_spark.ops.inspection import inspect_model

WORDS = {
    ("sport", "football"): "goal keeper league striker pitch referee match",
    ("sport", "tennis"): "serve racket court match volley set umpire",
    ("tech", "phones"): "battery screen call android camera app charger",
    ("tech", "laptops"): "keyboard screen battery cpu trackpad ram hinge",
}
FEATURES = FeatureSettings(min_df=1.0, max_df=1.0, stop_words="none")


def settings(**kw):
    base = dict(
        method="pcem",
        smoothing=0.5,
        unlabeled_weight=0.5,
        path_weight=1.0,
        doc_length=0.0,
        max_iter=5,
        calibration="none",
        names="off",
        family="combined",
        linear_c=10.0,
        generative_weight=0.3,
    )
    base.update(kw)
    return ModelSettings(**base)


@pytest.fixture(scope="module")
def corpus(spark):
    rng = np.random.default_rng(4)
    rows = []
    for path, words in WORDS.items():
        vocab = words.split()
        for i in range(12):
            text = " ".join(rng.choice(vocab, size=int(rng.integers(3, 9))))
            rows.append((f"{path[1]}-{i}", text, list(path) if i < 3 else None))
    docs = spark.createDataFrame(rows, "id string, text string, labels array<string>")
    return rows, docs, Taxonomy.from_label_paths(list(WORDS))


@pytest.fixture(scope="module")
def combined(corpus):
    _, docs, taxonomy = corpus
    model, _ = train(docs, taxonomy, FEATURES, settings())
    return model


@pytest.fixture(scope="module")
def combined_saved(combined, tmp_path_factory):
    """The combined model saved once, for the tests that read it back."""
    path = str(tmp_path_factory.mktemp("combined") / "model")
    combined.save(path)
    return path


@pytest.fixture(scope="module")
def features(corpus):
    """The corpus's vocabulary and cached features, computed once for the cross-validation tests."""
    from pcem_spark.engine.features import featurize, fit_vocabulary

    _, docs, _ = corpus
    vocabulary = fit_vocabulary(docs, FEATURES)
    feats = featurize(docs, vocabulary, FEATURES).cache()
    yield vocabulary, feats
    feats.unpersist()


def test_the_regression_is_the_optimum_of_its_objective_on_the_labelled_documents(corpus, combined):
    rows, _, taxonomy = corpus
    model = combined
    info = model.training_summary["linear"]
    assert info["family"] == "combined" and info["n_labeled"] == 12 and info["converged"]
    X = dense_counts(rows, model.vocabulary)
    n = len(rows)
    df = (X > 0).sum(axis=0)
    idf = np.log((1 + n) / (1 + df)) + 1
    np.testing.assert_allclose(model.linear.idf, idf, rtol=1e-12)
    labelled = [i for i, r in enumerate(rows) if r[2] is not None]
    F = dense_tfidf(X[labelled], idf)
    paths = np.array([taxonomy.paths.index(tuple(rows[i][2])) for i in labelled])
    local = fit_softmax(
        lambda W, b: softmax_terms(F, one_hot_targets(paths, taxonomy.n_paths), np.ones(len(paths)), W, b),
        taxonomy.n_paths,
        len(model.vocabulary),
        linear_l2(10.0, len(paths)),
        max_iter=500,
        tol=1e-9,
    )
    np.testing.assert_allclose(model.linear.weights_t.T, local.W, atol=2e-3)


def test_predictions_are_the_argmax_of_the_pooled_scores(corpus, combined, staged_shipping):
    rows, docs, taxonomy = corpus
    model = combined
    X = dense_counts(rows, model.vocabulary)
    jll = X @ model.log_theta.T + model.log_prior
    log_post = jll - np.log(np.exp(jll - jll.max(1, keepdims=True)).sum(1, keepdims=True)) - jll.max(1, keepdims=True)
    pooled = 0.3 * log_post + dense_tfidf(X, model.linear.idf) @ model.linear.weights_t + model.linear.bias
    want = {r[0]: list(taxonomy.paths[j]) for r, j in zip(rows, pooled.argmax(axis=1))}
    got = {r.id: r.path for r in model.transform(docs).select("id", "path").collect()}
    assert got == want
    prob = np.exp(pooled - pooled.max(1, keepdims=True))
    prob = prob.max(1) / prob.sum(1)
    got_prob = dict(model.transform(docs).select("id", "probability").collect())
    np.testing.assert_allclose([got_prob[r[0]] for r in rows], prob, rtol=1e-9)


def test_save_and_load_keep_the_regression(spark, corpus, combined, combined_saved):
    _, docs, _ = corpus
    loaded = PathModel.load(combined_saved)
    assert loaded.linear is not None
    np.testing.assert_array_equal(loaded.linear.weights_t, combined.linear.weights_t)
    np.testing.assert_array_equal(loaded.linear.bias, combined.linear.bias)
    np.testing.assert_array_equal(loaded.linear.idf, combined.linear.idf)
    assert loaded.linear.generative_weight == 0.3
    before = sorted(combined.transform(docs).select("id", "path", "probability").collect())
    after = sorted(loaded.transform(docs).select("id", "path", "probability").collect())
    assert before == after
    with pytest.raises(InputError, match="exact argmax"):
        loaded.beam_width(4)
    assert loaded.beam_width("auto") == 0


def test_the_discriminative_family_ignores_the_generative_posterior(corpus):
    rows, docs, taxonomy = corpus
    model, _ = train(docs, taxonomy, FEATURES, settings(family="discriminative"))
    assert model.linear.generative_weight == 0.0
    X = dense_counts(rows, model.vocabulary)
    scores = dense_tfidf(X, model.linear.idf) @ model.linear.weights_t + model.linear.bias
    want = {r[0]: list(taxonomy.paths[j]) for r, j in zip(rows, scores.argmax(axis=1))}
    assert {r.id: r.path for r in model.transform(docs).select("id", "path").collect()} == want


def test_families_need_one_component_per_path():
    with pytest.raises(InputError, match="one component per path"):
        settings(method="emmc").validate()
    with pytest.raises(InputError, match="model.family"):
        settings(family="neural").validate()


def test_family_auto_is_cross_validated_for_one_component_methods_only():
    from pcem_spark.ml.tune_settings import TuneSettings

    auto = settings(family="auto")
    auto.validate()
    assert "family" in auto.auto_params()
    assert auto.resolved(unlabeled_weight=0.3).family == "generative"  # what a fit without CV uses
    emmc = settings(method="emmc", family="auto")
    emmc.validate()  # auto is allowed: it resolves to generative for a method that has no other family
    assert "family" not in emmc.auto_params()
    assert TuneSettings().families[0] == "combined"  # preferred by the paired one-standard-error rule
    with pytest.raises(InputError, match="families"):
        TuneSettings(families=["generative", "neural"]).validate()


def test_multi_path_weighs_the_pair_gain_by_the_generative_weight(corpus, combined):
    """--multi-path on a combined model: the pair's generative gain enters the pooled scores times beta."""
    from pcem_spark.core.decoding import predict_path_details
    from pcem_spark.core.estep import scoring_tables
    from pcem_spark.core.multi_path import PAIR_CANDIDATES, membership_probabilities, mixture_gain, with_membership
    from pcem_spark.core.path_nodes import path_node_table

    rows, docs, taxonomy = corpus
    X = dense_counts(rows, combined.vocabulary)
    X = sp.csr_matrix(np.vstack([X, X[:12] + X[24:36]]))  # + documents of two topics (football and phones)
    tables = scoring_tables(combined.params)._replace(linear=combined.linear)
    path_nodes = path_node_table(taxonomy.path_node_matrix(sparse=True), taxonomy.is_dummy)
    out = predict_path_details(X, None, 0.0, tables, path_nodes, 0.0, taxonomy.n_paths)
    got = with_membership(out, X, tables)
    C = min(PAIR_CANDIDATES, taxonomy.n_paths - 1)
    _, gain = mixture_gain(X, tables._replace(linear=None), out.top_index[:, 0], out.top_index[:, 1 : 1 + C])
    assert np.abs(gain).max() > 0.1  # the pairs' gains are not all 0: beta must matter below
    want = membership_probabilities(out.top_index, out.top_posterior, 0.3 * gain, tables.log_prior)
    np.testing.assert_allclose(got.member_probability, want, rtol=1e-12)
    alone = with_membership(out, X, tables._replace(linear=combined.linear._replace(generative_weight=0.0)))
    no_gain = membership_probabilities(out.top_index, out.top_posterior, 0.0 * gain, tables.log_prior)
    np.testing.assert_allclose(alone.member_probability, no_gain, rtol=1e-12)
    assert not np.allclose(got.member_probability, alone.member_probability)
    predicted = combined.transform(docs, multi_path=0.3).select("id", "path", "paths").collect()
    assert len(predicted) == len(rows) and all(r.paths[0] == r.path for r in predicted)


def test_a_warm_start_inherits_the_family(spark, combined_saved):
    from pcem_spark.model.warm import CROSS_VALIDATED_SETTINGS, WarmStart

    inherited, taken = WarmStart.load(combined_saved).inherit(settings(family="auto"), CROSS_VALIDATED_SETTINGS)
    assert inherited.family == "combined" and taken["family"] == "combined"


@pytest.mark.slow
def test_exhaustive_tuning_keeps_the_chosen_familys_regression(corpus):
    """The exhaustive strategy (also every tuned warm start) refits through PathEM: the regression must survive."""
    from pcem_spark.ml import TuneSettings

    _, docs, taxonomy = corpus
    tune = TuneSettings(strategy="exhaustive", folds=2, min_labeled_per_fold=1, families=["combined"])
    model, _ = train(docs, taxonomy, FEATURES, settings(family="auto", unlabeled_weight="auto"), tune=tune)
    assert model.model_settings.family == "combined"
    assert model.linear is not None and model.training_summary["tuning"]["chosen"]["family"] == "combined"


def test_inspect_shows_each_nodes_top_weighted_terms(combined, tmp_path):
    from pcem_spark.ops.inspection import inspect_model, inspection_files, write_inspection

    report = inspect_model(combined, top_n=3)
    assert report["regression"]["family"] == "combined" and report["regression"]["generative_weight"] == 0.3
    nodes = {n["node"]: n for n in report["nodes"]}
    # A leaf's top weighted terms are its own words, never one only its sibling uses, and most of
    # them are exclusive to it (a shared word may lead where the few labelled documents favour it).
    for (top, leaf), words in WORDS.items():
        (sibling_words,) = [w for (t, name), w in WORDS.items() if t == top and name != leaf]
        exclusive = set(words.split()) - set(sibling_words.split())
        terms = [t["term"] for t in nodes[leaf]["top_weighted_terms"]]
        assert len(terms) == 3 and set(terms) <= set(words.split()), (leaf, terms)
        assert sum(t in exclusive for t in terms) >= 2, (leaf, terms)
        assert all(t["contrast"] > 0 for t in nodes[leaf]["top_weighted_terms"])
    sport_words = set(" ".join(WORDS[p] for p in WORDS if p[0] == "sport").split())
    assert nodes["sport"]["top_weighted_terms"][0]["term"] in sport_words
    out = write_inspection(str(tmp_path / "inspect"), inspection_files(report))
    text = open(os.path.join(out, "model.md")).read()
    assert "top weighted terms vs siblings" in text and nodes["tennis"]["top_weighted_terms"][0]["term"] in text


def test_observed_weights_fit_save_and_predict_like_their_dense_reference(spark, corpus, tmp_path):
    """linear_weights = observed: only the (path, term) pairs of the labelled documents are free."""
    rows, docs, taxonomy = corpus
    model, _ = train(docs, taxonomy, FEATURES, settings(linear_weights="observed"))
    Wt = model.linear.weights_t
    assert sp.issparse(Wt) and model.training_summary["linear"]["weights"] == "observed"
    X = dense_counts(rows, model.vocabulary)
    labelled = [i for i, r in enumerate(rows) if r[2] is not None]
    paths = np.array([taxonomy.paths.index(tuple(rows[i][2])) for i in labelled])
    seen = {(j, t) for i, j in zip(labelled, paths) for t in np.flatnonzero(X[i])}  # written out pair by pair
    W = Wt.T.tocsr()
    stored = set(zip(np.repeat(np.arange(W.shape[0]), np.diff(W.indptr)).tolist(), W.indices.tolist()))
    assert stored == seen and model.training_summary["linear"]["n_weights"] == len(seen) < W.shape[0] * W.shape[1]
    # The same problem in dense numpy: the pairs outside the support held at 0.
    mask = np.zeros(W.shape, bool)
    for j, t in seen:
        mask[j, t] = True
    F = dense_tfidf(X[labelled], model.linear.idf)
    Y = one_hot_targets(paths, taxonomy.n_paths)

    def masked(Wd, b):
        t = softmax_terms(F, Y, np.ones(len(paths)), Wd * mask, b)
        return t._replace(grad_W=t.grad_W * mask)

    local = fit_softmax(masked, W.shape[0], W.shape[1], linear_l2(10.0, len(paths)), max_iter=500, tol=1e-9)
    np.testing.assert_allclose(W.toarray(), local.W * mask, atol=2e-3)
    path = str(tmp_path / "observed")
    model.save(path)
    loaded = PathModel.load(path)
    assert sp.issparse(loaded.linear.weights_t)
    np.testing.assert_array_equal(loaded.linear.weights_t.toarray(), Wt.toarray())
    before = sorted(model.transform(docs).select("id", "path", "probability").collect())
    assert sorted(loaded.transform(docs).select("id", "path", "probability").collect()) == before
    report = inspect_model(loaded, top_n=2)  # a sparse regression inspects too
    assert all(n["top_weighted_terms"] for n in report["nodes"] if n["leaf"])


def test_the_weight_layout_follows_the_width(monkeypatch):
    from pcem_spark.model import linear_family

    assert linear_family.weight_layout(settings(), 20, 20000) == "dense"
    assert linear_family.weight_layout(settings(linear_weights="observed"), 20, 20000) == "observed"
    assert linear_family.weight_layout(settings(), 1000, 1 << 18) == "observed"  # 2^28 cells: too wide for dense
    with pytest.raises(InputError, match="model.linear_weights = dense .* 1000 paths x 262144 terms"):
        linear_family.weight_layout(settings(linear_weights="dense"), 1000, 1 << 18)
    with pytest.raises(InputError, match="model.linear_weights"):
        settings(linear_weights="sparse").validate()


@pytest.mark.slow
def test_the_family_choice_is_deterministic_for_a_seed_and_records_each_familys_scores(spark, corpus, features):
    """model.family = auto: the sampled cross-validation scores both families; the same seed, the same choice."""
    from pcem_spark.ml import PathEM, TuneSettings
    from pcem_spark.ml.tuning import resolve_auto

    taxonomy = corpus[2]
    vocabulary, feats = features
    tune = TuneSettings(folds=2, min_labeled_per_fold=1, unlabeled_weights=[0.5], path_weights=[1.0])
    ms = settings(family="auto")

    def run(seed):
        chosen, info, _ = resolve_auto(
            feats, taxonomy, vocabulary, FEATURES, ms, tune, seed=seed, estimator_class=PathEM
        )
        scores = [(g["family"], g["fold_scores"]) for g in info["grid"]]
        return (chosen.family, info["chosen"], scores), info

    (first, info), (again, _) = run(3), run(3)
    assert first == again
    # the families compared fold by fold: each one's point and the paired rule's choice are recorded
    families = info["families"]
    assert [f["family"] for f in families["families"]] == ["combined", "generative", "discriminative"]
    assert families["chosen"] == first[0]
    # each family's fold scores recorded (tune.families' default: all three)
    assert sorted(f for f, _ in first[2]) == ["combined", "discriminative", "generative"]
    assert first[0] in ("generative", "combined", "discriminative") and first[1]["family"] == first[0]


def fold_parts(corpus):
    """``(parts, V)``: one-row blocks of the corpus, labelled rows dealt to folds 0 / 1, the rest unlabelled."""
    from pcem_spark.engine.blocks import Block
    from pcem_spark.model.sampled_cv import UNLABELED_PART

    rows, _, taxonomy = corpus
    vocabulary = sorted({w for _, text, _ in rows for w in text.split()})
    X = sp.csr_matrix(dense_counts(rows, vocabulary))
    A = taxonomy.path_node_matrix()
    parts = []
    for i, (_, _, labels) in enumerate(rows):
        ns = np.zeros((1, taxonomy.n_nodes))
        if labels is not None:
            ns[0] = A[taxonomy.paths.index(tuple(labels))]
        part = (i % 2) if labels is not None else UNLABELED_PART
        parts.append((part, Block(X[i], sp.csr_matrix(ns), np.array([labels is not None]))))
    return parts, len(vocabulary)


def test_a_folds_regression_fitted_once_gives_every_grid_point_the_scores_of_its_own_fit(corpus):
    """run_sampled_cv fits each fold's regression once for all grid points (it depends on the fold's labelled
    documents only): a task given it scores exactly as a task that fits its own."""
    from pcem_spark.model.linear_family import fit_linear_local
    from pcem_spark.model.sampled_cv import cv_task

    taxonomy = corpus[2]
    parts, V = fold_parts(corpus)
    for weight in (0.3, 1.0):  # two grid points sharing fold 0's regression
        point = settings(unlabeled_weight=weight, generative_weight=weight)
        shared = fit_linear_local([b for p, b in parts if p != 0], taxonomy, V, settings(generative_weight=0.7))
        own = cv_task(parts, 0, taxonomy, V, point)
        given = cv_task(parts, 0, taxonomy, V, point, linear=shared)
        assert {k: v for k, v in given.items() if k != "seconds"} == {k: v for k, v in own.items() if k != "seconds"}


def test_grid_points_that_differ_only_in_their_family_share_one_fold_fit_and_score_as_their_own(corpus):
    """cv_tasks fits a fold's EM once for every point of one em_key: each point's counts equal cv_task's own."""
    from pcem_spark.model.sampled_cv import cv_task, cv_tasks, em_key

    taxonomy = corpus[2]
    parts, V = fold_parts(corpus)
    points = [
        settings(family="generative"),
        settings(family="combined"),
        settings(family="combined", generative_weight=1.0),
    ]
    assert len({em_key(p) for p in points}) == 1
    # the discriminative family's scores ignore EM-lambda and gamma: one key for all of them, another than EM's
    disc = {
        em_key(settings(family="discriminative", unlabeled_weight=w, path_weight=g)) for w in (0.3, 1) for g in (0, 1)
    }
    assert len(disc) == 1 and disc.isdisjoint({em_key(points[0])})
    assert em_key(settings(unlabeled_weight=0.3)) != em_key(settings(unlabeled_weight=1.0))

    def strip(r):
        return {k: v for k, v in r.items() if k != "seconds"}

    shared = cv_tasks(parts, 1, taxonomy, V, points)
    assert [strip(r) for r in shared] == [strip(cv_task(parts, 1, taxonomy, V, p)) for p in points]
    with pytest.raises(ValueError, match="em_key"):
        cv_tasks(parts, 1, taxonomy, V, [points[0], settings(unlabeled_weight=1.0)])


@pytest.mark.slow
def test_beta_auto_is_cross_validated_for_the_combined_points_only(spark, corpus, features):
    """model.generative_weight = auto: the combined family's beta is a grid value; a generative or discriminative
    point is scored once (beta changes nothing for them); without folds beta falls back to 0.3."""
    from pcem_spark.ml import PathEM, TuneSettings
    from pcem_spark.ml.tuning import resolve_auto
    from pcem_spark.model.settings import GENERATIVE_WEIGHT_FALLBACK

    taxonomy = corpus[2]
    vocabulary, feats = features
    tune = TuneSettings(
        folds=2, min_labeled_per_fold=1, unlabeled_weights=[0.5], path_weights=[1.0], generative_weights=[0.3, 0.03]
    )
    ms = settings(family="auto", generative_weight="auto")
    # embedding_weight is "auto" too, and not tuned: these documents have no vectors
    assert ms.auto_params() == ["family", "generative_weight"] and ms.tunes_embedding_weight()
    assert settings(family="generative", generative_weight="auto").auto_params() == []
    chosen, info, _ = resolve_auto(feats, taxonomy, vocabulary, FEATURES, ms, tune, seed=1, estimator_class=PathEM)
    assert all("embedding_weight" not in g for g in info["grid"])
    points = sorted((g["family"], g["generative_weight"]) for g in info["grid"])
    assert points == [("combined", 0.03), ("combined", 0.3), ("discriminative", 0.3), ("generative", 0.3)]
    # the two betas share the fold's EM and regression: the same fit, scored two ways
    combined = [g for g in info["grid"] if g["family"] == "combined"]
    assert combined[0]["n_iter"] == combined[1]["n_iter"]
    assert chosen.generative_weight in (0.3, 0.03) and chosen.family == info["chosen"]["family"]
    assert ms.resolved().generative_weight == GENERATIVE_WEIGHT_FALLBACK


def test_a_regression_fitted_with_beta_auto_outside_the_cross_validation_pools_at_the_fallback(corpus):
    """A direct fit with generative_weight = "auto" (no folds to choose it) pools at the documented fallback."""
    from pcem_spark.engine.blocks import Block
    from pcem_spark.model.linear_family import fit_linear_local, generative_weight_of
    from pcem_spark.model.settings import GENERATIVE_WEIGHT_FALLBACK

    rows, _, taxonomy = corpus
    vocabulary = sorted({w for _, text, _ in rows for w in text.split()})
    X = sp.csr_matrix(dense_counts(rows, vocabulary))
    A = taxonomy.path_node_matrix()
    ns = np.array([A[taxonomy.paths.index(tuple(lab))] if lab else np.zeros(taxonomy.n_nodes) for _, _, lab in rows])
    block = Block(X, sp.csr_matrix(ns), np.array([lab is not None for _, _, lab in rows]))
    auto = settings(generative_weight="auto")
    assert generative_weight_of(auto) == GENERATIVE_WEIGHT_FALLBACK == 0.3
    assert generative_weight_of(settings(family="discriminative", generative_weight="auto")) == 0.0
    assert fit_linear_local([block], taxonomy, len(vocabulary), auto).generative_weight == GENERATIVE_WEIGHT_FALLBACK
