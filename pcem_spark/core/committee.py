"""A committee of naive Bayes models drawn from the posterior of the fitted parameters.

McCallum & Nigam (ICML 1998), "Employing EM and Pool-Based Active Learning for Text
Classification", build their query-by-committee members this way: each member's word
distributions are a draw from the Dirichlet posterior that the (expected) counts define. Where
the counts are large the members agree; where a decision rests on a few counts they part, and a
document they disagree on is worth a label.

With Lidstone smoothing ``s`` and expected counts ``c_jw`` (:func:`recovered_counts`), the
posterior of component ``j``'s distribution is ``Dirichlet(c_j + s)``, drawn as normalised
gamma variates. The words a component never saw (``c_jw = 0``, most of the vocabulary) are
drawn as one gamma of shape ``s x (V - nnz_j)`` shared evenly among them: their total mass has
exactly the Dirichlet's law and they keep one common value, so a member is as sparse as the model
(a :class:`PathParameters` with the same non-zeros) however wide the vocabulary. The path priors
are kept: the doubt worth a label is about the words.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.parameters import PathParameters, recovered_counts

__all__ = ["sample_member_parameters", "member_seeds"]


def member_seeds(seed: int, size: int) -> list:
    """``size`` independent seeds, one per member, from ``seed`` (numpy's SeedSequence spawning)."""
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(int(seed)).spawn(int(size))]


def sample_member_parameters(params: PathParameters, smoothing: float, rng: np.random.Generator) -> PathParameters:
    """One committee member: ``theta_j ~ Dirichlet(c_j + s)`` for each component ``j``.

    Parameters
    ----------
    params : PathParameters, shape (R, V), fitted with Lidstone ``smoothing``.
    smoothing : float > 0, the model's word smoothing (the counts are recovered with it).
    rng : numpy Generator.

    Returns
    -------
    PathParameters, shape (R, V), the same ``log_prior`` and non-zero pattern; each row of
    ``exp(log_theta)`` sums to 1. ``log_ratio`` may hold negative entries (a seen word drawn below
    the unseen words' common value): scoring does not need them to be >= 0.
    """
    if not smoothing > 0:
        raise ValueError(f"a committee needs a smoothing > 0 (the Dirichlet's pseudo-count), got {smoothing}")
    R, V = params.shape
    counts, _ = recovered_counts(params, smoothing)
    counts = sp.csr_matrix(counts, dtype=np.float64)
    drawn = counts.copy()
    drawn.data = rng.gamma(counts.data + smoothing)
    seen = np.diff(counts.indptr)
    unseen = V - seen
    # One gamma per row for all its unseen words (shape 0 when there are none: no mass).
    unseen_total = np.where(unseen > 0, rng.gamma(np.maximum(unseen, 1) * smoothing), 0.0)
    totals = np.asarray(drawn.sum(axis=1), dtype=np.float64).ravel() + unseen_total
    # The value every unseen word shares; a row that saw every word takes its smallest draw as base.
    row_min = np.array([drawn.data[a:b].min() if b > a else 1.0 for a, b in zip(counts.indptr[:-1], counts.indptr[1:])])
    base = np.where(unseen > 0, unseen_total / np.maximum(unseen, 1), row_min)
    base = np.maximum(base, np.finfo(np.float64).tiny)  # a gamma draw of tiny shape can underflow to 0
    log_ratio = drawn.copy()
    rows = np.repeat(np.arange(R), seen)
    log_ratio.data = np.log(np.maximum(drawn.data, np.finfo(np.float64).tiny)) - np.log(base[rows])
    return PathParameters(
        np.asarray(params.log_prior, dtype=np.float64).copy(), np.log(base) - np.log(totals), log_ratio
    )
