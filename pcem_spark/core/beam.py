"""Beam decoding: the most probable path found top-down, keeping the ``beam`` best partial
paths per depth instead of scoring every leaf -- for taxonomies with thousands of leaves."""

from __future__ import annotations

from typing import NamedTuple, Tuple

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.parameters import PathParameters

__all__ = ["BeamTables", "beam_tables", "beam_predict_paths"]


class BeamTables(NamedTuple):
    """What :func:`beam_predict_paths` needs: per-depth node tables and the path tables.

    ``levels[d]`` is ``(nodes, parent_slot, params)`` for depth d+1 < D:
    ``nodes`` the node ids at that depth, ``parent_slot`` (len(nodes),) the
    position of each node's parent among the previous depth's nodes (-1 at
    depth 1), ``params`` a :class:`PathParameters` whose rows are those
    nodes' aggregate word distributions. ``path_parent`` (M,) is each path's
    depth D-1 node's position; ``paths`` the path parameters.
    """

    levels: list
    path_parent: np.ndarray
    paths: PathParameters


def beam_tables(params: PathParameters, path_node: np.ndarray, smoothing: float) -> BeamTables:
    """Node-level parameters for a beam search over the tree, from path parameters.

    Each internal node's word distribution is the Lidstone estimate of the summed
    counts of the paths below it (counts recovered from ``params`` and the
    ``smoothing`` they were built with), its prior the sum of their priors.

    Parameters
    ----------
    params : PathParameters (M, V) built with ``smoothing`` (:func:`sparse_log_parameters`)
    path_node : ndarray (M, K) 0/1 path-node membership (``Taxonomy.path_node_matrix()``,
        nodes sorted by depth)
    smoothing : float > 0
    """
    M, V = params.shape
    pn = sp.csr_matrix(path_node)
    pn.eliminate_zeros()
    pn.sort_indices()
    depth = np.diff(pn.indptr)
    if not np.all(depth == depth[0]):
        raise ValueError("beam_tables needs padded paths of one depth")
    D = int(depth[0])
    # node of each path at each depth (columns are sorted by depth in the taxonomy)
    path_nodes = pn.indices.reshape(M, D).astype(np.int64)  # (M, D)
    counts = params.log_ratio.copy()
    counts.data = smoothing * np.expm1(counts.data)
    n_words = smoothing * np.exp(-params.log_base) - V * smoothing  # N_j
    prior = np.exp(params.log_prior)
    levels = []
    prev_nodes = None
    for d in range(D - 1):
        nodes, slot_of_path = np.unique(path_nodes[:, d], return_inverse=True)
        member = sp.csr_matrix((np.ones(M), (slot_of_path, np.arange(M))), shape=(len(nodes), M))
        node_counts = (member @ counts).tocsr()
        node_n = member @ n_words
        ratio = node_counts.copy()
        ratio.data = np.log1p(ratio.data / smoothing)
        ratio.eliminate_zeros()
        node_params = PathParameters(np.log(member @ prior), np.log(smoothing) - np.log(V * smoothing + node_n), ratio)
        if prev_nodes is None:
            parent_slot = np.full(len(nodes), -1)
        else:
            parent_of = {}
            for j in range(M):
                parent_of[path_nodes[j, d]] = path_nodes[j, d - 1]
            parent_slot = np.searchsorted(prev_nodes, [parent_of[c] for c in nodes])
        levels.append((nodes, parent_slot, node_params))
        prev_nodes = nodes
    if prev_nodes is None:
        path_parent = np.full(M, -1)
    else:
        path_parent = np.searchsorted(prev_nodes, path_nodes[:, D - 2])
    return BeamTables(levels, path_parent, params)


def _rows_jll(X, params: PathParameters, rows: np.ndarray) -> np.ndarray:
    """(n, len(rows)) joint log-likelihood of ``X`` under the components ``rows`` of ``params``."""
    ratio = params.log_ratio[rows]
    lengths = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
    out = lengths[:, None] * params.log_base[rows][None, :] + params.log_prior[rows][None, :]
    out += (X @ ratio.T).toarray() if ratio.nnz else 0.0
    return out


def beam_predict_paths(X, tables: BeamTables, beam: int) -> Tuple[np.ndarray, np.ndarray]:
    """Best path by a beam search down the tree: keep the ``beam`` best nodes per depth.

    At each depth only the children of the kept nodes are scored (node-level
    naive Bayes of :func:`beam_tables`); at the last depth the kept nodes'
    paths are scored with the path parameters and the best one wins. With
    ``beam`` >= the number of nodes at every depth this is the exact argmax of
    Eq. 5; the probability returned is the posterior among the scored paths.

    Returns
    -------
    best : int ndarray (n,), prob : ndarray (n,)
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    n = X.shape[0]
    kept = np.zeros((n, 1), dtype=np.int64)  # slots at the previous depth (the root: slot 0)
    for _nodes, parent_slot, node_params in tables.levels:
        parent = np.where(parent_slot < 0, 0, parent_slot)
        kept = _beam_step(X, kept, parent, node_params, beam)
    M = tables.paths.shape[0]
    parent = np.where(tables.path_parent < 0, 0, tables.path_parent)
    best = np.zeros(n, dtype=np.int64)
    prob = np.zeros(n)
    scores, cands = _candidate_scores(X, kept, parent, tables.paths, M)
    for i in range(n):
        s, c = scores[i], cands[i]
        k = int(np.argmax(s))
        best[i] = c[k]
        prob[i] = 1.0 / np.exp(s - s[k]).sum()
    return best, prob


def _candidate_scores(X, kept: np.ndarray, parent: np.ndarray, params: PathParameters, n_comp: int):
    """Per row: scores and ids of the components whose parent slot is among that row's kept slots.

    Rows sharing a kept parent are scored together: one sparse product per parent.
    """
    n = X.shape[0]
    children_of = {}
    for c in range(n_comp):
        children_of.setdefault(int(parent[c]), []).append(c)
    scores = [[] for _ in range(n)]
    cands = [[] for _ in range(n)]
    for p in np.unique(kept[kept >= 0]):
        rows = np.flatnonzero((kept == p).any(axis=1))
        kids = np.asarray(children_of.get(int(p), []), dtype=np.int64)
        if not len(kids):
            continue
        jll = _rows_jll(X[rows], params, kids)
        for r, i in enumerate(rows):
            scores[i].append(jll[r])
            cands[i].append(kids)
    return (
        [np.concatenate(s) if s else np.zeros(0) for s in scores],
        [np.concatenate(c) if c else np.zeros(0, np.int64) for c in cands],
    )


def _beam_step(X, kept: np.ndarray, parent: np.ndarray, params: PathParameters, beam: int) -> np.ndarray:
    """Slots (n, <= beam) of the best children of each row's kept slots (-1 = none)."""
    scores, cands = _candidate_scores(X, kept, parent, params, params.shape[0])
    out = np.full((X.shape[0], beam), -1, dtype=np.int64)
    for i, (s, c) in enumerate(zip(scores, cands)):
        top = np.argsort(-s, kind="stable")[:beam]
        out[i, : len(top)] = c[top]
    return out
