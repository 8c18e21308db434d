"""Warm starts (``pcem train --init-model``, PathEM ``initModel``) against independent dense references.

* :func:`pcem_spark.core.warm_start_parameters` vs a dense numpy computation
  from the previous *counts* (not from the library's parameters): the previous
  expected counts moved onto the new vocabulary by name, Eqs. 6-7 at the new
  smoothing.
* the engine started from those parameters vs the paper's E/M steps written
  out densely (the reference of ``tests/test_reference.py``), including a
  batch without labelled documents.
* the CLI and the PathEM Param end to end: metadata, inherited settings,
  refusals with exit code 2.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
from cli_args import set_args
from test_reference import ATOL, RTOL, make_corpus, ref_e_step, ref_log_params, ref_loglik, to_blocks  # noqa: E402

from pcem_spark import core, engine
from pcem_spark.model.fitting import score_matrix
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import ModelSettings

# =====================================================================
# Dense reference of a warm start
# =====================================================================


def dense_counts(R, V, rng, density=0.4, scale=12.0):
    """Previous expected counts (R, V): fractional, with exact zeros."""
    counts = rng.gamma(0.7, scale, size=(R, V)) * (rng.random((R, V)) < density)
    counts[0, :] = 0.0  # one component that never saw a word
    return counts


def ref_warm(prev_counts, prev_vocab, new_vocab, smoothing, path_mass, prior_smoothing=None, groups=None):
    """The warm parameters by definition: counts moved by term name, then Eqs. 6-7 with ``smoothing``.

    Returns dense ``(log_prior (R,), log_theta (R, V_new))``.
    """
    R = prev_counts.shape[0]
    ps = smoothing if prior_smoothing is None else prior_smoothing
    moved = np.zeros((R, len(new_vocab)))
    for k, term in enumerate(new_vocab):
        if term in prev_vocab:
            moved[:, k] = prev_counts[:, prev_vocab.index(term)]
    theta = np.empty_like(moved)
    for j in range(R):
        theta[j] = (moved[j] + smoothing) / (moved[j].sum() + len(new_vocab) * smoothing)
    numer = ps + np.asarray(path_mass, dtype=float)
    prior = np.empty(R)
    for j in range(R):
        same = [i for i in range(R) if groups is None or groups[i] == groups[j]]
        prior[j] = numer[j] / sum(numer[i] for i in same)
    return np.log(prior), np.log(theta)


def library_params(counts, path_mass, smoothing, prior_smoothing=None, groups=None):
    return core.sparse_log_parameters(
        sp.csr_matrix(counts), np.asarray(path_mass, float), smoothing, groups, prior_smoothing
    )


# =====================================================================
# 1. The pure function
# =====================================================================


@pytest.mark.parametrize("smoothing,prior_smoothing", [(1.0, None), (0.05, None), (0.3, 1.0)])
def test_same_vocabulary_and_smoothing_reproduces_the_previous_model(smoothing, prior_smoothing):
    rng = np.random.default_rng(1)
    counts = dense_counts(6, 40, rng)
    mass = rng.gamma(2.0, 10.0, size=6)
    mass[2] = 0.0
    vocab = [f"w{i}" for i in range(40)]
    prev = library_params(counts, mass, smoothing, prior_smoothing)
    for path_mass in (mass, None):
        previous = core.PreviousFit(prev, vocab, smoothing, prior_smoothing, path_mass)
        warm = core.warm_start_parameters(previous, vocab, smoothing, None, prior_smoothing)
        np.testing.assert_allclose(warm.log_theta(), prev.log_theta(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(warm.log_prior, prev.log_prior, rtol=RTOL, atol=ATOL)
        # and both are the dense Eqs. 6-7 of the counts
        lp, lt = ref_warm(counts, vocab, vocab, smoothing, mass, prior_smoothing)
        np.testing.assert_allclose(warm.log_theta(), lt, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(warm.log_prior, lp, rtol=RTOL, atol=ATOL)
    # the sparse form keeps the zeros of the counts
    assert warm.log_ratio.nnz == np.count_nonzero(counts)


@pytest.mark.parametrize("prev_s,new_s,use_groups", [(0.5, 0.5, False), (0.5, 0.1, False), (1.0, 0.2, True)])
def test_terms_are_mapped_by_name(prev_s, new_s, use_groups):
    """Permuted, dropped and new terms: the dense reference moves each column by its name."""
    rng = np.random.default_rng(7)
    R, V_prev = 8, 30
    counts = dense_counts(R, V_prev, rng)
    mass = rng.gamma(2.0, 5.0, size=R)
    prev_vocab = [f"t{i}" for i in range(V_prev)]
    # new vocabulary: 22 of the old terms in another order, 8 dropped, 11 new ones interleaved
    kept = list(rng.permutation(prev_vocab)[:22])
    new_vocab = kept[:10] + [f"new{i}" for i in range(11)] + kept[10:]
    groups = np.array([0, 0, 1, 1, 1, 2, 2, 2]) if use_groups else None
    prev = library_params(counts, mass, prev_s, None, groups)
    warm = core.warm_start_parameters(core.PreviousFit(prev, prev_vocab, prev_s, None, mass), new_vocab, new_s, groups)
    lp, lt = ref_warm(counts, prev_vocab, new_vocab, new_s, mass, None, groups)
    assert warm.shape == (R, len(new_vocab))
    np.testing.assert_allclose(warm.log_theta(), lt, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(warm.log_prior, lp, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.exp(warm.log_theta()).sum(axis=1), 1.0, rtol=1e-12)
    # a new term has the smoothing prior's probability in every component
    k = new_vocab.index("new3")
    n_kept = np.array([sum(counts[j, prev_vocab.index(t)] for t in kept) for j in range(R)])
    np.testing.assert_allclose(np.exp(warm.log_theta()[:, k]), new_s / (n_kept + len(new_vocab) * new_s), rtol=1e-12)


def test_term_mapping_and_overlap():
    target = core.term_mapping(["a", "b", "c", "d"], ["d", "x", "b"])
    np.testing.assert_array_equal(target, [-1, 2, -1, 0])
    with pytest.raises(ValueError, match="duplicate"):
        core.term_mapping(["a"], ["a", "a"])


def test_recovered_counts_and_refusal_of_dense_parameters():
    rng = np.random.default_rng(3)
    counts = dense_counts(4, 20, rng)
    params = library_params(counts, np.ones(4), 0.5)
    got, n_words = core.recovered_counts(params, 0.5)
    np.testing.assert_allclose(got.toarray(), counts, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(n_words, counts.sum(axis=1), rtol=1e-9, atol=1e-9)
    # read with another smoothing: the same theta, counts on that scale
    scaled, _ = core.recovered_counts(params, 1.0)
    np.testing.assert_allclose(scaled.toarray(), counts * 2.0, rtol=1e-9, atol=1e-9)
    # dense parameters (format-1 models: base = each row's minimum) give theta-equivalent counts:
    # the same vocabulary and smoothing reproduce them
    full = library_params(counts + 0.25, np.ones(4), 0.5)
    dense = core.PathParameters.from_log_theta(full.log_prior, full.log_theta())
    vocab = [f"w{i}" for i in range(20)]
    np.testing.assert_allclose(
        core.warm_start_parameters(core.PreviousFit(dense, vocab, 0.5), vocab, 0.5).log_theta(),
        full.log_theta(),
        rtol=RTOL,
        atol=ATOL,
    )
    # rows that are not distributions are refused
    damaged = params._replace(log_base=params.log_base + 0.1)
    with pytest.raises(ValueError, match="not word distributions"):
        core.warm_start_parameters(core.PreviousFit(damaged, vocab, 0.5), ["w1"], 0.5)
    with pytest.raises(ValueError, match="previous vocabulary has 3 terms"):
        core.warm_start_parameters(core.PreviousFit(params, ["a", "b", "c"], 0.5), ["a"], 0.5)


# =====================================================================
# 2. The engine from warm parameters vs the paper's E/M steps
# =====================================================================


def _prev_model_counts(c, rng):
    """A previous model on a vocabulary that overlaps the corpus's: names, counts (R, V_prev), masses."""
    new_vocab = [f"t{i}" for i in range(c.V)]
    prev_vocab = list(rng.permutation(new_vocab[3:])) + ["old0", "old1", "old2", "old3"]
    counts = dense_counts(c.M, len(prev_vocab), rng, density=0.6, scale=4.0)
    mass = rng.gamma(3.0, 4.0, size=c.M)
    return new_vocab, prev_vocab, counts, mass


def _ref_steps(X, S_fix, lab, lp, lt, s, n):
    lls = []
    for _ in range(n):
        lls.append(ref_loglik(X, S_fix, lab, lp, lt, s))
        S = ref_e_step(X, S_fix, lab, lp, lt)
        lp, lt = ref_log_params(X, S, s)
    return lp, lt, lls


@pytest.fixture(scope="module")
def corpus(spark):
    c = make_corpus("deep", seed=11)
    c.blocks = to_blocks(spark, c)
    yield c
    c.blocks.unpersist()


@pytest.mark.slow
@pytest.mark.parametrize("n_iter", [1, 3])
def test_engine_warm_start_equals_dense_em_from_the_warm_parameters(corpus, n_iter):
    c = corpus
    rng = np.random.default_rng(5)
    new_vocab, prev_vocab, counts, mass = _prev_model_counts(c, rng)
    s_prev, s = 0.4, 0.7
    prev = library_params(counts, mass, s_prev)
    warm = core.warm_start_parameters(core.PreviousFit(prev, prev_vocab, s_prev, path_mass=mass), new_vocab, s)
    res = engine.fit(
        c.blocks,
        score_matrix(c.tax, "pcem"),
        c.V,
        engine.EMSettings(em=True, smoothing=s, max_iter=n_iter, tol=0.0),
        init_params=warm,
    )
    lp0, lt0 = ref_warm(counts, prev_vocab, new_vocab, s, mass)
    lp, lt, lls = _ref_steps(c.X, c.S_pc, c.labeled, lp0, lt0, s, n_iter)
    assert res.warm_start and res.n_iter == n_iter
    np.testing.assert_allclose(res.log_prior, lp, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.log_theta, lt, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL, atol=ATOL)
    # the labelled documents counted as usual; a cold start from naive Bayes lands elsewhere
    assert res.n_labeled == int(c.labeled.sum())
    cold = engine.fit(
        c.blocks, score_matrix(c.tax, "pcem"), c.V, engine.EMSettings(em=True, smoothing=s, max_iter=n_iter, tol=0.0)
    )
    assert np.abs(cold.log_theta - res.log_theta).max() > 1e-3


def test_engine_max_iter_zero_returns_the_warm_parameters(corpus):
    c = corpus
    new_vocab, prev_vocab, counts, mass = _prev_model_counts(c, np.random.default_rng(2))
    warm = core.warm_start_parameters(
        core.PreviousFit(library_params(counts, mass, 0.5), prev_vocab, 0.5, path_mass=mass), new_vocab, 0.5
    )
    res = engine.fit(
        c.blocks,
        score_matrix(c.tax, "pcem"),
        c.V,
        engine.EMSettings(em=True, smoothing=0.5, max_iter=0),
        init_params=warm,
    )
    np.testing.assert_allclose(res.log_theta, warm.log_theta(), rtol=0, atol=0)
    assert res.n_iter == 0


@pytest.fixture(scope="module")
def unlabelled_corpus(spark):
    c = make_corpus("balanced", seed=21)
    c.labeled = np.zeros_like(c.labeled)
    c.S_pc = np.zeros_like(c.S_pc)
    c.blocks = to_blocks(spark, c)
    yield c
    c.blocks.unpersist()


@pytest.mark.slow
def test_batch_without_labels_runs_em_from_the_warm_start_and_fails_clearly_without(unlabelled_corpus):
    c = unlabelled_corpus
    sm = score_matrix(c.tax, "pcem")
    with pytest.raises(ValueError, match="no labelled document"):
        engine.fit(c.blocks, sm, c.V, engine.EMSettings(em=True, smoothing=0.5, max_iter=2))
    new_vocab, prev_vocab, counts, mass = _prev_model_counts(c, np.random.default_rng(9))
    warm = core.warm_start_parameters(
        core.PreviousFit(library_params(counts, mass, 0.5), prev_vocab, 0.5, path_mass=mass), new_vocab, 0.5
    )
    res = engine.fit(
        c.blocks, sm, c.V, engine.EMSettings(em=True, smoothing=0.5, max_iter=2, tol=0.0), init_params=warm
    )
    lp0, lt0 = ref_warm(counts, prev_vocab, new_vocab, 0.5, mass)
    lp, lt, lls = _ref_steps(c.X, c.S_pc, c.labeled, lp0, lt0, 0.5, 2)
    assert res.n_labeled == 0 and res.n_unlabeled == c.X.shape[0]
    np.testing.assert_allclose(res.log_theta, lt, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.log_prior, lp, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL, atol=ATOL)
    # what cannot run without labels even from a warm start: "auto" smoothing, naive Bayes, lambda = 0
    with pytest.raises(ValueError, match="auto"):
        engine.fit(c.blocks, sm, c.V, engine.EMSettings(em=True, smoothing="auto", max_iter=2), init_params=warm)
    with pytest.raises(ValueError, match="no EM iterations"):
        engine.fit(c.blocks, sm, c.V, engine.EMSettings(em=False, smoothing=0.5), init_params=warm)
    with pytest.raises(ValueError, match="unlabeled_weight 0"):
        engine.fit(c.blocks, sm, c.V, engine.EMSettings(em=True, smoothing=0.5, unlabeled_weight=0.0), init_params=warm)
    with pytest.raises(ValueError, match="init_params are"):
        engine.fit(
            c.blocks,
            sm,
            c.V,
            engine.EMSettings(em=True, smoothing=0.5),
            init_params=core.PathParameters(warm.log_prior, warm.log_base, warm.log_ratio[:, :-1]),
        )


# =====================================================================
# 3. CLI: pcem train --init-model
# =====================================================================

TAX_CHILDREN = {"ROOT": ["sport", "tech"], "sport": ["football", "tennis"], "tech": ["phones", "chips"]}
WORDS = {
    "football": "goal striker penalty league referee offside",
    "tennis": "serve racket wimbledon volley deuce baseline",
    "phones": "android iphone screen battery camera handset",
    "chips": "silicon transistor wafer nanometer fab lithography",
}
# Day 2 talks about some new things: each leaf gains two words, loses one.
NEW_WORDS = {
    "football": "var halftime",
    "tennis": "tiebreak grasscourt",
    "phones": "foldable charger",
    "chips": "euv foundry",
}
CLI_SETTINGS = [
    "--set",
    "features.min_df=1",
    "--set",
    "features.max_df=1.0",
    "--set",
    "features.vocab_size=0",
    "--set",
    "model.max_iter=30",
    "--set",
    "model.doc_length=0",
    "--log-level",
    "WARNING",
]


def _write_docs(path, day, n_per_leaf=15, n_labeled=2, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for leaf, words in WORDS.items():
            parent = "sport" if leaf in ("football", "tennis") else "tech"
            vocab = words.split()
            if day == 2:
                vocab = vocab[1:] + NEW_WORDS[leaf].split()
            for i in range(n_per_leaf):
                text = " ".join(rng.choice(vocab, size=8))
                labels = [parent, leaf] if i < n_labeled else None
                fh.write(json.dumps({"id": f"d{day}-{leaf}-{i}", "text": text, "labels": labels}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def day1_model(spark, tmp_path_factory):
    from pcem_spark.cli import main

    d = tmp_path_factory.mktemp("warm_cli")
    docs = _write_docs(d / "day1.jsonl", 1)
    model = str(d / "day1_model")
    assert (
        main(
            [
                "train",
                "--docs",
                docs,
                "--model",
                model,
                "--set",
                "model.smoothing=0.5",
                "--set",
                "model.unlabeled_weight=0.7",
                "--set",
                "model.path_weight=1.0",
                *CLI_SETTINGS,
            ]
        )
        == 0
    )
    return d, model


@pytest.fixture(scope="module")
def day1_fixed_model(spark, tmp_path_factory):
    """Day 1's model trained with fixed settings, for the tests that read only its taxonomy and method (the
    default pipeline's choices, what day1_model is for, play no part in them)."""
    from pcem_spark.cli import main

    d = tmp_path_factory.mktemp("warm_cli_fixed")
    docs = _write_docs(d / "day1.jsonl", 1)
    model = str(d / "day1_model")
    fixed = ["model.smoothing=0.5", "model.unlabeled_weight=0.7", "model.path_weight=1.0", "model.family=generative"]
    fixed += ["model.calibration=none", "model.names=off", "features.stop_words=none", "model.max_iter=5"]
    assert main(["train", "--docs", docs, "--model", model, *CLI_SETTINGS, *set_args(*fixed)]) == 0
    return d, model


@pytest.mark.slow
def test_cli_train_from_a_previous_model_records_it(spark, day1_model):
    from pcem_spark.cli import main

    d, prev_path = day1_model
    docs = _write_docs(d / "day2.jsonl", 2, seed=1)
    out = str(d / "day2_warm")
    assert (
        main(
            [
                "train",
                "--docs",
                docs,
                "--model",
                out,
                "--init-model",
                prev_path,
                "--set",
                "model.smoothing=auto",
                "--set",
                "model.unlabeled_weight=auto",
                "--set",
                "model.path_weight=auto",
                *CLI_SETTINGS,
            ]
        )
        == 0
    )
    prev, new = PathModel.load(prev_path), PathModel.load(out)
    summary = new.training_summary
    assert summary["init_model"] == prev_path
    kept = set(prev.vocabulary) & set(new.vocabulary)
    ws = summary["warm_start"]
    assert ws["terms_kept"] == len(kept) > 0
    assert ws["terms_dropped"] == len(set(prev.vocabulary) - kept) > 0
    assert ws["terms_new"] == len(set(new.vocabulary) - kept) > 0
    # settings left at "auto" are the previous model's, not chosen again (no tuning ran): the family the default
    # chose on day 1 (combined, the preferred one, here), and its beta
    assert prev.model_settings.family == "combined"
    assert ws["inherited"] == {
        "smoothing": 0.5,
        "unlabeled_weight": 0.7,
        "path_weight": 1.0,
        "family": "combined",
        "generative_weight": prev.model_settings.generative_weight,
    }
    assert new.model_settings.family == "combined" and "tuning" not in summary
    ms = new.model_settings
    assert (ms.smoothing, ms.unlabeled_weight, ms.path_weight) == (0.5, 0.7, 1.0)
    assert "tuning" not in summary and "smoothing_evidence" not in summary
    # the new model is fitted on day 2's vocabulary and predicts day 2's documents
    assert set(NEW_WORDS["chips"].split()) <= set(new.vocabulary)
    assert summary["n_iter"] >= 1 and summary["n_labeled"] == 8


@pytest.mark.slow
def test_cli_tune_cross_validates_the_weights_of_warm_started_fits(spark, day1_model):
    """--tune: the weights are chosen again by CV (each fit warm-started, terms mapped by name); smoothing inherited."""
    from pcem_spark.cli import main

    d, prev_path = day1_model
    docs = _write_docs(d / "day2_tune.jsonl", 2, seed=4)
    out = str(d / "day2_tuned")
    assert (
        main(
            [
                "train",
                "--docs",
                docs,
                "--model",
                out,
                "--init-model",
                prev_path,
                "--tune",
                "--set",
                "model.smoothing=auto",
                "--set",
                "model.unlabeled_weight=auto",
                "--set",
                "model.path_weight=1.0",
                "--set",
                "tune.folds=2",
                "--set",
                "tune.unlabeled_weights=[0.3, 1.0]",
                *CLI_SETTINGS,
            ]
        )
        == 0
    )
    prev, new = PathModel.load(prev_path), PathModel.load(out)
    summary = new.training_summary
    assert summary["tuning"]["tuned"] and [g["unlabeled_weight"] for g in summary["tuning"]["grid"]] == [0.3, 1.0]
    assert new.model_settings.unlabeled_weight == summary["tuning"]["chosen"]["unlabeled_weight"]
    assert summary["init_model"] == prev_path
    assert summary["warm_start"]["inherited"] == {"smoothing": 0.5}
    assert summary["warm_start"]["terms_kept"] == len(set(prev.vocabulary) & set(new.vocabulary)) > 0


@pytest.mark.slow
def test_cli_batch_without_labels_needs_the_init_model(spark, day1_model, capsys):
    from pcem_spark.cli import main

    d, prev_path = day1_model
    docs = _write_docs(d / "day2_unlabelled.jsonl", 2, n_labeled=0, seed=2)
    tax = d / "tax.json"
    tax.write_text(json.dumps({"root": "ROOT", "children": TAX_CHILDREN}))
    out = str(d / "day2_nolabels")
    assert (
        main(
            [
                "train",
                "--docs",
                docs,
                "--model",
                out,
                "--taxonomy",
                str(tax),
                *CLI_SETTINGS,
                "--set",
                "model.smoothing=0.5",
                "--set",
                "model.unlabeled_weight=0.7",
                "--set",
                "model.path_weight=1.0",
            ]
        )
        == 2
    )
    assert "no labelled document" in capsys.readouterr().err
    assert not os.path.exists(out)
    # with the previous model (its taxonomy, its settings) it trains: family auto, inherited as combined, whose
    # regression has no labelled document here, trains the generative family (an explicit combined exits 2)
    assert PathModel.load(prev_path).model_settings.family == "combined"
    assert main(["train", "--docs", docs, "--model", out, "--init-model", prev_path, *CLI_SETTINGS]) == 0
    new = PathModel.load(out)
    assert new.model_settings.family == "generative"
    assert new.training_summary["warm_start"]["inherited"]["family"] == "generative"
    explicit = ["--set", "model.family=combined"]
    failed = str(d / "day2_nolabels_combined")
    assert main(["train", "--docs", docs, "--model", failed, "--init-model", prev_path, *CLI_SETTINGS, *explicit]) == 2
    assert "needs labelled documents" in capsys.readouterr().err and not os.path.exists(failed)
    assert new.training_summary["n_labeled"] == 0 and new.training_summary["n_unlabeled"] == 60
    assert new.training_summary["init_model"] == prev_path
    assert new.taxonomy.path_keys() == PathModel.load(prev_path).taxonomy.path_keys()


@pytest.mark.slow
def test_cli_refuses_another_taxonomy_a_missing_model_and_another_method(spark, day1_fixed_model, capsys):
    from pcem_spark.cli import main

    d, prev_path = day1_fixed_model
    docs = _write_docs(d / "day2b.jsonl", 2, seed=3)
    other = d / "other_tax.json"
    other.write_text(
        json.dumps({"root": "ROOT", "children": {**TAX_CHILDREN, "sport": ["football", "tennis", "golf"]}})
    )
    out = str(d / "refused")
    assert (
        main(
            [
                "train",
                "--docs",
                docs,
                "--model",
                out,
                "--init-model",
                prev_path,
                "--taxonomy",
                str(other),
                *CLI_SETTINGS,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert prev_path in err and "taxonomy" in err and "golf" in err
    missing = str(d / "no_such_model")
    assert main(["train", "--docs", docs, "--model", out, "--init-model", missing, *CLI_SETTINGS]) == 2
    err = capsys.readouterr().err
    assert missing in err and "init model" in err
    assert (
        main(["train", "--docs", docs, "--model", out, "--init-model", prev_path, "--method", "flat-em", *CLI_SETTINGS])
        == 2
    )
    err = capsys.readouterr().err
    assert "'pcem'" in err and "'flat-em'" in err
    # a directory that is not a complete model (no completion marker)
    os.makedirs(d / "not_a_model", exist_ok=True)
    assert main(["train", "--docs", docs, "--model", out, "--init-model", str(d / "not_a_model"), *CLI_SETTINGS]) == 2
    assert "completion marker" in capsys.readouterr().err
    assert not os.path.exists(out)


# =====================================================================
# 4. PathEM initModel
# =====================================================================


def _features_df(spark, c):
    from pyspark.ml.linalg import SparseVector, VectorUDT
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("id", T.StringType(), False),
            T.StructField("features", VectorUDT(), False),
            T.StructField("labels", T.ArrayType(T.StringType(), False), True),
        ]
    )
    rows = []
    for i in range(c.X.shape[0]):
        nz = np.flatnonzero(c.X[i])
        rows.append(
            (
                f"doc{i}",
                SparseVector(c.V, nz.tolist(), c.X[i, nz].tolist()),
                list(c.order[c.true[i]]) if c.labeled[i] else None,
            )
        )
    return spark.createDataFrame(rows, schema)


@pytest.fixture(scope="module")
def saved_prev(spark, corpus, tmp_path_factory):
    """A previous PathModel on the corpus's taxonomy, over PathEM's term names (#i) partly renamed."""
    from pcem_spark.engine.features import FeatureSettings

    c = corpus
    rng = np.random.default_rng(13)
    _, prev_vocab, counts, mass = _prev_model_counts(c, rng)
    prev_vocab = [t.replace("t", "#", 1) if t.startswith("t") else t for t in prev_vocab]
    s_prev = 0.4
    params = library_params(counts, mass, s_prev)
    settings = ModelSettings(
        method="pcem",
        smoothing=s_prev,
        unlabeled_weight=0.6,
        path_weight=1.0,
        doc_length=0.0,
        posterior_top_k=0,
        max_iter=1,
        tol=0.0,
    )
    model = PathModel(
        c.tax,
        prev_vocab,
        None,
        params,
        FeatureSettings(),
        settings,
        {"path_mass": [float(x) for x in mass], "prior_smoothing": s_prev, "n_iter": 7},
    )
    path = str(tmp_path_factory.mktemp("warm_ml") / "prev")
    model.save(path)
    return path, prev_vocab, counts, mass, s_prev


@pytest.mark.slow
def test_pathem_init_model_starts_from_the_previous_model(spark, corpus, saved_prev, tmp_path):
    from pyspark.ml import Pipeline

    from pcem_spark.ml.estimator import PathEM, PathEMModel

    c = corpus
    path, prev_vocab, counts, mass, _ = saved_prev
    s = 0.7
    df = _features_df(spark, c)
    est = PathEM(
        featuresCol="features",
        taxonomy=c.tax.to_json(),
        method="pcem",
        smoothing=s,
        unlabeledWeight=1.0,
        pathWeight=1.0,
        docLength=0.0,
        posteriorTopK=0,
        maxIter=1,
        tol=0.0,
        initModel=path,
    )
    fitted = est.fit(df).path_model
    new_vocab = [f"#{i}" for i in range(c.V)]
    lp0, lt0 = ref_warm(counts, prev_vocab, new_vocab, s, mass)
    lp, lt, _ = _ref_steps(c.X, c.S_pc, c.labeled, lp0, lt0, s, 1)
    np.testing.assert_allclose(fitted.log_prior, lp, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(fitted.log_theta, lt, rtol=RTOL, atol=ATOL)
    assert fitted.training_summary["init_model"] == path
    assert fitted.training_summary["warm_start"]["terms_kept"] == c.V - 3

    # in a Pipeline, and persisted with the estimator
    stage = Pipeline(stages=[est]).fit(df).stages[0]
    np.testing.assert_allclose(stage.path_model.log_theta, lt, rtol=RTOL, atol=ATOL)
    est_path = str(tmp_path / "estimator")
    est.write().overwrite().save(est_path)
    loaded = PathEM.load(est_path)
    assert loaded.getOrDefault("initModel") == path
    np.testing.assert_allclose(loaded.fit(df).path_model.log_theta, lt, rtol=RTOL, atol=ATOL)

    # a saved PathEMModel is an init model too
    pem_path = str(tmp_path / "pathem_model")
    est.fit(df).write().save(pem_path)
    again = PathEM(
        featuresCol="features",
        taxonomy=c.tax.to_json(),
        method="pcem",
        smoothing=s,
        unlabeledWeight=1.0,
        pathWeight=1.0,
        docLength=0.0,
        posteriorTopK=0,
        maxIter=1,
        tol=0.0,
        initModel=pem_path,
    ).fit(df)
    lp2, lt2, _ = _ref_steps(c.X, c.S_pc, c.labeled, lp, lt, s, 1)
    np.testing.assert_allclose(again.path_model.log_theta, lt2, rtol=1e-7, atol=1e-7)
    assert isinstance(PathEMModel.load(pem_path), PathEMModel)


@pytest.mark.slow
def test_pathem_auto_params_take_the_init_models_values(spark, corpus, saved_prev):
    from pcem_spark.ml.estimator import PathEM

    c = corpus
    path, _, _, _, s_prev = saved_prev
    est = PathEM(
        featuresCol="features", taxonomy=c.tax.to_json(), method="pcem", docLength=0.0, maxIter=2, initModel=path
    )  # smoothing, unlabeledWeight, pathWeight left at "auto"
    pm = est.fit(_features_df(spark, c)).path_model
    ms = pm.model_settings
    assert (ms.smoothing, ms.unlabeled_weight, ms.path_weight) == (s_prev, 0.6, 1.0)
    assert "tuning" not in pm.training_summary
    assert pm.training_summary["warm_start"]["inherited"] == {
        "smoothing": s_prev,
        "unlabeled_weight": 0.6,
        "path_weight": 1.0,
        "family": "generative",
    }
    # the inherited smoothing keeps the previous prior pseudo-count
    assert pm.training_summary["prior_smoothing"] == s_prev
    with pytest.raises(ValueError, match="method 'pcem'.*'flat-em'"):
        PathEM(
            featuresCol="features",
            taxonomy=c.tax.to_json(),
            method="flat-em",
            smoothing=0.5,
            unlabeledWeight=1.0,
            pathWeight=1.0,
            initModel=path,
        ).fit(_features_df(spark, c))
