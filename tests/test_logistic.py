"""pcem_spark.core.logistic against dense numpy computations written out here, without Spark."""

import math

import numpy as np
import pytest
import scipy.sparse as sp

from pcem_spark.core import logistic
from pcem_spark.core.logistic import (
    fit_softmax,
    log_softmax_rows,
    observed_support,
    one_hot_targets,
    path_logits,
    softmax_objective,
    softmax_terms,
    tfidf_features,
)
from pcem_spark.core.similarity import idf_weights


def random_counts(n, V, rng, density=0.3):
    X = (rng.random((n, V)) < density) * rng.integers(1, 5, size=(n, V))
    X[0] = 0  # an empty document
    X[1, X[1] > 0] += 1  # a document whose rarest term is seen twice
    return X.astype(float)


def reference_tfidf(X):
    """Term by term: df, smoothed idf, (1 + log(tf / the row's smallest tf)) * idf, then each row over its norm."""
    n, V = X.shape
    df = [sum(1 for i in range(n) if X[i, j] > 0) for j in range(V)]
    idf = [math.log((1 + n) / (1 + df[j])) + 1 for j in range(V)]
    out = np.zeros((n, V))
    for i in range(n):
        smallest = min((X[i, j] for j in range(V) if X[i, j] > 0), default=1.0)
        for j in range(V):
            if X[i, j] > 0:
                out[i, j] = (1 + math.log(X[i, j] / smallest)) * idf[j]
        norm = math.sqrt(sum(v * v for v in out[i]))
        if norm > 0:
            out[i] /= norm
    return out, np.array(idf)


def reference_objective(F, Y, w, W, b, l2):
    """Sum over documents and paths of -w_i Y_im log softmax(F_i W^T + b)_m, over the weighted mass, + L2."""
    n, M = Y.shape
    loss, mass = 0.0, 0.0
    for i in range(n):
        scores = [float(F[i] @ W[m] + b[m]) for m in range(M)]
        top = max(scores)
        log_z = top + math.log(sum(math.exp(s - top) for s in scores))
        for m in range(M):
            if Y[i, m] > 0:
                loss -= w[i] * Y[i, m] * (scores[m] - log_z)
            mass += w[i] * Y[i, m]
    return loss / mass + 0.5 * l2 * float(np.sum(W * W))


@pytest.fixture
def problem():
    rng = np.random.default_rng(3)
    n, V, M = 12, 7, 4
    X = random_counts(n, V, rng)
    labels = rng.integers(0, M, size=n)
    Y = np.zeros((n, M))
    Y[np.arange(6), labels[:6]] = 1.0  # labelled
    Y[6:] = rng.dirichlet(np.ones(M), size=n - 6)  # soft targets (posteriors)
    Y[9] *= 0.5  # a target of mass 1/2
    Y[10] = 0.0  # a document that does not count
    w = np.r_[np.ones(6), np.full(n - 6, 0.3)]
    W = rng.normal(scale=0.7, size=(M, V))
    b = rng.normal(scale=0.3, size=M)
    return X, Y, w, W, b


def test_tfidf_features_equal_the_term_by_term_computation(problem):
    X = problem[0]
    expected, idf = reference_tfidf(X)
    df = (X > 0).sum(axis=0)
    np.testing.assert_allclose(idf_weights(df, X.shape[0]), idf, rtol=1e-12)
    got = tfidf_features(sp.csr_matrix(X), idf)
    np.testing.assert_allclose(got.toarray(), expected, rtol=1e-12, atol=1e-15)
    assert got[0].nnz == 0  # the empty document stays empty
    # A row scaled down (as length normalisation scales long documents) keeps its features.
    scaled = sp.csr_matrix(X * np.linspace(0.05, 1.0, X.shape[0])[:, None])
    np.testing.assert_allclose(tfidf_features(scaled, idf).toarray(), expected, rtol=1e-12, atol=1e-15)


def test_objective_equals_the_dense_sum_and_blocks_add_up(problem):
    X, Y, w, W, b = problem
    F, _ = reference_tfidf(X)
    l2 = 0.05
    terms = softmax_terms(sp.csr_matrix(F), sp.csr_matrix(Y), w, W, b)
    value, _, _ = softmax_objective(terms, W, l2)
    assert value == pytest.approx(reference_objective(F, Y, w, W, b, l2), rel=1e-12)
    # Two blocks' terms summed = the whole: what a Spark pass adds up.
    a = softmax_terms(sp.csr_matrix(F[:5]), Y[:5], w[:5], W, b)
    c = softmax_terms(sp.csr_matrix(F[5:]), Y[5:], w[5:], W, b)
    assert a.loss + c.loss == pytest.approx(terms.loss, rel=1e-12)
    np.testing.assert_allclose(a.grad_W + c.grad_W, terms.grad_W, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.grad_b + c.grad_b, terms.grad_b, rtol=1e-12, atol=1e-14)
    assert a.weight + c.weight == pytest.approx(terms.weight)


def test_gradient_equals_finite_differences_of_the_dense_objective(problem):
    X, Y, w, W, b = problem
    F, _ = reference_tfidf(X)
    l2 = 0.05
    _, gW, gb = softmax_objective(softmax_terms(F, Y, w, W, b), W, l2)
    h = 1e-6
    for m, j in [(0, 0), (1, 3), (3, 6), (2, 2)]:
        Wp, Wm = W.copy(), W.copy()
        Wp[m, j] += h
        Wm[m, j] -= h
        numeric = (reference_objective(F, Y, w, Wp, b, l2) - reference_objective(F, Y, w, Wm, b, l2)) / (2 * h)
        assert gW[m, j] == pytest.approx(numeric, rel=1e-6, abs=1e-9)
    for m in range(len(b)):
        bp, bm = b.copy(), b.copy()
        bp[m] += h
        bm[m] -= h
        numeric = (reference_objective(F, Y, w, W, bp, l2) - reference_objective(F, Y, w, W, bm, l2)) / (2 * h)
        assert gb[m] == pytest.approx(numeric, rel=1e-6, abs=1e-9)


def test_fit_reaches_the_optimum_whatever_the_start_and_separates_what_is_separable():
    rng = np.random.default_rng(5)
    M, V, per = 3, 9, 8
    X = np.zeros((M * per, V))
    for m in range(M):  # each path owns three terms, plus noise terms shared by all
        X[m * per : (m + 1) * per, 3 * m : 3 * m + 3] = rng.integers(1, 4, size=(per, 3))
    X += (rng.random(X.shape) < 0.15) * 1.0
    paths = np.repeat(np.arange(M), per)
    F = tfidf_features(sp.csr_matrix(X), idf_weights((X > 0).sum(axis=0), len(X)))
    Y = one_hot_targets(paths, M)
    w = np.ones(len(X))

    def summed(W, b):
        return softmax_terms(F, Y, w, W, b)

    l2 = 1e-2
    fit = fit_softmax(summed, M, V, l2, max_iter=500, tol=1e-9)
    again = fit_softmax(summed, M, V, l2, max_iter=500, tol=1e-9, start=(rng.normal(size=(M, V)), np.ones(M)))
    assert fit.converged and again.converged
    for reached in (fit, again):
        _, gW, gb = softmax_objective(summed(reached.W, reached.b), reached.W, l2)
        assert np.abs(gW).max() < 1e-5 and np.abs(gb).max() < 1e-5  # first-order optimality
    # Strictly convex in W: one optimum (the biases only up to a common shift, which no probability sees).
    np.testing.assert_allclose(again.W, fit.W, atol=1e-3)
    assert again.objective == pytest.approx(fit.objective, rel=1e-7)
    predicted = path_logits(F, fit.W, fit.b).argmax(axis=1)
    assert (predicted == paths).all()
    posterior = np.exp(log_softmax_rows(path_logits(F, fit.W, fit.b)))
    np.testing.assert_allclose(posterior.sum(axis=1), 1.0)


def test_a_soft_target_is_the_mixture_of_its_one_hot_targets(problem):
    """Y_i = 0.3 e_a + 0.7 e_b gives the terms of two copies of the document, weighted 0.3 and 0.7."""
    X, _, _, W, b = problem
    F, _ = reference_tfidf(X)
    soft = np.zeros((1, W.shape[0]))
    soft[0, 1], soft[0, 2] = 0.3, 0.7
    mixed = softmax_terms(F[3:4], soft, np.ones(1), W, b)
    copies = softmax_terms(np.vstack([F[3:4], F[3:4]]), one_hot_targets([1, 2], W.shape[0]), np.r_[0.3, 0.7], W, b)
    assert mixed.loss == pytest.approx(copies.loss, rel=1e-12)
    np.testing.assert_allclose(mixed.grad_W, copies.grad_W, rtol=1e-12, atol=1e-14)


def test_observed_support_is_the_paths_terms_of_the_labelled_documents():
    X = np.array([[1, 0, 2, 0], [0, 3, 0, 0], [0, 0, 1, 1]], float)
    Y = np.array([[1, 0, 0], [0, 1, 0], [0, 0.5, 0.5]])
    support = observed_support(sp.csr_matrix(X), Y)
    want = {(m, t) for i in range(3) for m in range(3) for t in range(4) if Y[i, m] > 0 and X[i, t] > 0}
    rows = np.repeat(np.arange(3), np.diff(support.indptr))
    assert set(zip(rows.tolist(), support.indices.tolist())) == want
    assert support.has_sorted_indices and not support.data.any()


def test_a_sparse_weight_matrix_gives_the_dense_objective_and_its_gradient_on_the_support(problem, monkeypatch):
    X, Y, w, W, b = problem
    F, _ = reference_tfidf(X)
    l2 = 0.05
    support = observed_support(sp.csr_matrix(X[:6]), Y[:6])  # the labelled rows' pairs
    assert 0 < support.nnz < W.size
    rows = np.repeat(np.arange(W.shape[0]), np.diff(support.indptr))
    W_on = np.zeros_like(W)
    W_on[rows, support.indices] = W[rows, support.indices]  # the dense twin: 0 off the support
    W_sparse = logistic.with_values(support, W[rows, support.indices])
    monkeypatch.setattr(logistic, "_SUPPORT_CHUNK_CELLS", 2 * X.shape[1])  # two paths per chunk: chunks meet
    sparse_terms = softmax_terms(sp.csr_matrix(F), Y, w, W_sparse, b)
    dense_terms = softmax_terms(sp.csr_matrix(F), Y, w, W_on, b)
    value, gW, gb = softmax_objective(sparse_terms, W_sparse.data, l2)
    assert value == pytest.approx(reference_objective(F, Y, w, W_on, b, l2), rel=1e-12)
    _, dense_gW, dense_gb = softmax_objective(dense_terms, W_on, l2)
    assert gW.shape == (support.nnz,)
    np.testing.assert_allclose(gW, dense_gW[rows, support.indices], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gb, dense_gb, rtol=1e-12, atol=1e-14)


def test_a_fit_on_the_support_is_the_dense_fit_with_the_other_weights_held_at_zero():
    rng = np.random.default_rng(9)
    M, V, per = 4, 12, 6
    X = np.zeros((M * per, V))
    for m in range(M):
        X[m * per : (m + 1) * per, 3 * m : 3 * m + 3] = rng.integers(1, 4, size=(per, 3))
    X += (rng.random(X.shape) < 0.1) * 1.0
    paths = np.repeat(np.arange(M), per)
    F = tfidf_features(sp.csr_matrix(X), idf_weights((X > 0).sum(axis=0), len(X)))
    Y = one_hot_targets(paths, M)
    w = np.ones(len(X))
    support = observed_support(sp.csr_matrix(X), Y)
    rows = np.repeat(np.arange(M), np.diff(support.indptr))
    mask = np.zeros((M, V), bool)
    mask[rows, support.indices] = True
    l2 = 1e-2
    fit = fit_softmax(lambda W, b: softmax_terms(F, Y, w, W, b), M, V, l2, 500, 1e-9, support=support)
    assert sp.issparse(fit.W) and fit.W.nnz <= support.nnz and fit.converged

    def masked(W, b):  # the dense objective, its gradient zeroed off the support: the same problem
        t = softmax_terms(F, Y, w, W * mask, b)
        return t._replace(grad_W=t.grad_W * mask)

    dense = fit_softmax(masked, M, V, l2, 500, 1e-9)
    np.testing.assert_allclose(fit.W.toarray(), dense.W * mask, atol=1e-4)
    assert fit.objective == pytest.approx(dense.objective, rel=1e-6)
    assert (path_logits(F, fit.W, fit.b).argmax(axis=1) == paths).all()
    with pytest.raises(ValueError, match="support"):
        fit_softmax(lambda W, b: None, M, V + 1, l2, support=support)


def test_l2_must_be_positive():
    with pytest.raises(ValueError, match="l2 must be > 0"):
        fit_softmax(lambda W, b: None, 2, 2, 0.0)


def test_block_scores_pool_the_generative_posterior_with_the_linear_scores():
    """With tables.linear, prediction's scores are beta * log p_gen + F W^T + b, whatever the row chunks."""
    from pcem_spark.core.decoding import block_scores, predict_paths
    from pcem_spark.core.estep import joint_log_likelihood, scoring_tables
    from pcem_spark.core.logistic import SoftmaxFit, linear_tables
    from pcem_spark.core.parameters import sparse_log_parameters

    rng = np.random.default_rng(11)
    n, V, M = 9, 6, 3
    X = sp.csr_matrix(random_counts(n, V, rng, density=0.5))
    counts = sp.csr_matrix(rng.integers(0, 5, size=(M, V)).astype(float))
    params = sparse_log_parameters(counts, np.array([3.0, 2.0, 1.0]), smoothing=0.5)
    idf = idf_weights(np.asarray((X > 0).sum(axis=0)).ravel(), n)
    W, b = rng.normal(size=(M, V)), rng.normal(size=M)
    for beta in (0.0, 0.7):
        tables = scoring_tables(params)._replace(linear=linear_tables(SoftmaxFit(W, b, 0.0, 0, True), idf, beta))
        got = np.vstack([jll for _, jll in block_scores(X, tables, row_chunk=4)])
        jll = joint_log_likelihood(X, params.log_prior, params.log_theta())
        dense_F, _ = reference_tfidf(X.toarray())
        want = beta * (jll - np.log(np.exp(jll).sum(axis=1, keepdims=True))) + dense_F @ W.T + b
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
        best, _ = predict_paths(X, None, None, None, 0.0, tables=tables)
        np.testing.assert_array_equal(best, want.argmax(axis=1))
