"""The model family at the refit's label count: a learning-curve correction of the sampled cross-validation.

The sampled cross-validation (:mod:`pcem_spark.model.sampled_cv`) scores every
family on folds of at most ``tune.max_labeled`` labelled documents, while the
refit learns from all of them. Generative models reach their asymptote with
fewer examples than discriminative ones (Ng & Jordan, NIPS 2001), so the
ranking of the families at the sample's size can flip at the refit's: on 20NG
at 90% labelled the folds (4,929 sampled of 13,568 labelled documents) scored
the combined and the discriminative family 0.8823 and 0.8824, and the test set
separates them by 0.7 micro-F1 (docs/RESULTS.md, "Model families").

When the sample holds fewer labelled documents than the corpus, each family's
best grid point is fitted once more per fold on a seeded half of that fold's
labelled training documents (:func:`halved_parts`). The gain from the half to
the whole is the family's slope per doubling of the labels, per fold, and its
score at the refit's count is extrapolated log-linearly
(:func:`extrapolated_scores`). The family is then chosen by a paired
one-standard-error rule (:func:`paired_choice`): a less preferred family must
beat the preferred one by more than the standard error of their per-fold
differences -- the folds share their documents, so the paired differences are
far less noisy than either family's scores.

Pure numpy: tested without Spark.
"""

from __future__ import annotations

import math
from typing import Sequence, Tuple

import numpy as np
import scipy.sparse as sp

__all__ = ["HALF_SHARE", "doublings", "halved_parts", "extrapolated_scores", "paired_choice"]

# The share of a fold's labelled training documents the second fit keeps: one doubling below the fold.
HALF_SHARE = 0.5


def doublings(n_labeled: int, n_labeled_sampled: int) -> float:
    """How many doublings of the labels separate the sample from the corpus: ``log2(n_labeled / n_sampled)``, >= 0.

    0 when the sample holds every labelled document: the cross-validation's ranking is then used as is.

    >>> doublings(13568, 4929) > 1.4, doublings(4524, 4524)
    (True, 0.0)
    """
    if n_labeled_sampled <= 0 or n_labeled <= n_labeled_sampled:
        return 0.0
    return math.log2(n_labeled / n_labeled_sampled)


def halved_parts(parts: Sequence[Tuple[int, object]], fold: int, seed: int, kept_parts: Sequence[int]):
    """``parts`` with a seeded half of the labelled rows of every training fold (parts ``>= 0``, not ``fold``).

    ``parts``: ``(part, block)`` pairs (:class:`pcem_spark.engine.blocks.Block`).
    The held-out fold, the unlabelled part and ``kept_parts`` (a leaf's only
    labelled document, trained on by every fold) are left whole; so is every
    block's order. The same ``(seed, fold)`` keeps the same rows.
    """
    from pcem_spark.engine.blocks import Block

    out = []
    for index, (part, block) in enumerate(parts):
        if part < 0 or part == fold or part in kept_parts:
            out.append((part, block))
            continue
        rng = np.random.default_rng([int(seed) & 0x7FFFFFFF, int(fold), int(part) & 0xFFFF, index])
        keep = rng.random(block.X.shape[0]) < HALF_SHARE
        if keep.all():
            out.append((part, block))
            continue
        rows = np.flatnonzero(keep)
        out.append((part, Block(block.X[rows], sp.csr_matrix(block.node_scores)[rows], block.labeled[rows])))
    return out


def extrapolated_scores(full: np.ndarray, half: np.ndarray, n_doublings: float) -> np.ndarray:
    """Per-fold scores at ``n_doublings`` doublings beyond the sample: ``full + (full - half) * n_doublings``.

    ``full``, ``half``: (F, k) scores of F families on k folds, fitted on each
    fold's labelled training documents and on half of them.

    >>> extrapolated_scores(np.array([[0.8, 0.9]]), np.array([[0.7, 0.85]]), 2.0).round(3).tolist()
    [[1.0, 1.0]]
    """
    full = np.asarray(full, dtype=np.float64)
    return full + (full - np.asarray(half, dtype=np.float64)) * float(n_doublings)


def paired_choice(scores: np.ndarray) -> int:
    """Row of ``scores`` (F families x k folds, the most preferred family first) that the paired rule keeps.

    The family with the highest mean is the best; the kept one is the most
    preferred family whose mean trails the best's by at most the standard
    error of their per-fold differences, ``std(d) / sqrt(k - 1)`` (population
    std, as the grid's one-SE rule uses).

    >>> paired_choice(np.array([[0.80, 0.82, 0.81], [0.81, 0.83, 0.82]]))  # +0.01 on every fold
    1
    >>> paired_choice(np.array([[0.80, 0.82, 0.81], [0.83, 0.80, 0.82]]))  # +0.007 on average, noisy
    0
    """
    scores = np.asarray(scores, dtype=np.float64)
    means = scores.mean(axis=1)
    best = int(np.argmax(means))  # ties: the most preferred
    k = scores.shape[1]
    for family in range(best + 1):
        d = scores[best] - scores[family]
        if d.mean() <= d.std() / math.sqrt(max(k - 1, 1)):
            return family
    return best
