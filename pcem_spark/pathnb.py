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

from .errors import InputError

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
    if sp.issparse(out):
        out = out.toarray()
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
    if sp.issparse(path_node) or sp.issparse(leaf_node):
        # Thousands of leaves: the same matrix, kept sparse.
        if path_weight == 1.0:
            return sp.csr_matrix(path_node, dtype=np.float64, copy=True)
        if path_weight == 0.0:
            return sp.csr_matrix(leaf_node, dtype=np.float64, copy=True)
        return ((1.0 - path_weight) * sp.csr_matrix(leaf_node, dtype=np.float64)
                + path_weight * sp.csr_matrix(path_node, dtype=np.float64)).tocsr()
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
    log_prior = log_path_prior(path_totals, smoothing if prior_smoothing is None else prior_smoothing, groups)
    # In place after one copy: with 1,000 paths x 2^18 words every extra
    # (M, V) temporary is another 2 GiB on the driver.
    log_theta = np.add(word_counts, smoothing, dtype=np.float64)
    log_row_sums = np.log(log_theta.sum(axis=1, keepdims=True))
    np.log(log_theta, out=log_theta)
    log_theta -= log_row_sums
    return log_prior, log_theta


def log_path_prior(path_totals: np.ndarray, prior_smoothing: float = 1.0,
                   groups: Optional[np.ndarray] = None) -> np.ndarray:
    """Eqs. 3 / 6: ``log P(p_j)`` from ``sum_i S_ij`` with ``prior_smoothing`` pseudo-counts.

    Parameters
    ----------
    path_totals : ndarray (R,)
    groups : int ndarray (R,) or None -- normalise within each group (None: one group)

    Returns
    -------
    ndarray (R,)
    """
    prior_num = prior_smoothing + np.asarray(path_totals, dtype=np.float64)
    if groups is None:
        return np.log(prior_num) - np.log(prior_num.sum())
    _, group_of = np.unique(groups, return_inverse=True)
    return np.log(prior_num) - np.log(np.bincount(group_of, weights=prior_num)[group_of])


class PathParameters(NamedTuple):
    """Word distributions stored by what the counts hold, not as a dense (R, V) array.

    With Lidstone smoothing ``s`` every word a component never saw has the
    same probability, so ``log theta_jw = log_base_j + log_ratio_jw`` with

    * ``log_base_j = log s - log(V s + N_j)``  (the unseen-word value), and
    * ``log_ratio_jw = log(1 + c_jw / s)``, zero exactly where ``c_jw = 0``,

    held as a sparse matrix whose non-zeros are those of the counts.

    Attributes
    ----------
    log_prior : ndarray (R,)
    log_base : ndarray (R,)
    log_ratio : csr_matrix (R, V), entries >= 0
    """
    log_prior: np.ndarray
    log_base: np.ndarray
    log_ratio: sp.csr_matrix

    @property
    def shape(self) -> Tuple[int, int]:
        return self.log_ratio.shape

    def log_theta(self) -> np.ndarray:
        """The dense (R, V) ``log theta`` (small models, tests and inspection only)."""
        out = self.log_ratio.toarray()
        out += self.log_base[:, None]
        return out

    @classmethod
    def from_log_theta(cls, log_prior: np.ndarray, log_theta: np.ndarray) -> "PathParameters":
        """Exact sparse form of any dense ``log_theta``: base = each row's minimum."""
        log_theta = np.asarray(log_theta, dtype=np.float64)
        base = log_theta.min(axis=1) if log_theta.shape[1] else np.zeros(log_theta.shape[0])
        ratio = sp.csr_matrix(log_theta - base[:, None])
        ratio.eliminate_zeros()
        return cls(np.asarray(log_prior, dtype=np.float64), base, ratio)


def sparse_log_parameters(word_counts, path_totals: np.ndarray, smoothing: float = 1.0,
                          groups: Optional[np.ndarray] = None,
                          prior_smoothing: Optional[float] = None) -> PathParameters:
    """Eqs. 3-4 (and 6-7) in the sparse form of :class:`PathParameters`.

    Equal to :func:`log_parameters` (``log_theta = log_base + log_ratio``) but
    ``O(nnz(word_counts) + R)`` in time and memory: the driver never builds
    the (R, V) array.

    Parameters
    ----------
    word_counts : sparse matrix or ndarray, shape (R, V), non-negative
    path_totals : ndarray (R,)
    smoothing, groups, prior_smoothing : as :func:`log_parameters`
    """
    if smoothing <= 0:
        raise ValueError(f"the sparse parameters need a smoothing > 0, got {smoothing}")
    wc = sp.csr_matrix(word_counts, dtype=np.float64)
    V = wc.shape[1]
    log_prior = log_path_prior(path_totals, smoothing if prior_smoothing is None else prior_smoothing, groups)
    n_words = np.asarray(wc.sum(axis=1), dtype=np.float64).ravel()
    log_base = np.log(smoothing) - np.log(V * smoothing + n_words)
    ratio = wc.copy()  # never write into the caller's counts
    ratio.data = np.log1p(ratio.data / smoothing)
    ratio.eliminate_zeros()
    return PathParameters(log_prior, log_base, ratio)


def sparse_log_prior_density(params: PathParameters, smoothing: float = 1.0,
                             prior_smoothing: Optional[float] = None) -> float:
    """:func:`log_prior_density` of sparse parameters, ``O(nnz + R)``."""
    ps = smoothing if prior_smoothing is None else prior_smoothing
    V = params.shape[1]
    return float(ps * params.log_prior.sum()
                 + smoothing * (V * params.log_base.sum() + params.log_ratio.data.sum(dtype=np.float64)))


def term_mapping(prev_vocabulary, new_vocabulary) -> np.ndarray:
    """Index in ``new_vocabulary`` of every term of ``prev_vocabulary``, -1 where the new one lacks it.

    Terms are matched by name. Returns an int64 ndarray (V_prev,).
    """
    new_index = {term: i for i, term in enumerate(new_vocabulary)}
    if len(new_index) != len(new_vocabulary):
        raise ValueError("the new vocabulary has duplicate terms")
    return np.fromiter((new_index.get(term, -1) for term in prev_vocabulary), dtype=np.int64,
                       count=len(prev_vocabulary))


def recovered_counts(params: PathParameters, smoothing: float, check_rtol: float = 1e-6) -> Tuple[sp.csr_matrix,
                                                                                                  np.ndarray]:
    """The expected word counts behind Lidstone-smoothed :class:`PathParameters` (inverse of Eq. 7).

    ``c_jw = s expm1(log_ratio_jw)`` and ``N_j = s exp(-log_base_j) - V s``
    (:func:`sparse_log_parameters` with ``s = smoothing``). The parameters
    fix the counts only up to that scale: read with another ``s'`` they come
    back as ``(s'/s) c`` (the same theta). Any normalised theta has this
    form (dense format-1 models, :meth:`PathParameters.from_log_theta`: the
    least probable word of a row gets count 0), so ``sum_w c_jw = N_j`` (to
    ``check_rtol``) fails only for rows that are not distributions: those
    are refused (damaged parameters).

    Returns
    -------
    counts : csr_matrix (R, V), entries >= 0
    n_words : ndarray (R,)
    """
    R, V = params.shape
    counts = sp.csr_matrix(params.log_ratio, dtype=np.float64, copy=True)
    counts.data = smoothing * np.expm1(counts.data)
    n_words = smoothing * np.exp(-np.asarray(params.log_base, dtype=np.float64)) - V * smoothing
    row_sums = np.asarray(counts.sum(axis=1), dtype=np.float64).ravel()
    bad = np.flatnonzero(np.abs(row_sums - n_words) > check_rtol * np.maximum(np.abs(n_words), 1.0))
    if len(bad):
        j = int(bad[0])
        raise InputError(f"parameters are not word distributions (damaged?): component {j} has word counts "
                         f"summing to {row_sums[j]:.6g} but its base says {n_words[j]:.6g} words "
                         f"({len(bad)} of {R} components disagree)")
    return counts, np.maximum(n_words, 0.0)


def warm_start_parameters(prev: PathParameters, prev_vocabulary, new_vocabulary, prev_smoothing: float,
                          smoothing: float, groups: Optional[np.ndarray] = None,
                          prior_smoothing: Optional[float] = None, prev_prior_smoothing: Optional[float] = None,
                          prev_path_mass: Optional[np.ndarray] = None) -> PathParameters:
    """A previous model's parameters re-expressed on a new vocabulary: the start of a warm EM.

    The previous expected counts (:func:`recovered_counts`) are moved onto
    ``new_vocabulary`` term by term **by name**: a term the new vocabulary
    lacks is dropped (its mass leaves the component's total), a new term gets
    count 0 (the smoothing prior alone). The parameters are then Eqs. 6-7 of
    those counts with ``smoothing`` -- so with the same vocabulary and
    smoothing they are the previous parameters again.

    The prior: ``log_prior`` fixes the prior numerators ``ps + T_j`` only up to
    a scale per group; ``prev_path_mass`` (the path masses ``T_j`` the previous
    prior was computed from, e.g. the training summary's ``path_mass``) gives
    that scale, and the prior is rebuilt from ``T_j`` with ``prior_smoothing``.
    Without it the previous ``log_prior`` is kept (exact when the prior
    smoothing does not change; the pseudo-count is small against the masses
    otherwise).

    Time and memory ``O(nnz + R + V_prev + V_new)``; never a dense (R, V) array.

    Parameters
    ----------
    prev : PathParameters (R, V_prev), built by :func:`sparse_log_parameters` with ``prev_smoothing``
    prev_vocabulary : sequence of str, length V_prev
    new_vocabulary : sequence of str, length V_new
    prev_smoothing, smoothing : float > 0, the word pseudo-counts before / now
    groups : int ndarray (R,) or None -- prior normalised within each group (as :func:`log_path_prior`)
    prior_smoothing, prev_prior_smoothing : float or None -- prior pseudo-counts now / before
        (None: the word pseudo-count, as :func:`sparse_log_parameters`)
    prev_path_mass : ndarray (R,) or None

    Returns
    -------
    PathParameters (R, V_new)
    """
    R, V_prev = prev.shape
    if len(prev_vocabulary) != V_prev:
        raise ValueError(f"the previous vocabulary has {len(prev_vocabulary)} terms, its parameters {V_prev}")
    if prev_smoothing <= 0 or smoothing <= 0:
        raise ValueError(f"smoothing must be > 0, got previous {prev_smoothing} and new {smoothing}")
    counts, _ = recovered_counts(prev, prev_smoothing)
    target = term_mapping(prev_vocabulary, new_vocabulary)
    coo = counts.tocoo()
    keep = target[coo.col] >= 0
    moved = sp.csr_matrix((coo.data[keep], (coo.row[keep], target[coo.col[keep]])),
                          shape=(R, len(new_vocabulary)))
    ps_prev = prev_smoothing if prev_prior_smoothing is None else prev_prior_smoothing
    ps_new = smoothing if prior_smoothing is None else prior_smoothing
    if prev_path_mass is None:
        # log_prior fixes the numerators only up to a scale: any masses with the same prior
        # give it back when the pseudo-count is the same; keep it.
        masses = None
    else:
        prev_path_mass = np.asarray(prev_path_mass, dtype=np.float64)
        if prev_path_mass.shape != (R,):
            raise ValueError(f"prev_path_mass has shape {prev_path_mass.shape}, expected ({R},)")
        # Numerators from log_prior (exact), their scale per group from the recorded masses.
        numer = ps_prev + np.maximum(prev_path_mass, 0.0)
        if groups is None:
            scale = np.full(R, numer.sum())
        else:
            _, group_of = np.unique(groups, return_inverse=True)
            scale = np.bincount(group_of, weights=numer)[group_of]
        masses = np.maximum(np.exp(prev.log_prior) * scale - ps_prev, 0.0)
    out = sparse_log_parameters(moved, np.zeros(R) if masses is None else masses, smoothing, groups, ps_new)
    if masses is None:
        out = out._replace(log_prior=np.array(prev.log_prior, dtype=np.float64, copy=True))
    return out


# A term whose log_ratio is non-zero for more than this share of the components
# is scored from a dense (terms x R) table: scipy's sparse x sparse product costs
# ~10x more per multiply-add than its sparse x dense one, and frequent terms are
# non-zero almost everywhere anyway.
DENSE_TERM_SHARE = 0.25


class ScoringTables(NamedTuple):
    """:class:`PathParameters` laid out for ``X @ log_theta.T`` (what is broadcast).

    ``dense_terms`` (Vd,) are scored from ``dense_t`` (Vd, R), every other term
    from ``sparse_t`` (V, R) CSR; ``dense_terms = None`` means every term is in
    ``dense_t`` (V, R). Tables are kept at the broadcast dtype (float32 halves
    them); ``log_prior`` / ``log_base`` stay float64.
    """
    log_prior: np.ndarray
    log_base: np.ndarray
    dense_terms: Optional[np.ndarray]
    dense_t: np.ndarray
    sparse_t: Optional[sp.csr_matrix]

    @property
    def dtype(self):
        return self.dense_t.dtype

    @property
    def n_components(self) -> int:
        return len(self.log_prior)


def scoring_tables(params: PathParameters, dtype="float64",
                   dense_share: float = DENSE_TERM_SHARE) -> ScoringTables:
    """Split ``params.log_ratio`` into dense columns for frequent terms and a sparse rest.

    Parameters
    ----------
    params : PathParameters with (R, V) log_ratio
    dtype : "float64" | "float32" of the tables
    dense_share : a term non-zero in more than this share of components is dense
    """
    dtype = np.dtype(dtype)
    ratio = params.log_ratio
    R, V = ratio.shape
    per_term = np.bincount(ratio.indices, minlength=V)
    dense = per_term > dense_share * R
    if ratio.nnz >= dense_share * R * V or dense.all():
        # Mostly filled (few paths, soft posteriors): one dense table is cheapest.
        return ScoringTables(params.log_prior, params.log_base, None,
                             np.ascontiguousarray(ratio.T.toarray(), dtype=dtype), None)
    dense_terms = np.flatnonzero(dense)
    coo = ratio.tocoo()
    keep = ~dense[coo.col]
    sparse_t = sp.csr_matrix((coo.data[keep].astype(dtype), (coo.col[keep], coo.row[keep])), shape=(V, R))
    dense_t = np.ascontiguousarray(ratio[:, dense_terms].T.toarray(), dtype=dtype)
    return ScoringTables(params.log_prior, params.log_base, dense_terms, dense_t, sparse_t)


def tables_joint_log_likelihood(X, tables: ScoringTables) -> np.ndarray:
    """:func:`joint_log_likelihood` from :class:`ScoringTables`.

    ``jll_ij = log P(p_j) + |x_i| log_base_j + sum_w x_iw log_ratio_jw``.

    Parameters
    ----------
    X : sparse matrix (n, V), any numeric dtype
    tables : ScoringTables with R components

    Returns
    -------
    ndarray (n, R), float64
    """
    X = sp.csr_matrix(X)
    lengths = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
    jll = lengths[:, None] * tables.log_base[None, :]
    jll += tables.log_prior[None, :]
    if X.shape[0] == 0:
        return jll
    # Multiply at the tables' dtype: scipy would otherwise upcast (copy) the table per block.
    Xt = X if X.dtype == tables.dtype else X.astype(tables.dtype)
    if tables.dense_terms is None:
        jll += Xt @ tables.dense_t
        return jll
    if len(tables.dense_terms):
        jll += Xt[:, tables.dense_terms] @ tables.dense_t
    if tables.sparse_t is not None and tables.sparse_t.nnz:
        jll += (Xt @ tables.sparse_t).toarray()
    return jll


def truncate_posteriors(post: np.ndarray, top_k: int = 0, min_posterior: float = 0.0) -> sp.csr_matrix:
    """Keep each row's ``top_k`` largest posteriors that are >= ``min_posterior``, renormalised.

    A row's largest entry is always kept, so no row empties; ``top_k = 0``
    keeps every path and ``min_posterior = 0`` every non-zero: with both at 0
    (or ``top_k >= R``) this is exact. Truncating the E-step is a
    "sparse EM" step (Neal & Hinton 1998): the M-step then maximises Eq. 8 for
    responsibilities restricted to the kept paths, so the log-likelihood is no
    longer guaranteed to rise every iteration (the engine warns when it falls).

    Parameters
    ----------
    post : ndarray (n, R), rows summing to 1
    top_k : int >= 0
    min_posterior : float in [0, 1)

    Returns
    -------
    csr_matrix (n, R), rows summing to 1
    """
    return sp.csr_matrix(truncated_dense(post, top_k, min_posterior))


def truncated_dense(post: np.ndarray, top_k: int = 0, min_posterior: float = 0.0) -> np.ndarray:
    """:func:`truncate_posteriors` as a dense (n, R) array (for small M, where dense sums are cheaper)."""
    post = np.asarray(post, dtype=np.float64)
    n, R = post.shape
    if n == 0:
        return np.zeros((n, R))
    keep = post >= min_posterior if min_posterior > 0 else post > 0
    if 0 < top_k < R:
        # k-th largest per row; ties at the boundary may keep a few more, never fewer.
        kth = -np.partition(-post, top_k - 1, axis=1)[:, top_k - 1]
        keep &= post >= kth[:, None]
    keep[np.arange(n), post.argmax(axis=1)] = True
    kept = np.where(keep, post, 0.0)
    kept /= kept.sum(axis=1, keepdims=True)
    return kept


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
           log_prior: Optional[np.ndarray], log_theta: Optional[np.ndarray], use_unlabeled: bool = True,
           posterior_floor: float = 0.0, sparse_density: float = 0.0,
           structure: Optional[Structure] = None, rng: Optional[np.random.Generator] = None,
           unlabeled_weight: float = 1.0, top_k: int = 0,
           tables: Optional[ScoringTables] = None) -> BlockStats:
    """One E-step on a block plus its contribution to the next M-step.

    Labelled rows keep their fixed path scores (``S_ij`` from Eq. 2);
    unlabelled rows get their posterior (Eq. 5) as path scores, as in
    Algorithm 1. The log-likelihood follows Eq. 8 with the labelled term
    generalised to fractional path scores as ``sum_j S_ij log(P(p_j)P(x_i|p_j))``
    -- the objective whose maximiser is Eqs. 6-7, so exact EM never decreases it.

    Parameters
    ----------
    X : sparse matrix, shape (n, V), any numeric dtype
    fixed_scores : ndarray, shape (n, M)
        Path scores of labelled rows (ignored for unlabelled rows).
    labeled : bool ndarray, shape (n,)
    log_prior, log_theta : current dense parameters, shapes (M,), (M, V);
        both ``None`` (and ``tables`` None) for the NB initialisation pass
        (labelled rows only, loglik 0)
    use_unlabeled : bool
        False for plain NB: unlabelled rows contribute nothing.
    posterior_floor, top_k : truncation of the unlabelled posteriors
        (:func:`truncate_posteriors`): keep at most ``top_k`` paths per row
        (0 = all) whose posterior is >= ``posterior_floor``, renormalised.
        Both 0 = exact Eq. 5. Truncated rows make the sums sparse when
        ``sparse_density`` > 0; with ``sparse_density = 0`` the dropped paths are
        zeroed in the dense responsibilities (cheaper for a few paths).
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
    tables : :class:`ScoringTables` or None
        The current parameters in sparse form (used instead of
        ``log_prior`` / ``log_theta``).

    Returns
    -------
    BlockStats; ``word_counts`` is an ndarray or a scipy sparse matrix (M, V),
    float64 (float32 when ``X`` is float32).
    """
    X = sp.csr_matrix(X)
    labeled = np.asarray(labeled, dtype=bool)
    resp = np.where(labeled[:, None], fixed_scores, 0.0)
    loglik = 0.0
    truncated = None
    has_params = tables is not None or log_theta is not None
    if not has_params and rng is not None and structure is not None and structure.restrict_labeled:
        resp = random_component_split(resp, structure.owner, rng)
    if has_params:
        # Without parameters (the NB initialisation) there is nothing to score.
        jll = (tables_joint_log_likelihood(X, tables) if tables is not None
               else joint_log_likelihood(X, log_prior, log_theta))
        if labeled.any():
            lab_resp, lab_ll = labeled_responsibilities(fixed_scores[labeled], jll[labeled], structure)
            resp[labeled] = lab_resp
            loglik += lab_ll
        if use_unlabeled and unlabeled_weight > 0 and (~labeled).any():
            post, log_ev = responsibilities(jll[~labeled], structure)
            if (posterior_floor > 0 or top_k > 0) and structure is not None and not structure.single_softmax:
                raise ValueError("posterior_floor / posterior_top_k apply to methods whose responsibilities are "
                                 "one distribution per document (not top-down / win-driven)")
            if (posterior_floor > 0 or 0 < top_k < post.shape[1]) and sparse_density > 0:
                truncated = truncate_posteriors(post, top_k, posterior_floor)
                if unlabeled_weight != 1.0:
                    truncated.data *= unlabeled_weight
            elif posterior_floor > 0 or 0 < top_k < post.shape[1]:
                # Dense sums wanted (few paths): zeroing the dropped paths is all truncation takes.
                kept = truncated_dense(post, top_k, posterior_floor)
                resp[~labeled] = kept if unlabeled_weight == 1.0 else unlabeled_weight * kept
            else:
                resp[~labeled] = post if unlabeled_weight == 1.0 else unlabeled_weight * post
            loglik += unlabeled_weight * float(log_ev.sum(dtype=np.float64))
    # float32 blocks give float32 sums; an integer count matrix gives float64 ones.
    out_dtype = np.result_type(X.dtype, np.float32)
    if truncated is not None:
        # Labelled rows' fixed scores plus the unlabelled rows' kept posteriors, sparse.
        order = np.r_[np.flatnonzero(labeled), np.flatnonzero(~labeled)]
        stacked = sp.vstack([sp.csr_matrix(resp[labeled]), truncated]).tocsr()
        resp_sp = stacked[np.argsort(order)].astype(out_dtype)
        word_counts = (resp_sp.T @ X.astype(out_dtype, copy=False)).tocsr()
        if sparse_density == 0:
            word_counts = word_counts.toarray()
        return BlockStats(word_counts, np.asarray(resp_sp.sum(axis=0), dtype=np.float64).ravel(), loglik)
    resp = resp.astype(out_dtype, copy=False)
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


def predict_paths(X, log_prior: Optional[np.ndarray], log_theta: Optional[np.ndarray],
                  structure: Optional[Structure] = None, doc_length: float = 0.0,
                  tables: Optional[ScoringTables] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Argmax path of Eq. 5 and its posterior probability (or a baseline's decoding rule).

    The parameters are dense (``log_prior``, ``log_theta``) or ``tables``
    (:func:`scoring_tables`, what prediction broadcasts).

    Returns
    -------
    best : int ndarray, shape (n,), path index
    prob : ndarray, shape (n,); for ``win`` the mean over depths of the
        path's node probabilities
    """
    X = length_normalize(X, doc_length) if doc_length > 0 else sp.csr_matrix(X)
    jll = (tables_joint_log_likelihood(X, tables) if tables is not None
           else joint_log_likelihood(X, log_prior, log_theta))
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


# ---------------------------------------------------------------- abstaining and top-k predictions
def path_posteriors(jll: np.ndarray, structure: Optional[Structure] = None) -> np.ndarray:
    """A probability distribution over the M paths for every row, for every method.

    * PCNB / PCEM / flat methods (``structure`` None): Eq. 5, ``P(p_j | x)``.
    * ``decoder="posterior"`` (multiple components per leaf): the sum of the
      posteriors of a path's components, what :func:`decode` takes the argmax of.
    * ``decoder="greedy"`` (top-down): the product of the local (per-parent
      softmax) probabilities of the path's nodes -- the top-down model's own
      ``P(path | x)``, so a node's marginal (:func:`node_marginals`) is the
      product of the local probabilities from the top down to it. A dummy node
      is its parent's only child (local probability 1).
    * ``decoder="win"`` (win-driven): the product over depths of the path's
      node probability under that depth's classifier, renormalised over the
      paths (the per-depth classifiers are independent and also give mass to
      node combinations that are not paths).

    Rows are renormalised to sum to 1 (for the first three they do up to
    rounding already). For ``greedy`` / ``win`` the argmax of this
    distribution can differ from the decoded path (greedy routing, largest
    summed win): :func:`decode` still decides the predicted path.

    Parameters
    ----------
    jll : ndarray (n, R), component joint log-likelihoods
    structure : Structure or None

    Returns
    -------
    ndarray (n, M), float64, rows summing to 1
    """
    jll = np.asarray(jll, dtype=np.float64)
    n = jll.shape[0]
    if structure is None:
        return posterior(jll)[0]
    if structure.decoder == "posterior":
        post, _ = posterior(jll)
        n_paths = int(structure.owner.max()) + 1 if len(structure.owner) else 0
        path_post = np.zeros((n, n_paths))
        np.add.at(path_post.T, structure.owner, post.T)
        return path_post / np.maximum(path_post.sum(axis=1, keepdims=True), np.finfo(np.float64).tiny)
    if structure.decoder not in ("greedy", "win"):
        raise ValueError(f"unknown decoder {structure.decoder!r}")
    log_local, _ = group_log_softmax(jll, structure.groups)
    pn = structure.path_nodes
    log_path = np.zeros((n, pn.shape[0]))
    for d in range(pn.shape[1]):   # one (n, M) gather per depth, not an (n, M, D) array
        log_path += log_local[:, pn[:, d]]
    return posterior(log_path)[0] if n else log_path


def node_marginals(path_post: np.ndarray, path_node) -> np.ndarray:
    """``P(c | x) = sum of the posteriors of the paths through c``, for every node c.

    Parameters
    ----------
    path_post : ndarray (n, M), rows summing to 1 (:func:`path_posteriors`)
    path_node : ndarray or sparse matrix (M, K), 0/1 path-node membership
        (``Taxonomy.path_node_matrix()``)

    Returns
    -------
    ndarray (n, K), in [0, 1]; along a path the marginals never increase
    (a node's paths include its children's).
    """
    out = np.asarray(path_post @ path_node if not sp.issparse(path_node)
                     else (sp.csr_matrix(path_node).T @ np.asarray(path_post).T).T, dtype=np.float64)
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


def abstain_depth(best_path: np.ndarray, marginals: np.ndarray, path_nodes: np.ndarray,
                  min_probability: float) -> np.ndarray:
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
    nodes = path_nodes[np.asarray(best_path, dtype=np.int64)]            # (n, D)
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


class PathPredictions(NamedTuple):
    """What one block's prediction holds with abstaining / top-k (:func:`predict_path_details`).

    best : int64 (n,), the decoded path (as :func:`predict_paths`)
    probability : (n,), its score (as :func:`predict_paths`)
    kept : int64 (n,) or None, nodes of ``best`` kept (:func:`abstain_depth`)
    kept_probability : (n,) or None, marginal of the last kept node (1 for an empty path: the root)
    top_index, top_probability : (n, min(k, M)) or None (:func:`top_k_paths`)
    """
    best: np.ndarray
    probability: np.ndarray
    kept: Optional[np.ndarray] = None
    kept_probability: Optional[np.ndarray] = None
    top_index: Optional[np.ndarray] = None
    top_probability: Optional[np.ndarray] = None


def predict_path_details(X, structure: Optional[Structure], doc_length: float, tables: ScoringTables,
                         path_node, path_nodes: np.ndarray, min_probability: float = 0.0,
                         top_k: int = 0) -> PathPredictions:
    """:func:`predict_paths` plus the abstained prefix and the top-k paths of every row.

    Parameters
    ----------
    X : sparse matrix (n, V)
    structure, doc_length, tables : as :func:`predict_paths`
    path_node : ndarray or sparse matrix (M, K) path-node membership
    path_nodes : int ndarray (M, D), -1 at dummies (:func:`path_node_table`)
    min_probability : float in [0, 1]; 0 = no abstaining (``kept`` None)
    top_k : int >= 0; 0 = no top-k (``top_index`` None)
    """
    X = length_normalize(X, doc_length) if doc_length > 0 else sp.csr_matrix(X)
    jll = tables_joint_log_likelihood(X, tables)
    best, prob = decode(jll, structure)
    if min_probability <= 0 and top_k <= 0:
        return PathPredictions(best, prob)
    path_post = path_posteriors(jll, structure)
    del jll
    kept = kept_prob = top_index = top_prob = None
    if min_probability > 0:
        marginals = node_marginals(path_post, path_node)
        kept = abstain_depth(best, marginals, path_nodes, min_probability)
        last = path_nodes[best, np.maximum(kept - 1, 0)]
        kept_prob = np.where(kept > 0, marginals[np.arange(len(best)), np.maximum(last, 0)], 1.0)
    if top_k > 0:
        top_index, top_prob = top_k_paths(path_post, top_k)
    return PathPredictions(best, prob, kept, kept_prob, top_index, top_prob)


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
    path_nodes = pn.indices.reshape(M, D).astype(np.int64)                  # (M, D)
    counts = params.log_ratio.copy()
    counts.data = smoothing * np.expm1(counts.data)
    n_words = smoothing * np.exp(-params.log_base) - V * smoothing           # N_j
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
        node_params = PathParameters(np.log(member @ prior), np.log(smoothing) - np.log(V * smoothing + node_n),
                                     ratio)
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
    kept = np.zeros((n, 1), dtype=np.int64)          # slots at the previous depth (the root: slot 0)
    for nodes, parent_slot, node_params in tables.levels:
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
    return ([np.concatenate(s) if s else np.zeros(0) for s in scores],
            [np.concatenate(c) if c else np.zeros(0, np.int64) for c in cands])


def _beam_step(X, kept: np.ndarray, parent: np.ndarray, params: PathParameters, beam: int) -> np.ndarray:
    """Slots (n, <= beam) of the best children of each row's kept slots (-1 = none)."""
    scores, cands = _candidate_scores(X, kept, parent, params, params.shape[0])
    out = np.full((X.shape[0], beam), -1, dtype=np.int64)
    for i, (s, c) in enumerate(zip(scores, cands)):
        top = np.argsort(-s, kind="stable")[:beam]
        out[i, :len(top)] = c[top]
    return out
