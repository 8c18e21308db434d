"""A fingerprint of each document as the model sees it: its bag of known words.

Two documents get the same fingerprint when they hold the same vocabulary
terms in the same counts, whatever their order, case, punctuation or words
the model does not know (the tokenizer has already dropped those). It is
what ``suggest-labels`` counts once: labelling a second copy of a document
the model reads as the same teaches it nothing new.

The hash is linear in the non-zeros: each (term, count) entry is mixed by
splitmix64 and a row's entries are added modulo 2^64 (so the order of a row's
entries does not matter), then the sum is mixed with the row's entry count.
It is a de-duplication key, not a cryptographic one: two different bags
collide with probability about 2^-64 per pair.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import scipy.sparse as sp

__all__ = ["bag_fingerprints"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic, a new array)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def bag_fingerprints(X) -> Tuple[np.ndarray, np.ndarray]:
    """The fingerprint of each row's bag of terms.

    Parameters
    ----------
    X : sparse matrix, shape (n, V): term counts (any numeric dtype; explicit zeros are ignored).

    Returns
    -------
    fingerprints : int64 ndarray, shape (n,)
        Equal for rows with the same non-zero (term, count) entries; 0 for an empty row.
    empty : bool ndarray, shape (n,)
        Rows with no non-zero entry (no word the model knows).
    """
    X = sp.csr_matrix(X)
    if not X.has_canonical_format or not X.data.all():
        X = X.copy()
        X.sum_duplicates()  # (t, 1) twice is the bag (t, 2)
        X.eliminate_zeros()
    counts = X.data.astype(np.float64).view(np.uint64)
    with np.errstate(over="ignore"):
        entry = _splitmix64(X.indices.astype(np.uint64) * _GOLDEN ^ counts)
        # Row sums of the entries' hashes modulo 2^64 through one cumulative sum (empty rows add nothing).
        cumulative = np.concatenate([np.zeros(1, np.uint64), np.cumsum(entry, dtype=np.uint64)])
        row_sum = cumulative[X.indptr[1:]] - cumulative[X.indptr[:-1]]
        n_entries = np.diff(X.indptr).astype(np.uint64)
        fingerprint = _splitmix64(row_sum ^ _splitmix64(n_entries))
    empty = n_entries == 0
    fingerprint[empty] = 0
    return fingerprint.view(np.int64), empty
