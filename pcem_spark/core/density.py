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

import numpy as np
import scipy.sparse as sp

__all__ = ["path_typicality"]


def path_typicality(X, log_base: np.ndarray, log_ratio: sp.csr_matrix, best: np.ndarray) -> np.ndarray:
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

    Returns
    -------
    ndarray (n,), float64, <= 0 up to rounding
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    best = np.asarray(best, dtype=np.int64)
    if X.shape[0] != best.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but best has {best.shape[0]}")
    lengths = np.asarray(X.sum(axis=1)).ravel()
    # sum_w x_iw log theta_{b_i w}: each row against its own path's row of log_ratio (a CSR row gather).
    gathered = sp.csr_matrix(log_ratio)[best]
    cross = np.asarray(X.multiply(gathered).sum(axis=1)).ravel() + lengths * np.asarray(log_base)[best]
    # sum_w x_iw log x_iw, then sum_w p log p = (sum x log x) / L - log L.
    x_log_x = sp.csr_matrix((X.data * np.log(np.where(X.data > 0, X.data, 1.0)), X.indices, X.indptr), shape=X.shape)
    self_term = np.asarray(x_log_x.sum(axis=1)).ravel()
    out = np.full(X.shape[0], np.nan)
    seen = lengths > 0
    L = lengths[seen]
    out[seen] = cross[seen] / L - (self_term[seen] / L - np.log(L))
    return out
