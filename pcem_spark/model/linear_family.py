"""The combined and discriminative families: a softmax regression over paths fitted beside the generative model.

With ``model.family = "combined"`` a path's score is ``beta * log P_gen(path | doc)``
plus a softmax regression's ``F W^T + b`` on sublinear tf-idf
(:mod:`pcem_spark.core.logistic`), fitted on the labelled documents with an L2
penalty of ``1 / (C * labelled documents)`` (scikit-learn's ``C``); with
``"discriminative"`` beta is 0. The regression's targets are the labelled
documents' paths (a row labelled with several paths spreads its mass over
them), and the idf weights count every training document, labelled or not.

:func:`fit_linear_local` fits on a list of blocks in one process (each
cross-validation and calibration fold); :func:`fit_linear_blocks` on the
cached blocks of a full fit: in one task when the labelled rows are few
(:func:`fits_in_one_task`), else one Spark pass per L-BFGS evaluation
(:mod:`pcem_spark.engine.softmax_pass`).

The weights are a dense (M, V) array while it fits (:data:`LINEAR_MAX_CELLS`),
else -- or with ``model.linear_weights = "observed"`` -- only the (path, term)
pairs seen together in a labelled document are free
(:func:`pcem_spark.core.logistic.observed_support`): the regression then costs
the labelled documents' non-zeros, not paths x terms, on the driver and in
every broadcast.
"""

from __future__ import annotations

import math
import time
from typing import Dict, Iterable, Sequence, Tuple

import numpy as np
import scipy.sparse as sp
from pyspark import RDD

from pcem_spark.core.logistic import LinearTables, fit_softmax, linear_tables, observed_support
from pcem_spark.core.similarity import idf_weights
from pcem_spark.core.structure import path_scores
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.blocks import Block
from pcem_spark.engine.limits import check_result_size
from pcem_spark.engine.softmax_pass import (
    add_frequencies,
    block_frequencies,
    features_terms,
    fit_softmax_in_one_task,
    fit_softmax_on_blocks,
    labeled_features,
    support_pass,
)
from pcem_spark.errors import InputError
from pcem_spark.model.settings import ModelSettings

__all__ = [
    "LINEAR_MAX_CELLS",
    "LINEAR_MAX_ITER",
    "LINEAR_TOL",
    "LINEAR_ONE_TASK_WORK",
    "LINEAR_ONE_TASK_NNZ",
    "fits_in_one_task",
    "generative_weight_of",
    "embedding_weight_of",
    "linear_l2",
    "weight_layout",
    "document_frequency",
    "check_linear_family",
    "fit_linear_local",
    "fit_linear_blocks",
    "with_vector_support",
]

# The regression's free weights live on the driver and in every broadcast, and scipy's L-BFGS keeps
# about 25 vectors of them (its 10 correction pairs and the iterates): 2^23 weights (64 MB as float64,
# ~1.7 GB in L-BFGS) at most; 20 paths x 20k terms are 400k. A dense layout wider than this becomes the
# observed support under linear_weights = "auto"; an observed support larger than this is refused.
LINEAR_MAX_CELLS = 1 << 23
# L-BFGS stops after this many iterations, or when the projected gradient is below LINEAR_TOL.
LINEAR_MAX_ITER = 200
LINEAR_TOL = 1e-5
# A full fit's regression runs in one task while an evaluation's arithmetic, the labelled non-zeros x paths
# multiply-adds, stays under this (~0.1-0.3 s on one core, about what a Spark job per evaluation costs in
# overhead), and its labelled rows under LINEAR_ONE_TASK_NNZ non-zeros (~200 MB of tf-idf rows in that task).
# Above either, every evaluation is a pass over the cluster. 20NG at 90% labelled: 1.5M x 20 = 3e7, one task.
LINEAR_ONE_TASK_WORK = 1 << 28
LINEAR_ONE_TASK_NNZ = 1 << 24

_NO_LABELS = (
    "model.family = {family} needs labelled documents: its softmax regression learns from them only, and "
    "this batch has none (a warm start on unlabelled documents: use model.family = generative)"
)


def generative_weight_of(settings: ModelSettings) -> float:
    """beta of the family: the setting for "combined" ("auto" not cross-validated: its fallback, as
    ``ModelSettings.resolved`` gives it), 0 for "discriminative"."""
    if settings.family == "discriminative":
        return 0.0
    if settings.family == "vmf":  # the words' whole log posterior beside the vectors' log-likelihood
        return 1.0
    return float(settings.resolved().generative_weight)


def embedding_weight_of(settings: ModelSettings) -> float:
    """The scale of the document vectors: the setting ("auto" not cross-validated: its fallback)."""
    return float(settings.resolved().embedding_weight)


def linear_l2(linear_c: float, n_labeled: float) -> float:
    """The objective's L2 strength for scikit-learn's ``C`` over ``n_labeled`` labelled documents.

    scikit-learn minimises ``C * sum(loss) + ||W||^2 / 2``; the objective here is the mean loss plus
    ``(l2 / 2) ||W||^2`` (:func:`pcem_spark.core.logistic.softmax_objective`), the same minimiser for
    ``l2 = 1 / (C * n)``.
    """
    return 1.0 / (float(linear_c) * max(float(n_labeled), 1.0))


def document_frequency(blocks: Iterable[Block], vocab_size: int) -> Tuple[np.ndarray, int]:
    """(V,) documents containing each term, and the number of documents, over ``blocks``."""
    df = np.zeros(vocab_size)
    n = 0
    for block in blocks:
        df += np.bincount(block.X.indices, minlength=vocab_size)[:vocab_size]  # CSR: one entry per (row, term)
        n += block.X.shape[0]
    return df, n


def weight_layout(settings: ModelSettings, n_paths: int, vocab_size: int) -> str:
    """``"dense"`` or ``"observed"``: the layout of the regression's weights for these settings and this width.

    ``model.linear_weights = "auto"`` is dense while paths x terms fit in :data:`LINEAR_MAX_CELLS`;
    an explicit ``"dense"`` wider than that is refused (InputError).
    """
    cells = n_paths * vocab_size
    if settings.linear_weights == "observed" or (settings.linear_weights == "auto" and cells > LINEAR_MAX_CELLS):
        return "observed"
    if cells > LINEAR_MAX_CELLS:
        raise InputError(
            f"model.linear_weights = dense keeps a paths x terms weight array: {n_paths} paths x {vocab_size} "
            f"terms = {cells:,} weights, above {LINEAR_MAX_CELLS:,}; use model.linear_weights = auto or observed "
            "(only the (path, term) pairs seen in a labelled document are weighed)"
        )
    return "dense"


def _check_support(nnz: int) -> None:
    if nnz > LINEAR_MAX_CELLS:
        raise InputError(
            f"the softmax regression's observed support has {nnz:,} (path, term) pairs, above {LINEAR_MAX_CELLS:,}: "
            "use model.family = generative, fewer labelled documents for the regression, or a smaller "
            "features.vocab_size"
        )


def _targets(taxonomy: Taxonomy) -> np.ndarray:
    """(M, K) leaf indicator: a labelled row's node scores times its transpose = its path(s)."""
    return np.asarray(taxonomy.leaf_node_matrix(), dtype=np.float64)


def check_linear_family(blocks, taxonomy: Taxonomy, vocab_size: int, settings: ModelSettings) -> None:
    """Refuse, before the generative fit, what :func:`fit_linear_blocks` would refuse after it."""
    if settings.family == "vmf" and not isinstance(blocks, RDD):  # before the EM, not after it
        raise InputError("model.family = vmf is fitted on a classic Spark session (not over Spark Connect)")
    if settings.family in ("generative", "vmf"):  # no regression (vmf: model.vmf_family)
        return
    weight_layout(settings, taxonomy.n_paths, vocab_size)


def fit_linear_local(
    blocks: Sequence[Block], taxonomy: Taxonomy, vocab_size: int, settings: ModelSettings
) -> LinearTables:
    """The regression on a list of blocks, in this process (a cross-validation or calibration fold's fit)."""
    layout = weight_layout(settings, taxonomy.n_paths, vocab_size)
    df, n = document_frequency(blocks, vocab_size)
    idf = idf_weights(df, n)
    target = _targets(taxonomy)
    n_labeled = sum(int(b.labeled.sum()) for b in blocks)
    dim = max((int(b.E.shape[1]) for b in blocks if b.E is not None and b.E.shape[0]), default=0)
    dim = dim if embedding_weight_of(settings) > 0 else 0  # weight 0: the words alone, as without vectors
    weight = embedding_weight_of(settings) if dim else 0.0
    if n_labeled == 0:
        raise InputError(_NO_LABELS.format(family=settings.family))
    support = None
    if layout == "observed":
        rows = [(b, np.flatnonzero(b.labeled)) for b in blocks]
        X = sp.vstack([b.X[r] for b, r in rows if len(r)]).tocsr()
        Y = np.vstack([np.asarray(path_scores(b.node_scores[r], target)) for b, r in rows if len(r)])
        support = with_vector_support(observed_support(X, Y), dim)
        _check_support(support.nnz)
    features = labeled_features(blocks, idf, target, (dim, weight))  # once: L-BFGS evaluates the objective many times
    fit = fit_softmax(
        lambda W, b: features_terms(features, W, b),
        taxonomy.n_paths,
        vocab_size + dim,
        linear_l2(settings.linear_c, n_labeled),
        LINEAR_MAX_ITER,
        LINEAR_TOL,
        support=support,
    )
    return linear_tables(fit, idf, generative_weight_of(settings), settings.parameter_dtype, weight)


def with_vector_support(support: sp.csr_matrix, dim: int) -> sp.csr_matrix:
    """An observed (path, term) support (M, V) widened by D vector columns, every one free for every path:
    a document vector is dense, so every path's weight on each of its dimensions is observed."""
    if not dim:
        return support
    M = support.shape[0]
    dense = sp.csr_matrix((np.zeros(M * dim), np.tile(np.arange(dim), M), np.arange(M + 1) * dim), shape=(M, dim))
    return sp.hstack([support, dense], format="csr")


def fits_in_one_task(labeled_nnz: int, n_paths: int) -> bool:
    """Whether a full fit's regression runs in one task (:func:`fit_softmax_in_one_task`) rather than one Spark
    pass per evaluation: its labelled rows' non-zeros and an evaluation's arithmetic are both small."""
    return labeled_nnz <= LINEAR_ONE_TASK_NNZ and labeled_nnz * max(n_paths, 1) <= LINEAR_ONE_TASK_WORK


def _fit_on_rdd(blocks: RDD, target: np.ndarray, vocab_size: int, settings: ModelSettings, layout: str):
    df, n, n_labeled, labeled_nnz, dim = blocks.mapPartitions(
        lambda part: [block_frequencies(part, vocab_size)]
    ).treeReduce(add_frequencies, depth=2)
    if n_labeled == 0:
        raise InputError(_NO_LABELS.format(family=settings.family))
    dim = dim if embedding_weight_of(settings) > 0 else 0  # weight 0: the words alone, as without vectors
    embedding = (dim, embedding_weight_of(settings) if dim else 0.0)
    support = None
    if layout == "observed":
        support = with_vector_support(support_pass(blocks, target, vocab_size), dim)
        _check_support(support.nnz)
    n_weights = target.shape[0] * (vocab_size + dim) if support is None else support.nnz
    # treeReduce brings about sqrt(partitions) gradients (the free weights, float64) to the driver per evaluation.
    n_parts = blocks.getNumPartitions()
    check_result_size(
        blocks.context,
        math.ceil(math.sqrt(max(n_parts, 1))) * (n_weights + target.shape[0] + 1) * 8.0,
        f"the softmax regression's gradients ({n_weights:,} weights, {layout}; {n_parts} partitions)",
    )
    idf = idf_weights(df, n)
    l2 = linear_l2(settings.linear_c, n_labeled)
    # A labelled row's vector is D more non-zeros of its features.
    if fits_in_one_task(labeled_nnz + n_labeled * dim, target.shape[0]):
        fit = fit_softmax_in_one_task(
            blocks, idf, target, l2, LINEAR_MAX_ITER, LINEAR_TOL, support=support, embedding=embedding
        )
        return fit, idf, n, n_labeled, n_weights, "one task", embedding
    fit = fit_softmax_on_blocks(
        blocks, idf, target, l2, LINEAR_MAX_ITER, LINEAR_TOL, support=support, embedding=embedding
    )
    return fit, idf, n, n_labeled, n_weights, "a pass per evaluation", embedding


def _fit_on_frame(frame, target: np.ndarray, vocab_size: int, settings: ModelSettings, layout: str):
    """The DataFrame-only fit (Spark Connect): the same passes on packed block rows."""
    from pcem_spark.engine.frame_softmax_pass import (
        fit_softmax_in_one_task_on_frame,
        fit_softmax_on_frame,
        frame_document_frequency,
        frame_support,
        labeled_frame,
    )
    from pcem_spark.engine.frame_sums import _default_parallelism

    n_nodes = target.shape[1]
    df, n, n_labeled, labeled_nnz, dim = frame_document_frequency(frame, vocab_size, n_nodes)
    if n_labeled == 0:
        raise InputError(_NO_LABELS.format(family=settings.family))
    if dim:
        raise InputError(
            "document vectors (features.embedding) are not used over Spark Connect yet: train on a classic "
            "session, or set features.embedding = none"
        )
    spark = frame.sparkSession
    one_task = fits_in_one_task(labeled_nnz, target.shape[0])
    n_tasks = _default_parallelism(spark)  # the labelled rows are filtered in parallel either way
    labeled = labeled_frame(frame, vocab_size, n_nodes).coalesce(n_tasks).cache()
    try:
        support = None
        if layout == "observed":
            support = frame_support(labeled, target, vocab_size, n_nodes)
            _check_support(support.nnz)
        n_weights = target.shape[0] * vocab_size if support is None else support.nnz
        # Each task's summed terms (the free weights, float64) reach the driver per evaluation.
        check_result_size(
            spark,
            n_tasks * (n_weights + target.shape[0] + 1) * 8.0,
            f"the softmax regression's gradients ({n_weights:,} weights, {layout}; {n_tasks} tasks)",
        )
        idf = idf_weights(df, n)
        fit_on = fit_softmax_in_one_task_on_frame if one_task else fit_softmax_on_frame
        fit = fit_on(
            labeled,
            idf,
            target,
            linear_l2(settings.linear_c, n_labeled),
            vocab_size,
            LINEAR_MAX_ITER,
            LINEAR_TOL,
            support=support,
        )
    finally:
        labeled.unpersist()
    return fit, idf, n, n_labeled, n_weights, "one task" if one_task else "a pass per evaluation", (0, 0.0)


def fit_linear_blocks(
    blocks, taxonomy: Taxonomy, vocab_size: int, settings: ModelSettings
) -> Tuple[LinearTables, Dict[str, object]]:
    """The regression on the cached blocks of a full fit, and what it did.

    ``blocks``: an RDD of :class:`Block` (classic Spark), or a DataFrame of packed block rows
    (:data:`pcem_spark.engine.blocks.BLOCK_ROW`; what Spark Connect fits on), each read by the
    matching pass (:mod:`pcem_spark.engine.softmax_pass`, :mod:`pcem_spark.engine.frame_softmax_pass`).
    """
    layout = weight_layout(settings, taxonomy.n_paths, vocab_size)
    t0 = time.perf_counter()
    fit_on = _fit_on_rdd if isinstance(blocks, RDD) else _fit_on_frame
    fit, idf, n, n_labeled, n_weights, where, embedding = fit_on(
        blocks, _targets(taxonomy), vocab_size, settings, layout
    )
    info = {
        "family": settings.family,
        "linear_c": float(settings.linear_c),
        "generative_weight": generative_weight_of(settings),
        "n_labeled": n_labeled,
        "n_documents": int(n),
        "weights": layout,
        "n_weights": int(n_weights),
        "embedding_dim": int(embedding[0]),
        "embedding_weight": float(embedding[1]),
        "fitted_in": where,
        "n_iter": fit.n_iter,
        "converged": fit.converged,
        "objective": fit.objective,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return linear_tables(fit, idf, generative_weight_of(settings), "float64", embedding[1]), info
