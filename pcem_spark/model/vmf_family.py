"""``model.family = "vmf"``: the generative model of the document vectors beside the words' (core.vmf).

After PCEM's EM over the words, a von Mises-Fisher mixture over the paths is fitted to the documents'
vectors by EM over the same blocks: labelled rows keep their paths (their path scores, normalised), unlabelled
rows weigh in with their posterior under the words and the vectors together (at the start, under the words
alone), at EM-lambda (``unlabeled_weight``), as PCEM weighs them. The words' parameters stay PCEM's (a
generalised EM on the vectors' part). A path's score is then the joint log-likelihood of words and vector,
``log P(path | words) + kappa mu_path . x``, which prediction computes as the combined family's pooled score
with beta 1, no word weights and the vectors scaled to unit length (:func:`vmf_tables`), so the model is saved,
loaded and scored as a combined one.

:func:`fit_vmf_local` fits on a list of blocks in one process (a cross-validation fold),
:func:`fit_vmf_blocks` on the cached RDD of a full fit: one pass of sums per EM iteration.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Iterable, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.estep import ScoringTables, length_normalize, tables_joint_log_likelihood
from pcem_spark.core.logistic import LinearTables, log_softmax_rows
from pcem_spark.core.structure import path_scores
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.core.vmf import VMFParameters, unit_rows, vmf_parameters, vmf_responsibilities, vmf_sums
from pcem_spark.engine.blocks import Block
from pcem_spark.errors import InputError
from pcem_spark.model.settings import ModelSettings

__all__ = ["VMF_MAX_ITER", "VMF_TOL", "block_vmf_sums", "fit_vmf_local", "fit_vmf_blocks", "vmf_tables"]

# EM over the vectors stops after this many iterations, or when no mean direction moves by more than VMF_TOL
# (1 - cosine) and kappa by more than VMF_TOL relative.
VMF_MAX_ITER = 10
VMF_TOL = 1e-4

_NO_VECTORS = (
    "model.family = vmf models the documents' vectors, and no document has one: give the documents an "
    "embedding column (features.embedding), or use another family"
)


def _labelled_responsibilities(block: Block, rows: np.ndarray, target: np.ndarray) -> np.ndarray:
    """(len(rows), M): a labelled row's path scores (several paths: its share of each), summing to 1."""
    Y = np.asarray(path_scores(block.node_scores[rows], target), dtype=np.float64)
    total = Y.sum(axis=1, keepdims=True)
    return np.divide(Y, total, out=np.zeros_like(Y), where=total > 0)


def block_vmf_sums(
    block: Block,
    target: np.ndarray,
    tables: Optional[ScoringTables],
    params: Optional[VMFParameters],
    unlabeled_weight: float,
    doc_length: float = 0.0,
) -> Tuple[np.ndarray, np.ndarray]:
    """One block's ``(resp^T x, resp mass)``, (M, D) and (M,): labelled rows by their paths; unlabelled rows by
    their posterior under the words (``tables``) and the vectors (``params``; None: the words' alone, EM's
    start), times ``unlabeled_weight``. Zeros for a block without vectors."""
    M = target.shape[0]
    if block.E is None or not block.E.shape[0]:
        return np.zeros((M, 0)), np.zeros(M)
    E = unit_rows(block.E)
    resp = np.zeros((E.shape[0], M))
    labeled = np.flatnonzero(block.labeled)
    if len(labeled):
        resp[labeled] = _labelled_responsibilities(block, labeled, target)
    unlabeled = np.flatnonzero(~block.labeled)
    if unlabeled_weight > 0 and len(unlabeled):
        params = params if params is not None else VMFParameters(np.zeros((M, E.shape[1])), 0.0)
        X = block.X[unlabeled]
        X = length_normalize(X, doc_length) if doc_length > 0 else X
        words = log_softmax_rows(tables_joint_log_likelihood(X, tables))
        resp[unlabeled] = unlabeled_weight * vmf_responsibilities(words, E[unlabeled], params)
    return vmf_sums(E, resp)


def _add(a, b):
    if a[0].shape[1] == 0:
        return b
    if b[0].shape[1] == 0:
        return a
    return a[0] + b[0], a[1] + b[1]


def _moved(old: VMFParameters, new: VMFParameters) -> float:
    """The largest change between two fits: 1 - cosine of a path's directions, or kappa's relative change."""
    cosines = np.einsum("md,md->m", old.mu, new.mu)
    has = (np.abs(old.mu).sum(axis=1) > 0) | (np.abs(new.mu).sum(axis=1) > 0)
    direction = float(np.max(1.0 - cosines[has])) if has.any() else 0.0
    return max(direction, abs(new.kappa - old.kappa) / max(abs(old.kappa), 1e-12))


def _em(summed: Callable[[Optional[VMFParameters]], Tuple[np.ndarray, np.ndarray]], max_iter: int):
    """EM from the words' posterior: ``summed(params)`` is the sums over every block under ``params`` (None: the
    labelled rows' paths and the unlabelled rows' posterior under the words, PCEM's last E-step)."""
    sums, totals = summed(None)
    if sums.shape[1] == 0 or totals.sum() <= 0:
        raise InputError(_NO_VECTORS)
    params, n_iter, converged = vmf_parameters(sums, totals), 0, False
    while n_iter < max_iter and not converged:
        new = vmf_parameters(*summed(params))
        n_iter, converged, params = n_iter + 1, _moved(params, new) <= VMF_TOL, new
    return params, n_iter, converged


def vmf_tables(params: VMFParameters, vocab_size: int, dtype="float64") -> LinearTables:
    """The mixture as the pooled score's tables: beta 1 (the words' log posterior), no word weights, no bias,
    ``kappa`` as the vectors' scale and ``mu^T`` as their weights, the vectors scaled to unit length."""
    M, D = params.mu.shape
    weights_t = sp.vstack([sp.csr_matrix((vocab_size, M)), sp.csr_matrix(params.mu.T)]).tocsr().astype(dtype)
    return LinearTables(
        weights_t,
        np.zeros(M),
        np.ones(vocab_size),
        generative_weight=1.0,
        embedding_weight=float(params.kappa),
        unit_vectors=True,
    )


def fit_vmf_local(
    blocks: Sequence[Block], taxonomy: Taxonomy, vocab_size: int, settings: ModelSettings, tables: ScoringTables
) -> LinearTables:
    """The mixture on a list of blocks, in this process (a cross-validation fold), after the fold's EM."""
    target = np.asarray(taxonomy.leaf_node_matrix(), dtype=np.float64)
    weight = float(settings.resolved().unlabeled_weight)

    def summed(params):
        out = (np.zeros((target.shape[0], 0)), np.zeros(target.shape[0]))
        for b in blocks:
            out = _add(out, block_vmf_sums(b, target, tables, params, weight, settings.doc_length))
        return out

    params, _, _ = _em(summed, VMF_MAX_ITER)
    return vmf_tables(params, vocab_size, settings.parameter_dtype)


def fit_vmf_blocks(
    blocks, taxonomy: Taxonomy, vocab_size: int, settings: ModelSettings, tables: ScoringTables
) -> Tuple[LinearTables, Dict[str, object]]:
    """The mixture on the cached RDD of :class:`Block` of a full fit (one Spark pass per EM iteration), and what
    it did. ``tables``: the fitted generative model's, broadcast once."""
    from pyspark import RDD

    if not isinstance(blocks, RDD):
        raise InputError("model.family = vmf is fitted on a classic Spark session (not over Spark Connect)")
    t0 = time.perf_counter()
    target = np.asarray(taxonomy.leaf_node_matrix(), dtype=np.float64)
    weight = float(settings.resolved().unlabeled_weight)
    doc_length = settings.doc_length
    sc = blocks.context
    tables_bc = sc.broadcast((target, tables))

    def summed(params):
        params_bc = sc.broadcast(params)

        def part_sums(part: Iterable[Block]):
            tg, tb = tables_bc.value
            out = (np.zeros((tg.shape[0], 0)), np.zeros(tg.shape[0]))
            for b in part:
                out = _add(out, block_vmf_sums(b, tg, tb, params_bc.value, weight, doc_length))
            return [out]

        try:
            return blocks.mapPartitions(part_sums).treeReduce(_add, depth=2)
        finally:
            params_bc.unpersist()

    try:
        params, n_iter, converged = _em(summed, VMF_MAX_ITER)
    finally:
        tables_bc.unpersist()
    info = {
        "family": "vmf",
        "kappa": round(float(params.kappa), 6),
        "embedding_dim": int(params.mu.shape[1]),
        "paths_with_vectors": int((np.abs(params.mu).sum(axis=1) > 0).sum()),
        "unlabeled_weight": weight,
        "n_iter": n_iter,
        "converged": converged,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return vmf_tables(params, vocab_size), info  # float64, as the full fit's regression (what a load reads)
