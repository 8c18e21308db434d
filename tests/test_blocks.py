"""Block packing pieces that run inside Python workers, tested without Spark."""

import pickle

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp

from pcem_spark.engine import Block, label_path_index, sparse_vector_arrays


def _vector_struct(rows, size):
    """Arrow struct array shaped like Spark's VectorUDT (type 0 = sparse)."""
    return pa.StructArray.from_arrays(
        [pa.array([0] * len(rows), pa.int8()), pa.array([size] * len(rows), pa.int32()),
         pa.array([[i for i, _ in r] for r in rows], pa.list_(pa.int32())),
         pa.array([[v for _, v in r] for r in rows], pa.list_(pa.float64()))],
        names=["type", "size", "indices", "values"])


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
        [pa.array([1], pa.int8()), pa.array([None], pa.int32()), pa.array([None], pa.list_(pa.int32())),
         pa.array([[1.0, 2.0]], pa.list_(pa.float64()))], names=["type", "size", "indices", "values"])
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
