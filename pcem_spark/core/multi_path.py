"""Every path a document belongs to: the membership probability behind ``--multi-path P``.

Eq. 5's posterior answers "which one path generated this document"; for a page
about both sports and business it piles onto the stronger topic (a document of
two 20NG posts gives the second post's path more than 5% in only 2 of 3 cases,
docs/BENCHMARKS.md), so "every path whose posterior is >= P" rarely finds the
second topic and, where it does, also adds runner-ups to single-topic
documents. The membership probability asks the question ``--multi-path``
means: is path ``j`` *one of* the document's paths?

The hypotheses are "one path ``j``" (every path, prior ``1 - rho`` spread by the
model's path prior) and "the predicted path ``a`` and a runner-up ``b``, mixed":
the document's words drawn from ``pi * theta_b + (1 - pi) * theta_a`` with the
share ``pi`` fitted per document by EM (:func:`mixture_gain`), prior ``rho``
spread over the :data:`PAIR_CANDIDATES` runner-ups, path prior the mean of the
two log priors. (A model with a softmax regression pooled in, the combined
family, weighs the pair's log-likelihood gain by the generative weight beta: the
regression scores a pair as its predicted path.) Their scores (log prior +
log-likelihood) are tempered by the
model's calibrated temperature ``T``, as Eq. 5's logits are for every
probability the model reports, and

    membership(j) = P(one path j) + sum of P(pair) over the pairs holding j.

With ``q`` the tempered posterior over single paths (Eq. 5 / T) and ``G`` a
pair's gain in log-likelihood over the predicted path alone, a pair's weight
relative to the single paths' ``(1 - rho)^(1/T)`` is
``q_a * exp((log(rho / C) + G + (log pi_b - log pi_a) / 2) / T)``
(:func:`membership_probabilities`), so nothing beyond the decoder's ranked
posteriors and the candidates' word probabilities is needed.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.decoding import PathPredictions
from pcem_spark.core.estep import ScoringTables, length_normalize

__all__ = [
    "PAIR_PRIOR",
    "PAIR_CANDIDATES",
    "MIXTURE_ITERATIONS",
    "gather_log_theta",
    "mixture_gain",
    "membership_probabilities",
    "with_membership",
    "ranked_for_multi_path",
]

# Prior probability that a document is a mix of two paths. Tempered by T with the likelihoods, it barely
# matters: on the semi-synthetic 20NG multi-path corpus, rho from 0.01 to 0.5 moves F1 at P = 0.5 by
# 1.2 points (docs/BENCHMARKS.md): a real second topic wins by its likelihood, not by the prior.
PAIR_PRIOR = 0.1

# Runner-up paths (by posterior) each tried as the second path of a pair with the predicted one.
PAIR_CANDIDATES = 4

# EM steps for a pair's mixing share; from pi = 1/2 the share moves < 1e-3 after ~20 on 20NG documents.
MIXTURE_ITERATIONS = 30


def gather_log_theta(tables: ScoringTables, terms: np.ndarray, paths: np.ndarray) -> np.ndarray:
    """``log theta[paths[e], terms[e]]`` for each entry ``e`` (equal-length int arrays), from scoring tables.

    ``log theta[j, w] = log_base[j] + log_ratio[j, w]``; the ratio is in
    ``dense_t`` for the dense terms and in ``sparse_t`` (0 where absent) for
    the rest (:func:`pcem_spark.core.estep.scoring_tables`).
    """
    terms = np.asarray(terms, dtype=np.int64)
    paths = np.asarray(paths, dtype=np.int64)
    out = np.asarray(tables.log_base, dtype=np.float64)[paths].copy()
    if tables.dense_terms is None:
        out += tables.dense_t[terms, paths]
        return out
    dense_terms = np.asarray(tables.dense_terms, dtype=np.int64)
    pos = np.searchsorted(dense_terms, terms)
    pos_ok = np.minimum(pos, max(len(dense_terms) - 1, 0))
    is_dense = (
        (pos < len(dense_terms)) & (dense_terms[pos_ok] == terms) if len(dense_terms) else np.zeros_like(terms, bool)
    )
    if is_dense.any():
        out[is_dense] += tables.dense_t[pos_ok[is_dense], paths[is_dense]]
    rest = ~is_dense
    if rest.any() and tables.sparse_t is not None:
        out[rest] += np.asarray(tables.sparse_t[terms[rest], paths[rest]], dtype=np.float64).ravel()
    return out


def mixture_gain(
    X: sp.csr_matrix, tables: ScoringTables, best: np.ndarray, second: np.ndarray, iterations: int = MIXTURE_ITERATIONS
) -> Tuple[np.ndarray, np.ndarray]:
    """``(share, gain)`` (n, C): each row's two-path mixture of ``best`` and each ``second`` candidate.

    Parameters
    ----------
    X : csr_matrix (n, V), the term counts as scored (length-normalised when the model is)
    best : int (n,), the predicted path
    second : int (n, C), candidate second paths (-1 = none: share 0, gain 0)

    Returns
    -------
    share : (n, C), the fitted ``pi`` of the second path (EM from 1/2)
    gain : (n, C), ``sum_w x_w log(pi theta_b + (1 - pi) theta_a) - sum_w x_w log theta_a`` (>= 0)
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    n, C = second.shape
    share, gain = np.zeros((n, C)), np.zeros((n, C))
    lengths = np.diff(X.indptr)
    row_of = np.repeat(np.arange(n), lengths)
    if not len(row_of):
        return share, gain
    x = X.data
    a = np.exp(gather_log_theta(tables, X.indices, np.asarray(best, dtype=np.int64)[row_of]))
    total = np.bincount(row_of, weights=x, minlength=n)
    for c in range(C):
        cand = np.asarray(second[:, c], dtype=np.int64)
        valid = (cand >= 0) & (total > 0)
        entry = valid[row_of]
        if not entry.any():
            continue
        rows, xe, ae = row_of[entry], x[entry], a[entry]
        # With ratio = theta_b / theta_a the EM step is pi <- sum x pi ratio / (1 + pi (ratio - 1)) / sum x:
        # the same update in half the array operations (this loop is --multi-path's cost).
        ratio = np.exp(gather_log_theta(tables, X.indices[entry], cand[rows])) / ae
        excess = ratio - 1.0
        inv_total = np.where(valid, 1.0 / np.maximum(total, 1e-300), 0.0)
        pi = np.where(valid, 0.5, 0.0)
        for _ in range(iterations):
            at = pi[rows]
            pi = np.bincount(rows, weights=xe * at * ratio / (1.0 + at * excess), minlength=n) * inv_total
        # log(pi theta_b + (1 - pi) theta_a) - log theta_a = log(1 + pi (ratio - 1))
        g = np.bincount(rows, weights=xe * np.log1p(pi[rows] * excess), minlength=n)
        share[:, c] = pi
        gain[:, c] = np.where(valid, np.maximum(g, 0.0), 0.0)
    return share, gain


def membership_probabilities(
    top_index: np.ndarray,
    top_posterior: np.ndarray,
    gain: np.ndarray,
    log_prior: np.ndarray,
    temperature: float = 1.0,
    rho: float = PAIR_PRIOR,
) -> np.ndarray:
    """(n, k) probability that each ranked path is one of the row's paths (see the module docstring).

    Parameters
    ----------
    top_index : int (n, k), the ranked paths, the predicted one first (-1 pads)
    top_posterior : (n, k), their tempered posteriors over single paths (unmapped, summing to <= 1)
    gain : (n, C), C <= k - 1: the mixture gain of the pair (top_index[:, 0], top_index[:, 1 + c])
        (:func:`mixture_gain`); a padded candidate has gain 0 and no weight
    log_prior : (M,), the model's log path priors
    """
    top_index = np.asarray(top_index, dtype=np.int64)
    q = np.where(top_index >= 0, np.asarray(top_posterior, dtype=np.float64), 0.0)
    n, k = q.shape
    C = gain.shape[1]
    if C > k - 1:
        raise ValueError(f"{C} pair candidates need at least {C + 1} ranked paths, got {k}")
    log_prior = np.asarray(log_prior, dtype=np.float64)
    second = top_index[:, 1 : 1 + C]
    has = second >= 0
    prior_gap = np.where(has, (log_prior[np.maximum(second, 0)] - log_prior[top_index[:, :1]]) / 2.0, 0.0)
    t = float(temperature)
    # A hypothesis' log prior is part of its score, tempered with it (as the path prior in Eq. 5's logits).
    log_single = np.log1p(-rho) / t
    with np.errstate(divide="ignore"):
        log_pair = np.where(has, (np.log(rho / C) + gain + prior_gap) / t + np.log(q[:, :1]), -np.inf)
    # Normalised by every hypothesis, in log space (a long document's gain can pass exp's range): the single
    # paths' mass exp(log_single) * sum(q) (sum(q) = 1 over all paths; a beam's scored paths likewise) plus
    # the pairs'.
    log_total = np.logaddexp(log_single, np.logaddexp.reduce(log_pair, axis=1, initial=-np.inf))[:, None]
    pair = np.exp(log_pair - log_total)
    member = np.exp(log_single - log_total) * q
    member[:, 0] += pair.sum(axis=1)
    member[:, 1 : 1 + C] += pair
    return member


def ranked_for_multi_path(probability: float, n_paths: int, top_k: int = 0) -> int:
    """How many ranked paths a decoder keeps for ``--multi-path probability``: the pair candidates and every
    single path that can reach it (a path's membership is at most its posterior), and ``top_k``."""
    reach = n_paths if probability <= 0 else int(np.floor(1.0 / max(float(probability), 1e-12)))
    return int(min(n_paths, max(top_k, PAIR_CANDIDATES + 1, reach)))


def with_membership(
    out: PathPredictions, X, tables: ScoringTables, doc_length: float = 0.0, rho: float = PAIR_PRIOR
) -> PathPredictions:
    """``out`` with ``member_probability``: each of its ranked paths' membership (module docstring).

    ``out``: a decoder's predictions of ``X`` (raw term counts) with ``top_index``
    / ``top_posterior`` ranked, the predicted path first; ``tables``: the
    model's path scoring tables (their ``temperature`` tempers the pairs as it
    did ``top_posterior``); ``doc_length`` as the decoder.
    """
    X = length_normalize(X, doc_length) if doc_length > 0 else sp.csr_matrix(X, dtype=np.float64)
    top_index = np.asarray(out.top_index, dtype=np.int64)
    top_posterior = np.asarray(out.top_posterior, dtype=np.float64)
    # The pairs are built on the predicted path: first in each row (a beam may rank a near-tie above it).
    rows = np.flatnonzero((top_index[:, 0] != out.best) & (top_index == np.asarray(out.best)[:, None]).any(axis=1))
    if rows.size:
        top_index, top_posterior = top_index.copy(), top_posterior.copy()
        top_probability = np.array(out.top_probability, dtype=np.float64, copy=True)
        at = np.argmax(top_index[rows] == np.asarray(out.best)[rows, None], axis=1)
        for arr in (top_index, top_posterior, top_probability):
            first = arr[rows, 0].copy()
            arr[rows, 0] = arr[rows, at]
            arr[rows, at] = first
        out = out._replace(top_index=top_index, top_posterior=top_posterior, top_probability=top_probability)
    C = min(PAIR_CANDIDATES, top_index.shape[1] - 1)
    if C <= 0 or top_index.shape[0] == 0:
        return out._replace(member_probability=np.where(top_index >= 0, top_posterior, 0.0))
    _, gain = mixture_gain(X, tables, top_index[:, 0], top_index[:, 1 : 1 + C])
    linear = getattr(tables, "linear", None)
    if linear is not None:
        # Pooled scores (the combined / discriminative family): the generative expert enters them with weight
        # beta, and the regression scores a pair as its predicted path (it has no notion of a mixture), so a
        # pair gains beta x the generative gain over that path; with beta 0 membership is the posterior's.
        gain = gain * float(linear.generative_weight)
    member = membership_probabilities(
        top_index, top_posterior, gain, tables.log_prior, getattr(tables, "temperature", 1.0), rho
    )
    return out._replace(member_probability=member)
