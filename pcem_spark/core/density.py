"""How typical a document is of the path it is predicted on: the density weight of label suggestions.

McCallum & Nigam (ICML 1998) weight a document's disagreement by its
density, ``exp(-beta * KL)`` of the document's word distribution from the
others', so that an outlier is not worth labelling however uncertain the
model is about it. Comparing every pair of documents is quadratic; the
model's word distributions already summarise the documents of each path, so
the distance used here is to the predicted path's distribution:

``typicality_i = -KL(p_i || theta_{b_i}) = sum_w p_iw log theta_{b_i w} - sum_w p_iw log p_iw``

with ``p_i = x_i / |x_i|`` the document's distribution over the words the
model knows and ``b_i`` its predicted path. It is <= 0 (nats); 0 means the
document's words are in the proportions of its path. A document with no
known word has none (NaN): there is nothing in it the model could learn
from a label.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import scipy.sparse as sp

__all__ = ["DENSE_LOOKUP_CELLS", "RatioLookup", "path_typicality", "ratio_lookup"]


# Up to this many (path, term) cells, a model's ratios are looked up in a dense table (8 bytes a cell:
# 64 MB), a direct gather; past it, by binary search in the stored entries.
DENSE_LOOKUP_CELLS = 1 << 23


class RatioLookup(NamedTuple):
    """``log_ratio[best, w]`` for every word of a block: a dense (R, V) table, or sorted keyed entries."""

    dense: Optional[np.ndarray]  # (R, V) at log_ratio's dtype, or None
    keys: np.ndarray  # (nnz,) int64 ``row * V + term``, sorted (empty with a dense table)
    values: np.ndarray  # (nnz,) at log_ratio's dtype
    vocab_size: int  # V

    def at(self, rows: np.ndarray, terms: np.ndarray, vocab_size: int) -> np.ndarray:
        """``log_ratio[rows, terms]`` (float64), for words of a vocabulary of ``vocab_size`` terms."""
        if vocab_size != self.vocab_size:
            raise ValueError(f"the documents have {vocab_size} terms but the word distributions {self.vocab_size}")
        if self.dense is not None:
            return self.dense[rows, terms].astype(np.float64, copy=False)
        if not len(self.keys):
            return np.zeros(len(terms))
        wanted = rows * np.int64(vocab_size) + terms
        at = np.minimum(np.searchsorted(self.keys, wanted), len(self.keys) - 1)
        found = np.where(self.keys[at] == wanted, self.values[at], 0)  # absent: 0, the path's base rate
        return found.astype(np.float64, copy=False)


def ratio_lookup(log_ratio, dense_cells: int = DENSE_LOOKUP_CELLS) -> RatioLookup:
    """How :func:`path_typicality` finds each document word's ``log_ratio[best, w]``; build once per model.

    A dense table when ``log_ratio`` has at most ``dense_cells`` cells, else its stored entries keyed
    ``row * V + term`` for a binary search, O(nnz(X) log nnz(log_ratio)). Either way each word is looked
    up alone: gathering each document's whole path row instead cost a 4,096-document block of a 2^18-term
    model hundreds of millions of entries.
    """
    ratio = sp.csr_matrix(log_ratio)
    ratio.sum_duplicates()  # canonical: sorted, unique (row, term) keys
    n_rows, vocab_size = ratio.shape
    if n_rows * vocab_size <= dense_cells:
        return RatioLookup(ratio.toarray(), np.zeros(0, np.int64), np.zeros(0), vocab_size)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(ratio.indptr))
    return RatioLookup(None, rows * vocab_size + ratio.indices, ratio.data, vocab_size)


def path_typicality(
    X, log_base: np.ndarray, log_ratio: sp.csr_matrix, best: np.ndarray, lookup: Optional[RatioLookup] = None
) -> np.ndarray:
    """``-KL(p_i || theta_{best_i})`` (nats) of each row of ``X``; NaN for a row with no count.

    Parameters
    ----------
    X : sparse matrix (n, V), term counts (any non-negative weights)
    log_base : ndarray (R,), and
    log_ratio : csr_matrix (R, V)
        The components' word distributions in the sparse form of
        :class:`~pcem_spark.core.parameters.PathParameters`:
        ``log theta_jw = log_base_j + log_ratio_jw``.
    best : int ndarray (n,), the component (path) of each row
    lookup : ``ratio_lookup(log_ratio)``, when the caller keeps it across blocks (else computed here)

    Returns
    -------
    ndarray (n,), float64, <= 0 up to rounding
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    if not X.has_canonical_format:  # x log x needs each word's count once
        X = X.copy()
        X.sum_duplicates()
    best = np.asarray(best, dtype=np.int64)
    if X.shape[0] != best.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but best has {best.shape[0]}")
    lengths = np.asarray(X.sum(axis=1)).ravel()
    # sum_w x_iw log theta_{b_i w}: each of the row's words looked up in its own path's row of log_ratio
    # (absent = 0, the path's base rate).
    lookup = lookup if lookup is not None else ratio_lookup(log_ratio)
    ratio = lookup.at(np.repeat(best, np.diff(X.indptr)), X.indices, X.shape[1])
    weighted = sp.csr_matrix((X.data * ratio, X.indices, X.indptr), shape=X.shape)
    cross = np.asarray(weighted.sum(axis=1)).ravel() + lengths * np.asarray(log_base)[best]
    # sum_w x_iw log x_iw, then sum_w p log p = (sum x log x) / L - log L.
    x_log_x = sp.csr_matrix((X.data * np.log(np.where(X.data > 0, X.data, 1.0)), X.indices, X.indptr), shape=X.shape)
    self_term = np.asarray(x_log_x.sum(axis=1)).ravel()
    out = np.full(X.shape[0], np.nan)
    seen = lengths > 0
    L = lengths[seen]
    out[seen] = cross[seen] / L - (self_term[seen] / L - np.log(L))
    return out
