"""What a posterior over paths says about nodes: the path-node table, node marginals, the depth to stop at
below ``min_probability``, the ``k`` most probable paths. Pure numpy on one block (:mod:`.decoding` gives
the posteriors).
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
import scipy.sparse as sp

__all__ = ["node_marginals", "path_node_table", "abstain_depth", "top_k_paths", "path_membership", "path_node_outputs"]


def node_marginals(path_post: np.ndarray, path_node) -> np.ndarray:
    """``P(c | x) = sum of the posteriors of the paths through c``, for every node c.

    Parameters
    ----------
    path_post : ndarray (n, M), rows summing to 1 (:func:`path_posteriors`)
    path_node : ndarray or sparse matrix (M, K), 0/1 path-node membership
        (``Taxonomy.path_node_matrix()``)

    Returns
    -------
    ndarray, shape (n, K)
        In [0, 1]; along a path the marginals never increase (a node's paths
        include its children's).

    Examples
    --------
    Paths ``rec/autos``, ``sci/med``, ``sci/space``; nodes in
    ``Taxonomy.nodes`` order (``rec``, ``sci``, ``autos``, ``med``, ``space``):

    >>> import numpy as np
    >>> from pcem_spark.core.taxonomy import Taxonomy
    >>> taxonomy = Taxonomy({"ROOT": ["sci", "rec"], "sci": ["space", "med"], "rec": ["autos"]})
    >>> path_post = np.array([[0.1, 0.3, 0.6]])
    >>> print(node_marginals(path_post, taxonomy.path_node_matrix()).round(3))
    [[0.1 0.9 0.1 0.3 0.6]]
    """
    out = np.asarray(
        path_post @ path_node
        if not sp.issparse(path_node)
        else (sp.csr_matrix(path_node).T @ np.asarray(path_post).T).T,
        dtype=np.float64,
    )
    return np.clip(out, 0.0, 1.0)


def path_node_table(path_node, is_dummy: np.ndarray) -> np.ndarray:
    """(M, D) node index of each path at each depth, ``-1`` where the path's node is a dummy.

    A path's real nodes are then its row up to the first -1 (dummies only pad
    a shallow leaf at the end).

    Parameters
    ----------
    path_node : ndarray or sparse matrix (M, K), 0/1, nodes sorted by depth
        (``Taxonomy.path_node_matrix()``), every path of the same (padded) depth D
    is_dummy : bool ndarray (K,) (``Taxonomy.is_dummy``)
    """
    pn = sp.csr_matrix(path_node)
    pn.eliminate_zeros()
    pn.sort_indices()
    depth = np.diff(pn.indptr)
    M = pn.shape[0]
    if M and not np.all(depth == depth[0]):
        raise ValueError("path_node_table needs padded paths of one depth")
    table = pn.indices.reshape(M, int(depth[0]) if M else 0).astype(np.int64)
    return np.where(np.asarray(is_dummy, dtype=bool)[table], -1, table)


def abstain_depth(
    best_path: np.ndarray, marginals: np.ndarray, path_nodes: np.ndarray, min_probability: float
) -> np.ndarray:
    """How many nodes of each row's predicted path to keep: the longest prefix of real nodes whose
    marginal probability is >= ``min_probability``.

    Marginals never increase along a path, so this stops at the deepest node
    with a marginal >= ``min_probability``; 0 = abstain at the root (no node
    is likely enough). ``min_probability = 0`` keeps every real node.

    Parameters
    ----------
    best_path : int ndarray (n,), the predicted path of each row
    marginals : ndarray (n, K) (:func:`node_marginals`)
    path_nodes : int ndarray (M, D), -1 at dummies (:func:`path_node_table`)
    min_probability : float in [0, 1]

    Returns
    -------
    int64 ndarray (n,), in 0..(real depth of the row's path)
    """
    nodes = path_nodes[np.asarray(best_path, dtype=np.int64)]  # (n, D)
    real = nodes >= 0
    if min_probability <= 0:
        return real.sum(axis=1).astype(np.int64)
    m = np.take_along_axis(marginals, np.where(real, nodes, 0), axis=1)
    ok = real & (m >= min_probability)
    return np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)


def top_k_paths(path_post: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` most probable paths, most probable first; ties go to the lower path index.

    Parameters
    ----------
    path_post : ndarray (n, M)
    k : int >= 0; ``min(k, M)`` paths are returned

    Returns
    -------
    index : int64 ndarray (n, min(k, M))
    probability : ndarray (n, min(k, M)), non-increasing along each row
    """
    path_post = np.asarray(path_post, dtype=np.float64)
    n, M = path_post.shape
    k = min(int(k), M)
    if k <= 0 or n == 0:
        return np.zeros((n, max(k, 0)), dtype=np.int64), np.zeros((n, max(k, 0)))
    if k == M:
        index = np.argsort(-path_post, axis=1, kind="stable")
    else:
        # The k largest per row in O(M) (argpartition), then sorted by (-probability, index);
        # a row with ties at the k-th value has an arbitrary partition: sorted in full instead.
        index = np.argpartition(-path_post, k - 1, axis=1)[:, :k]
        kth = np.take_along_axis(path_post, index, axis=1).min(axis=1)
        tied = (path_post >= kth[:, None]).sum(axis=1) > k
        if tied.any():
            index[tied] = np.argsort(-path_post[tied], axis=1, kind="stable")[:, :k]
        order = np.lexsort((index, -np.take_along_axis(path_post, index, axis=1)), axis=-1)
        index = np.take_along_axis(index, order, axis=1)
    index = np.ascontiguousarray(index[:, :k], dtype=np.int64)
    return index, np.take_along_axis(path_post, index, axis=1)


def path_membership(path_nodes: np.ndarray) -> sp.csr_matrix:
    """(M, K') 0/1 CSR: the real nodes of each path, from :func:`path_node_table` (K' = largest node index + 1).

    What :func:`node_marginals` needs for the marginals of real nodes (a
    dummy's marginal is never read: it is never kept or shown).
    """
    rows, depth = np.nonzero(path_nodes >= 0)
    cols = path_nodes[rows, depth]
    k = int(cols.max()) + 1 if cols.size else 0
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(path_nodes.shape[0], k))


def path_node_outputs(along: np.ndarray, real: np.ndarray, min_probability: float, node_probabilities: bool):
    """``(node_probability, kept, kept_probability)`` of :class:`PathPredictions` from the decoded paths' nodes.

    ``along`` (n, D): the marginal of each depth's node of the decoded path
    (never increasing); ``real`` (n, D): where that node is not a dummy.
    ``kept``: the longest prefix of real nodes at least ``min_probability``
    probable (None when it is 0), ``kept_probability`` its last node's (1 for
    an empty path); ``node_probability``: ``along`` with NaN at dummies
    (None unless ``node_probabilities``).
    """
    node_prob = np.where(real, along, np.nan) if node_probabilities else None
    kept = kept_prob = None
    if min_probability > 0:
        kept = np.cumprod(real & (along >= min_probability), axis=1).sum(axis=1).astype(np.int64)
        last = np.take_along_axis(along, np.maximum(kept - 1, 0)[:, None], axis=1).ravel()
        kept_prob = np.where(kept > 0, last, 1.0)
    return node_prob, kept, kept_prob
