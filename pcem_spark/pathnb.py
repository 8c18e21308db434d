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

from typing import NamedTuple, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln, logsumexp

# Pseudo-counts tried by ``smoothing = "auto"`` (log-spaced, 0.01 .. 1): below
# 0.01 a word unseen in a class costs more than ~10 nats per occurrence and one
# stray token decides a document; above 1 the labelled counts of a small
# class are swamped by the V pseudo-counts (measured in docs/RESULTS.md).
DEFAULT_SMOOTHING_GRID = tuple(float(x) for x in np.round(np.logspace(-2, 0, 9), 6))


class Structure(NamedTuple):
    """How a method's ``R`` components relate (pure arrays, cheap to broadcast).

    PCNB/PCEM and the flat methods use one softmax group and decode by Eq. 5;
    the baselines of :mod:`pcem_spark.methods` use the other fields.

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
    run_of = np.cumsum(np.r_[False, g_sorted[1:] != g_sorted[:-1]])   # run index of each sorted column
    s_sorted = np.asarray(scores, dtype=np.float64)[:, order]
    top = np.maximum.reduceat(s_sorted, starts, axis=1) if s_sorted.shape[0] else np.zeros((0, len(starts)))
    shifted = s_sorted - top[:, run_of]
    lse = top + np.log(np.add.reduceat(np.exp(shifted), starts, axis=1)) if s_sorted.shape[0] else top
    out = np.empty_like(s_sorted)
    out[:, order] = s_sorted - lse[:, run_of]
    return out, lse.sum(axis=1)


def responsibilities(jll: np.ndarray, structure: Optional[Structure] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Posterior responsibilities of unlabelled rows over the R components.

    One group and no ancestors: exactly Eq. 5. Returns ``(resp (n, R),
    log_evidence (n,))``.
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


def labeled_responsibilities(fixed: np.ndarray, jll: np.ndarray,
                             structure: Optional[Structure]) -> Tuple[np.ndarray, float]:
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
    """
    out = node_scores @ score_matrix.T
    return np.asarray(out, dtype=np.float64)


def length_normalize(X, doc_length: float = 0.0) -> sp.csr_matrix:
    """Scale the term counts of every document longer than ``doc_length`` tokens down to ``doc_length``.

    Naive Bayes multiplies one factor per token, so a 2,000-token document
    gets a posterior of 1.0 for some path whatever its evidence, and in EM it
    outweighs a hundred short documents in the M-step. Scaling long documents
    to a common length (Rennie et al. 2003, "Tackling the poor assumptions of
    naive Bayes", Sec. 4) tempers both; shorter documents are left as they
    are, so short-text corpora are unchanged. ``doc_length = 0``: raw counts
    (the paper).

    Parameters
    ----------
    X : sparse matrix (n, V) of term counts
    doc_length : float >= 0

    Returns
    -------
    csr_matrix (n, V), float64
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    if doc_length <= 0 or X.shape[0] == 0:
        return X
    lengths = np.asarray(X.sum(axis=1)).ravel()
    scale = np.ones_like(lengths)
    long_rows = lengths > doc_length
    scale[long_rows] = doc_length / lengths[long_rows]
    out = X.copy()
    out.data *= np.repeat(scale, np.diff(out.indptr))
    return out


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
    if path_weight == 1.0:
        return np.array(path_node, dtype=np.float64)
    if path_weight == 0.0:
        return np.array(leaf_node, dtype=np.float64)
    return (1.0 - path_weight) * np.asarray(leaf_node, np.float64) + path_weight * np.asarray(path_node, np.float64)


def dirichlet_log_evidence(word_counts, alphas) -> np.ndarray:
    """Log evidence of each row of counts under a symmetric Dirichlet-multinomial, per pseudo-count.

    For row j with counts ``c_j`` (length V, total ``N_j``) and pseudo-count
    ``a``: ``log G(V a) - log G(V a + N_j) + sum_w [log G(a + c_jw) - log G(a)]``
    (the multinomial coefficient does not depend on ``a`` and is left out).
    This is the marginal likelihood of the counts with theta integrated out,
    i.e. how well ``a`` predicts a class's words from its other words -- the
    quantity Laplace / Lidstone smoothing with ``a`` is the posterior mean of.
    Only non-zero counts enter the sum, so the cost is ``O(nnz)`` per ``a``;
    fractional counts (path scores of Eq. 2, posteriors) are fine.

    Parameters
    ----------
    word_counts : ndarray or sparse matrix, shape (M, V)
    alphas : sequence of float > 0

    Returns
    -------
    ndarray, shape (len(alphas),): sum over rows of the log evidence
    """
    if sp.issparse(word_counts):
        wc = sp.csr_matrix(word_counts)
        nz = wc.data[wc.data > 0]
        row_totals = np.asarray(wc.sum(axis=1)).ravel()
        V = wc.shape[1]
    else:
        wc = np.asarray(word_counts, dtype=np.float64)
        nz = wc[wc > 0]
        row_totals = wc.sum(axis=1)
        V = wc.shape[1]
    row_totals = row_totals[row_totals > 0]
    out = np.empty(len(alphas))
    for i, a in enumerate(alphas):
        if a <= 0:
            raise ValueError(f"pseudo-counts must be > 0, got {a}")
        out[i] = (np.sum(gammaln(V * a) - gammaln(V * a + row_totals))
                  + np.sum(gammaln(a + nz)) - nz.size * gammaln(a))
    return out


def choose_smoothing(word_counts, grid=DEFAULT_SMOOTHING_GRID) -> Tuple[float, np.ndarray]:
    """The pseudo-count of ``grid`` with the largest Dirichlet-multinomial evidence of ``word_counts``.

    Deterministic (ties go to the larger pseudo-count, the safer side). Returns
    ``(smoothing, log_evidence per grid value)``; with no counts at all the
    largest grid value is returned.
    """
    grid = np.asarray(sorted(grid), dtype=np.float64)
    ev = dirichlet_log_evidence(word_counts, grid)
    best = len(grid) - 1 - int(np.argmax(ev[::-1]))
    return float(grid[best]), ev


def log_parameters(word_counts: np.ndarray, path_totals: np.ndarray,
                   smoothing: float = 1.0, groups: Optional[np.ndarray] = None,
                   prior_smoothing: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Eqs. 3-4 (and 6-7): Laplace-smoothed path prior and word distributions.

    Parameters
    ----------
    word_counts : ndarray, shape (M, V)
        ``sum_i S_ij x_it``.
    path_totals : ndarray, shape (M,)
        ``sum_i S_ij``.
    smoothing : float
        Pseudo-count added to every word count; the paper uses 1.
    groups : int ndarray (M,) or None
        Normalise the prior within each group (per-node / per-depth
        classifiers of the baselines); None = one group (the paper).
    prior_smoothing : float or None
        Pseudo-count of the path prior (None: ``smoothing``, the paper).

    Returns
    -------
    log_prior : ndarray, shape (M,)
    log_theta : ndarray, shape (M, V)
    """
    path_totals = np.asarray(path_totals, dtype=np.float64)
    prior_num = (smoothing if prior_smoothing is None else prior_smoothing) + path_totals
    if groups is None:
        log_prior = np.log(prior_num) - np.log(prior_num.sum())
    else:
        _, group_of = np.unique(groups, return_inverse=True)
        log_prior = np.log(prior_num) - np.log(np.bincount(group_of, weights=prior_num)[group_of])
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
           posterior_floor: float = 0.0, sparse_density: float = 0.0,
           structure: Optional[Structure] = None, rng: Optional[np.random.Generator] = None,
           unlabeled_weight: float = 1.0) -> BlockStats:
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
    structure : :class:`Structure` or None
        The baselines' component structure (None = PCNB/PCEM, flat).
    rng : numpy Generator or None
        Initialisation pass of a ``restrict_labeled`` structure only: each
        labelled row starts in one random component of its path.
    unlabeled_weight : float in [0, 1]
        Nigam et al. (2000)'s EM-lambda: unlabelled rows' responsibilities
        (and their log-evidence term of Eq. 8) are scaled by it; 1 = the
        paper, 0 = unlabelled rows contribute nothing (naive Bayes).

    Returns
    -------
    BlockStats; ``word_counts`` is an ndarray or a scipy sparse matrix (M, V).
    """
    X = sp.csr_matrix(X)
    labeled = np.asarray(labeled, dtype=bool)
    resp = np.where(labeled[:, None], fixed_scores, 0.0)
    loglik = 0.0
    if log_theta is None and rng is not None and structure is not None and structure.restrict_labeled:
        resp = random_component_split(resp, structure.owner, rng)
    if log_theta is not None:
        # Without parameters (the NB initialisation) there is nothing to score.
        jll = joint_log_likelihood(X, log_prior, log_theta)
        if labeled.any():
            lab_resp, lab_ll = labeled_responsibilities(fixed_scores[labeled], jll[labeled], structure)
            resp[labeled] = lab_resp
            loglik += lab_ll
        if use_unlabeled and unlabeled_weight > 0 and (~labeled).any():
            post, log_ev = responsibilities(jll[~labeled], structure)
            if posterior_floor > 0 and structure is not None and not structure.single_softmax:
                raise ValueError("posterior_floor applies to methods whose responsibilities are one "
                                 "distribution per document (not top-down / win-driven)")
            if posterior_floor > 0:
                small = post < posterior_floor
                small[np.arange(len(post)), post.argmax(axis=1)] = False  # a row never empties
                post[small] = 0.0
                post /= post.sum(axis=1, keepdims=True)
            resp[~labeled] = post if unlabeled_weight == 1.0 else unlabeled_weight * post
            loglik += unlabeled_weight * float(log_ev.sum(dtype=np.float64))
    # float32 blocks give float32 sums; an integer count matrix gives float64 ones.
    resp = resp.astype(np.result_type(X.dtype, np.float32), copy=False)
    if resp.size and np.count_nonzero(resp) <= sparse_density * resp.size:
        # Few (document, path) pairs carry weight: sum only those.
        word_counts = (sp.csr_matrix(resp).T @ X).tocsr()
    else:
        word_counts = np.asarray((X.T @ resp).T)
    return BlockStats(word_counts, resp.sum(axis=0, dtype=np.float64), loglik)


def log_prior_density(log_prior: np.ndarray, log_theta: np.ndarray, smoothing: float = 1.0,
                      prior_smoothing: Optional[float] = None) -> float:
    """``log P(theta)`` of Eq. 8 for the Dirichlet prior that Laplace smoothing implies.

    Adding ``smoothing`` pseudo-counts is the MAP estimate under a Dirichlet
    with exponents ``smoothing``, so ``log P(theta) = smoothing * (sum_j log theta_j
    + sum_jt log theta_t|j)`` up to a constant.
    """
    ps = smoothing if prior_smoothing is None else prior_smoothing
    return float(ps * log_prior.sum() + smoothing * log_theta.sum())


def predict_paths(X, log_prior: np.ndarray, log_theta: np.ndarray,
                  structure: Optional[Structure] = None, doc_length: float = 0.0) -> Tuple[np.ndarray, np.ndarray]:
    """Argmax path of Eq. 5 and its posterior probability (or a baseline's decoding rule).

    Returns
    -------
    best : int ndarray, shape (n,), path index
    prob : ndarray, shape (n,); for ``win`` the mean over depths of the
        path's node probabilities
    """
    X = length_normalize(X, doc_length) if doc_length > 0 else sp.csr_matrix(X)
    jll = joint_log_likelihood(X, log_prior, log_theta)
    return decode(jll, structure)


def decode(jll: np.ndarray, structure: Optional[Structure] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Best path and its score from component joint log-likelihoods (n, R); see :class:`Structure`."""
    n = jll.shape[0]
    if structure is None:
        post, _ = posterior(jll)
        best = np.argmax(jll, axis=1)
        return best, post[np.arange(n), best]
    if structure.decoder == "posterior":
        post, _ = posterior(jll)
        n_paths = int(structure.owner.max()) + 1
        path_post = np.zeros((n, n_paths))
        np.add.at(path_post.T, structure.owner, post.T)
        best = np.argmax(path_post, axis=1)
        return best, path_post[np.arange(n), best]
    log_local, _ = group_log_softmax(jll, structure.groups)
    pn = structure.path_nodes
    if structure.decoder == "win":
        local = np.exp(log_local)
        win = local[:, pn].sum(axis=2)          # (n, M): sum over depths
        best = np.argmax(win, axis=1)
        return best, win[np.arange(n), best] / pn.shape[1]
    if structure.decoder == "greedy":
        alive = np.ones((n, pn.shape[0]), dtype=bool)
        for d in range(pn.shape[1]):
            s = np.where(alive, log_local[:, pn[:, d]], -np.inf)
            alive &= s >= s.max(axis=1, keepdims=True)
        best = np.argmax(alive, axis=1)          # first surviving path on ties
        return best, np.exp(log_local[:, pn].sum(axis=2)[np.arange(n), best])
    raise ValueError(f"unknown decoder {structure.decoder!r}")
