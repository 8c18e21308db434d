"""The bag-of-known-words fingerprint (``core.fingerprints``) against a brute-force grouping of the bags."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.fingerprints import bag_fingerprints


def _bag(X, i):
    """Row i's bag as a frozenset of (term, count), explicit zeros and duplicates resolved by hand."""
    counts = {}
    row = X.getrow(i).tocoo()
    for t, c in zip(row.col, row.data):
        counts[int(t)] = counts.get(int(t), 0.0) + float(c)
    return frozenset((t, c) for t, c in counts.items() if c != 0)


def test_rows_share_a_fingerprint_exactly_when_their_bags_are_equal():
    rng = np.random.default_rng(0)
    dense = rng.poisson(0.4, size=(300, 12)).astype(float)
    dense[:40] = dense[40:80]  # exact copies
    dense[80:85] = 0  # empty rows
    X = sp.csr_matrix(dense)
    got, empty = bag_fingerprints(X)
    assert got.dtype == np.int64 and got.shape == (300,)
    bags = [_bag(X, i) for i in range(300)]
    for i in range(300):
        for j in range(i + 1, 300):
            assert (got[i] == got[j]) == (bags[i] == bags[j]), (i, j)
    assert np.array_equal(empty, dense.sum(axis=1) == 0) and (got[empty] == 0).all()


def test_the_fingerprint_ignores_entry_order_duplicates_and_explicit_zeros():
    # Row 0 canonical; row 1 the same bag with its entries reversed, one count split in two and an explicit 0.
    indptr = np.array([0, 3, 8])
    indices = np.array([1, 4, 7, 7, 4, 1, 1, 9])
    data = np.array([2.0, 1.0, 3.0, 3.0, 1.0, 1.0, 1.0, 0.0])
    X = sp.csr_matrix((data, indices, indptr), shape=(2, 10))
    (a, b), empty = bag_fingerprints(X)
    assert a == b and not empty.any()
    # A different count or a different term is another bag; the input matrix is left as it was.
    assert bag_fingerprints(sp.csr_matrix([[0, 2, 0, 0, 2, 0, 0, 3, 0, 0]]))[0][0] != a
    assert bag_fingerprints(sp.csr_matrix([[0, 2, 0, 0, 0, 1, 0, 3, 0, 0]]))[0][0] != a
    assert np.array_equal(X.indices, indices) and np.array_equal(X.data, data)
    # The same bag in float32 or integer counts is the same fingerprint.
    assert bag_fingerprints(X.astype(np.float32))[0][0] == a
    assert bag_fingerprints(sp.csr_matrix(X.toarray().astype(np.int64)))[0][0] == a
