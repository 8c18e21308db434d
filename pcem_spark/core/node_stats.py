"""Per-node statistics of a fitted model for ``pcem inspect``: word counts recovered from the
parameters, node masses and priors, and the terms that set a node apart from its siblings
(signed log-likelihood ratio, smoothed log-odds). Pure numpy/scipy.
"""

from __future__ import annotations

import logging
from typing import List, NamedTuple, Optional, Tuple

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.parameters import PathParameters, recovered_counts
from pcem_spark.errors import InputError

__all__ = [
    "TERM_RANKINGS",
    "component_paths",
    "node_counts",
    "node_sum",
    "NodeMass",
    "node_prior",
    "node_mass",
    "labeled_documents",
    "TermScore",
    "signed_llr",
    "sibling_log_odds",
    "WeightedTerm",
    "sibling_weight_contrasts",
    "padded_parents",
    "tree_order",
]

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ the math
def _membership(path_nodes, owner: Optional[np.ndarray] = None) -> sp.csr_matrix:
    """(R, K) 0/1 component -> node membership: ``path_nodes[owner]`` (``owner`` None: R = M)."""
    pn = sp.csr_matrix(path_nodes, dtype=np.float64)
    if owner is None:
        return pn
    owner = np.asarray(owner, dtype=np.int64)
    if len(owner) and (owner.min() < 0 or owner.max() >= pn.shape[0]):
        raise ValueError(
            f"owner must map every component to a path in [0, {pn.shape[0]}), "
            f"got values in [{owner.min()}, {owner.max()}]"
        )
    return pn[owner]


def component_paths(taxonomy, spec) -> Tuple[sp.csr_matrix, Optional[np.ndarray]]:
    """``(path_nodes, owner)`` of a method: how its R components map to the K nodes.

    PCNB / PCEM / flat: components are the paths (``owner`` None); nbmc / emmc:
    several components per path (``owner`` = ``spec.structure.owner``);
    top-down / win-driven: components are the nodes themselves (``path_nodes``
    = the (K, K) identity, ``owner`` None).
    """
    K = taxonomy.n_nodes
    structure = spec.structure
    if structure is None:
        return taxonomy.path_node_matrix(sparse=True), None
    owner = np.asarray(structure.owner, dtype=np.int64)
    if len(owner) and (owner >= 0).all():
        return taxonomy.path_node_matrix(sparse=True), owner
    if spec.n_components != K:
        raise ValueError(f"{spec.name}: {spec.n_components} node components for {K} taxonomy nodes")
    return sp.identity(K, format="csr", dtype=np.float64), None


def node_counts(
    params: PathParameters, smoothing: float, path_nodes, owner: Optional[np.ndarray] = None
) -> Tuple[sp.csr_matrix, np.ndarray]:
    """Word counts and word mass per node: the sums over the components through it.

    The counts behind the Lidstone-smoothed parameters are recovered by
    :func:`pcem_spark.core.recovered_counts` (``c = s expm1(log_ratio)``,
    ``N_j = s exp(-log_base_j) - V s``). Time and memory ``O(nnz D + K)``.

    Parameters
    ----------
    params : PathParameters (R, V) built with ``smoothing``
    path_nodes : (M, K) 0/1 path -> node membership (sparse or dense)
    owner : int ndarray (R,) or None -- path of each component (None: R = M)

    Returns
    -------
    counts : csr_matrix (K, V), word_mass : ndarray (K,)
    """
    counts, n_words = recovered_counts(params, smoothing)
    member = _membership(path_nodes, owner)
    if member.shape[0] != counts.shape[0]:
        raise ValueError(f"{counts.shape[0]} components but the membership has {member.shape[0]} rows")
    node = (member.T @ counts).tocsr()
    node.sort_indices()
    return node, np.asarray(member.T @ n_words, dtype=np.float64).ravel()


def node_sum(path_nodes, component_values: np.ndarray, owner: Optional[np.ndarray] = None) -> np.ndarray:
    """(K,) the sum of a per-component quantity (R,) over the components through each node."""
    member = _membership(path_nodes, owner)
    values = np.asarray(component_values, dtype=np.float64)
    if values.shape != (member.shape[0],):
        raise ValueError(f"expected {member.shape[0]} per-component values, got shape {values.shape}")
    return np.asarray(member.T @ values, dtype=np.float64).ravel()


class NodeMass(NamedTuple):
    """Per node (K,): labelled, expected (= total - labelled) and total mass, and the prior.

    ``labeled`` / ``expected`` are None when only a total is known (the word
    mass fallback of models without ``path_mass``).
    """

    labeled: Optional[np.ndarray]
    expected: Optional[np.ndarray]
    total: np.ndarray
    prior: np.ndarray


def node_prior(
    log_prior: np.ndarray, path_nodes, owner: Optional[np.ndarray] = None, parents: Optional[np.ndarray] = None
) -> np.ndarray:
    """(K,) prior of each node: the sum of the component priors through it.

    ``parents`` (R,) for top-down methods, whose components are nodes with a
    prior normalised among siblings: the node's prior is then the product of
    those conditional priors from the top down to it. Either way the priors of
    the nodes at one depth (dummies included) sum to 1.
    """
    prior = np.exp(np.asarray(log_prior, dtype=np.float64))
    if parents is None:
        return node_sum(path_nodes, prior, owner)
    parents = np.asarray(parents, dtype=np.int64)
    marginal = prior.copy()
    for c, p in enumerate(parents):  # parents come before their children (top_down_log_marginals)
        if p >= c:
            raise ValueError("top-down structure: a parent must come before its children")
        if p >= 0:
            marginal[c] *= marginal[p]
    return node_sum(path_nodes, marginal, owner)


def node_mass(
    path_nodes,
    total: np.ndarray,
    log_prior: np.ndarray,
    labeled: Optional[np.ndarray] = None,
    owner: Optional[np.ndarray] = None,
    parents: Optional[np.ndarray] = None,
) -> NodeMass:
    """Per-node masses and priors from per-component ones (R,).

    ``total`` = the training summary's ``path_mass`` (or the word mass when a
    model lacks it), ``labeled`` = ``path_mass_labeled`` (None if unknown);
    ``expected = total - labeled``, clipped at 0 against rounding.
    """
    tot = node_sum(path_nodes, total, owner)
    lab = exp = None
    if labeled is not None:
        lab = node_sum(path_nodes, labeled, owner)
        exp = np.maximum(tot - lab, 0.0)
    return NodeMass(lab, exp, tot, node_prior(log_prior, path_nodes, owner, parents))


def labeled_documents(
    path_nodes,
    labeled_mass: np.ndarray,
    path_weight: float = 0.0,
    owner: Optional[np.ndarray] = None,
    atol: float = 1e-4,
) -> Optional[np.ndarray]:
    """(K,) labelled documents through each node, recovered from the labelled masses; None if they are not counts.

    A labelled document on path p gives path j the mass ``(1 - g) [j = p] + g
    |p and j|`` (Eq. 2 with ``path_weight`` g; flat and multi-component
    methods: g = 0), so the per-path masses are ``m = ((1 - g) I + g A A^T) n``
    with ``A`` the (M, K) path-node matrix and ``n`` the labelled documents
    per path. ``A A^T`` is positive definite (each path has its own depth-D
    node), so ``n`` is unique; it is found by conjugate gradients
    (``O(nnz(A))`` per step, never an M x M matrix). For methods whose
    components are nodes pass the (K, K) identity as ``path_nodes`` (then ``m``
    already counts documents per node).

    Weak or soft labels (the dataless setting) need not give whole documents:
    when ``n`` is not a vector of non-negative integers (to ``atol``), None.
    """
    from scipy.sparse.linalg import LinearOperator, cg

    A = sp.csr_matrix(path_nodes, dtype=np.float64)
    m = np.asarray(labeled_mass, dtype=np.float64)
    if owner is not None:  # components -> paths
        owner = np.asarray(owner, dtype=np.int64)
        m = np.bincount(owner, weights=m, minlength=A.shape[0])
    if m.shape != (A.shape[0],):
        raise ValueError(f"expected {A.shape[0]} labelled masses, got shape {m.shape}")
    g = float(path_weight)
    if not 0.0 <= g <= 1.0:
        raise ValueError(f"path_weight must be in [0, 1], got {g}")
    if g == 0.0 or not m.any():
        n = m.copy()
    else:
        At = A.T.tocsr()
        op = LinearOperator((len(m), len(m)), dtype=np.float64, matvec=lambda x: (1.0 - g) * x + g * (A @ (At @ x)))
        n, info = cg(
            op, m, x0=m / max(np.asarray(A.sum(axis=1)).max(), 1.0), rtol=1e-12, atol=0.0, maxiter=10 * len(m) + 100
        )
        if info != 0:
            log.warning("labelled documents: conjugate gradients did not converge (%s); not reported", info)
            return None
    rounded = np.round(n)
    if np.any(rounded < 0) or np.max(np.abs(n - rounded), initial=0.0) > atol:
        return None
    return np.asarray(A.T @ rounded, dtype=np.float64).ravel()


class TermScore(NamedTuple):
    """One top term of a node: index, log-odds, signed log-likelihood ratio, count in the node, pooled
    count in its siblings."""

    term: int
    log_odds: float
    llr: float
    count: float
    sibling_count: float


TERM_RANKINGS = ("llr", "log-odds")


def _o_log_o_over_e(o: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``o log(o / e)`` elementwise, 0 where ``o`` is 0 (the G-test's convention)."""
    out = np.zeros(np.broadcast(o, e).shape)
    pos = o > 0
    o_b, e_b = np.broadcast_to(o, out.shape), np.broadcast_to(e, out.shape)
    out[pos] = o_b[pos] * np.log(o_b[pos] / e_b[pos])
    return out


def signed_llr(a: np.ndarray, b: np.ndarray, n_a: np.ndarray, n_b: np.ndarray) -> np.ndarray:
    """Dunning's (1993) log-likelihood ratio G^2 of the 2 x 2 table (term, other terms) x (node, siblings).

    ``a``, ``b``: the term's counts in the node and in its siblings; ``n_a``,
    ``n_b``: their word totals (arrays of one shape, or broadcastable). Signed:
    positive where the node's rate ``a / n_a`` exceeds the siblings' ``b / n_b``.
    No smoothing needed: zero counts are exact (``0 log 0 = 0``).
    """
    a, b, n_a, n_b = (np.asarray(x, dtype=np.float64) for x in (a, b, n_a, n_b))
    n = n_a + n_b
    t = a + b
    with np.errstate(divide="ignore", invalid="ignore"):
        g = 2.0 * (
            _o_log_o_over_e(a, t * n_a / n)
            + _o_log_o_over_e(b, t * n_b / n)
            + _o_log_o_over_e(np.maximum(n_a - a, 0.0), (n - t) * n_a / n)
            + _o_log_o_over_e(np.maximum(n_b - b, 0.0), (n - t) * n_b / n)
        )
        rate_a = np.where(n_a > 0, a / np.where(n_a > 0, n_a, 1.0), 0.0)
        rate_b = np.where(n_b > 0, b / np.where(n_b > 0, n_b, 1.0), 0.0)
    g = np.maximum(g, 0.0)  # rounding can make an exact 0 slightly negative
    return np.where(rate_a >= rate_b, g, -g)


def sibling_log_odds(
    counts,
    parent_of: np.ndarray,
    smoothing: float,
    top_n: int = 10,
    show: Optional[np.ndarray] = None,
    rank: str = "llr",
) -> List[List[TermScore]]:
    """Per node, the ``top_n`` terms that most favour it over its siblings.

    ``log_odds(k, w) = log theta_kw - log theta_Sw`` with the node's and its
    pooled siblings' (the other children of its parent; for a top-level node
    the other top-level nodes) smoothed multinomials

        ``theta_kw = (c_kw + s) / (N_k + V s)``,
        ``theta_Sw = (sum_{j in S} c_jw + s) / (sum_{j in S} N_j + V s)``,

    ``s`` = ``smoothing`` (pass the model's own word pseudo-count: the
    log-odds is then the weight with which one occurrence of ``w`` moves a
    document from the siblings towards the node), ``N`` the row sums.

    Ranking: ``rank="llr"`` (default) orders by the signed log-likelihood
    ratio (:func:`signed_llr`): how surely the node's rate of ``w`` differs
    from its siblings', which grows with the evidence behind the ratio. The
    log-odds alone (``rank="log-odds"``) puts terms seen a few times in the
    node and never in its siblings first -- with a small ``s`` a top list of
    rare names and ids (on the 20NG demo model: "abc, bruins, gld" for
    rec.sport.hockey, against "hockey, nhl, team" by llr). Only terms the node
    holds (``c_kw > 0``) are candidates: a term it never saw is not what
    characterises it. Ties: larger count first, then lower term index. A node
    without siblings (an only child) gets an empty list.

    Time ``O(nnz log nnz + K)``, memory ``O(nnz + K)``: never a dense (K, V) array.

    Parameters
    ----------
    counts : sparse or dense (K, V) non-negative node counts (:func:`node_counts`)
    parent_of : int ndarray (K,) -- parent node of each node, -1 for top-level nodes
    smoothing : float > 0
    top_n : int >= 1
    show : bool ndarray (K,) or None -- nodes taking part (False: dummy nodes,
        which are neither scored nor anyone's sibling); None = all
    rank : ``"llr"`` | ``"log-odds"``
    """
    if smoothing <= 0:
        raise InputError(f"the log-odds smoothing must be > 0, got {smoothing}")
    if top_n < 1:
        raise InputError(f"top_n must be >= 1, got {top_n}")
    if rank not in TERM_RANKINGS:
        raise InputError(f"term ranking must be one of {TERM_RANKINGS}, got {rank!r}")
    C = sp.csr_matrix(counts, dtype=np.float64)
    C.sum_duplicates()
    C.eliminate_zeros()
    C.sort_indices()
    K, V = C.shape
    parent_of = np.asarray(parent_of, dtype=np.int64)
    if parent_of.shape != (K,):
        raise ValueError(f"parent_of must have {K} entries, got shape {parent_of.shape}")
    show = np.ones(K, dtype=bool) if show is None else np.asarray(show, dtype=bool)
    # Sibling groups: one per parent (the top level is group 0); hidden nodes in no group.
    group_of = parent_of + 1
    members = np.flatnonzero(show)
    n_groups = K + 1
    G_member = sp.csr_matrix((np.ones(len(members)), (group_of[members], members)), shape=(n_groups, K))
    group_counts = (G_member @ C).tocsr()
    group_counts.sort_indices()
    group_size = np.bincount(group_of[members], minlength=n_groups)
    N = np.asarray(C.sum(axis=1), dtype=np.float64).ravel()
    group_N = G_member @ N
    # Every non-zero (k, w) of C: look up its group's pooled count by key g*V + w (sorted in CSR order).
    rows = np.repeat(np.arange(K), np.diff(C.indptr))
    cols, c = C.indices.astype(np.int64), C.data
    keep = show[rows] & (group_size[group_of[rows]] > 1)
    rows, cols, c = rows[keep], cols[keep], c[keep]
    g_rows = np.repeat(np.arange(n_groups), np.diff(group_counts.indptr))
    g_keys = g_rows.astype(np.int64) * V + group_counts.indices.astype(np.int64)
    keys = group_of[rows].astype(np.int64) * V + cols
    pos = np.searchsorted(g_keys, keys)
    pooled = group_counts.data[pos]  # the node's own counts are part of its group's
    sib = np.maximum(pooled - c, 0.0)
    N_sib = np.maximum(group_N[group_of[rows]] - N[rows], 0.0)
    s = float(smoothing)
    log_odds = (np.log(c + s) - np.log(N[rows] + V * s)) - (np.log(sib + s) - np.log(N_sib + V * s))
    llr = signed_llr(c, sib, N[rows], N_sib)
    key = llr if rank == "llr" else log_odds
    order = np.lexsort((cols, -c, -key, rows))
    rows, cols, c, sib, log_odds, llr = rows[order], cols[order], c[order], sib[order], log_odds[order], llr[order]
    starts = np.searchsorted(rows, np.arange(K))
    ends = np.searchsorted(rows, np.arange(K), side="right")
    out: List[List[TermScore]] = []
    for k in range(K):
        a, b = starts[k], min(ends[k], starts[k] + top_n)
        out.append(
            [
                TermScore(int(cols[i]), float(log_odds[i]), float(llr[i]), float(c[i]), float(sib[i]))
                for i in range(a, b)
            ]
        )
    return out


class WeightedTerm(NamedTuple):
    """One top weighted term of a node in a discriminative path model: term index, its weight contrast
    (the node's mean path weight minus its siblings'), and the node's own mean path weight."""

    term: int
    contrast: float
    weight: float


def sibling_weight_contrasts(
    weights_t: np.ndarray,
    path_nodes,
    parent_of: np.ndarray,
    top_n: int = 10,
    show: Optional[np.ndarray] = None,
) -> List[List[WeightedTerm]]:
    """Per node, the ``top_n`` terms whose regression weights most favour it over its siblings.

    A node's weight of term ``w`` is the mean ``W[p, w]`` over the paths ``p`` through it, and
    its contrast is that minus the mean of the same over its siblings (the other children of
    its parent; for a top-level node the other top-level nodes). In the path logits
    ``S = F W^T + b`` (:func:`pcem_spark.core.logistic.path_logits`) the contrast is how much one
    unit of the term's tf-idf feature moves the score of an average path through the node
    above an average path through a sibling. Terms with a contrast > 0, largest first (ties:
    lower term index); a node without siblings gets an empty list.

    Parameters
    ----------
    weights_t : (V, M) ``W^T`` of the fitted regression (:class:`pcem_spark.core.logistic.LinearTables`)
    path_nodes : (M, K) 0/1 path-to-node membership (``Taxonomy.path_node_matrix``)
    parent_of : int ndarray (K,) -- parent node of each node, -1 for top-level nodes
    top_n : int >= 1
    show : bool ndarray (K,) or None -- nodes taking part (False: dummy nodes); None = all

    Memory: the node weights are kept sparse, ``O(K V)`` for a dense ``weights_t`` (the regression
    itself is (M, V), and K < 2 M + depth), ``O(K nnz / M + V)`` for one fitted on its observed support.
    """
    if top_n < 1:
        raise InputError(f"top_n must be >= 1, got {top_n}")
    Wt = sp.csr_matrix(weights_t, dtype=np.float64)  # a dense W^T is stored whole; zeros never win (contrast > 0)
    A = sp.csr_matrix(path_nodes, dtype=np.float64)
    M, K = A.shape
    if Wt.shape[1] != M:
        raise ValueError(f"weights_t has {Wt.shape[1]} paths, path_nodes {M}")
    parent_of = np.asarray(parent_of, dtype=np.int64)
    if parent_of.shape != (K,):
        raise ValueError(f"parent_of must have {K} entries, got shape {parent_of.shape}")
    show = np.ones(K, dtype=bool) if show is None else np.asarray(show, dtype=bool)
    n_paths = np.asarray(A.sum(axis=0), dtype=np.float64).ravel()  # paths through each node
    # Mean path weight per node: (K, V) = diag(1 / n_paths) A^T W, sparse.
    node_w = (sp.diags(1.0 / np.maximum(n_paths, 1.0)) @ (A.T @ Wt.T)).tocsr()
    group_of = parent_of + 1
    members = np.flatnonzero(show & (n_paths > 0))
    G = sp.csr_matrix((np.ones(len(members)), (group_of[members], members)), shape=(K + 1, K))
    group_sum = (G @ node_w).tocsr()
    group_size = np.bincount(group_of[members], minlength=K + 1)
    out: List[List[WeightedTerm]] = []
    for k in range(K):
        g = group_of[k]
        if not (show[k] and n_paths[k] > 0 and group_size[g] > 1):
            out.append([])
            continue
        mine = node_w[k]
        contrast = (mine - (group_sum[g] - mine) / (group_size[g] - 1)).tocsr()
        contrast.sum_duplicates()
        keep = contrast.data > 0
        terms, values = contrast.indices[keep], contrast.data[keep]
        order = np.lexsort((terms, -values))[:top_n]
        own = mine.toarray().ravel()
        out.append([WeightedTerm(int(terms[i]), float(values[i]), float(own[terms[i]])) for i in order])
    return out


def padded_parents(taxonomy) -> np.ndarray:
    """(K,) parent node index of each node in the padded tree (-1 for top-level nodes)."""
    parent = np.full(taxonomy.n_nodes, -1, dtype=np.int64)
    for p in taxonomy.paths:
        for d in range(1, len(p)):
            parent[taxonomy.node_index[p[d]]] = taxonomy.node_index[p[d - 1]]
    return parent


def tree_order(taxonomy) -> List[str]:
    """The real nodes depth-first (each parent followed by its subtree, children by name)."""
    out: List[str] = []

    def walk(node: str) -> None:
        for kid in taxonomy.children(node):
            out.append(kid)
            walk(kid)

    walk(taxonomy.root)
    return out
