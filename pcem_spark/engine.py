"""The Spark engine: CSR blocks, broadcast parameters, EM passes.

Execution shape (DESIGN.md):

* each partition's rows are packed once into scipy CSR blocks and cached;
* each pass broadcasts ``(log_prior, log_theta, score_matrix)``;
* ``mapPartitions`` runs the E-step of :mod:`pcem_spark.pathnb` per block and
  emits per-path sums, combined by ``reduceByKey`` (key = path id) into the
  M x V count matrix on the driver;
* the driver updates theta (Eqs. 6-7), tracks the log-likelihood (Eq. 8),
  tests convergence and unpersists the old broadcast.

Spark only moves blocks, broadcasts and sums; the math is in ``pathnb``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp
from pyspark import RDD, StorageLevel
from pyspark.sql import DataFrame

from . import pathnb

log = logging.getLogger(__name__)

# Key of the scalar record (log-likelihood, counts) next to the path keys 0..M-1.
_SCALARS = -1


@dataclass
class Block:
    """A partition's documents as matrices.

    X : csr_matrix (n, V) term counts; node_scores : csr_matrix (n, K) of
    ``S_i(c)``; labeled : bool (n,) -- rows with any supervision.
    """
    X: sp.csr_matrix
    node_scores: sp.csr_matrix
    labeled: np.ndarray


def pack_block(features: Sequence, node_rows: Sequence[Optional[np.ndarray]], vocab_size: int,
               n_nodes: int) -> Block:
    """Stack SparseVectors and node-score rows into one :class:`Block`."""
    n = len(features)
    indptr = np.zeros(n + 1, dtype=np.int64)
    idx_parts, val_parts = [], []
    for i, vec in enumerate(features):
        idx_parts.append(vec.indices)
        val_parts.append(vec.values)
        indptr[i + 1] = indptr[i] + len(vec.indices)
    indices = np.concatenate(idx_parts).astype(np.int32) if n else np.zeros(0, np.int32)
    values = np.concatenate(val_parts) if n else np.zeros(0)
    X = sp.csr_matrix((values, indices, indptr), shape=(n, vocab_size))
    labeled = np.array([r is not None for r in node_rows], dtype=bool)
    ns = np.zeros((n, n_nodes))
    for i, r in enumerate(node_rows):
        if r is not None:
            ns[i] = r
    return Block(X, sp.csr_matrix(ns), labeled)


def blocks_from_labels(df: DataFrame, path_lookup: Dict[Tuple[str, ...], int], path_node: np.ndarray,
                       vocab_size: int, block_size: int = 4096, features_col: str = "features",
                       labels_col: str = "labels") -> RDD:
    """RDD of :class:`Block` from a featurised DataFrame with true label paths.

    ``labels`` must already be validated against the taxonomy (see
    :func:`pcem_spark.model.check_label_paths`); null labels = unlabelled.
    The node scores of a labelled row are the nodes of its (padded) path.
    """
    sc = df.sparkSession.sparkContext
    bc = sc.broadcast((path_lookup, path_node))
    n_nodes = path_node.shape[1]

    def pack(rows: Iterable) -> Iterator[Block]:
        lookup, a = bc.value
        feats, nodes = [], []
        for row in rows:
            feats.append(row[0])
            labels = row[1]
            nodes.append(None if labels is None else a[lookup[tuple(labels)]])
            if len(feats) >= block_size:
                yield pack_block(feats, nodes, vocab_size, n_nodes)
                feats, nodes = [], []
        if feats:
            yield pack_block(feats, nodes, vocab_size, n_nodes)

    return df.select(features_col, labels_col).rdd.mapPartitions(pack)


@dataclass
class FitResult:
    log_prior: np.ndarray
    log_theta: np.ndarray
    n_iter: int = 0
    converged: bool = False
    loglik_history: List[float] = field(default_factory=list)
    iter_seconds: List[float] = field(default_factory=list)
    n_labeled: int = 0
    n_unlabeled: int = 0


def _pass_partition(blocks: Iterable[Block], bc, use_unlabeled: bool, n_paths: int):
    log_prior, log_theta, score_matrix = bc.value
    word_counts = None
    totals = np.zeros(n_paths)
    scalars = np.zeros(3)  # loglik, n labelled, n unlabelled
    for blk in blocks:
        fixed = pathnb.path_scores(blk.node_scores, score_matrix)
        st = pathnb.e_step(blk.X, fixed, blk.labeled, log_prior, log_theta, use_unlabeled)
        word_counts = st.word_counts if word_counts is None else word_counts + st.word_counts
        totals += st.path_totals
        n_lab = int(blk.labeled.sum())
        scalars += (st.loglik, n_lab, len(blk.labeled) - n_lab)
    if word_counts is None:
        return
    for j in range(n_paths):
        # One record per path: its word sums with the path total appended.
        yield j, np.append(word_counts[j], totals[j])
    yield _SCALARS, scalars


def sufficient_stats(blocks: RDD, log_prior: Optional[np.ndarray], log_theta: Optional[np.ndarray],
                     score_matrix: np.ndarray, vocab_size: int, use_unlabeled: bool):
    """One distributed pass: returns (word_counts (M,V), path_totals (M,), loglik, n_lab, n_unlab).

    With ``log_theta=None`` only labelled rows count (the NB initialisation)
    and no log-likelihood is computed.
    """
    sc = blocks.context
    n_paths = score_matrix.shape[0]
    bc = sc.broadcast((log_prior, log_theta, score_matrix))
    try:
        n_reducers = max(1, min(n_paths + 1, sc.defaultParallelism))
        records = (blocks.mapPartitions(lambda it: _pass_partition(it, bc, use_unlabeled, n_paths))
                   .reduceByKey(np.add, numPartitions=n_reducers)
                   .collect())  # M + 1 summed records: O(M x V) on the driver, never documents
    finally:
        bc.unpersist()
    word_counts = np.zeros((n_paths, vocab_size))
    totals = np.zeros(n_paths)
    scalars = np.zeros(3)
    for key, arr in records:
        if key == _SCALARS:
            scalars = arr
        else:
            word_counts[key] = arr[:-1]
            totals[key] = arr[-1]
    return word_counts, totals, float(scalars[0]), int(scalars[1]), int(scalars[2])


def fit(blocks: RDD, score_matrix: np.ndarray, vocab_size: int, em: bool = True, smoothing: float = 1.0,
        max_iter: int = 50, tol: float = 1e-5, label: str = "PCEM") -> FitResult:
    """PCNB (``em=False``) or PCEM (Algorithm 1) on cached blocks.

    ``score_matrix`` (M, K) turns node scores into path scores (Eq. 2): the
    path-node matrix for PCNB/PCEM, the leaf indicator for flat NB/EM.
    Convergence: relative change of the log-likelihood (Eq. 8) below ``tol``,
    or ``max_iter`` EM iterations.
    """
    t0 = time.perf_counter()
    wc, totals, _, n_lab, n_unlab = sufficient_stats(blocks, None, None, score_matrix, vocab_size, False)
    if n_lab == 0:
        raise ValueError(f"{label}: no labelled document in the training data; "
                         "naive Bayes needs at least one labelled document")
    log_prior, log_theta = pathnb.log_parameters(wc, totals, smoothing)
    result = FitResult(log_prior, log_theta, n_labeled=n_lab, n_unlabeled=n_unlab)
    log.info("%s: naive Bayes initialisation on %d labelled documents (%d unlabelled) in %.2fs",
             label, n_lab, n_unlab, time.perf_counter() - t0)
    if not em:
        result.converged = True
        return result
    if n_unlab == 0:
        log.warning("%s: no unlabelled documents, EM reduces to naive Bayes", label)
    prev = None
    for it in range(1, max_iter + 1):
        t_it = time.perf_counter()
        wc, totals, data_ll, _, _ = sufficient_stats(
            blocks, log_prior, log_theta, score_matrix, vocab_size, True)
        loglik = data_ll + pathnb.log_prior_density(log_prior, log_theta, smoothing)
        log_prior, log_theta = pathnb.log_parameters(wc, totals, smoothing)
        secs = time.perf_counter() - t_it
        rel = float("nan") if prev is None else abs(loglik - prev) / max(abs(prev), 1e-300)
        result.loglik_history.append(loglik)
        result.iter_seconds.append(secs)
        result.n_iter = it
        log.info("%s EM iteration %d: log-likelihood %.6e, relative change %.3e, %.2fs",
                 label, it, loglik, rel, secs)
        if prev is not None and rel < tol:
            result.converged = True
            break
        prev = loglik
    if not result.converged:
        log.warning("%s: EM stopped at max_iter=%d before the relative change fell below tol=%g",
                    label, max_iter, tol)
    result.log_prior, result.log_theta = log_prior, log_theta
    return result


def cache_blocks(blocks: RDD, level: StorageLevel = StorageLevel.MEMORY_AND_DISK) -> RDD:
    """Persist the packed blocks (they are read once per EM iteration)."""
    return blocks.persist(level)
