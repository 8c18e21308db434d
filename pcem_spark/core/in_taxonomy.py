"""How much better a document is explained by the taxonomy than by the corpus at large: ``in_taxonomy``.

A classifier's probability is normalised over the known paths, so a page
that belongs to none of them can still get a confident path. A generative
model knows more: how likely the document's words are under its path, and
under the training corpus as a whole, the background (the likelihood ratio
of Ren et al., NeurIPS 2019, with the corpus PCEM reads as the background).

Both sides are models of every token of the document, the words the
vocabulary holds and those it does not (*unknown*: tokens the tokenizer
keeps, stop words and short tokens excluded, that are not terms):

- the taxonomy: a token is unknown with probability ``rho_L``, the rate of
  unknown tokens in the labelled documents; a known one is word ``w`` with
  probability ``theta_{b w}`` of the document's predicted path ``b``;
- the background: unknown with probability ``rho_A``, the rate in all the
  training documents; a known one is ``w`` with probability ``beta_w``, the
  corpus's term frequencies with the model's Laplace smoothing ``a``:
  ``beta_w = (c_w + a) / (sum_v c_v + a V)``.

The score is the log-likelihood ratio per token (nats):

``in_taxonomy = [sum_w x_w log(theta_bw / beta_w) + n log((1-rho_L)/(1-rho_A)) + u log(rho_L/rho_A)] / (n + u)``

with ``n`` the known and ``u`` the unknown tokens. ``rho_L`` is capped at
``rho_A``: an unknown word is never evidence *for* the taxonomy. So each
unknown token adds ``log(rho_L / rho_A) <= 0`` and the score of a page the
vocabulary cannot read (another language, an empty page) tends to that
value, the score of a page of nothing but unknown tokens; a page whose
words the taxonomy explains scores above 0, one whose words the background
explains as well or better scores at or below 0.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.density import RatioLookup, ratio_lookup

__all__ = [
    "CorpusCounts",
    "Background",
    "FitWeights",
    "background_of",
    "in_taxonomy_scores",
    "in_taxonomy_of_likelihoods",
    "path_log_likelihoods",
    "held_out_scores",
]


class CorpusCounts(NamedTuple):
    """What the training corpus held, counted once at the end of a train (the background's data).

    ``term_counts`` (V,) float64: each term's count over the training documents (category-name documents
    excluded); ``tokens`` / ``unknown``: their known and unknown tokens; ``labelled_tokens`` /
    ``labelled_unknown``: the same over the labelled documents alone; ``documents`` /
    ``labelled_documents``: how many.
    """

    term_counts: np.ndarray
    tokens: float
    unknown: float
    labelled_tokens: float
    labelled_unknown: float
    documents: int
    labelled_documents: int

    def totals(self) -> dict:
        """The counts but the terms', as a JSON-able record (the model's metadata)."""
        return {k: getattr(self, k) for k in self._fields if k != "term_counts"}


class Background(NamedTuple):
    """The background and the known/unknown rates of the score (:func:`background_of`)."""

    log_background: np.ndarray  # (V,) log beta_w
    log_known_ratio: float  # log((1 - rho_L) / (1 - rho_A)) >= 0
    log_unknown_ratio: float  # log(rho_L / rho_A) <= 0: each unknown token's share, and an empty page's score


def background_of(counts: CorpusCounts, smoothing: float) -> Background:
    """The score's background from the corpus counts, with ``smoothing`` pseudo-counts per term.

    The unknown rates get one pseudo-count of each kind (``(u + 1) / (n + u + 2)``): a corpus without an
    unknown token still gives an unknown word a probability.

    >>> b = background_of(CorpusCounts(np.array([3.0, 1.0]), 4.0, 4.0, 2.0, 0.0, 2, 1), smoothing=1.0)
    >>> np.exp(b.log_background).round(3).tolist()
    [0.667, 0.333]
    >>> round(float(np.exp(b.log_unknown_ratio)), 3)  # (0 + 1)/(2 + 2) against (4 + 1)/(8 + 2)
    0.5
    """
    c = np.asarray(counts.term_counts, dtype=np.float64)
    if smoothing <= 0:
        raise ValueError(f"smoothing must be > 0, got {smoothing}")
    log_background = np.log(c + smoothing) - np.log(c.sum() + smoothing * c.size)
    rho_all = (counts.unknown + 1.0) / (counts.tokens + counts.unknown + 2.0)
    rho_labelled = (counts.labelled_unknown + 1.0) / (counts.labelled_tokens + counts.labelled_unknown + 2.0)
    rho_labelled = min(rho_labelled, rho_all)  # an unknown word is never evidence for the taxonomy
    return Background(
        log_background,
        float(np.log1p(-rho_labelled) - np.log1p(-rho_all)),
        float(np.log(rho_labelled) - np.log(rho_all)),
    )


def in_taxonomy_scores(
    X,
    unknown: Optional[np.ndarray],
    log_base: np.ndarray,
    log_ratio,
    best: np.ndarray,
    background: Background,
    lookup: Optional[RatioLookup] = None,
) -> np.ndarray:
    """The per-token log-likelihood ratio of each row's predicted path against the background (module doc).

    Parameters
    ----------
    X : sparse matrix (n, V), the documents' known-term counts
    unknown : ndarray (n,) or None, their unknown tokens (None: none counted, as for pre-counted features)
    log_base : ndarray (R,), and
    log_ratio : csr_matrix (R, V)
        The paths' word distributions, ``log theta_jw = log_base_j + log_ratio_jw``
        (:class:`~pcem_spark.core.parameters.PathParameters`).
    best : int ndarray (n,), each row's predicted path
    background : :func:`background_of`
    lookup : ``ratio_lookup(log_ratio)`` kept across blocks (else built here)

    Returns
    -------
    ndarray (n,), float64 nats per token; ``background.log_unknown_ratio`` for a row with no token.
    """
    path_ll = path_log_likelihoods(X, log_base, log_ratio, best, lookup)
    return in_taxonomy_of_likelihoods(X, unknown, path_ll, background)


def path_log_likelihoods(
    X, log_base: np.ndarray, log_ratio, best: np.ndarray, lookup: Optional[RatioLookup] = None
) -> np.ndarray:
    """``sum_w x_iw log theta_{best_i w}`` (n,) float64: each row's words looked up in its own path's row.

    Prediction reads the same numbers off its scores instead
    (:func:`pcem_spark.core.decoding.best_path_log_likelihood`); this lookup serves the decoders that
    do not score every path (a beam).
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    best = np.asarray(best, dtype=np.int64)
    n = X.shape[0]
    if best.shape[0] != n:
        raise ValueError(f"X has {n} rows but best has {best.shape[0]}")
    lookup = lookup if lookup is not None else ratio_lookup(log_ratio)
    counts = np.diff(X.indptr)
    # each of the row's words in its own path's row (absent: 0, the path's base rate)
    ratio = lookup.at(np.repeat(best, counts), X.indices, X.shape[1])
    path_ll = np.bincount(np.repeat(np.arange(n), counts), X.data * ratio, minlength=n).astype(np.float64)
    lengths = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
    return path_ll + lengths * np.asarray(log_base, dtype=np.float64)[best]


def in_taxonomy_of_likelihoods(
    X, unknown: Optional[np.ndarray], path_ll: np.ndarray, background: Background
) -> np.ndarray:
    """:func:`in_taxonomy_scores` from each row's log-likelihood under its path, ``path_ll`` (n,).

    ``X``, ``unknown`` and ``background`` as :func:`in_taxonomy_scores`; ``path_ll`` from
    :func:`path_log_likelihoods` or read off prediction's scores.
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    n = X.shape[0]
    path_ll = np.asarray(path_ll, dtype=np.float64)
    if path_ll.shape != (n,):
        raise ValueError(f"path_ll has shape {path_ll.shape}, expected ({n},)")
    u = np.zeros(n) if unknown is None else np.asarray(unknown, dtype=np.float64)
    if u.shape != (n,):
        raise ValueError(f"unknown has shape {u.shape}, expected ({n},)")
    lengths = np.asarray(X.sum(axis=1)).ravel()
    total = lengths + u
    rates = lengths * background.log_known_ratio + u * background.log_unknown_ratio
    ratio_sum = path_ll - X @ background.log_background + rates
    out = np.full(n, background.log_unknown_ratio)
    some = total > 0
    out[some] = ratio_sum[some] / total[some]
    return out


class FitWeights(NamedTuple):
    """How a fit weighed a labelled document's counts into the paths (what :func:`held_out_scores` takes out).

    ``smoothing``: the Laplace ``a``; ``path_weight`` g (Eq. 2: a document labelled with path p gives path j
    ``(1 - g) [j = p] + g |p and j|`` copies of its counts); ``doc_length`` > 0: a longer document's counts
    were scaled down to that many tokens (:func:`pcem_spark.core.estep.length_normalize`); ``path_nodes``: the
    (M, K) path-node matrix (None: no two paths share a node).
    """

    smoothing: float
    path_weight: float = 0.0
    doc_length: float = 0.0
    path_nodes: object = None


def held_out_scores(
    X,
    unknown: Optional[np.ndarray],
    paths: np.ndarray,
    log_base: np.ndarray,
    log_ratio,
    background: Background,
    fit: FitWeights,
    lookup: Optional[RatioLookup] = None,
) -> np.ndarray:
    """:func:`in_taxonomy_scores` of labelled rows as if the model had not been fitted on them.

    A labelled document's words are in its path's distribution, so its score overstates what a new document
    of that path gets (at one label per leaf the path *is* the document). With Laplace smoothing ``a`` a
    path's distribution is ``theta_jw = (N_jw + a) / Z_j`` with ``Z_j = N_j + a V = a exp(-log_base_j)``;
    without the ``c`` copies of the row's (length-scaled) counts ``x~`` the fit gave it
    (:class:`FitWeights`) it is ``(theta_jw Z_j - c x~_w) / (Z_j - c |x~|)``, each numerator at least ``a``.
    A row is scored by the best of its own path so held out and the paths that never held it (every other
    one without path weight, else those sharing no node with its path; the paths that share nodes are left
    out: they held part of it). The background and the unknown rates keep the row (the corpus is large
    beside one document). EM's fit to unlabelled documents like the row is not undone: the scores stay
    somewhat above a new document's.

    Parameters
    ----------
    X, unknown, log_base, log_ratio, background, lookup : as :func:`in_taxonomy_scores`
    paths : int ndarray (n,), each row's labelled path
    fit : :class:`FitWeights`

    Returns
    -------
    ndarray (n,), float64 nats per token
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    paths = np.asarray(paths, dtype=np.int64)
    n, V = X.shape
    a, g = float(fit.smoothing), float(fit.path_weight)
    lengths = np.asarray(X.sum(axis=1)).ravel()
    scale = np.ones(n)
    if fit.doc_length > 0:
        long_rows = lengths > fit.doc_length
        scale[long_rows] = fit.doc_length / lengths[long_rows]
    A = sp.identity(len(log_base), format="csr") if fit.path_nodes is None else sp.csr_matrix(fit.path_nodes)
    depth = np.asarray((A != 0).sum(axis=1), dtype=np.float64).ravel()  # |p and p|: the nodes of each path
    taken = scale * ((1.0 - g) + g * depth[paths])  # (n,) copies of each row's counts its own path holds
    base = np.asarray(log_base, dtype=np.float64)[paths]
    Z = a * np.exp(-base)  # (n,) each row's path's N_j + a V
    rows = np.repeat(np.arange(n), np.diff(X.indptr))
    lookup = lookup if lookup is not None else ratio_lookup(log_ratio)
    theta = np.exp(base[rows] + lookup.at(paths[rows], X.indices, V))
    numerator = np.maximum(theta * Z[rows] - taken[rows] * X.data, a)
    denominator = np.maximum(Z - taken * lengths, a * V)
    path_ll = np.bincount(rows, X.data * np.log(numerator), minlength=n).astype(np.float64)
    path_ll -= lengths * np.log(denominator)
    # the paths that never held the row, in row chunks of at most 2^22 (row, path) cells
    ratio = sp.csr_matrix(log_ratio)
    n_paths = ratio.shape[0]
    step = max(1, (1 << 22) // max(n_paths, 1))
    for start in range(0, n, step):
        chunk = slice(start, min(n, start + step))
        others = np.asarray((X[chunk] @ ratio.T).todense()) + lengths[chunk, None] * np.asarray(log_base)[None, :]
        if g > 0:
            others[np.asarray((A[paths[chunk]] @ A.T).todense()) != 0] = -np.inf
        others[np.arange(others.shape[0]), paths[chunk]] = -np.inf
        if n_paths > 1:
            path_ll[chunk] = np.maximum(path_ll[chunk], others.max(axis=1))
    return in_taxonomy_of_likelihoods(X, unknown, path_ll, background)
