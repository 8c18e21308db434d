"""The M-step and the parameters it produces: smoothed log-probabilities of words per path
(Eq. 6) and path priors (Eq. 7), dense or sparse, the evidence that chooses the smoothing,
and parameters carried over to a new vocabulary for a warm start. Pure numpy/scipy.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln

from pcem_spark.errors import InputError

__all__ = [
    "DEFAULT_SMOOTHING_GRID",
    "dirichlet_log_evidence",
    "choose_smoothing",
    "log_parameters",
    "log_path_prior",
    "PathParameters",
    "sparse_log_parameters",
    "sparse_log_prior_density",
    "term_mapping",
    "recovered_counts",
    "PreviousFit",
    "warm_start_parameters",
    "log_prior_density",
]

# Pseudo-counts tried by ``smoothing = "auto"`` (log-spaced, 0.01 .. 1): below
# 0.01 a word unseen in a class costs more than ~10 nats per occurrence and one
# stray token decides a document; above 1 the labelled counts of a small
# class are swamped by the V pseudo-counts (measured in docs/RESULTS.md).
DEFAULT_SMOOTHING_GRID = tuple(float(x) for x in np.round(np.logspace(-2, 0, 9), 6))


def dirichlet_log_evidence(word_counts, alphas) -> np.ndarray:
    """Log evidence of each row of counts under a symmetric Dirichlet-multinomial, per pseudo-count.

    For row j with counts ``c_j`` (length V, total ``N_j``) and pseudo-count
    ``a``: ``log G(V a) - log G(V a + N_j) + sum_w [log G(a + c_jw) - log G(a)]``
    (the multinomial coefficient does not depend on ``a`` and is left out).
    This is the marginal likelihood of the counts with theta integrated out,
    i.e. how well ``a`` predicts a class's words from its other words -- the
    quantity Laplace / Lidstone smoothing with ``a`` is the posterior mean of.
    Only non-zero counts enter the sum, so the cost is ``O(nnz)`` per ``a``;
    fractional counts (path scores of Eq. 2, posteriors) are fine.

    Parameters
    ----------
    word_counts : ndarray or sparse matrix, shape (M, V)
    alphas : sequence of float > 0

    Returns
    -------
    ndarray, shape (len(alphas),): sum over rows of the log evidence
    """
    if sp.issparse(word_counts):
        wc = sp.csr_matrix(word_counts)
        nz = wc.data[wc.data > 0]
        row_totals = np.asarray(wc.sum(axis=1)).ravel()
        V = wc.shape[1]
    else:
        wc = np.asarray(word_counts, dtype=np.float64)
        nz = wc[wc > 0]
        row_totals = wc.sum(axis=1)
        V = wc.shape[1]
    row_totals = row_totals[row_totals > 0]
    out = np.empty(len(alphas))
    for i, a in enumerate(alphas):
        if a <= 0:
            raise ValueError(f"pseudo-counts must be > 0, got {a}")
        out[i] = np.sum(gammaln(V * a) - gammaln(V * a + row_totals)) + np.sum(gammaln(a + nz)) - nz.size * gammaln(a)
    return out


def choose_smoothing(word_counts, grid=DEFAULT_SMOOTHING_GRID) -> Tuple[float, np.ndarray]:
    """The pseudo-count of ``grid`` with the largest Dirichlet-multinomial evidence of ``word_counts``.

    Deterministic (ties go to the larger pseudo-count, the safer side); with
    no counts at all the largest grid value is returned.

    Parameters
    ----------
    word_counts : ndarray or sparse matrix, shape (M, V)
        Per-path word counts (``sum_i S_ij x_it``), fractional counts allowed.
    grid : sequence of float > 0
        The candidate pseudo-counts (default :data:`DEFAULT_SMOOTHING_GRID`).

    Returns
    -------
    smoothing : float
        The chosen pseudo-count.
    log_evidence : ndarray, shape (len(grid),)
        :func:`dirichlet_log_evidence` of each grid value, in ascending grid order.

    Examples
    --------
    >>> import numpy as np
    >>> word_counts = np.array([[4.0, 0.0, 0.0, 1.0], [0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 2.0, 2.0]])
    >>> smoothing, log_evidence = choose_smoothing(word_counts, grid=(1.0, 0.1))
    >>> smoothing, log_evidence.shape
    (1.0, (2,))
    """
    grid = np.asarray(sorted(grid), dtype=np.float64)
    ev = dirichlet_log_evidence(word_counts, grid)
    best = len(grid) - 1 - int(np.argmax(ev[::-1]))
    return float(grid[best]), ev


def log_parameters(
    word_counts: np.ndarray,
    path_totals: np.ndarray,
    smoothing: float = 1.0,
    groups: Optional[np.ndarray] = None,
    prior_smoothing: Optional[float] = None,
) -> Tuple[np.ndarray, np.ndarray]:
    """Eqs. 3-4 (and 6-7): Laplace-smoothed path prior and word distributions.

    Parameters
    ----------
    word_counts : ndarray, shape (M, V)
        ``sum_i S_ij x_it``.
    path_totals : ndarray, shape (M,)
        ``sum_i S_ij``.
    smoothing : float
        Pseudo-count added to every word count; the paper uses 1.
    groups : int ndarray (M,) or None
        Normalise the prior within each group (per-node / per-depth
        classifiers of the baselines); None = one group (the paper).
    prior_smoothing : float or None
        Pseudo-count of the path prior (None: ``smoothing``, the paper).

    Returns
    -------
    log_prior : ndarray, shape (M,)
        ``log P(p_j)``; ``exp`` sums to 1 (within each group).
    log_theta : ndarray, shape (M, V)
        ``log P(w_t | p_j)``; each row's ``exp`` sums to 1.

    Examples
    --------
    Three paths, a vocabulary of four words, Laplace smoothing (the paper):

    >>> import numpy as np
    >>> word_counts = np.array([[4.0, 0.0, 0.0, 1.0], [0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 2.0, 2.0]])
    >>> path_totals = np.array([2.0, 1.0, 1.0])
    >>> log_prior, log_theta = log_parameters(word_counts, path_totals, smoothing=1.0)
    >>> print(np.exp(log_prior).round(3))
    [0.429 0.286 0.286]
    >>> print(np.exp(log_theta).round(3))
    [[0.556 0.111 0.111 0.222]
     [0.125 0.5   0.25  0.125]
     [0.125 0.125 0.375 0.375]]
    """
    log_prior = log_path_prior(path_totals, smoothing if prior_smoothing is None else prior_smoothing, groups)
    # In place after one copy: with 1,000 paths x 2^18 words every extra
    # (M, V) temporary is another 2 GiB on the driver.
    log_theta = np.add(word_counts, smoothing, dtype=np.float64)
    log_row_sums = np.log(log_theta.sum(axis=1, keepdims=True))
    np.log(log_theta, out=log_theta)
    log_theta -= log_row_sums
    return log_prior, log_theta


def log_path_prior(
    path_totals: np.ndarray, prior_smoothing: float = 1.0, groups: Optional[np.ndarray] = None
) -> np.ndarray:
    """Eqs. 3 / 6: ``log P(p_j)`` from ``sum_i S_ij`` with ``prior_smoothing`` pseudo-counts.

    Parameters
    ----------
    path_totals : ndarray, shape (R,)
        ``sum_i S_ij``, the (fractional) number of documents per component.
    prior_smoothing : float
        Pseudo-count added to every total (the paper: 1).
    groups : int ndarray, shape (R,), or None
        Normalise within each group (None: one group).

    Returns
    -------
    ndarray, shape (R,)
        ``log P(p_j)``; ``exp`` sums to 1 within each group.

    Examples
    --------
    >>> import numpy as np
    >>> print(np.exp(log_path_prior(np.array([2.0, 1.0, 1.0]))).round(3))
    [0.429 0.286 0.286]
    >>> print(np.exp(log_path_prior(np.array([2.0, 1.0, 1.0]), groups=np.array([0, 1, 1]))).round(3))
    [1.  0.5 0.5]
    """
    prior_num = prior_smoothing + np.asarray(path_totals, dtype=np.float64)
    if groups is None:
        return np.log(prior_num) - np.log(prior_num.sum())
    _, group_of = np.unique(groups, return_inverse=True)
    return np.log(prior_num) - np.log(np.bincount(group_of, weights=prior_num)[group_of])


class PathParameters(NamedTuple):
    """Word distributions stored by what the counts hold, not as a dense (R, V) array.

    With Lidstone smoothing ``s`` every word a component never saw has the
    same probability, so ``log theta_jw = log_base_j + log_ratio_jw`` with

    * ``log_base_j = log s - log(V s + N_j)``  (the unseen-word value), and
    * ``log_ratio_jw = log(1 + c_jw / s)``, zero exactly where ``c_jw = 0``,

    held as a sparse matrix whose non-zeros are those of the counts.

    Attributes
    ----------
    log_prior : ndarray (R,)
    log_base : ndarray (R,)
    log_ratio : csr_matrix (R, V), entries >= 0
    """

    log_prior: np.ndarray
    log_base: np.ndarray
    log_ratio: sp.csr_matrix

    @property
    def shape(self) -> Tuple[int, int]:
        return self.log_ratio.shape

    def log_theta(self) -> np.ndarray:
        """The dense (R, V) ``log theta`` (small models, tests and inspection only)."""
        out = self.log_ratio.toarray()
        out += self.log_base[:, None]
        return out

    @classmethod
    def from_log_theta(cls, log_prior: np.ndarray, log_theta: np.ndarray) -> "PathParameters":
        """Exact sparse form of any dense ``log_theta``: base = each row's minimum."""
        log_theta = np.asarray(log_theta, dtype=np.float64)
        base = log_theta.min(axis=1) if log_theta.shape[1] else np.zeros(log_theta.shape[0])
        ratio = sp.csr_matrix(log_theta - base[:, None])
        ratio.eliminate_zeros()
        return cls(np.asarray(log_prior, dtype=np.float64), base, ratio)


def sparse_log_parameters(
    word_counts,
    path_totals: np.ndarray,
    smoothing: float = 1.0,
    groups: Optional[np.ndarray] = None,
    prior_smoothing: Optional[float] = None,
) -> PathParameters:
    """Eqs. 3-4 (and 6-7) in the sparse form of :class:`PathParameters`.

    Equal to :func:`log_parameters` (``log_theta = log_base + log_ratio``) but
    ``O(nnz(word_counts) + R)`` in time and memory: the driver never builds
    the (R, V) array.

    Parameters
    ----------
    word_counts : sparse matrix or ndarray, shape (R, V), non-negative
        ``sum_i S_ij x_it``.
    path_totals : ndarray, shape (R,)
        ``sum_i S_ij``.
    smoothing : float > 0
        Pseudo-count added to every word count.
    groups, prior_smoothing : as :func:`log_parameters`

    Returns
    -------
    PathParameters
        ``log_prior`` (R,), ``log_base`` (R,) and ``log_ratio`` (R, V) CSR with
        the non-zeros of ``word_counts``.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> word_counts = sp.csr_matrix(np.array([[4.0, 0.0, 0.0, 1.0], [0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 2.0, 2.0]]))
    >>> params = sparse_log_parameters(word_counts, np.array([2.0, 1.0, 1.0]), smoothing=1.0)
    >>> params.shape, params.log_ratio.nnz
    ((3, 4), 6)
    >>> dense_prior, dense_theta = log_parameters(word_counts.toarray(), np.array([2.0, 1.0, 1.0]))
    >>> bool(np.allclose(params.log_theta(), dense_theta))
    True
    """
    if smoothing <= 0:
        raise ValueError(f"the sparse parameters need a smoothing > 0, got {smoothing}")
    wc = sp.csr_matrix(word_counts, dtype=np.float64)
    V = wc.shape[1]
    log_prior = log_path_prior(path_totals, smoothing if prior_smoothing is None else prior_smoothing, groups)
    n_words = np.asarray(wc.sum(axis=1), dtype=np.float64).ravel()
    log_base = np.log(smoothing) - np.log(V * smoothing + n_words)
    ratio = wc.copy()  # never write into the caller's counts
    ratio.data = np.log1p(ratio.data / smoothing)
    ratio.eliminate_zeros()
    return PathParameters(log_prior, log_base, ratio)


def sparse_log_prior_density(
    params: PathParameters, smoothing: float = 1.0, prior_smoothing: Optional[float] = None
) -> float:
    """:func:`log_prior_density` of sparse parameters, ``O(nnz + R)``."""
    ps = smoothing if prior_smoothing is None else prior_smoothing
    V = params.shape[1]
    return float(
        ps * params.log_prior.sum()
        + smoothing * (V * params.log_base.sum() + params.log_ratio.data.sum(dtype=np.float64))
    )


def term_mapping(prev_vocabulary, new_vocabulary) -> np.ndarray:
    """Index in ``new_vocabulary`` of every term of ``prev_vocabulary``, -1 where the new one lacks it.

    Terms are matched by name. Returns an int64 ndarray (V_prev,).
    """
    new_index = {term: i for i, term in enumerate(new_vocabulary)}
    if len(new_index) != len(new_vocabulary):
        raise ValueError("the new vocabulary has duplicate terms")
    return np.fromiter(
        (new_index.get(term, -1) for term in prev_vocabulary), dtype=np.int64, count=len(prev_vocabulary)
    )


def recovered_counts(
    params: PathParameters, smoothing: float, check_rtol: float = 1e-6
) -> Tuple[sp.csr_matrix, np.ndarray]:
    """The expected word counts behind Lidstone-smoothed :class:`PathParameters` (inverse of Eq. 7).

    ``c_jw = s expm1(log_ratio_jw)`` and ``N_j = s exp(-log_base_j) - V s``
    (:func:`sparse_log_parameters` with ``s = smoothing``). The parameters
    fix the counts only up to that scale: read with another ``s'`` they come
    back as ``(s'/s) c`` (the same theta). Any normalised theta has this
    form (dense format-1 models, :meth:`PathParameters.from_log_theta`: the
    least probable word of a row gets count 0), so ``sum_w c_jw = N_j`` (to
    ``check_rtol``) fails only for rows that are not distributions: those
    are refused (damaged parameters).

    Returns
    -------
    counts : csr_matrix (R, V), entries >= 0
    n_words : ndarray (R,)
    """
    R, V = params.shape
    counts = sp.csr_matrix(params.log_ratio, dtype=np.float64, copy=True)
    counts.data = smoothing * np.expm1(counts.data)
    n_words = smoothing * np.exp(-np.asarray(params.log_base, dtype=np.float64)) - V * smoothing
    row_sums = np.asarray(counts.sum(axis=1), dtype=np.float64).ravel()
    bad = np.flatnonzero(np.abs(row_sums - n_words) > check_rtol * np.maximum(np.abs(n_words), 1.0))
    if len(bad):
        j = int(bad[0])
        raise InputError(
            f"parameters are not word distributions (damaged?): component {j} has word counts "
            f"summing to {row_sums[j]:.6g} but its base says {n_words[j]:.6g} words "
            f"({len(bad)} of {R} components disagree)"
        )
    return counts, np.maximum(n_words, 0.0)


class PreviousFit(NamedTuple):
    """A previous model's parameters and what they were fitted with: where a warm start starts.

    params : PathParameters (R, V_prev), built by :func:`sparse_log_parameters` with ``smoothing``
    vocabulary : sequence of str, length V_prev
    smoothing : float > 0, the word pseudo-count of that fit
    prior_smoothing : float or None -- its prior pseudo-count (None: ``smoothing``)
    path_mass : ndarray (R,) or None -- the path masses ``T_j`` its prior was computed from
    """

    params: PathParameters
    vocabulary: Sequence[str]
    smoothing: float
    prior_smoothing: Optional[float] = None
    path_mass: Optional[np.ndarray] = None


def warm_start_parameters(
    prev: PreviousFit,
    new_vocabulary,
    smoothing: float,
    groups: Optional[np.ndarray] = None,
    prior_smoothing: Optional[float] = None,
) -> PathParameters:
    """A previous model's parameters re-expressed on a new vocabulary: the start of a warm EM.

    The previous expected counts (:func:`recovered_counts`) are moved onto
    ``new_vocabulary`` term by term **by name**: a term the new vocabulary
    lacks is dropped (its mass leaves the component's total), a new term gets
    count 0 (the smoothing prior alone). The parameters are then Eqs. 6-7 of
    those counts with ``smoothing`` -- so with the same vocabulary and
    smoothing they are the previous parameters again.

    The prior: ``log_prior`` fixes the prior numerators ``ps + T_j`` only up to
    a scale per group; ``prev.path_mass`` (the path masses ``T_j`` the previous
    prior was computed from, e.g. the training summary's ``path_mass``) gives
    that scale, and the prior is rebuilt from ``T_j`` with ``prior_smoothing``.
    Without it the previous ``log_prior`` is kept (exact when the prior
    smoothing does not change; the pseudo-count is small against the masses
    otherwise).

    Time and memory ``O(nnz + R + V_prev + V_new)``; never a dense (R, V) array.

    Parameters
    ----------
    prev : :class:`PreviousFit` -- the previous parameters (R, V_prev), vocabulary, smoothing,
        prior smoothing and path masses
    new_vocabulary : sequence of str, length V_new
    smoothing : float > 0, the word pseudo-count now
    groups : int ndarray (R,) or None -- prior normalised within each group (as :func:`log_path_prior`)
    prior_smoothing : float or None -- the prior pseudo-count now
        (None: the word pseudo-count, as :func:`sparse_log_parameters`)

    Returns
    -------
    PathParameters (R, V_new)
    """
    params, prev_vocabulary, prev_smoothing, prev_prior_smoothing, prev_path_mass = prev
    R, V_prev = params.shape
    if len(prev_vocabulary) != V_prev:
        raise ValueError(f"the previous vocabulary has {len(prev_vocabulary)} terms, its parameters {V_prev}")
    if prev_smoothing <= 0 or smoothing <= 0:
        raise ValueError(f"smoothing must be > 0, got previous {prev_smoothing} and new {smoothing}")
    counts, _ = recovered_counts(params, prev_smoothing)
    target = term_mapping(prev_vocabulary, new_vocabulary)
    coo = counts.tocoo()
    keep = target[coo.col] >= 0
    moved = sp.csr_matrix((coo.data[keep], (coo.row[keep], target[coo.col[keep]])), shape=(R, len(new_vocabulary)))
    ps_prev = prev_smoothing if prev_prior_smoothing is None else prev_prior_smoothing
    ps_new = smoothing if prior_smoothing is None else prior_smoothing
    if prev_path_mass is None:
        # log_prior fixes the numerators only up to a scale: any masses with the same prior
        # give it back when the pseudo-count is the same; keep it.
        masses = None
    else:
        prev_path_mass = np.asarray(prev_path_mass, dtype=np.float64)
        if prev_path_mass.shape != (R,):
            raise ValueError(f"prev_path_mass has shape {prev_path_mass.shape}, expected ({R},)")
        # Numerators from log_prior (exact), their scale per group from the recorded masses.
        numer = ps_prev + np.maximum(prev_path_mass, 0.0)
        if groups is None:
            scale = np.full(R, numer.sum())
        else:
            _, group_of = np.unique(groups, return_inverse=True)
            scale = np.bincount(group_of, weights=numer)[group_of]
        masses = np.maximum(np.exp(params.log_prior) * scale - ps_prev, 0.0)
    out = sparse_log_parameters(moved, np.zeros(R) if masses is None else masses, smoothing, groups, ps_new)
    if masses is None:
        out = out._replace(log_prior=np.array(params.log_prior, dtype=np.float64, copy=True))
    return out


def log_prior_density(
    log_prior: np.ndarray, log_theta: np.ndarray, smoothing: float = 1.0, prior_smoothing: Optional[float] = None
) -> float:
    """``log P(theta)`` of Eq. 8 for the Dirichlet prior that Laplace smoothing implies.

    Adding ``smoothing`` pseudo-counts is the MAP estimate under a Dirichlet
    with exponents ``smoothing``, so ``log P(theta) = smoothing * (sum_j log theta_j
    + sum_jt log theta_t|j)`` up to a constant.
    """
    ps = smoothing if prior_smoothing is None else prior_smoothing
    return float(ps * log_prior.sum() + smoothing * log_theta.sum())
