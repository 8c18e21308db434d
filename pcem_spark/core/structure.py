"""Mixture structures over the taxonomy's paths: how node scores become path scores (Eq. 2),
and responsibilities within groups of components (one multinomial per path, or several).

Pure numpy: the E-step (:mod:`pcem_spark.core.estep`) and decoding build on these.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp

__all__ = [
    "Structure",
    "group_log_softmax",
    "responsibilities",
    "top_down_log_marginals",
    "labeled_responsibilities",
    "random_component_split",
    "path_scores",
    "weighted_score_matrix",
    "posterior",
]


class Structure(NamedTuple):
    """How a method's ``R`` components relate (pure arrays, cheap to broadcast).

    PCNB/PCEM and the flat methods use one softmax group and decode by Eq. 5;
    the baselines of :mod:`pcem_spark.core.methods` use the other fields.

    groups : int ndarray (R,)
        Components in one group share one softmax (posterior) and one
        normalised prior; one group = an ordinary mixture.
    owner : int ndarray (R,)
        Path of each component (``decoder="posterior"``: ``P(path | x)`` is
        the sum over its components); -1 where components are nodes.
    decoder : ``"posterior"`` | ``"win"`` | ``"greedy"``
        posterior: argmax path of summed component posteriors; win: path of
        largest sum over depths of its nodes' per-group posteriors; greedy:
        from the root, the most probable child at each depth.
    path_nodes : int ndarray (M, D) or None
        Component of each path's node at each depth (win / greedy).
    parents : int ndarray (R,) or None
        Parent component of each component (-1 at the top), components
        ordered so parents come first: unlabelled responsibilities are then
        node marginals, the product of the per-group (local) posteriors from
        the top down to the node (top-down methods).
    restrict_labeled : bool
        A labelled row's fixed score for a path is spread over that path's
        components by their posterior (multiple components per class).
    """

    groups: np.ndarray
    owner: np.ndarray
    decoder: str = "posterior"
    path_nodes: Optional[np.ndarray] = None
    parents: Optional[np.ndarray] = None
    restrict_labeled: bool = False

    @property
    def single_softmax(self) -> bool:
        """True when the responsibilities of a row are one distribution (sum to 1)."""
        return self.parents is None and (not len(self.groups) or bool(np.all(self.groups == self.groups[0])))


def group_log_softmax(scores: np.ndarray, groups: Optional[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """Log-softmax of ``scores`` (n, R) within each group of columns.

    Returns
    -------
    log_post : ndarray (n, R)
    log_evidence : ndarray (n,), the sum over groups of each group's logsumexp
    """
    if groups is None or not len(groups) or np.all(groups == groups[0]):
        log_ev = logsumexp(scores, axis=1)
        return scores - log_ev[:, None], log_ev
    # Vectorised over groups (a top-down tree has one group per internal node):
    # sort the columns by group and reduce each contiguous run.
    order = np.argsort(groups, kind="stable")
    g_sorted = groups[order]
    starts = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]])
    run_of = np.cumsum(np.r_[False, g_sorted[1:] != g_sorted[:-1]])  # run index of each sorted column
    s_sorted = np.asarray(scores, dtype=np.float64)[:, order]
    top = np.maximum.reduceat(s_sorted, starts, axis=1) if s_sorted.shape[0] else np.zeros((0, len(starts)))
    shifted = s_sorted - top[:, run_of]
    lse = top + np.log(np.add.reduceat(np.exp(shifted), starts, axis=1)) if s_sorted.shape[0] else top
    out = np.empty_like(s_sorted)
    out[:, order] = s_sorted - lse[:, run_of]
    return out, lse.sum(axis=1)


def responsibilities(jll: np.ndarray, structure: Optional[Structure] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Posterior responsibilities of unlabelled rows over the R components.

    One group and no ancestors: exactly Eq. 5.

    Parameters
    ----------
    jll : ndarray, shape (n, R)
        Component joint log-likelihoods (:func:`~pcem_spark.core.estep.joint_log_likelihood`).
    structure : Structure or None
        The baselines' component structure; None (PCNB / PCEM, flat methods)
        is one softmax over the R = M paths.

    Returns
    -------
    resp : ndarray, shape (n, R)
        With one softmax group each row sums to 1; per-group softmaxes, or
        node marginals when ``structure.parents`` is set.
    log_evidence : ndarray, shape (n,)
        The sum over groups of each group's ``logsumexp`` of ``jll``.

    Examples
    --------
    >>> import numpy as np
    >>> jll = np.log(np.array([[6.0, 3.0, 1.0], [2.0, 2.0, 6.0]]))
    >>> resp, log_evidence = responsibilities(jll)
    >>> print(resp.round(3))
    [[0.6 0.3 0.1]
     [0.2 0.2 0.6]]
    >>> print(np.exp(log_evidence).round(6))
    [10. 10.]
    """
    if structure is None:
        return posterior(jll)
    log_local, log_ev = group_log_softmax(jll, structure.groups)
    if structure.parents is not None:
        log_local = top_down_log_marginals(log_local, structure.parents)
    return np.exp(log_local), log_ev


def top_down_log_marginals(log_local: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """``log P(c | x) = log P(c | parent(c), x) + log P(parent(c) | x)``, from the top down.

    ``parents`` (R,) gives each column's parent column (-1 at the top);
    parents must come before their children in column order (taxonomy nodes
    are sorted by depth), so one pass per depth suffices.
    """
    out = np.array(log_local, dtype=np.float64, copy=True)
    depth = np.zeros(len(parents), dtype=np.int64)
    for c, p in enumerate(parents):
        if p >= c:
            raise ValueError("top-down structure: a parent must come before its children")
        depth[c] = 0 if p < 0 else depth[p] + 1
    for d in range(1, int(depth.max(initial=0)) + 1):
        cols = np.flatnonzero(depth == d)
        out[:, cols] += out[:, parents[cols]]
    return out


def labeled_responsibilities(
    fixed: np.ndarray, jll: np.ndarray, structure: Optional[Structure]
) -> Tuple[np.ndarray, float]:
    """Responsibilities and log-likelihood term of labelled rows.

    Normally the fixed scores themselves, with ``sum_r S_ir jll_ir`` (Eq. 8).
    With ``restrict_labeled`` each path's fixed score is spread over the
    path's components by their posterior within the path, and the term is
    ``sum_path S_i,path logsumexp_{r in path} jll_ir``.
    """
    if structure is None or not structure.restrict_labeled:
        return fixed, float(np.sum(fixed * jll, dtype=np.float64))
    log_within = group_log_softmax(jll, structure.owner)[0]
    resp = fixed * np.exp(log_within)
    # fixed * (jll - log_within) is the path's logsumexp on each of its columns;
    # weight each path once (1 / its number of components).
    n_comp = np.bincount(structure.owner)[structure.owner]
    loglik = float(np.sum(fixed * (jll - log_within) / n_comp[None, :], dtype=np.float64))
    return resp, loglik


def random_component_split(fixed: np.ndarray, owner: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Initial responsibilities: each row's score for a path goes to one random component of it."""
    u = rng.random(fixed.shape)
    keep = np.zeros(fixed.shape, dtype=bool)
    for j in np.unique(owner):
        cols = np.flatnonzero(owner == j)
        keep[np.arange(len(fixed)), cols[u[:, cols].argmax(axis=1)]] = True
    return np.where(keep, fixed, 0.0)


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
        ``S_ij``, float64 and dense even for sparse ``node_scores``.

    Examples
    --------
    A document labelled ``sci/space`` (nodes ``sci`` and ``space``) scores 2
    on its own path, 1 on its sibling ``sci/med`` and 0 on ``rec/autos``:

    >>> import numpy as np
    >>> from pcem_spark.core.taxonomy import Taxonomy
    >>> taxonomy = Taxonomy({"ROOT": ["sci", "rec"], "sci": ["space", "med"], "rec": ["autos"]})
    >>> taxonomy.nodes, taxonomy.paths
    (['rec', 'sci', 'autos', 'med', 'space'], [('rec', 'autos'), ('sci', 'med'), ('sci', 'space')])
    >>> node_scores = np.array([[0.0, 1.0, 0.0, 0.0, 1.0]])
    >>> print(path_scores(node_scores, taxonomy.path_node_matrix()))
    [[0. 1. 2.]]
    """
    out = node_scores @ score_matrix.T
    if sp.issparse(out):
        out = out.toarray()
    return np.asarray(out, dtype=np.float64)


def weighted_score_matrix(path_node: np.ndarray, leaf_node: np.ndarray, path_weight: float = 1.0) -> np.ndarray:
    """Score matrix (M, K) between flat counts (``path_weight = 0``) and Eq. 2 (``path_weight = 1``).

    ``(1 - g) * leaf_node + g * path_node``: a labelled document on path j
    scores ``(1 - g) + g * D`` for its own path and ``g * d`` for a path that
    shares d nodes with it. ``g = 1`` is the paper's Eq. 2 exactly, ``g = 0``
    one-hot leaf counts (flat NB / EM) exactly; in between, the share a
    labelled document gives its leaf's siblings shrinks linearly, which is
    what plentiful labels need (docs/RESULTS.md, "No-regret defaults").

    Parameters
    ----------
    path_node, leaf_node : ndarray (M, K)
        ``Taxonomy.path_node_matrix()`` and ``Taxonomy.leaf_node_matrix()``.
    path_weight : float in [0, 1]
    """
    if not 0.0 <= path_weight <= 1.0:
        raise ValueError(f"path_weight must be in [0, 1], got {path_weight}")
    if sp.issparse(path_node) or sp.issparse(leaf_node):
        # Thousands of leaves: the same matrix, kept sparse.
        if path_weight == 1.0:
            return sp.csr_matrix(path_node, dtype=np.float64, copy=True)
        if path_weight == 0.0:
            return sp.csr_matrix(leaf_node, dtype=np.float64, copy=True)
        return (
            (1.0 - path_weight) * sp.csr_matrix(leaf_node, dtype=np.float64)
            + path_weight * sp.csr_matrix(path_node, dtype=np.float64)
        ).tocsr()
    if path_weight == 1.0:
        return np.array(path_node, dtype=np.float64)
    if path_weight == 0.0:
        return np.array(leaf_node, dtype=np.float64)
    return (1.0 - path_weight) * np.asarray(leaf_node, np.float64) + path_weight * np.asarray(path_node, np.float64)


def posterior(jll: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Eq. 5 in log space.

    Returns
    -------
    post : ndarray, shape (n, M)
        ``P(y_i = p_j | x_i)``; rows sum to 1.
    log_evidence : ndarray, shape (n,)
        ``log sum_j P(p_j) P(x_i | p_j)`` (up to the omitted constants).
    """
    # One exp per cell: the shifted exponentials are the unnormalised posterior (scipy's logsumexp,
    # then exp(jll - lse), took two, and its checks cost as much again: ~3.5x this per block).
    top = jll.max(axis=1, keepdims=True) if jll.shape[1] else np.zeros((jll.shape[0], 1))
    top[~np.isfinite(top)] = 0.0  # as logsumexp: a row of -inf has evidence -inf (posterior NaN), not an error
    post = np.subtract(jll, top, dtype=np.float64)
    np.exp(post, out=post)
    total = post.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_evidence = top[:, 0] + np.log(total)
        post /= total[:, None]
    return post, log_evidence
