"""The engine and ``pcem_spark.core`` against an independent dense reference.

The reference below is written directly from Section 4 of Xiao, Liu & Song
(WWW'19), Eqs. 2-8 and Algorithm 1, with dense numpy arrays and plain loops.
It does not call any ``pcem_spark`` math: the library is only the thing under
test. The taxonomy object is used only for the order of the paths (the
library's column convention), and the reference pads shallow leaves itself.

Conventions (those of the library):

* Eq. 2: the path score of a labelled document is the number of non-root
  nodes (dummies included) its padded label path shares with path j (PC
  methods), or 1 iff j is the label path (flat methods).
* Eqs. 3-4 / 6-7 with a Laplace pseudo-count ``s``.
* Eq. 5: unlabelled documents take their posterior as path scores.
* Eq. 8, evaluated with the parameters *before* the k-th M-step:
  ``sum_l sum_j S_ij (log th_j + sum_t x_it log th_t|j)
  + sum_u log sum_j exp(...) + s (sum_j log th_j + sum_jt log th_t|j)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from pcem_spark import core, engine
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.model.fitting import score_matrix

RTOL = 1e-9
ATOL = 1e-9

TREES = {
    # every leaf at depth 2
    "balanced": {"ROOT": ["a", "b"], "a": ["a1", "a2"], "b": ["b1", "b2", "b3"]},
    # y is a shallow leaf, padded with one dummy node
    "padded": {"R": ["x", "y"], "x": ["x1", "x2"]},
    # depth 3: x2 gets one dummy, y two dummies, z1 one dummy
    "deep": {"R": ["x", "y", "z"], "x": ["x1", "x2"], "x1": ["x11", "x12"], "z": ["z1"]},
}


# =====================================================================
# Independent dense reference (paper Section 4)
# =====================================================================


def ref_real_paths(children):
    """Root-excluded real paths (level 1 -> leaf) of a children mapping."""
    kids = {c for ks in children.values() for c in ks}
    roots = [n for n in children if n not in kids]
    assert len(roots) == 1
    out = []

    def walk(node, prefix):
        ks = children.get(node, [])
        if not ks:
            out.append(tuple(prefix))
            return
        for k in ks:
            walk(k, prefix + [k])

    walk(roots[0], [])
    return out


def ref_padded_paths(children, order):
    """Section 3: pad every shallow leaf with dummy children down to depth d.

    ``order`` is the list of real paths in the order the columns must follow.
    A dummy node is the tuple ("<dummy>", leaf, level): unique to its leaf.
    """
    real = ref_real_paths(children)
    assert sorted(real) == sorted(order)
    d = max(len(p) for p in real)
    return [p + tuple(("<dummy>", p[-1], lvl) for lvl in range(len(p) + 1, d + 1)) for p in order]


def ref_score_row(label_j, padded, flat):
    """Eq. 2 for a document labelled with path ``label_j``."""
    m = len(padded)
    row = np.zeros(m)
    for j in range(m):
        if flat:
            row[j] = 1.0 if j == label_j else 0.0
        else:
            # sum over the d nodes of path j of S_i(node) = 1 iff node is a label
            row[j] = sum(1.0 for node in padded[j] if node in set(padded[label_j]))
    return row


def ref_log_params(X, S, s):
    """Eqs. 3-4 (6-7): smoothed counts with path scores S (n, M) as weights."""
    n, v = X.shape
    m = S.shape[1]
    totals = np.zeros(m)
    counts = np.zeros((m, v))
    for i in range(n):
        for j in range(m):
            if S[i, j] != 0.0:
                totals[j] += S[i, j]
                for t in range(v):
                    counts[j, t] += S[i, j] * X[i, t]
    prior = (s + totals) / (m * s + totals.sum())
    theta = np.empty((m, v))
    for j in range(m):
        theta[j] = (s + counts[j]) / (v * s + counts[j].sum())
    return np.log(prior), np.log(theta)


def ref_jll(X, log_prior, log_theta):
    """log(theta_j prod_t theta_t|j^x_it), one row per document."""
    n, v = X.shape
    m = log_prior.shape[0]
    out = np.empty((n, m))
    for i in range(n):
        for j in range(m):
            out[i, j] = log_prior[j] + float(np.dot(X[i], log_theta[j]))
    return out


def ref_logsumexp_rows(a):
    mx = a.max(axis=1)
    return mx + np.log(np.exp(a - mx[:, None]).sum(axis=1))


def ref_posterior(jll):
    """Eq. 5, shifted by the row maximum so long documents do not underflow."""
    lse = ref_logsumexp_rows(jll)
    return np.exp(jll - lse[:, None]), lse


def ref_loglik(X, S_fixed, labeled, log_prior, log_theta, s):
    """Eq. 8 (up to constants) at the given parameters."""
    jll = ref_jll(X, log_prior, log_theta)
    data = 0.0
    for i in range(X.shape[0]):
        if labeled[i]:
            data += float(np.sum(S_fixed[i] * jll[i]))
    if (~labeled).any():
        data += float(ref_logsumexp_rows(jll[~labeled]).sum())
    return data + s * (log_prior.sum() + log_theta.sum())


def ref_e_step(X, S_fixed, labeled, log_prior, log_theta):
    """Algorithm 1 E-step: labelled rows keep S, unlabelled rows get Eq. 5."""
    S = np.where(labeled[:, None], S_fixed, 0.0)
    if (~labeled).any():
        post, _ = ref_posterior(ref_jll(X[~labeled], log_prior, log_theta))
        S[~labeled] = post
    return S


def ref_em(X, S_fixed, labeled, s, max_iter, tol=0.0):
    """Algorithm 1: NB init on the labelled rows, then E/M steps.

    Stops like the engine: relative change of Eq. 8 below ``tol`` (from the
    second iteration on) or ``max_iter``. Returns params, loglik list.
    """
    S0 = np.where(labeled[:, None], S_fixed, 0.0)
    lp, lt = ref_log_params(X, S0, s)
    lls = []
    prev = None
    for _ in range(max_iter):
        ll = ref_loglik(X, S_fixed, labeled, lp, lt, s)
        S = ref_e_step(X, S_fixed, labeled, lp, lt)
        lp, lt = ref_log_params(X, S, s)
        lls.append(ll)
        if prev is not None and abs(ll - prev) / abs(prev) < tol:
            break
        prev = ll
    return lp, lt, lls


# =====================================================================
# Corpus and engine plumbing
# =====================================================================


class Corpus:
    pass


def make_corpus(tree_name, n_docs=48, vocab=25, seed=0):
    children = TREES[tree_name]
    tax = Taxonomy(children)
    order = [tuple(tax.real_path(j)) for j in range(tax.n_paths)]
    padded = ref_padded_paths(children, order)
    m = len(order)
    rng = np.random.default_rng(seed)
    word_dists = rng.dirichlet(np.full(vocab, 0.4), size=m)
    true = rng.integers(m, size=n_docs)
    lengths = rng.integers(3, 30, size=n_docs)
    X = np.vstack([rng.multinomial(L, word_dists[j]) for L, j in zip(lengths, true)]).astype(float)
    labeled = rng.random(n_docs) < 0.35
    labeled[:m] = True  # every path has a labelled example...
    true[:m] = np.arange(m)
    labeled[m] = False  # ...and there is always unlabelled data
    # one all-zero labelled document and one all-zero unlabelled document
    X[m + 1] = 0.0
    labeled[m + 1] = True
    X[m + 2] = 0.0
    labeled[m + 2] = False
    c = Corpus()
    c.tree, c.tax, c.order, c.padded = tree_name, tax, order, padded
    c.X, c.labeled, c.true, c.V, c.M = X, labeled, true, vocab, m
    c.S_pc = np.array([ref_score_row(true[i], padded, False) if labeled[i] else np.zeros(m) for i in range(n_docs)])
    c.S_flat = np.array([ref_score_row(true[i], padded, True) if labeled[i] else np.zeros(m) for i in range(n_docs)])
    return c


def to_blocks(spark, c, block_size=3, n_partitions=3):
    from pyspark.ml.linalg import SparseVector, VectorUDT
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("features", VectorUDT(), False),
            T.StructField("labels", T.ArrayType(T.StringType(), False), True),
        ]
    )
    rows = []
    for i in range(c.X.shape[0]):
        nz = np.flatnonzero(c.X[i])
        vec = SparseVector(c.V, nz.tolist(), c.X[i, nz].tolist())
        rows.append((vec, list(c.order[c.true[i]]) if c.labeled[i] else None))
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, n_partitions), schema)
    blocks = engine.blocks_from_labels(df, c.tax.path_lookup(), c.tax.path_node_matrix(), c.V, block_size)
    return engine.cache_blocks(blocks)


@pytest.fixture(scope="module")
def corpora(spark):
    out = {}
    for k, name in enumerate(TREES):
        c = make_corpus(name, seed=100 + k)
        c.blocks = to_blocks(spark, c)
        out[name] = c
    yield out
    for c in out.values():
        c.blocks.unpersist()


def method_names(kind):
    return ("pcnb", "pcem") if kind == "pc" else ("flat-nb", "flat-em")


def ref_scores(c, kind):
    return c.S_pc if kind == "pc" else c.S_flat


def assert_params(res, lp, lt):
    np.testing.assert_allclose(res.log_prior, lp, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.log_theta, lt, rtol=RTOL, atol=ATOL)


# =====================================================================
# Sanity of the reference and of the test data
# =====================================================================


def test_reference_path_scores_paper_figure():
    """Figure 1 of the paper: x_i labelled {c_1^1, c_2^2} scores 1,2,1,0,0,0."""
    children = {"ROOT": ["c11", "c12"], "c11": ["c21", "c22", "c23"], "c12": ["c24", "c25", "c26"]}
    tax = Taxonomy(children)
    order = [tuple(tax.real_path(j)) for j in range(tax.n_paths)]
    padded = ref_padded_paths(children, order)
    lab = order.index(("c11", "c22"))
    expected = {("c11", "c21"): 1, ("c11", "c22"): 2, ("c11", "c23"): 1}
    want = np.array([expected.get(p, 0) for p in order], dtype=float)
    np.testing.assert_array_equal(ref_score_row(lab, padded, False), want)
    # the library agrees on the node -> path matrix product (Eq. 2)
    node_row = tax.path_node_matrix()[tax.path_index[tax.paths[lab]]][None, :]
    np.testing.assert_array_equal(core.path_scores(sp.csr_matrix(node_row), tax.path_node_matrix())[0], want)


def test_reference_path_scores_padded_tree():
    """A shallow leaf's dummy counts: label y scores d=2 on its own path."""
    c = make_corpus("padded")
    idx = {p: j for j, p in enumerate(c.order)}
    row_y = ref_score_row(idx[("y",)], c.padded, False)
    row_x1 = ref_score_row(idx[("x", "x1")], c.padded, False)
    assert row_y[idx[("y",)]] == 2 and row_y[idx[("x", "x1")]] == 0 and row_y[idx[("x", "x2")]] == 0
    assert row_x1[idx[("x", "x1")]] == 2 and row_x1[idx[("x", "x2")]] == 1 and row_x1[idx[("y",)]] == 0
    # the library pads the same way (d nodes per path, dummy last for y)
    assert c.tax.depth == 2 and all(len(p) == 2 for p in c.tax.paths)
    # deep tree: y padded with two dummies scores 3 on its own path
    d = make_corpus("deep")
    idd = {p: j for j, p in enumerate(d.order)}
    row = ref_score_row(idd[("y",)], d.padded, False)
    assert row[idd[("y",)]] == 3 and row.sum() == 3
    row = ref_score_row(idd[("x", "x2")], d.padded, False)
    assert row[idd[("x", "x2")]] == 3 and row[idd[("x", "x1", "x11")]] == 1


def test_blocks_exercise_partition_and_block_sums(corpora):
    c = corpora["balanced"]
    assert c.blocks.getNumPartitions() == 3
    blks = c.blocks.collect()
    assert len(blks) > 3 and max(b.X.shape[0] for b in blks) == 3
    assert sum(b.X.shape[0] for b in blks) == c.X.shape[0]
    assert sum(int(b.labeled.sum()) for b in blks) == int(c.labeled.sum())


# =====================================================================
# 1 + 4. NB (PCNB and flat NB): Eqs. 3-4
# =====================================================================


@pytest.mark.slow
@pytest.mark.parametrize(
    "tree,smoothing,kind",
    [(t, s, "pc") for t in TREES for s in (1.0, 0.3)] + [(t, 1.0, "flat") for t in TREES] + [("padded", 0.3, "flat")],
)
def test_nb_parameters_match_reference(corpora, tree, smoothing, kind):
    c = corpora[tree]
    nb, _ = method_names(kind)
    res = engine.fit(c.blocks, score_matrix(c.tax, nb), c.V, engine.EMSettings(em=False, smoothing=smoothing))
    S = ref_scores(c, kind)
    lp, lt = ref_log_params(c.X[c.labeled], S[c.labeled], smoothing)
    assert_params(res, lp, lt)
    assert res.n_labeled == int(c.labeled.sum())
    assert res.n_unlabeled == int((~c.labeled).sum())
    assert res.n_iter == 0 and res.loglik_history == []
    np.testing.assert_allclose(np.exp(res.log_prior).sum(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.exp(res.log_theta).sum(axis=1), 1.0, rtol=1e-12)


def test_pc_and_flat_differ(corpora):
    """Path scores matter: PCNB and flat NB are different estimators (so test 1 checks both)."""
    c = corpora["balanced"]
    _, a = ref_log_params(c.X, c.S_pc, 1.0)
    _, b = ref_log_params(c.X, c.S_flat, 1.0)
    assert np.abs(a - b).max() > 1e-3


# =====================================================================
# 2. One EM iteration: NB init, E-step (Eq. 5), M-step (Eqs. 6-7), Eq. 8
# =====================================================================


@pytest.mark.parametrize("tree,kind", [("balanced", "pc"), ("padded", "pc"), ("deep", "pc"), ("padded", "flat")])
def test_one_em_iteration(corpora, tree, kind):
    c = corpora[tree]
    _, em = method_names(kind)
    s = 0.7
    res = engine.fit(
        c.blocks, score_matrix(c.tax, em), c.V, engine.EMSettings(em=True, smoothing=s, max_iter=1, tol=0.0)
    )
    S_fix, lab, X = ref_scores(c, kind), c.labeled, c.X

    # NB initialisation on the labelled documents (Eqs. 3-4)
    lp0, lt0 = ref_log_params(X[lab], S_fix[lab], s)
    # E-step: posterior of the unlabelled documents (Eq. 5), written out in full
    S = S_fix.copy()
    for i in np.flatnonzero(~lab):
        logp = np.array([lp0[j] + sum(X[i, t] * lt0[j, t] for t in range(c.V)) for j in range(c.M)])
        p = np.exp(logp - logp.max())
        S[i] = p / p.sum()
    # M-step over labelled + unlabelled (Eqs. 6-7)
    lp1, lt1 = ref_log_params(X, S, s)
    assert_params(res, lp1, lt1)

    # Eq. 8 at the NB parameters
    ll = 0.0
    for i in range(X.shape[0]):
        logp = np.array([lp0[j] + float(X[i] @ lt0[j]) for j in range(c.M)])
        if lab[i]:
            ll += float(S_fix[i] @ logp)
        else:
            ll += logp.max() + np.log(np.exp(logp - logp.max()).sum())
    ll += s * (lp0.sum() + lt0.sum())
    assert res.n_iter == 1 and len(res.loglik_history) == 1
    np.testing.assert_allclose(res.loglik_history[0], ll, rtol=RTOL, atol=ATOL)
    # the EM step moved the parameters away from NB (unlabelled data counted)
    assert np.abs(lt1 - lt0).max() > 1e-4


# =====================================================================
# 3. PCEM / flat EM over many iterations, and to convergence
# =====================================================================


@pytest.mark.slow
@pytest.mark.parametrize("tree,kind", [("padded", "pc"), ("deep", "pc"), ("deep", "flat")])
def test_em_fixed_iterations(corpora, tree, kind):
    """tol=0: exactly n_iter EM iterations (the balanced tree runs to convergence below)."""
    c = corpora[tree]
    _, em = method_names(kind)
    n_iter = 8
    res = engine.fit(
        c.blocks, score_matrix(c.tax, em), c.V, engine.EMSettings(em=True, smoothing=1.0, max_iter=n_iter, tol=0.0)
    )
    lp, lt, lls = ref_em(c.X, ref_scores(c, kind), c.labeled, 1.0, n_iter)
    assert res.n_iter == n_iter and not res.converged
    assert_params(res, lp, lt)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL, atol=ATOL)
    # EM monotonicity of the MAP objective (Eq. 8)
    diffs = np.diff(lls)
    assert np.all(diffs >= -1e-9 * np.abs(lls[:-1])), diffs
    assert lls[-1] > lls[0]


@pytest.mark.parametrize("tree,kind", [("balanced", "pc")])
def test_em_converged(corpora, tree, kind):
    c = corpora[tree]
    _, em = method_names(kind)
    tol = 1e-9
    res = engine.fit(
        c.blocks, score_matrix(c.tax, em), c.V, engine.EMSettings(em=True, smoothing=1.0, max_iter=200, tol=tol)
    )
    lp, lt, lls = ref_em(c.X, ref_scores(c, kind), c.labeled, 1.0, 200, tol=tol)
    assert res.converged
    assert res.n_iter == len(lls) < 200
    assert_params(res, lp, lt)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL, atol=ATOL)
    assert np.all(np.diff(lls) >= -1e-9 * np.abs(lls[:-1]))
    # converged: one more reference EM step barely moves the parameters
    S = ref_e_step(c.X, ref_scores(c, kind), c.labeled, lp, lt)
    lp2, lt2 = ref_log_params(c.X, S, 1.0)
    assert np.abs(lt2 - lt).max() < 1e-3 and np.abs(lp2 - lp).max() < 1e-3


def test_em_independent_of_blocking(spark, corpora):
    """One partition with one-document blocks gives the same fit as 3 partitions of 3-document blocks."""
    c = corpora["deep"]
    other = to_blocks(spark, c, block_size=1, n_partitions=1)
    try:
        a = engine.fit(c.blocks, score_matrix(c.tax, "pcem"), c.V, engine.EMSettings(max_iter=2, tol=0.0))
        b = engine.fit(other, score_matrix(c.tax, "pcem"), c.V, engine.EMSettings(max_iter=2, tol=0.0))
    finally:
        other.unpersist()
    np.testing.assert_allclose(a.log_theta, b.log_theta, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(a.loglik_history, b.loglik_history, rtol=RTOL, atol=ATOL)


# =====================================================================
# 5. Pure functions of pathnb on one block
# =====================================================================


@pytest.fixture(scope="module")
def block():
    c = make_corpus("deep", n_docs=20, vocab=18, seed=7)
    a = c.tax.path_node_matrix()
    node_scores = np.zeros((c.X.shape[0], c.tax.n_nodes))
    for i in np.flatnonzero(c.labeled):
        node_scores[i] = a[c.true[i]]
    c.node_scores = node_scores
    rng = np.random.default_rng(3)
    lp = np.log(rng.dirichlet(np.ones(c.M)))
    lt = np.log(rng.dirichlet(np.ones(c.V), size=c.M))
    c.params = (lp, lt)
    return c


@pytest.mark.parametrize("kind", ["pc", "flat"])
def test_path_scores(block, kind):
    c = block
    sm = score_matrix(c.tax, "pcnb" if kind == "pc" else "flat-nb")
    got = core.path_scores(sp.csr_matrix(c.node_scores), sm)
    np.testing.assert_array_equal(got, ref_scores(c, kind))
    np.testing.assert_array_equal(core.path_scores(c.node_scores, sm), ref_scores(c, kind))


@pytest.mark.parametrize("smoothing", [1.0, 0.3, 2.5])
def test_log_parameters(block, smoothing):
    c = block
    S = ref_scores(c, "pc").copy()
    S[~c.labeled] = np.random.default_rng(1).dirichlet(np.ones(c.M), size=int((~c.labeled).sum()))
    word_counts = S.T @ c.X
    totals = S.sum(axis=0)
    lp, lt = core.log_parameters(word_counts, totals, smoothing)
    rlp, rlt = ref_log_params(c.X, S, smoothing)
    np.testing.assert_allclose(lp, rlp, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(lt, rlt, rtol=RTOL, atol=ATOL)


def test_joint_log_likelihood_and_posterior(block):
    c = block
    lp, lt = c.params
    jll = core.joint_log_likelihood(sp.csr_matrix(c.X), lp, lt)
    np.testing.assert_allclose(jll, ref_jll(c.X, lp, lt), rtol=RTOL, atol=ATOL)
    post, log_ev = core.posterior(jll)
    rpost, rlse = ref_posterior(ref_jll(c.X, lp, lt))
    np.testing.assert_allclose(post, rpost, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(log_ev, rlse, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(post.sum(axis=1), 1.0, rtol=1e-12)


def test_zero_count_document_gets_prior(block):
    c = block
    lp, lt = c.params
    X = np.zeros((2, c.V))
    X[1, 0] = 1.0
    jll = core.joint_log_likelihood(sp.csr_matrix(X), lp, lt)
    post, log_ev = core.posterior(jll)
    np.testing.assert_allclose(post[0], np.exp(lp), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(log_ev[0], 0.0, atol=ATOL)  # the prior sums to 1
    best, prob = core.predict_paths(sp.csr_matrix(X), lp, lt)
    assert best[0] == int(np.argmax(lp))
    np.testing.assert_allclose(prob[0], np.exp(lp).max(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind", ["pc", "flat"])
@pytest.mark.parametrize("use_unlabeled", [True, False])
def test_e_step(block, kind, use_unlabeled):
    c = block
    lp, lt = c.params
    S_fix = core.path_scores(sp.csr_matrix(c.node_scores), score_matrix(c.tax, "pcnb" if kind == "pc" else "flat-nb"))
    st = core.e_step(sp.csr_matrix(c.X), S_fix, c.labeled, lp, lt, core.EStepOptions(use_unlabeled=use_unlabeled))
    S_ref = ref_scores(c, kind)
    if use_unlabeled:
        R = ref_e_step(c.X, S_ref, c.labeled, lp, lt)
        ll = ref_loglik(c.X, S_ref, c.labeled, lp, lt, 0.0)  # data term only
    else:
        R = np.where(c.labeled[:, None], S_ref, 0.0)
        jll = ref_jll(c.X, lp, lt)
        ll = float(np.sum(S_ref[c.labeled] * jll[c.labeled]))
    wc = np.zeros((c.M, c.V))
    for i in range(c.X.shape[0]):
        for j in range(c.M):
            wc[j] += R[i, j] * c.X[i]
    np.testing.assert_allclose(st.word_counts, wc, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(st.path_totals, R.sum(axis=0), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(st.loglik, ll, rtol=RTOL, atol=ATOL)
    # the prior term of Eq. 8
    np.testing.assert_allclose(core.log_prior_density(lp, lt, 0.3), 0.3 * (lp.sum() + lt.sum()), rtol=RTOL)


def test_e_step_nb_initialisation_pass(block):
    """Without parameters only labelled rows count and the log-likelihood is 0."""
    c = block
    st = core.e_step(sp.csr_matrix(c.X), c.S_pc, c.labeled, None, None, core.EStepOptions(use_unlabeled=False))
    R = np.where(c.labeled[:, None], c.S_pc, 0.0)
    np.testing.assert_allclose(st.word_counts, R.T @ c.X, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(st.path_totals, R.sum(axis=0), rtol=RTOL, atol=ATOL)
    assert st.loglik == 0.0


def test_predict_paths(block):
    c = block
    lp, lt = c.params
    best, prob = core.predict_paths(sp.csr_matrix(c.X), lp, lt)
    rpost, _ = ref_posterior(ref_jll(c.X, lp, lt))
    np.testing.assert_array_equal(best, np.argmax(rpost, axis=1))
    np.testing.assert_allclose(prob, rpost.max(axis=1), rtol=RTOL, atol=ATOL)


def test_long_documents_are_numerically_stable(block):
    """Counts ~1e4: naive exp(jll) underflows to 0, the log-space posterior does not."""
    c = block
    rng = np.random.default_rng(11)
    base = rng.dirichlet(np.full(c.V, 2.0))
    # nearly identical word distributions so that the posterior is not one-hot
    lt = np.log(base)[None, :] + 1e-4 * rng.standard_normal((c.M, c.V))
    lt -= np.log(np.exp(lt).sum(axis=1, keepdims=True))
    lp = np.log(rng.dirichlet(np.ones(c.M)))
    X = np.vstack([rng.multinomial(10000 + 1000 * k, base) for k in range(6)]).astype(float)
    Xs = sp.csr_matrix(X)

    jll = core.joint_log_likelihood(Xs, lp, lt)
    with np.errstate(under="ignore"):
        assert np.all(np.exp(jll) == 0.0)  # the naive Eq. 5 would be 0/0
    post, log_ev = core.posterior(jll)
    rpost, rlse = ref_posterior(ref_jll(X, lp, lt))
    assert np.all(np.isfinite(post)) and np.all(np.isfinite(log_ev))
    # |jll| ~ 3e4, so float64 rounding of log-evidence is ~1e-12 here
    np.testing.assert_allclose(post.sum(axis=1), 1.0, rtol=1e-10)
    np.testing.assert_allclose(post, rpost, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(log_ev, rlse, rtol=RTOL)
    assert ((post > 1e-3) & (post < 0.999)).any()  # a genuinely mixed posterior

    labeled = np.array([True, False, False, True, False, False])
    S_fix = np.zeros((6, c.M))
    S_fix[0, 0] = 2.0
    S_fix[0, 1] = 1.0
    S_fix[3, 2] = 1.0
    st = core.e_step(Xs, S_fix, labeled, lp, lt)
    R = ref_e_step(X, S_fix, labeled, lp, lt)
    np.testing.assert_allclose(st.path_totals, R.sum(axis=0), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(st.word_counts, R.T @ X, rtol=1e-7, atol=1e-5)
    np.testing.assert_allclose(st.loglik, ref_loglik(X, S_fix, labeled, lp, lt, 0.0), rtol=RTOL)

    best, prob = core.predict_paths(Xs, lp, lt)
    np.testing.assert_array_equal(best, rpost.argmax(axis=1))
    np.testing.assert_allclose(prob, rpost.max(axis=1), rtol=1e-7, atol=1e-9)
