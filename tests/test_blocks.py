"""Block packing pieces that run inside Python workers, tested without Spark."""

import pickle

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp

from pcem_spark.engine.arrow_io import label_path_index, sparse_vector_arrays
from pcem_spark.engine.blocks import Block


def _vector_struct(rows, size):
    """Arrow struct array shaped like Spark's VectorUDT (type 0 = sparse)."""
    return pa.StructArray.from_arrays(
        [
            pa.array([0] * len(rows), pa.int8()),
            pa.array([size] * len(rows), pa.int32()),
            pa.array([[i for i, _ in r] for r in rows], pa.list_(pa.int32())),
            pa.array([[v for _, v in r] for r in rows], pa.list_(pa.float64())),
        ],
        names=["type", "size", "indices", "values"],
    )


def test_sparse_vector_arrays_are_csr_even_for_a_slice():
    rows = [[(0, 1.0), (3, 2.0)], [], [(1, 5.0)], [(2, 1.0), (4, 1.0), (5, 3.0)]]
    arr = _vector_struct(rows, 6)
    indptr, indices, data = sparse_vector_arrays(arr.slice(1, 3))
    X = sp.csr_matrix((data, indices, indptr), shape=(3, 6)).toarray()
    expected = np.zeros((3, 6))
    expected[1, 1] = 5.0
    expected[2, [2, 4, 5]] = [1.0, 1.0, 3.0]
    np.testing.assert_array_equal(X, expected)


def test_dense_vectors_are_refused():
    arr = pa.StructArray.from_arrays(
        [
            pa.array([1], pa.int8()),
            pa.array([None], pa.int32()),
            pa.array([None], pa.list_(pa.int32())),
            pa.array([[1.0, 2.0]], pa.list_(pa.float64())),
        ],
        names=["type", "size", "indices", "values"],
    )
    with pytest.raises(ValueError, match="expected sparse"):
        sparse_vector_arrays(arr)


def test_label_path_index_maps_paths_and_nulls():
    keys = ["a\x1fa1", "a\x1fa2", "b\x1fb1"]
    labels = pa.array([["a", "a2"], None, ["b", "b1"], ["a", "a1"]], pa.list_(pa.string()))
    np.testing.assert_array_equal(label_path_index(labels, keys), [1, -1, 2, 0])
    with pytest.raises(ValueError, match=r"\['a', 'b1'\] is not a path"):
        label_path_index(pa.array([["a", "b1"]], pa.list_(pa.string())), keys)


def test_block_pickles_compactly_and_exactly():
    rng = np.random.default_rng(0)
    X = sp.random(200, 500, density=0.05, format="csr", random_state=1)
    X.data = rng.integers(1, 300, X.nnz).astype(np.float64)  # needs uint16
    ns = sp.csr_matrix(np.eye(200, 7))
    blk = Block(X, ns, np.arange(200) % 2 == 0)
    back = pickle.loads(pickle.dumps(blk))
    assert back.X.dtype == np.float64 and (back.X != X).nnz == 0
    assert (back.node_scores != ns).nnz == 0
    np.testing.assert_array_equal(back.labeled, blk.labeled)
    assert len(pickle.dumps(blk)) < 0.75 * len(pickle.dumps((X, ns, blk.labeled)))
    X.data = X.data / 7  # not integer counts: kept as float64, exactly
    back = pickle.loads(pickle.dumps(Block(X, ns, blk.labeled)))
    assert (back.X != X).nnz == 0


@pytest.mark.parametrize("n_terms", [1 << 16, (1 << 16) + 1, 1 << 20])
def test_block_term_ids_survive_the_pickle_at_every_vocabulary_width(n_terms):
    # Up to 2^16 terms the ids travel as uint16, wider vocabularies as int32: the highest id must come back.
    rng = np.random.default_rng(n_terms)
    cols = np.sort(np.r_[0, rng.choice(n_terms - 1, 40, replace=False) + 1, n_terms - 1])
    cols = np.unique(cols)
    X = sp.csr_matrix((np.ones(len(cols)), (np.zeros(len(cols), int), cols)), shape=(2, n_terms))
    blk = Block(X, sp.csr_matrix(np.ones((2, 3))), np.array([True, False]))
    back = pickle.loads(pickle.dumps(blk))
    assert back.X.indices.dtype == np.int32
    np.testing.assert_array_equal(back.X.indices, cols)
    assert back.X.shape == (2, n_terms) and (back.X != X).nnz == 0


def test_block_term_ids_take_two_bytes_up_to_two_to_the_sixteen_terms():
    X = sp.random(100, 1 << 16, density=0.01, format="csr", random_state=2)
    X.data[:] = 1.0
    ns, labeled = sp.csr_matrix(np.ones((100, 3))), np.zeros(100, bool)
    narrow = len(pickle.dumps(Block(X, ns, labeled)))
    wide = len(pickle.dumps(Block(sp.csr_matrix(X, shape=(100, (1 << 16) + 1)), ns, labeled)))
    assert wide - narrow >= 2 * X.nnz - 64


def test_sparse_and_dense_word_sums_agree_and_mix():
    from pcem_spark import core
    from pcem_spark.engine.sums import _add, _SumAccumulator

    rng = np.random.default_rng(3)
    X = sp.random(40, 30, density=0.2, format="csr", random_state=2)
    X.data = np.ceil(X.data * 5)
    M = 6
    fixed = np.zeros((40, M))
    labeled = np.arange(40) < 10
    fixed[np.arange(10), rng.integers(0, M, 10)] = 1.0
    log_prior = np.log(np.full(M, 1 / M))
    log_theta = np.log(rng.dirichlet(np.ones(30), size=M))
    dense = core.e_step(X, fixed, labeled, log_prior, log_theta, core.EStepOptions(sparse_density=0.0))
    sparse = core.e_step(X, fixed, labeled, log_prior, log_theta, core.EStepOptions(sparse_density=1.0))
    assert isinstance(dense.word_counts, np.ndarray) and sp.issparse(sparse.word_counts)
    np.testing.assert_allclose(sparse.word_counts.toarray(), dense.word_counts, rtol=1e-12, atol=1e-12)
    # the per-partition accumulator, dense or sparse, whatever mix of block sums it gets
    for sparse_sums in (False, True):
        acc = _SumAccumulator(M, 30, sparse_sums, np.float64)
        for part in (sparse.word_counts, dense.word_counts, sparse.word_counts):
            acc.add(part)
        total = acc.result()
        assert sp.issparse(total) == sparse_sums
        np.testing.assert_allclose(total.toarray() if sparse_sums else total, 3 * dense.word_counts, rtol=1e-12)
    row = sp.csr_matrix(dense.word_counts[:1])
    np.testing.assert_allclose(_add(row, dense.word_counts[:1].copy()), 2 * dense.word_counts[:1])
    np.testing.assert_allclose(_add(row, row).toarray().ravel(), 2 * dense.word_counts[0])


def test_posterior_floor_zeroes_small_posteriors_and_keeps_rows_normalised():
    from pcem_spark import core

    X = sp.csr_matrix(np.array([[3.0, 0, 1], [0, 2.0, 2]]))
    log_theta = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.2, 0.7], [1 / 3, 1 / 3, 1 / 3]]))
    log_prior = np.log(np.array([0.5, 0.49, 0.01]))
    st = core.e_step(
        X, np.zeros((2, 3)), np.zeros(2, bool), log_prior, log_theta, core.EStepOptions(posterior_floor=0.05)
    )
    exact = core.e_step(X, np.zeros((2, 3)), np.zeros(2, bool), log_prior, log_theta)
    np.testing.assert_allclose(st.path_totals.sum(), 2.0)
    assert st.path_totals[2] == 0.0 < exact.path_totals[2]


def test_posterior_floor_above_one_over_m_never_empties_a_row():
    from pcem_spark import core

    M = 20
    X = sp.csr_matrix((1, 5))  # no known word: the posterior is the uniform prior, 0.05 each
    st = core.e_step(
        X,
        np.zeros((1, M)),
        np.zeros(1, bool),
        np.log(np.full(M, 1 / M)),
        np.log(np.full((M, 5), 0.2)),
        core.EStepOptions(posterior_floor=0.06),
    )
    assert np.isfinite(st.path_totals).all() and st.path_totals.sum() == pytest.approx(1.0)


def test_a_packed_row_reads_back_whatever_width_its_term_ids_and_counts_travel_at():
    from pcem_spark.engine.blocks import block_from_row
    from pcem_spark.engine.frame_softmax_pass import row_of_block

    X = sp.csr_matrix(np.array([[0, 3, 0, 1], [0, 0, 0, 0], [2, 0, 5, 0]], dtype=np.float64))
    ns = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]))
    ns_parts = (ns.indptr.astype(np.int64), ns.indices.astype(np.int32), ns.data)
    for ids, counts in [(np.uint16, np.uint8), (np.int32, np.uint16), (np.uint16, np.float64), (np.int32, np.float64)]:
        row = (3, X.indptr.astype(np.int64).tobytes(), X.indices.astype(ids).tobytes(), X.data.astype(counts).tobytes())
        blk = block_from_row(row + tuple(a.tobytes() for a in ns_parts), 4, 2)
        assert blk.X.indices.dtype == np.int32 and (blk.X != X).nnz == 0, (ids, counts)
        np.testing.assert_array_equal(blk.labeled, [True, False, True])
    back = block_from_row(row_of_block(Block(X, ns, np.array([True, False, True]))), 4, 2)
    assert (back.X != X).nnz == 0 and (back.node_scores != ns).nnz == 0
    empty = block_from_row(row_of_block(Block(sp.csr_matrix((2, 4)), sp.csr_matrix((2, 2)), np.zeros(2, bool))), 4, 2)
    assert empty.X.shape == (2, 4) and empty.X.nnz == 0
