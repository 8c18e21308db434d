"""The discriminative path model's passes on the DataFrame API alone: what Spark Connect can run.

The same partition code as :mod:`pcem_spark.engine.softmax_pass`
(:func:`~pcem_spark.engine.softmax_pass.block_terms`,
:func:`~pcem_spark.engine.softmax_pass.block_support`), moved by DataFrame
operations, as :mod:`pcem_spark.engine.frame_sums` moves an EM pass:

* the labelled rows of the cached blocks (:data:`pcem_spark.engine.blocks.BLOCK_ROW`
  rows) are re-packed once into a small cached DataFrame (:func:`labeled_frame`):
  every L-BFGS evaluation reads only them;
* the idf weights, the targets' score matrix and the weights ``W``, ``b`` travel
  with the ``mapInArrow`` function (:func:`pcem_spark.engine.shipping.ship_in_plan`:
  in the plan, or a staged file when large over Connect);
* each task yields one pickled record (its summed terms), the driver adds them.
  A record is the size of the free weights; it is checked against
  ``spark.driver.maxResultSize`` before the first pass;
* a small labelled set is fitted whole in one task instead
  (:func:`fit_softmax_in_one_task_on_frame`, as
  :func:`pcem_spark.engine.softmax_pass.fit_softmax_in_one_task` on an RDD).
"""

from __future__ import annotations

import pickle
from typing import Callable, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from pyspark.sql import DataFrame

from pcem_spark.core.logistic import SoftmaxFit, SoftmaxTerms, fit_softmax
from pcem_spark.engine.blocks import BLOCK_ROW, Block, block_batches, block_from_row
from pcem_spark.engine.shipping import ship_in_plan
from pcem_spark.engine.softmax_pass import (
    _add,
    add_frequencies,
    as_support,
    block_frequencies,
    block_support,
    block_terms,
    features_terms,
    labeled_features,
    union_pattern,
)

__all__ = [
    "row_of_block",
    "labeled_frame",
    "frame_document_frequency",
    "frame_support",
    "frame_softmax_terms",
    "fit_softmax_on_frame",
    "fit_softmax_in_one_task_on_frame",
]

_RECORD_SCHEMA = "payload binary"


def row_of_block(block: Block) -> tuple:
    """A :data:`BLOCK_ROW` tuple of ``block`` (float64 counts): the inverse of :func:`block_from_row`."""
    X = sp.csr_matrix(block.X, dtype=np.float64)
    ns = sp.csr_matrix(block.node_scores, dtype=np.float64)
    return (
        int(X.shape[0]),
        X.indptr.astype(np.int64).tobytes(),
        X.indices.astype(np.int32).tobytes(),
        X.data.astype(np.float64).tobytes(),
        ns.indptr.astype(np.int64).tobytes(),
        ns.indices.astype(np.int32).tobytes(),
        ns.data.astype(np.float64).tobytes(),
        None if block.E is None else np.ascontiguousarray(block.E, dtype=np.float32).tobytes(),
    )


def _blocks(batches, vocab_size: int, n_nodes: int):
    for batch in batches:
        for row in batch.to_pylist():
            yield block_from_row(row, vocab_size, n_nodes)


def _one_record(value):
    import pyarrow as pa

    if value is not None:
        yield pa.RecordBatch.from_arrays(
            [pa.array([pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)], pa.binary())], names=["payload"]
        )


def _summed(frame: DataFrame, body: Callable, add: Callable):
    """Run ``body`` (batches -> one record per task) and add the records on the driver (None when there are none)."""
    total = None
    with block_batches(frame.sparkSession):
        payloads = frame.mapInArrow(body, _RECORD_SCHEMA).toArrow().column("payload").to_pylist()
    for payload in payloads:
        value = pickle.loads(payload)
        total = value if total is None else add(total, value)
    return total


def labeled_frame(frame: DataFrame, vocab_size: int, n_nodes: int) -> DataFrame:
    """The labelled rows of ``frame``'s blocks, re-packed as :data:`BLOCK_ROW` rows (blocks without one dropped).

    Not cached here: the caller caches it for the fit's passes and unpersists it after.
    """

    def body(batches):
        import pyarrow as pa

        names = ["n", "indptr", "indices", "data", "ns_indptr", "ns_indices", "ns_data", "emb"]
        for block in _blocks(batches, vocab_size, n_nodes):
            rows = np.flatnonzero(block.labeled)
            if len(rows):
                values = row_of_block(block.rows(rows))
                types = [pa.int32()] + [pa.binary()] * 7
                yield pa.RecordBatch.from_arrays([pa.array([v], t) for v, t in zip(values, types)], names=names)

    return frame.mapInArrow(body, BLOCK_ROW)


def frame_document_frequency(frame: DataFrame, vocab_size: int, n_nodes: int) -> Tuple[np.ndarray, int, int, int, int]:
    """(V,) documents containing each term, the number of documents, of labelled ones, the labelled
    rows' non-zeros and the document vectors' length (0 without), in one pass."""

    def body(batches):
        return _one_record(block_frequencies(_blocks(batches, vocab_size, n_nodes), vocab_size))

    total = _summed(frame, body, add_frequencies)
    return (np.zeros(vocab_size), 0, 0, 0, 0) if total is None else total


def frame_support(labeled: DataFrame, target_matrix: np.ndarray, vocab_size: int, n_nodes: int) -> sp.csr_matrix:
    """The observed support (csr (M, V), stored zeros) of the labelled rows: :func:`block_support` per task."""
    shipped = ship_in_plan(labeled.sparkSession, target_matrix, "the regression's targets")

    def body(batches):
        return _one_record(block_support(_blocks(batches, vocab_size, n_nodes), shipped.value, vocab_size))

    try:
        total = _summed(labeled, body, union_pattern)
    finally:
        shipped.unpersist()
    return as_support(total, (target_matrix.shape[0], vocab_size))


def frame_softmax_terms(labeled: DataFrame, static, W, b: np.ndarray, vocab_size: int, n_nodes: int) -> SoftmaxTerms:
    """One evaluation: (W, b) with the function, each task's :func:`block_terms` summed on the driver.

    ``static`` is ``(idf, target_matrix)``.
    """
    shipped = ship_in_plan(labeled.sparkSession, (static, W, b), "the softmax regression's weights")

    def body(batches):
        (idf, target_matrix), W_, b_ = shipped.value
        return _one_record(block_terms(_blocks(batches, vocab_size, n_nodes), idf, target_matrix, W_, b_))

    try:
        total = _summed(labeled, body, _add)
    finally:
        shipped.unpersist()
    if total is None:
        raise ValueError("no labelled document to fit the discriminative path model on")
    return total


def fit_softmax_on_frame(
    labeled: DataFrame,
    idf: np.ndarray,
    target_matrix: np.ndarray,
    l2: float,
    vocab_size: int,
    max_iter: int = 100,
    tol: float = 1e-6,
    support: Optional[sp.csr_matrix] = None,
) -> SoftmaxFit:
    """:func:`pcem_spark.engine.softmax_pass.fit_softmax_on_blocks` on a cached :func:`labeled_frame`
    (target_matrix (M, K): its K are the blocks' node-score columns)."""
    static = (np.asarray(idf, dtype=np.float64), np.asarray(target_matrix))
    n_nodes = target_matrix.shape[1]
    return fit_softmax(
        lambda W, b: frame_softmax_terms(labeled, static, W, b, vocab_size, n_nodes),
        target_matrix.shape[0],
        vocab_size,
        l2,
        max_iter,
        tol,
        support=support,
    )


def fit_softmax_in_one_task_on_frame(
    labeled: DataFrame,
    idf: np.ndarray,
    target_matrix: np.ndarray,
    l2: float,
    vocab_size: int,
    max_iter: int = 100,
    tol: float = 1e-6,
    support: Optional[sp.csr_matrix] = None,
) -> SoftmaxFit:
    """:func:`fit_softmax_on_frame` for a small labelled set: the whole L-BFGS in one task.

    ``labeled`` (a :func:`labeled_frame`) is coalesced to one partition, which keeps its partitions'
    order, so the task's sums (and the fit) are the same every run; the fit is the task's one record.
    The caller bounds the labelled non-zeros this task holds
    (:func:`pcem_spark.model.linear_family.fits_in_one_task`).
    """
    static = (np.asarray(idf, dtype=np.float64), np.asarray(target_matrix), support)
    M, n_nodes = target_matrix.shape
    shipped = ship_in_plan(labeled.sparkSession, static, "the softmax regression's idf and targets")

    def body(batches):
        idf_, target_, support_ = shipped.value
        features = labeled_features(_blocks(batches, vocab_size, n_nodes), idf_, target_)
        if features:
            fit = fit_softmax(
                lambda W, b: features_terms(features, W, b), M, vocab_size, l2, max_iter, tol, support=support_
            )
            return _one_record(fit)
        return _one_record(None)

    try:
        # One record reaches the driver: the fit (W, b, its objective), never a document.
        payloads = labeled.coalesce(1).mapInArrow(body, _RECORD_SCHEMA).toArrow().column("payload").to_pylist()
    finally:
        shipped.unpersist()
    if not payloads:
        raise ValueError("no labelled document to fit the discriminative path model on")
    return pickle.loads(payloads[0])
