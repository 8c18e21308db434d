"""Unlabelled weight (EM-lambda), path weight and evidence-chosen smoothing against dense references.

The references are written from the definitions, in plain numpy / math with
loops, reusing only the paper reference of ``test_reference`` (Eqs. 2-8):

* EM-lambda (Nigam et al. 2000, Sec. 5.2): the unlabelled documents'
  posteriors enter the M-step multiplied by lambda, and their log-evidence
  term of Eq. 8 too;
* path weight g: a labelled document's path scores are
  ``(1 - g) * flat + g * Eq. 2``;
* Dirichlet-multinomial evidence: ``log G(sum a) - log G(N + sum a) +
  sum_w [log G(c_w + a) - log G(a)]`` over *every* word (zeros included).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from test_reference import (  # noqa: F401 (fixture)
    ATOL,
    RTOL,
    TREES,
    assert_params,
    corpora,
    ref_jll,
    ref_log_params,
    ref_logsumexp_rows,
    ref_posterior,
)

from pcem_spark import core, engine
from pcem_spark.core.methods import method_spec
from pcem_spark.model.fitting import score_matrix
from pcem_spark.model.settings import ModelSettings


def ref_em_lambda(X, S_fixed, labeled, s, lam, max_iter, prior_s=None):
    """Algorithm 1 with the unlabelled posteriors weighted by ``lam`` (dense, from the definitions)."""
    prior_s = s if prior_s is None else prior_s

    def params(S):
        lp, _ = ref_log_params(X, S, prior_s)
        _, lt = ref_log_params(X, S, s)
        return lp, lt

    lp, lt = params(np.where(labeled[:, None], S_fixed, 0.0))
    lls = []
    for _ in range(max_iter):
        jll = ref_jll(X, lp, lt)
        ll = float(np.sum(S_fixed[labeled] * jll[labeled]))
        ll += lam * float(ref_logsumexp_rows(jll[~labeled]).sum())
        ll += prior_s * lp.sum() + s * lt.sum()
        S = np.where(labeled[:, None], S_fixed, 0.0)
        post, _ = ref_posterior(jll[~labeled])
        S[~labeled] = lam * post
        lp, lt = params(S)
        lls.append(ll)
    return lp, lt, lls


def ref_dirmult_evidence(counts, a):
    """Sum over rows of log DirMult(c | a, ..., a), without the multinomial coefficient, every word."""
    total = 0.0
    for row in np.atleast_2d(counts):
        n = float(row.sum())
        if n == 0:
            continue
        v = len(row)
        total += math.lgamma(v * a) - math.lgamma(n + v * a)
        for c in row:
            total += math.lgamma(c + a) - math.lgamma(a)
    return total


# ----------------------------------------------------------- path weight


@pytest.mark.parametrize("tree", list(TREES))
def test_path_weight_interpolates_eq2_and_flat(tree):
    from pcem_spark.core.taxonomy import Taxonomy

    tax = Taxonomy(TREES[tree])
    pc, flat = tax.path_node_matrix(), tax.leaf_node_matrix()
    np.testing.assert_array_equal(method_spec(tax, "pcem", path_weight=1.0).score_matrix, pc)
    np.testing.assert_array_equal(
        method_spec(tax, "pcem", path_weight=0.0).score_matrix, method_spec(tax, "flat-em").score_matrix
    )
    g = 0.3
    np.testing.assert_allclose(method_spec(tax, "pcnb", path_weight=g).score_matrix, 0.7 * flat + 0.3 * pc)
    with pytest.raises(ValueError, match="path_weight"):
        core.weighted_score_matrix(pc, flat, 1.5)


@pytest.mark.slow
def test_path_weight_one_is_todays_pcem_and_zero_is_flat_em(corpora):
    c = corpora["padded"]
    today = engine.fit(
        c.blocks, c.tax.path_node_matrix(), c.V, engine.EMSettings(em=True, smoothing=1.0, max_iter=4, tol=0.0)
    )
    g1 = engine.fit(
        c.blocks,
        score_matrix(c.tax, "pcem", path_weight=1.0),
        c.V,
        engine.EMSettings(em=True, smoothing=1.0, max_iter=4, tol=0.0),
    )
    assert_params(g1, today.log_prior, today.log_theta)
    flat = engine.fit(
        c.blocks, score_matrix(c.tax, "flat-em"), c.V, engine.EMSettings(em=True, smoothing=1.0, max_iter=4, tol=0.0)
    )
    g0 = engine.fit(
        c.blocks,
        score_matrix(c.tax, "pcem", path_weight=0.0),
        c.V,
        engine.EMSettings(em=True, smoothing=1.0, max_iter=4, tol=0.0),
    )
    assert_params(g0, flat.log_prior, flat.log_theta)
    # and something in between is neither
    mid = engine.fit(
        c.blocks,
        score_matrix(c.tax, "pcem", path_weight=0.5),
        c.V,
        engine.EMSettings(em=True, smoothing=1.0, max_iter=4, tol=0.0),
    )
    assert np.abs(mid.log_theta - g1.log_theta).max() > 1e-3
    assert np.abs(mid.log_theta - g0.log_theta).max() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("tree", ["balanced", "deep"])
def test_fractional_path_weight_matches_dense_reference(corpora, tree):
    c = corpora[tree]
    g = 0.4
    S = (1 - g) * c.S_flat + g * c.S_pc
    lp, lt, lls = ref_em_lambda(c.X, S, c.labeled, 0.5, 1.0, 3)
    res = engine.fit(
        c.blocks,
        score_matrix(c.tax, "pcem", path_weight=g),
        c.V,
        engine.EMSettings(em=True, smoothing=0.5, max_iter=3, tol=0.0),
    )
    assert_params(res, lp, lt)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL)


# ------------------------------------------------------- unlabelled weight


@pytest.mark.slow
@pytest.mark.parametrize("lam", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("tree", ["balanced", "padded"])
def test_unlabeled_weight_matches_dense_reference(corpora, tree, lam):
    c = corpora[tree]
    lp, lt, lls = ref_em_lambda(c.X, c.S_pc, c.labeled, 1.0, lam, 3)
    res = engine.fit(
        c.blocks,
        c.tax.path_node_matrix(),
        c.V,
        engine.EMSettings(em=True, smoothing=1.0, max_iter=3, tol=0.0, unlabeled_weight=lam),
    )
    assert_params(res, lp, lt)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL)
    # EM-lambda is still EM on its own objective: the log-likelihood never decreases
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(res.loglik_history, res.loglik_history[1:]))


def test_unlabeled_weight_zero_is_pcnb_exactly(corpora):
    c = corpora["deep"]
    nb = engine.fit(c.blocks, c.tax.path_node_matrix(), c.V, engine.EMSettings(em=False, smoothing=0.7))
    lp, lt = ref_log_params(c.X, np.where(c.labeled[:, None], c.S_pc, 0.0), 0.7)
    assert_params(nb, lp, lt)
    em0 = engine.fit(
        c.blocks, c.tax.path_node_matrix(), c.V, engine.EMSettings(em=True, smoothing=0.7, unlabeled_weight=0.0)
    )
    np.testing.assert_array_equal(em0.log_theta, nb.log_theta)
    np.testing.assert_array_equal(em0.log_prior, nb.log_prior)
    assert em0.n_iter == 0


def test_e_step_unlabeled_weight_scales_only_unlabelled_rows(corpora):
    c = corpora["balanced"]
    lp, lt = ref_log_params(c.X, np.where(c.labeled[:, None], c.S_pc, 0.0), 1.0)
    X = sp.csr_matrix(c.X)
    full = core.e_step(X, c.S_pc, c.labeled, lp, lt)
    half = core.e_step(X, c.S_pc, c.labeled, lp, lt, core.EStepOptions(unlabeled_weight=0.5))
    lab = core.e_step(X, c.S_pc, c.labeled, lp, lt, core.EStepOptions(use_unlabeled=False))
    np.testing.assert_allclose(half.word_counts, 0.5 * (full.word_counts + lab.word_counts), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(half.path_totals, 0.5 * (full.path_totals + lab.path_totals), rtol=RTOL)


def test_e_step_integer_counts_give_real_sums(corpora):
    """An integer count matrix must not truncate the fractional responsibilities to 0."""
    c = corpora["balanced"]
    lp, lt = ref_log_params(c.X, np.where(c.labeled[:, None], c.S_pc, 0.0), 1.0)
    as_float = core.e_step(sp.csr_matrix(c.X), c.S_pc, c.labeled, lp, lt)
    as_int = core.e_step(sp.csr_matrix(c.X.astype(np.int64)), c.S_pc, c.labeled, lp, lt)
    np.testing.assert_allclose(as_int.word_counts, as_float.word_counts, rtol=RTOL, atol=ATOL)
    assert as_int.word_counts.dtype == np.float64


# ----------------------------------------------------------- smoothing


def test_dirichlet_evidence_matches_definition():
    rng = np.random.default_rng(3)
    counts = rng.poisson(0.7, size=(4, 30)).astype(float)
    counts[2] = 0.0  # an empty row contributes nothing
    counts[1, :5] += 0.5  # fractional counts (Eq. 2 path scores)
    alphas = [0.01, 0.1, 1.0, 3.0]
    ev = core.dirichlet_log_evidence(counts, alphas)
    np.testing.assert_allclose(ev, [ref_dirmult_evidence(counts, a) for a in alphas], rtol=1e-10)
    np.testing.assert_allclose(core.dirichlet_log_evidence(sp.csr_matrix(counts), alphas), ev, rtol=1e-12)


def test_choose_smoothing_is_the_evidence_argmax_and_deterministic():
    rng = np.random.default_rng(0)
    # peaked word distributions (sparse text-like classes) favour a small pseudo-count ...
    peaked = np.vstack([rng.multinomial(400, rng.dirichlet(np.full(500, 0.02))) for _ in range(5)])
    # ... nearly uniform ones a large one
    flat = np.vstack([rng.multinomial(400, rng.dirichlet(np.full(500, 50.0))) for _ in range(5)])
    grid = core.DEFAULT_SMOOTHING_GRID
    a_peaked, ev = core.choose_smoothing(peaked, grid)
    assert a_peaked == grid[int(np.argmax(ev))]
    a_flat, _ = core.choose_smoothing(flat, grid)
    assert a_peaked < 0.1 and a_flat == max(grid)
    assert core.choose_smoothing(peaked, grid)[0] == a_peaked
    # ties go to the larger pseudo-count; no counts at all: the largest
    assert core.choose_smoothing(np.zeros((3, 10)), grid)[0] == max(grid)


def test_auto_smoothing_in_the_engine(corpora):
    c = corpora["balanced"]
    res = engine.fit(
        c.blocks, c.tax.path_node_matrix(), c.V, engine.EMSettings(em=True, smoothing="auto", max_iter=2, tol=0.0)
    )
    S0 = np.where(c.labeled[:, None], c.S_pc, 0.0)
    counts = S0.T @ c.X
    evid = [ref_dirmult_evidence(counts, a) for a in sorted(core.DEFAULT_SMOOTHING_GRID)]
    best = sorted(core.DEFAULT_SMOOTHING_GRID)[int(np.argmax(evid))]
    assert res.smoothing == best
    assert set(res.smoothing_evidence) == {f"{a:g}" for a in core.DEFAULT_SMOOTHING_GRID}
    # the chosen word pseudo-count with Laplace's 1 on the path prior, through the EM iterations
    lp, lt, lls = ref_em_lambda(c.X, c.S_pc, c.labeled, best, 1.0, 2, prior_s=1.0)
    assert_params(res, lp, lt)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL)


def test_model_settings_accept_numbers_or_auto():
    ms = ModelSettings()
    assert (ms.smoothing, ms.unlabeled_weight, ms.path_weight) == ("auto", "auto", "auto")
    # the family and the combined family's beta are cross-validated too, for one-component-per-path methods
    regression = ["family", "generative_weight"]  # the vectors' scale too, when the documents have vectors
    assert ms.auto_params() == ["unlabeled_weight", "path_weight", *regression]
    assert ModelSettings(method="flat-em").auto_params() == ["unlabeled_weight", *regression]
    assert ModelSettings(method="pcnb").auto_params() == ["path_weight", *regression]
    assert ModelSettings(method="emmc").auto_params() == ["unlabeled_weight"]
    assert ModelSettings(family="generative").auto_params() == ["unlabeled_weight", "path_weight"]
    r = ms.resolved(path_weight=0.5)
    assert (r.unlabeled_weight, r.path_weight, r.smoothing) == (1.0, 0.5, "auto")
    for bad in (
        dict(smoothing=0.0),
        dict(smoothing="sometimes"),
        dict(unlabeled_weight=1.5),
        dict(path_weight=-0.1),
        dict(path_weight=True),
    ):
        with pytest.raises(ValueError):
            ModelSettings(**bad).validate()


# ------------------------------------------------------- document length


def ref_length_normalize(X, L):
    out = np.array(X, dtype=float)
    for i in range(out.shape[0]):
        n = out[i].sum()
        if n > L:
            out[i] *= L / n
    return out


def test_length_normalize_shrinks_only_long_documents():
    X = np.array([[3, 0, 1], [10, 10, 0], [0, 0, 0], [1, 1, 1]], dtype=float)
    got = core.length_normalize(sp.csr_matrix(X), 5.0).toarray()
    np.testing.assert_allclose(got, ref_length_normalize(X, 5.0))
    np.testing.assert_allclose(got.sum(axis=1), [4, 5, 0, 3])
    np.testing.assert_array_equal(core.length_normalize(sp.csr_matrix(X), 0.0).toarray(), X)


def test_doc_length_em_matches_dense_reference(corpora):
    c = corpora["deep"]
    L = 8.0
    Xn = ref_length_normalize(c.X, L)
    lp, lt, lls = ref_em_lambda(Xn, c.S_pc, c.labeled, 0.5, 0.3, 3)
    res = engine.fit(
        c.blocks,
        c.tax.path_node_matrix(),
        c.V,
        engine.EMSettings(em=True, smoothing=0.5, max_iter=3, tol=0.0, unlabeled_weight=0.3, doc_length=L),
    )
    assert_params(res, lp, lt)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL)
    # prediction scores the same normalised counts
    best, _ = core.predict_paths(sp.csr_matrix(c.X), lp, lt, doc_length=L)
    np.testing.assert_array_equal(best, np.argmax(ref_jll(Xn, lp, lt), axis=1))


def test_auto_smoothing_with_doc_length_uses_raw_token_scale(corpora):
    """The evidence sees the labelled counts rescaled to their raw token total."""
    c = corpora["balanced"]
    L = 6.0
    res = engine.fit(
        c.blocks, c.tax.path_node_matrix(), c.V, engine.EMSettings(em=False, smoothing="auto", doc_length=L)
    )
    S0 = np.where(c.labeled[:, None], c.S_pc, 0.0)
    Xn = ref_length_normalize(c.X, L)
    counts = S0.T @ Xn
    scale = c.X[c.labeled].sum() / Xn[c.labeled].sum()
    grid = sorted(core.DEFAULT_SMOOTHING_GRID)
    evid = [ref_dirmult_evidence(counts * scale, a) for a in grid]
    assert res.smoothing == grid[int(np.argmax(evid))]
