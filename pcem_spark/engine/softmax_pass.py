"""The discriminative path model on Spark: one pass per L-BFGS evaluation, the optimiser on the driver.

Execution shape, the same as an EM iteration's (:mod:`pcem_spark.engine.sums`):

* the labelled rows of the cached blocks are kept once (:func:`labeled_rows`):
  a discriminative fit reads only them, usually a small share of a crawl;
* the idf weights and the targets' score matrix are broadcast once per fit,
  the weights ``W`` (M, V) and biases ``b`` once per evaluation (a sparse ``W``,
  fitted on its observed support, travels as its stored entries: one pass
  over the labelled rows finds that support first, :func:`support_pass`);
* the labelled rows' sublinear tf-idf rows and targets are computed once per fit
  and cached (:func:`labeled_features`); each task sums
  :func:`pcem_spark.core.logistic.softmax_terms` over its share, so one record per
  task travels back, and ``treeReduce`` adds the records on the executors;
* :func:`pcem_spark.core.logistic.fit_softmax` (scipy's L-BFGS) runs on the
  driver and calls :func:`softmax_terms_pass` once per evaluation.

A small labelled set is fitted in one task instead (:func:`fit_softmax_in_one_task`):
its labelled rows are shuffled to one partition and L-BFGS runs there, so its
hundred or so evaluations cost their arithmetic, not a Spark job each.

The math is in :mod:`pcem_spark.core.logistic`; this module moves blocks,
broadcasts and sums.
"""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from pyspark import RDD

from pcem_spark.core.logistic import (
    SoftmaxFit,
    SoftmaxTerms,
    fit_softmax,
    observed_support,
    regression_features,
    softmax_terms,
)
from pcem_spark.core.structure import path_scores
from pcem_spark.engine.blocks import Block

__all__ = [
    "block_frequencies",
    "labeled_features",
    "add_frequencies",
    "block_vectors",
    "features_terms",
    "labeled_rows",
    "block_terms",
    "union_pattern",
    "as_support",
    "block_support",
    "support_pass",
    "softmax_terms_pass",
    "fit_softmax_on_blocks",
    "fit_softmax_in_one_task",
]


def _labelled_part(block: Block) -> Optional[Block]:
    """The labelled rows of ``block`` as a block, None when it has none."""
    if not block.labeled.any():
        return None
    return block.rows(np.flatnonzero(block.labeled))


def block_frequencies(blocks: Iterable[Block], vocab_size: int) -> Tuple[np.ndarray, int, int, int, int]:
    """(V,) document frequencies, documents, labelled documents and their non-zeros, and the length D of the
    blocks' document vectors (0 without), of ``blocks``: one pass feeds the idf, the penalty, the regression's
    width and the choice of where L-BFGS runs."""
    df, n = np.zeros(vocab_size), 0
    n_labeled = labeled_nnz = dim = 0
    for block in blocks:
        if block.E is not None and block.E.shape[0]:
            dim = max(dim, int(block.E.shape[1]))
        df += np.bincount(block.X.indices, minlength=vocab_size)[:vocab_size]  # CSR: one entry per (row, term)
        n += block.X.shape[0]
        n_labeled += int(block.labeled.sum())
        if block.labeled.any():
            row_nnz = np.diff(block.X.indptr)
            labeled_nnz += int(row_nnz[np.asarray(block.labeled, dtype=bool)].sum())
    return df, n, n_labeled, labeled_nnz, dim


def add_frequencies(a: tuple, b: tuple) -> tuple:
    """Two tasks' :func:`block_frequencies` together: counts add, the vectors' length is the one either has."""
    return tuple(x + y for x, y in zip(a[:4], b[:4])) + (max(a[4], b[4]),)


def labeled_rows(blocks: RDD) -> RDD:
    """The labelled rows of each block, as blocks (blocks without a labelled row are dropped)."""
    return blocks.map(_labelled_part).filter(lambda block: block is not None)


def block_vectors(block: Block, rows: np.ndarray, dim: int) -> np.ndarray:
    """(len(rows), D) document vectors of ``rows`` of ``block``: zeros for a block without them (a block of
    category-name documents only, which have no vector)."""
    if block.E is None or block.E.shape[1] != dim:
        return np.zeros((len(rows), dim), np.float32)
    return block.E[rows]


def _features(block: Block, rows: np.ndarray, idf: np.ndarray, embedding: Tuple[int, float]):
    """The regression rows of ``rows`` of ``block``: tf-idf, and ``embedding`` = (D, weight) vectors beside
    them when D > 0 (:func:`pcem_spark.core.logistic.regression_features`)."""
    dim, weight = embedding
    E = block_vectors(block, rows, dim) if dim else None
    return regression_features(block.X[rows], idf, E, weight)


def labeled_features(
    blocks: Iterable[Block], idf: np.ndarray, target_matrix: np.ndarray, embedding: Tuple[int, float] = (0, 0.0)
) -> list:
    """``[(features, targets)]`` of the labelled rows of each block with one (what :func:`block_terms` reads):
    computed once, for a local fit's many evaluations (:func:`features_terms`). Blocks with document vectors
    give (V + D)-column rows with ``embedding`` = (D, weight) (:func:`pcem_spark.core.logistic.regression_features`)."""
    out = []
    for block in blocks:
        rows = np.flatnonzero(block.labeled)
        if len(rows):
            out.append((_features(block, rows, idf, embedding), path_scores(block.node_scores[rows], target_matrix)))
    return out


def features_terms(features: Iterable[tuple], W, b: np.ndarray) -> Optional[SoftmaxTerms]:
    """:func:`block_terms` of :func:`labeled_features`' pairs: the same sums, in the same order."""
    total = None
    for F, targets in features:
        terms = softmax_terms(F, targets, np.ones(F.shape[0]), W, b)
        total = terms if total is None else _add(total, terms)
    return total


def block_terms(
    blocks: Iterable[Block],
    idf: np.ndarray,
    target_matrix: np.ndarray,
    W: np.ndarray,
    b: np.ndarray,
    embedding: Tuple[int, float] = (0, 0.0),
) -> Optional[SoftmaxTerms]:
    """:class:`SoftmaxTerms` summed over the labelled rows of ``blocks`` (None when there are none).

    A row's target is ``path_scores(node_scores, target_matrix)``: with the taxonomy's
    leaf-node matrix (M, K), a one-hot vector on the document's path; with weak
    supervision, its scores spread over paths. Every labelled row weighs 1.
    """
    total = None
    for block in blocks:
        rows = np.flatnonzero(block.labeled)
        if len(rows) == 0:
            continue
        features = _features(block, rows, idf, embedding)
        targets = path_scores(block.node_scores[rows], target_matrix)
        terms = softmax_terms(features, targets, np.ones(len(rows)), W, b)
        total = terms if total is None else _add(total, terms)
    return total


def union_pattern(a: sp.csr_matrix, b: sp.csr_matrix) -> sp.csr_matrix:
    """The union of two 0/1 patterns (csr (M, V)): a pair seen in both is one free weight."""
    total = (a + b).tocsr()
    total.data[:] = 1.0
    return total


def as_support(pattern: Optional[sp.csr_matrix], shape) -> sp.csr_matrix:
    """A 0/1 pattern (None: empty) as a support: sorted indices, every stored entry 0.0 (the weights' start)."""
    pattern = sp.csr_matrix(shape) if pattern is None else pattern
    pattern.sort_indices()
    return sp.csr_matrix((np.zeros(pattern.nnz), pattern.indices, pattern.indptr), shape=shape)


def block_support(blocks: Iterable[Block], target_matrix: np.ndarray, vocab_size: int) -> sp.csr_matrix:
    """The (path, term) pairs of the labelled rows of ``blocks``
    (:func:`pcem_spark.core.logistic.observed_support`), as a csr (M, V) 0/1 pattern."""
    total = sp.csr_matrix((target_matrix.shape[0], vocab_size))
    for block in blocks:
        rows = np.flatnonzero(block.labeled)
        if len(rows):
            pattern = observed_support(block.X[rows], path_scores(block.node_scores[rows], target_matrix))
            # its stored entries are 0.0, which a sparse sum would drop: ones first
            total = union_pattern(
                total, sp.csr_matrix((np.ones(pattern.nnz), pattern.indices, pattern.indptr), shape=pattern.shape)
            )
    return total


def support_pass(blocks: RDD, target_matrix: np.ndarray, vocab_size: int) -> sp.csr_matrix:
    """The observed support of the labelled rows of ``blocks``: one pass, patterns added on the executors."""
    patterns = blocks.mapPartitions(lambda part: [block_support(part, target_matrix, vocab_size)])
    return as_support(patterns.treeReduce(union_pattern, depth=2), (target_matrix.shape[0], vocab_size))


def _add(a: Optional[SoftmaxTerms], b: Optional[SoftmaxTerms]) -> Optional[SoftmaxTerms]:
    if a is None:
        return b
    if b is None:
        return a
    return SoftmaxTerms(a.loss + b.loss, a.grad_W + b.grad_W, a.grad_b + b.grad_b, a.weight + b.weight)


def _evaluation(rdd: RDD, partition_terms, W, b: np.ndarray) -> SoftmaxTerms:
    """Broadcast (W, b), sum ``partition_terms(partition, W, b)`` per task, add the records on the executors."""
    weights_bc = rdd.context.broadcast((W, b))
    try:

        def task(part):
            W_, b_ = weights_bc.value
            yield partition_terms(part, W_, b_)

        total = rdd.mapPartitions(task).treeReduce(_add, depth=2)
    finally:
        weights_bc.unpersist()
    if total is None:
        raise ValueError("no labelled document to fit the discriminative path model on")
    return total


def softmax_terms_pass(blocks: RDD, static_bc, W: np.ndarray, b: np.ndarray) -> SoftmaxTerms:
    """One evaluation: broadcast (W, b), sum each task's :func:`block_terms`, add them on the executors.

    ``static_bc`` is the per-fit broadcast of ``(idf, target_matrix)``.
    """

    def partition_terms(rows: Iterable[Block], W_, b_):
        idf, target_matrix = static_bc.value
        return block_terms(rows, idf, target_matrix, W_, b_)

    return _evaluation(blocks, partition_terms, W, b)


def _features_pass(features: RDD, W, b: np.ndarray) -> SoftmaxTerms:
    """One evaluation over cached :func:`labeled_features` (lists of pairs): :func:`softmax_terms_pass`
    without recomputing the tf-idf rows."""

    def partition_terms(parts, W_, b_):
        total = None
        for pairs in parts:
            total = _add(total, features_terms(pairs, W_, b_))
        return total

    return _evaluation(features, partition_terms, W, b)


def fit_softmax_on_blocks(
    blocks: RDD,
    idf: np.ndarray,
    target_matrix: np.ndarray,
    l2: float,
    max_iter: int = 100,
    tol: float = 1e-6,
    support: Optional[sp.csr_matrix] = None,
    embedding: Tuple[int, float] = (0, 0.0),
) -> SoftmaxFit:
    """Fit the softmax over paths on the labelled rows of cached ``blocks`` (one Spark pass per evaluation).

    idf : (V,); target_matrix : (M, K), e.g. ``Taxonomy.leaf_node_matrix()``; l2 : the penalty of
    :func:`pcem_spark.core.logistic.softmax_objective`; support :
    a csr (M, V) of the free weights (:func:`support_pass`), None for a dense W; embedding : (D, weight) of the
    blocks' document vectors, (0, 0.0) without (the weights are then (M, V + D)).
    """
    idf = np.asarray(idf, dtype=np.float64)
    target_matrix = np.asarray(target_matrix)
    static_bc = blocks.context.broadcast((idf, target_matrix))

    def featurise(part: Iterable[Block]):
        idf_, target_ = static_bc.value
        yield labeled_features(part, idf_, target_, embedding)

    # The labelled rows' tf-idf rows and targets, computed once and cached: every evaluation reads them. Labelled
    # rows are usually few: one partition per core, so an evaluation is one short task per core, not one per block
    # partition (an evaluation's arithmetic is small; its cost is mostly the job's and the tasks' overhead).
    n_cores = max(1, blocks.context.defaultParallelism)
    features = blocks.mapPartitions(featurise).coalesce(min(n_cores, blocks.getNumPartitions())).cache()
    try:
        M, V = target_matrix.shape[0], len(idf) + embedding[0]
        return fit_softmax(
            lambda W, b: _features_pass(features, W, b),
            M,
            V,
            l2,
            max_iter,
            tol,
            support=support,
        )
    finally:
        features.unpersist()
        static_bc.unpersist()


def fit_softmax_in_one_task(
    blocks: RDD,
    idf: np.ndarray,
    target_matrix: np.ndarray,
    l2: float,
    max_iter: int = 100,
    tol: float = 1e-6,
    support: Optional[sp.csr_matrix] = None,
    embedding: Tuple[int, float] = (0, 0.0),
) -> SoftmaxFit:
    """:func:`fit_softmax_on_blocks` for a small labelled set: the whole L-BFGS in one task.

    The labelled rows of ``blocks`` are filtered in parallel and shuffled to one partition, where
    :func:`pcem_spark.core.logistic.fit_softmax` runs on their :func:`labeled_features` (the same
    objective and sums as a cross-validation fold's fit); the fit (W, b) is the task's one record.
    Each evaluation then costs its arithmetic instead of a Spark job (about 0.2 s each on ``local[2]``,
    for a fit of up to LINEAR_MAX_ITER evaluations). The caller bounds the labelled non-zeros
    this task holds.
    """
    idf = np.asarray(idf, dtype=np.float64)
    target_matrix = np.asarray(target_matrix)
    M, V = target_matrix.shape[0], len(idf) + embedding[0]
    static_bc = blocks.context.broadcast((idf, target_matrix, support))

    def keyed(index: int, part: Iterable[Block]):
        # Only the labelled rows travel to the task; the key fixes their order there.
        for j, block in enumerate(part):
            labelled = _labelled_part(block)
            if labelled is not None:
                yield (index, j), labelled

    def fit_partition(part):
        idf_, target_, support_ = static_bc.value
        # The shuffle delivers the blocks in no fixed order: sorted, the sums (and the fit) are the same every run.
        ordered = [block for _, block in sorted(part, key=lambda kv: kv[0])]
        features = labeled_features(ordered, idf_, target_, embedding)
        if features:
            yield fit_softmax(lambda W, b: features_terms(features, W, b), M, V, l2, max_iter, tol, support=support_)

    try:
        # One record reaches the driver: the fit (W, b, its objective), never a document.
        fits = blocks.mapPartitionsWithIndex(keyed).coalesce(1, shuffle=True).mapPartitions(fit_partition).collect()
    finally:
        static_bc.unpersist()
    if not fits:
        raise ValueError("no labelled document to fit the discriminative path model on")
    return fits[0]
