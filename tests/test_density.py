"""The density weight's typicality (:mod:`pcem_spark.core.density`) against a dense numpy computation.

``-KL(p_i || theta_{b_i})`` written out with the dense ``log theta`` of the paper's Eq. 3 (Lidstone
smoothing): no Spark.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from pcem_spark.core.density import path_typicality, ratio_lookup
from pcem_spark.core.parameters import sparse_log_parameters


def _params(rng, R=4, V=30, smoothing=0.1):
    counts = sp.random(R, V, density=0.4, random_state=rng, data_rvs=lambda n: rng.integers(1, 9, n)).tocsr()
    return sparse_log_parameters(counts, np.asarray(counts.sum(axis=1)).ravel(), smoothing=smoothing)


def _dense_reference(X, log_theta, best):
    out = []
    for i in range(X.shape[0]):
        x = X[i]
        if x.sum() == 0:
            out.append(np.nan)
            continue
        p = x / x.sum()
        nz = p > 0
        out.append(float(np.sum(p[nz] * log_theta[best[i], nz]) - np.sum(p[nz] * np.log(p[nz]))))
    return np.array(out)


def test_typicality_equals_the_dense_kl_divergence():
    rng = np.random.default_rng(0)
    params = _params(rng)
    X = sp.random(12, 30, density=0.3, random_state=rng, data_rvs=lambda n: rng.integers(1, 5, n)).tocsr()
    X = sp.vstack([X, sp.csr_matrix((1, 30))]).tocsr()  # a document with no known word
    best = rng.integers(0, 4, X.shape[0])
    got = path_typicality(X, params.log_base, params.log_ratio, best)
    want = _dense_reference(X.toarray().astype(float), params.log_theta(), best)
    assert np.isnan(got[-1]) and np.isnan(want[-1])
    np.testing.assert_allclose(got[:-1], want[:-1], rtol=0, atol=1e-9)
    assert np.all(got[:-1] <= 1e-12)


def test_a_document_in_its_path_proportions_is_the_most_typical():
    rng = np.random.default_rng(1)
    params = _params(rng)
    theta = np.exp(params.log_theta())
    # Row 0 has path 2's proportions exactly (weights, not counts); row 1 the same words on another path.
    X = sp.csr_matrix(np.vstack([1000 * theta[2], 1000 * theta[2], rng.integers(0, 3, 30)]))
    got = path_typicality(X, params.log_base, params.log_ratio, np.array([2, 0, 2]))
    assert got[0] == pytest.approx(0.0, abs=1e-9)
    assert got[1] < got[0] and got[2] < got[0]
    # The scale of a document does not matter, only its proportions.
    doubled = path_typicality(2 * X, params.log_base, params.log_ratio, np.array([2, 0, 2]))
    np.testing.assert_allclose(doubled, got, atol=1e-9)


def test_rows_and_paths_must_agree():
    params = _params(np.random.default_rng(2))
    with pytest.raises(ValueError, match="3 rows but best has 2"):
        path_typicality(sp.csr_matrix(np.ones((3, 30))), params.log_base, params.log_ratio, np.array([0, 1]))


def test_the_lookup_kept_across_blocks_gives_the_same_typicality_on_any_block():
    """The per-worker lookup table against the dense reference: blocks with duplicate entries, empty rows,
    a word no path stored a ratio for, and an empty block."""
    rng = np.random.default_rng(3)
    params = _params(rng, R=5, V=40, smoothing=0.5)
    dense = ratio_lookup(params.log_ratio)  # 200 cells: a dense table
    lookup = ratio_lookup(params.log_ratio, dense_cells=100)  # the binary search of the wide models
    assert dense.dense is not None and lookup.dense is None
    assert np.all(np.diff(lookup.keys) > 0) and len(lookup.keys) == params.log_ratio.nnz
    for n in (0, 1, 7, 30):
        X = sp.random(n, 40, density=0.25, random_state=rng, data_rvs=lambda k: rng.integers(1, 6, k)).tocsr()
        if n:
            X = sp.vstack([X[: n - 1], sp.csr_matrix((1, 40))]).tocsr()  # a document with no known word
        best = rng.integers(0, 5, n)
        got = path_typicality(X, params.log_base, params.log_ratio, best, lookup)
        assert got.shape == (n,)
        np.testing.assert_allclose(got, path_typicality(X, params.log_base, params.log_ratio, best, dense), atol=1e-12)
        want = _dense_reference(X.toarray().astype(float), params.log_theta(), best)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    # Duplicate (row, term) entries count as their sum.
    X = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([4, 4, 9]), np.array([0, 3])), shape=(1, 40))
    dense = np.zeros((1, 40))
    dense[0, 4], dense[0, 9] = 3.0, 3.0
    np.testing.assert_allclose(
        path_typicality(X, params.log_base, params.log_ratio, np.array([1]), lookup),
        _dense_reference(dense, params.log_theta(), np.array([1])),
        rtol=0,
        atol=1e-9,
    )
