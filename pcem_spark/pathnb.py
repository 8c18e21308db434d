"""The math of PCNB / PCEM on one block of documents, as small pure functions.

Nothing here knows about Spark: the engine (:mod:`pcem_spark.engine`) moves
blocks and sums, and calls these functions on each block. Shapes use

* ``n``  documents in the block,
* ``V``  vocabulary size,
* ``K``  non-root taxonomy nodes (dummies included),
* ``M``  paths (= padded leaves).

Equation numbers are those of Xiao, Liu & Song (WWW'19).
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp


def path_scores(node_scores, score_matrix: np.ndarray) -> np.ndarray:
    """Eq. 2: ``S_ij = sum_k S_i(c^k_j)`` over the nodes of path j.

    Parameters
    ----------
    node_scores : array or sparse matrix, shape (n, K)
        ``S_i(c)`` for every non-root node ``c``.
    score_matrix : ndarray, shape (M, K)
        Path-node membership (PC methods) or leaf indicator (flat methods).

    Returns
    -------
    ndarray, shape (n, M)
    """
    out = node_scores @ score_matrix.T
    return np.asarray(out, dtype=np.float64)


def log_parameters(word_counts: np.ndarray, path_totals: np.ndarray,
                   smoothing: float = 1.0) -> Tuple[np.ndarray, np.ndarray]:
    """Eqs. 3-4 (and 6-7): Laplace-smoothed path prior and word distributions.

    Parameters
    ----------
    word_counts : ndarray, shape (M, V)
        ``sum_i S_ij x_it``.
    path_totals : ndarray, shape (M,)
        ``sum_i S_ij``.
    smoothing : float
        Pseudo-count added to every event; the paper uses 1.

    Returns
    -------
    log_prior : ndarray, shape (M,)
    log_theta : ndarray, shape (M, V)
    """
    path_totals = np.asarray(path_totals, dtype=np.float64)
    prior_num = smoothing + path_totals
    log_prior = np.log(prior_num) - np.log(prior_num.sum())
    # In place after one copy: with 1,000 paths x 2^18 words every extra
    # (M, V) temporary is another 2 GiB on the driver.
    log_theta = np.add(word_counts, smoothing, dtype=np.float64)
    log_row_sums = np.log(log_theta.sum(axis=1, keepdims=True))
    np.log(log_theta, out=log_theta)
    log_theta -= log_row_sums
    return log_prior, log_theta


def joint_log_likelihood(X, log_prior: np.ndarray, log_theta: np.ndarray) -> np.ndarray:
    """``log P(p_j) + sum_t x_it log P(w_t | p_j)`` for every document and path.

    The multinomial coefficient and ``P(|x_i|)`` are constant in j and
    omitted (they cancel in Eq. 5 and are constant in Eq. 8).

    Parameters
    ----------
    X : sparse matrix, shape (n, V)
    log_prior : ndarray, shape (M,)
    log_theta : ndarray, shape (M, V)

    Returns
    -------
    ndarray, shape (n, M)
    """
    jll = X @ log_theta.T
    return np.asarray(jll, dtype=np.float64) + log_prior[None, :]


def posterior(jll: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Eq. 5 in log space.

    Returns
    -------
    post : ndarray, shape (n, M)
        ``P(y_i = p_j | x_i)``; rows sum to 1.
    log_evidence : ndarray, shape (n,)
        ``log sum_j P(p_j) P(x_i | p_j)`` (up to the omitted constants).
    """
    log_evidence = logsumexp(jll, axis=1)
    post = np.exp(jll - log_evidence[:, None])
    return post, log_evidence


class BlockStats(NamedTuple):
    """Sufficient statistics of one block for the M-step and Eq. 8."""
    word_counts: np.ndarray   # (M, V)  sum_i R_ij x_it
    path_totals: np.ndarray   # (M,)    sum_i R_ij
    loglik: float             # data part of Eq. 8 for the block


def e_step(X, fixed_scores: np.ndarray, labeled: np.ndarray,
           log_prior: np.ndarray, log_theta: np.ndarray, use_unlabeled: bool = True,
           posterior_floor: float = 0.0, sparse_density: float = 0.0) -> BlockStats:
    """One E-step on a block plus its contribution to the next M-step.

    Labelled rows keep their fixed path scores (``S_ij`` from Eq. 2);
    unlabelled rows get their posterior (Eq. 5) as path scores, as in
    Algorithm 1. The log-likelihood follows Eq. 8 with the labelled term
    generalised to fractional path scores as ``sum_j S_ij log(P(p_j)P(x_i|p_j))``
    -- the objective whose maximiser is Eqs. 6-7, so EM never decreases it.

    Parameters
    ----------
    X : sparse matrix, shape (n, V)
    fixed_scores : ndarray, shape (n, M)
        Path scores of labelled rows (ignored for unlabelled rows).
    labeled : bool ndarray, shape (n,)
    log_prior, log_theta : current parameters, shapes (M,), (M, V); ``None``
        for the NB initialisation pass (labelled rows only, loglik 0)
    use_unlabeled : bool
        False for plain NB: unlabelled rows contribute nothing.
    posterior_floor : float
        Posteriors below this are set to 0 (rows renormalised; each row's
        best path is always kept). 0 = exact
        Eq. 5. With many paths a tiny floor makes the per-path sums sparse.
    sparse_density : float
        When at most this fraction of the responsibilities is non-zero, the
        word sums are computed and returned as a sparse matrix (0 = always
        dense, the faster choice while M x V is small).

    Returns
    -------
    BlockStats; ``word_counts`` is an ndarray or a scipy sparse matrix (M, V).
    """
    X = sp.csr_matrix(X)
    labeled = np.asarray(labeled, dtype=bool)
    resp = np.where(labeled[:, None], fixed_scores, 0.0)
    loglik = 0.0
    if log_theta is not None:
        # Without parameters (the NB initialisation) there is nothing to score.
        jll = joint_log_likelihood(X, log_prior, log_theta)
        if labeled.any():
            loglik += float(np.sum(fixed_scores[labeled] * jll[labeled], dtype=np.float64))
        if use_unlabeled and (~labeled).any():
            post, log_ev = posterior(jll[~labeled])
            if posterior_floor > 0:
                small = post < posterior_floor
                small[np.arange(len(post)), post.argmax(axis=1)] = False  # a row never empties
                post[small] = 0.0
                post /= post.sum(axis=1, keepdims=True)
            resp[~labeled] = post
            loglik += float(log_ev.sum(dtype=np.float64))
    resp = resp.astype(X.dtype, copy=False)  # float32 blocks give float32 sums
    if resp.size and np.count_nonzero(resp) <= sparse_density * resp.size:
        # Few (document, path) pairs carry weight: sum only those.
        word_counts = (sp.csr_matrix(resp).T @ X).tocsr()
    else:
        word_counts = np.asarray((X.T @ resp).T)
    return BlockStats(word_counts, resp.sum(axis=0, dtype=np.float64), loglik)


def log_prior_density(log_prior: np.ndarray, log_theta: np.ndarray, smoothing: float = 1.0) -> float:
    """``log P(theta)`` of Eq. 8 for the Dirichlet prior that Laplace smoothing implies.

    Adding ``smoothing`` pseudo-counts is the MAP estimate under a Dirichlet
    with exponents ``smoothing``, so ``log P(theta) = smoothing * (sum_j log theta_j
    + sum_jt log theta_t|j)`` up to a constant.
    """
    return float(smoothing * (log_prior.sum() + log_theta.sum()))


def predict_paths(X, log_prior: np.ndarray, log_theta: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Argmax path of Eq. 5 and its posterior probability.

    Returns
    -------
    best : int ndarray, shape (n,)
    prob : ndarray, shape (n,)
    """
    jll = joint_log_likelihood(sp.csr_matrix(X), log_prior, log_theta)
    post, _ = posterior(jll)
    best = np.argmax(jll, axis=1)
    return best, post[np.arange(len(best)), best]
