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
cached blocks of a full fit, one Spark pass per L-BFGS evaluation
(:mod:`pcem_spark.engine.softmax_pass`).
"""

from __future__ import annotations

import math
import time
from typing import Dict, Iterable, Sequence, Tuple

import numpy as np
from pyspark import RDD

from pcem_spark.core.logistic import LinearTables, fit_softmax, linear_tables
from pcem_spark.core.similarity import idf_weights
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.blocks import Block
from pcem_spark.engine.limits import check_result_size
from pcem_spark.engine.softmax_pass import block_terms, fit_softmax_on_blocks
from pcem_spark.errors import InputError
from pcem_spark.model.settings import ModelSettings

__all__ = [
    "LINEAR_MAX_CELLS",
    "LINEAR_MAX_ITER",
    "LINEAR_TOL",
    "generative_weight_of",
    "linear_l2",
    "document_frequency",
    "check_linear_family",
    "fit_linear_local",
    "fit_linear_blocks",
]

# The regression's weights are a dense (M, V) array on the driver and in every broadcast, and scipy's
# L-BFGS keeps about 25 such arrays (its 10 correction pairs and the iterates): 2^23 cells (64 MB as
# float64, ~1.7 GB in L-BFGS) at most; 20 paths x 20k terms are 400k. Wider taxonomies need a sparse
# or per-parent model, which this family does not have yet: they are refused with this number.
LINEAR_MAX_CELLS = 1 << 23
# L-BFGS stops after this many iterations, or when the projected gradient is below LINEAR_TOL.
LINEAR_MAX_ITER = 200
LINEAR_TOL = 1e-5

_NO_CONNECT = (
    "model.family = combined / discriminative is not available over Spark Connect yet "
    "(its fit runs on RDD blocks); use model.family = generative there"
)
_NO_LABELS = (
    "model.family = {family} needs labelled documents: its softmax regression learns from them only, and "
    "this batch has none (a warm start on unlabelled documents: use model.family = generative)"
)


def generative_weight_of(settings: ModelSettings) -> float:
    """beta of the family: the setting for "combined", 0 for "discriminative"."""
    return 0.0 if settings.family == "discriminative" else float(settings.generative_weight)


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


def _check_width(taxonomy: Taxonomy, vocab_size: int) -> None:
    cells = taxonomy.n_paths * vocab_size
    if cells > LINEAR_MAX_CELLS:
        raise InputError(
            f"model.family = combined / discriminative keeps a dense paths x terms weight array: "
            f"{taxonomy.n_paths} paths x {vocab_size} terms = {cells:,} cells, above {LINEAR_MAX_CELLS:,}; "
            "use model.family = generative, or a smaller features.vocab_size"
        )


def _targets(taxonomy: Taxonomy) -> np.ndarray:
    """(M, K) leaf indicator: a labelled row's node scores times its transpose = its path(s)."""
    return np.asarray(taxonomy.leaf_node_matrix(), dtype=np.float64)


def check_linear_family(blocks, taxonomy: Taxonomy, vocab_size: int, settings: ModelSettings) -> None:
    """Refuse, before the generative fit, what :func:`fit_linear_blocks` would refuse after it."""
    if settings.family == "generative":
        return
    if not isinstance(blocks, RDD):
        raise InputError(_NO_CONNECT)
    _check_width(taxonomy, vocab_size)


def fit_linear_local(
    blocks: Sequence[Block], taxonomy: Taxonomy, vocab_size: int, settings: ModelSettings
) -> LinearTables:
    """The regression on a list of blocks, in this process (a cross-validation or calibration fold's fit)."""
    _check_width(taxonomy, vocab_size)
    df, n = document_frequency(blocks, vocab_size)
    idf = idf_weights(df, n)
    target = _targets(taxonomy)
    n_labeled = sum(int(b.labeled.sum()) for b in blocks)
    if n_labeled == 0:
        raise InputError(_NO_LABELS.format(family=settings.family))
    fit = fit_softmax(
        lambda W, b: block_terms(blocks, idf, target, W, b),
        taxonomy.n_paths,
        vocab_size,
        linear_l2(settings.linear_c, n_labeled),
        LINEAR_MAX_ITER,
        LINEAR_TOL,
    )
    return linear_tables(fit, idf, generative_weight_of(settings), settings.parameter_dtype)


def fit_linear_blocks(
    blocks, taxonomy: Taxonomy, vocab_size: int, settings: ModelSettings
) -> Tuple[LinearTables, Dict[str, object]]:
    """The regression on the cached blocks of a full fit (an RDD of :class:`Block`), and what it did."""
    if not isinstance(blocks, RDD):
        raise InputError(_NO_CONNECT)
    _check_width(taxonomy, vocab_size)
    # treeReduce brings about sqrt(partitions) gradients of (M, V) float64 to the driver per evaluation.
    n_parts = blocks.getNumPartitions()
    check_result_size(
        blocks.context,
        math.ceil(math.sqrt(max(n_parts, 1))) * (taxonomy.n_paths + 1) * (vocab_size + 1) * 8.0,
        f"the softmax regression's gradients ({taxonomy.n_paths:,} paths x {vocab_size:,} terms, {n_parts} partitions)",
    )
    t0 = time.perf_counter()

    def add(a, b):
        return a[0] + b[0], a[1] + b[1]

    df, n = blocks.mapPartitions(lambda part: [document_frequency(part, vocab_size)]).treeReduce(add, depth=2)
    n_labeled = int(blocks.map(lambda b: int(b.labeled.sum())).sum())
    if n_labeled == 0:
        raise InputError(_NO_LABELS.format(family=settings.family))
    idf = idf_weights(df, n)
    fit = fit_softmax_on_blocks(
        blocks,
        idf,
        _targets(taxonomy),
        linear_l2(settings.linear_c, n_labeled),
        LINEAR_MAX_ITER,
        LINEAR_TOL,
    )
    info = {
        "family": settings.family,
        "linear_c": float(settings.linear_c),
        "generative_weight": generative_weight_of(settings),
        "n_labeled": n_labeled,
        "n_documents": int(n),
        "n_iter": fit.n_iter,
        "converged": fit.converged,
        "objective": fit.objective,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return linear_tables(fit, idf, generative_weight_of(settings), "float64"), info
