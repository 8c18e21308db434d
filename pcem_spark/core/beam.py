"""Beam decoding: the most probable path found top-down, keeping the ``beam`` best partial
paths per depth instead of scoring every leaf -- for taxonomies with thousands of leaves.

:func:`beam_tables` gives every internal node the naive-Bayes distribution of the summed
counts of the paths below it; :func:`beam_scorer` lays each depth out for block scoring;
:func:`beam_candidates` walks a whole block of documents down the tree at once (Python loops
over depths and kept parent nodes, never over documents); :func:`beam_predict_paths` and
:func:`beam_path_details` turn the scored paths into predictions.
:func:`beam_predict_paths_reference` is the per-document definition the vectorised decoder
is tested against (same paths, probabilities to 1e-9).

What the beam reports: at the last depth it scores the paths below its kept depth D-1 nodes;
the predicted path is the best of them (ties: the lower path index, as the exact argmax) and
every probability -- the path's, ``top_paths``' and the node marginals that abstaining cuts
at -- is the posterior renormalised over those scored paths (the paths it did not score get
0). A path's beam probability is thus an upper bound of its exact Eq. 5 posterior; all of it
equals the exact decoder's when the beam is as wide as the tree.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple, Union

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.calibration import map_nodes, map_paths
from pcem_spark.core.decoding import PathPredictions, block_scores
from pcem_spark.core.estep import DENSE_TERM_SHARE, ScoringTables, length_normalize, scoring_tables
from pcem_spark.core.parameters import PathParameters, recovered_counts
from pcem_spark.core.path_nodes import path_node_outputs
from pcem_spark.errors import InputError

__all__ = [
    "FULL_LEVEL_NODES",
    "BEAM_AUTO_PATHS",
    "BEAM_AUTO_WIDTH",
    "check_beam",
    "beam_width",
    "BeamTables",
    "beam_tables",
    "BeamLevel",
    "BeamScorer",
    "beam_scorer",
    "beam_candidates",
    "beam_predict_paths",
    "beam_path_details",
    "beam_predict_paths_reference",
]

# A depth with at most this many nodes is scored with one product over all of them (then gathered);
# a wider one only at the kept parents' children (:func:`beam_candidates`).
FULL_LEVEL_NODES = 256


# ``beam = "auto"``: the exact argmax up to BEAM_AUTO_PATHS paths, a beam of BEAM_AUTO_WIDTH above
# (docs/BENCHMARKS.md, "Prediction throughput and beam decoding").
BEAM_AUTO_PATHS = 5000
BEAM_AUTO_WIDTH = 5


def check_beam(beam, name: str = "beam") -> None:
    """Refuse a beam that is neither an integer >= 0 nor ``"auto"``: InputError naming ``name``."""
    if isinstance(beam, str) and beam == "auto":
        return
    if isinstance(beam, (bool, np.bool_)) or not isinstance(beam, (int, np.integer)) or beam < 0:
        raise InputError(f'{name} must be an integer >= 0 (0 = exact, N = beam width) or "auto", got {beam!r}')


def beam_width(beam, n_paths: int) -> int:
    """The beam width ``beam`` asks for with ``n_paths`` paths: itself, or for ``"auto"`` 0 (exact) up to
    :data:`BEAM_AUTO_PATHS` paths and :data:`BEAM_AUTO_WIDTH` above. 0 = the exact argmax."""
    check_beam(beam)
    if beam == "auto":
        return BEAM_AUTO_WIDTH if n_paths > BEAM_AUTO_PATHS else 0
    return int(beam)


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


def beam_tables(params: PathParameters, path_node, smoothing: float = 1.0) -> BeamTables:
    """Node-level parameters for a beam search over the tree, from path parameters.

    Each internal node's word distribution is the Lidstone estimate of the summed
    counts of the paths below it (:func:`~pcem_spark.core.parameters.recovered_counts`),
    its prior the sum of their priors. The result does not depend on ``smoothing``
    (counts recovered with another pseudo-count scale by the same factor as the
    pseudo-count itself), so any positive value serves.

    Parameters
    ----------
    params : PathParameters (M, V) (:func:`sparse_log_parameters`)
    path_node : ndarray or sparse matrix (M, K) 0/1 path-node membership
        (``Taxonomy.path_node_matrix()``, nodes sorted by depth)
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
    counts, n_words = recovered_counts(params, smoothing)
    prior = np.exp(params.log_prior)
    levels = []
    prev_nodes = None
    for d in range(D - 1):
        nodes, first, slot_of_path = np.unique(path_nodes[:, d], return_index=True, return_inverse=True)
        member = sp.csr_matrix((np.ones(M), (slot_of_path, np.arange(M))), shape=(len(nodes), M))
        ratio = (member @ counts).tocsr()
        ratio.data = np.log1p(ratio.data / smoothing)
        ratio.eliminate_zeros()
        node_n = member @ n_words
        with np.errstate(divide="ignore"):
            node_prior = np.log(member @ prior)
        node_params = PathParameters(node_prior, np.log(smoothing) - np.log(V * smoothing + node_n), ratio)
        if prev_nodes is None:
            parent_slot = np.full(len(nodes), -1)
        else:  # a node's parent is its first path's node one depth up
            parent_slot = np.searchsorted(prev_nodes, path_nodes[first, d - 1])
        levels.append((nodes, parent_slot, node_params))
        prev_nodes = nodes
    if prev_nodes is None:
        path_parent = np.full(M, -1)
    else:
        path_parent = np.searchsorted(prev_nodes, path_nodes[:, D - 2])
    return BeamTables(levels, path_parent, params)


class BeamLevel(NamedTuple):
    """One depth of a :class:`BeamScorer`: its nodes' scoring tables, the children of a parent adjacent.

    Attributes
    ----------
    tables : ScoringTables
        R columns, the depth's nodes ordered by (parent slot, slot); for a depth scored at the
        kept parents only, its ``sparse_t`` is None (the ``pair_*`` tables hold it).
    col_slot : int64 (R,)
        The slot of each column (node position at the depth; path index at the last).
    col_parent : int64 (R,)
        The parent slot of each column (0 at depth 1: the root), non-decreasing.
    start, count : int64 (P,)
        First column and number of children of each parent slot.
    full : bool
        Scored with one product over every node of the depth (then gathered).
    pair_terms : int64 (T,) or None
        The term of each (parent, term) row, parents in order, terms sorted.
    pair_ptr : int64 (P + 1,) or None
        The rows of each parent in ``pair_terms``.
    pair_table : csr_matrix (T, C) or None
        At (parent, term) the children's log ratios of that term, by child rank (the column
        minus the parent's ``start``).
    """

    tables: ScoringTables
    col_slot: np.ndarray
    col_parent: np.ndarray
    start: np.ndarray
    count: np.ndarray
    full: bool
    pair_terms: Optional[np.ndarray] = None
    pair_ptr: Optional[np.ndarray] = None
    pair_table: Optional[sp.csr_matrix] = None


class BeamScorer(NamedTuple):
    """:class:`BeamTables` laid out for block scoring (:func:`beam_scorer`): one :class:`BeamLevel` per depth,
    the last one over the M paths. What prediction broadcasts."""

    steps: tuple
    n_paths: int
    # The model's calibration (core.calibration): the scored paths' softmax is that of jll / temperature,
    # then every reported probability goes through probability_map ((x, y) breakpoints; None = identity).
    temperature: float = 1.0
    probability_map: Optional[tuple] = None


def beam_scorer(
    tables: BeamTables, dtype="float64", full_nodes: int = FULL_LEVEL_NODES, dense_share: float = DENSE_TERM_SHARE
) -> BeamScorer:
    """Each depth's parameters as :class:`ScoringTables` (at ``dtype``) with the children of a parent adjacent.

    A depth of at most ``full_nodes`` nodes (or whose terms are all in the
    dense table) is scored in full; a wider one only at the children of the
    kept parents, its sparse part regrouped by (parent, term)
    (:class:`BeamLevel`). ``dense_share`` as :func:`~pcem_spark.core.estep.scoring_tables`.
    """
    steps = []
    n_parent = 1
    parts = [(parent, params) for _, parent, params in tables.levels] + [(tables.path_parent, tables.paths)]
    for parent, params in parts:
        parent = np.where(np.asarray(parent) < 0, 0, parent).astype(np.int64)
        R = len(parent)
        order = np.lexsort((np.arange(R), parent))  # by parent, then slot
        count = np.bincount(parent, minlength=n_parent).astype(np.int64)
        start = (np.cumsum(count) - count).astype(np.int64)
        sub = PathParameters(params.log_prior[order], params.log_base[order], params.log_ratio[order])
        st = scoring_tables(sub, dtype, dense_share)
        level = BeamLevel(st, order.astype(np.int64), parent[order], start, count, True)
        if R > full_nodes and st.dense_terms is not None:
            level = _grouped_level(level, n_parent)
        steps.append(level)
        n_parent = R
    return BeamScorer(tuple(steps), len(tables.path_parent))


def _grouped_level(level: BeamLevel, n_parent: int) -> BeamLevel:
    """``level`` with its sparse table regrouped by (parent, term) rows (:class:`BeamLevel` ``pair_*``)."""
    st = level.tables
    C = int(level.count.max())
    coo = (st.sparse_t if st.sparse_t.has_sorted_indices else st.sparse_t.sorted_indices()).tocoo()
    term, col = coo.row.astype(np.int64), coo.col.astype(np.int64)
    par = level.col_parent[col]
    # The entries are in (term, column) order: a stable sort by parent (a radix sort on small integers)
    # makes it (parent, term, column).
    order = np.argsort(par.astype(np.int16 if n_parent < 1 << 15 else np.int32), kind="stable")
    term, col, par, data = term[order], col[order], par[order], coo.data[order]
    new_row = np.ones(len(term), dtype=bool)
    new_row[1:] = (par[1:] != par[:-1]) | (term[1:] != term[:-1])
    row_start = np.flatnonzero(new_row)
    indptr = np.append(row_start, len(term))
    table = sp.csr_matrix((data, col - level.start[par], indptr), shape=(len(row_start), C))
    row_parent = par[row_start]
    pair_ptr = np.searchsorted(row_parent, np.arange(n_parent + 1)).astype(np.int64)
    return level._replace(
        tables=st._replace(sparse_t=None),
        full=False,
        pair_terms=term[row_start],
        pair_ptr=pair_ptr,
        pair_table=table,
    )


def _as_scorer(tables: Union[BeamTables, BeamScorer]) -> BeamScorer:
    return tables if isinstance(tables, BeamScorer) else beam_scorer(tables)


def beam_candidates(X, tables: Union[BeamTables, BeamScorer], beam: int) -> Tuple[np.ndarray, np.ndarray]:
    """The paths a beam search of width ``beam`` scores for every row of ``X``, with their joint log-likelihoods.

    Depth by depth the ``beam`` best nodes of each row are kept (ties: the
    lower parent slot, then the lower slot) and only their children scored
    at the next depth; at the last depth the children are paths. The whole
    block moves down together: Python loops over depths and, at a depth
    scored at the kept parents only, over the parents kept by any row (one
    lookup and one dense product each, for all the rows that kept it) --
    never over rows (:func:`_pair_scores`).

    Parameters
    ----------
    X : sparse matrix (n, V), term counts (length-normalised already if wanted)
    tables : BeamTables or BeamScorer (:func:`beam_scorer`)
    beam : int >= 1

    Returns
    -------
    paths : int64 (n, C), the scored path indices, -1 in padding
    scores : float64 (n, C), their joint log-likelihoods, -inf in padding
    """
    if int(beam) < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    scorer = _as_scorer(tables)
    X = sp.csr_matrix(X, dtype=np.float64)
    lengths = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
    kept = np.zeros((X.shape[0], 1), dtype=np.int64)  # slots at the previous depth (the root: slot 0)
    for d, step in enumerate(scorer.steps):
        cols, scores = _level_scores(X, lengths, kept, step)
        slots = np.where(cols >= 0, step.col_slot[np.maximum(cols, 0)], -1)
        if d == len(scorer.steps) - 1:
            return slots, scores
        order = np.argsort(-scores, axis=1, kind="stable")[:, : int(beam)]
        kept = np.take_along_axis(slots, order, axis=1)
    raise ValueError("a beam scorer has at least one depth")


def _level_scores(X, lengths: np.ndarray, kept: np.ndarray, step: BeamLevel) -> Tuple[np.ndarray, np.ndarray]:
    """(n, B*C) columns of ``step`` (-1 = none) and their scores (-inf = none): the children of each row's kept slots.

    Each row's kept parents are taken in ascending slot order, each with its
    C (the most children of any parent) columns, so a row's candidates are
    ordered by (parent slot, slot) -- the order ties are broken in.
    """
    n, B = kept.shape
    big = np.iinfo(np.int64).max
    parents = np.sort(np.where(kept < 0, big, kept), axis=1)
    has_parent = parents < big
    parents = np.where(has_parent, parents, 0)
    C = int(step.count.max()) if len(step.count) else 0
    child = np.arange(C)[None, None, :]
    ok = has_parent[:, :, None] & (child < step.count[parents][:, :, None])
    cols = np.where(ok, step.start[parents][:, :, None] + child, -1).reshape(n, B * C)
    safe = np.maximum(cols, 0)
    t = step.tables
    if step.full:
        scores = np.empty((n, B * C))
        for start, jll in block_scores(X, t):
            scores[start : start + len(jll)] = np.take_along_axis(jll, safe[start : start + len(jll)], axis=1)
    else:
        scores = lengths[:, None] * t.log_base[safe] + t.log_prior[safe]
        scores += _pair_scores(X, parents, has_parent, step, C).reshape(n, B * C)
    scores[cols < 0] = -np.inf
    return cols, scores


def _pair_scores(X, parents: np.ndarray, has_parent: np.ndarray, step: BeamLevel, C: int) -> np.ndarray:
    """``sum_w x_iw log_ratio_cw`` (n, B, C) for every row i, its b-th kept parent and that parent's child c.

    The (row, kept parent) pairs, grouped by parent, are the rows of one
    sparse product with ``step.pair_table``: a pair's term w becomes the
    (parent, w) row of the table (through a term -> row lookup filled for one
    parent at a time; a term none of its children has drops out), so each row
    is multiplied only by its kept parents' children. The dense-table terms
    go by one dense product per kept parent over the rows that kept it (BLAS
    when they fill an eighth of their columns, as :func:`block_scores`).
    """
    n, B = parents.shape
    t = step.tables
    out = np.zeros((n, B, C))
    pair_row, pair_b = np.nonzero(has_parent)
    if not len(pair_row) or C == 0:
        return out
    pair_parent = parents[pair_row, pair_b]
    order = np.argsort(pair_parent, kind="stable")
    pair_row, pair_b, pair_parent = pair_row[order], pair_b[order], pair_parent[order]
    used, first = np.unique(pair_parent, return_index=True)
    bounds = np.append(first, len(pair_parent))
    Xp = X[pair_row]  # the pairs' rows, grouped by parent
    entry_bounds = Xp.indptr[bounds]
    table_row = np.full(Xp.nnz, -1, dtype=np.int64)
    dense_x = None
    if len(t.dense_terms):
        dense_x = X[:, t.dense_terms]
        if dense_x.nnz * 8 >= dense_x.shape[0] * dense_x.shape[1]:
            dense_x = dense_x.toarray()
        dense_x = dense_x.astype(t.dtype, copy=False)
    lookup = np.full(X.shape[1], -1, dtype=np.int64)  # term -> its row of the current parent's table
    for g, p in enumerate(used):  # parents kept by any row: each a lookup and a product over its rows
        lo, hi = int(entry_bounds[g]), int(entry_bounds[g + 1])
        r0, r1 = int(step.pair_ptr[p]), int(step.pair_ptr[p + 1])
        if r1 > r0 and hi > lo:
            terms = step.pair_terms[r0:r1]
            lookup[terms] = np.arange(r0, r1)
            table_row[lo:hi] = lookup[Xp.indices[lo:hi]]
            lookup[terms] = -1
        if dense_x is not None:
            s, c = int(step.start[p]), int(step.count[p])
            rows = pair_row[bounds[g] : bounds[g + 1]]
            out[rows, pair_b[bounds[g] : bounds[g + 1]], :c] = dense_x[rows] @ t.dense_t[:, s : s + c]
    keep = table_row >= 0
    if keep.any():
        entry_pair = np.repeat(np.arange(len(pair_row)), np.diff(Xp.indptr))[keep]
        index_dtype = step.pair_table.indices.dtype  # the table's: scipy would otherwise copy it to match
        Xk = sp.csr_matrix(
            (
                Xp.data[keep].astype(step.pair_table.dtype),
                table_row[keep].astype(index_dtype),
                _indptr_of(entry_pair, len(pair_row)).astype(index_dtype),
            ),
            shape=(len(pair_row), step.pair_table.shape[0]),
        )
        out[pair_row, pair_b] += (Xk @ step.pair_table).toarray()[:, :C]
    return out


def _indptr_of(row_of_entry: np.ndarray, n_rows: int) -> np.ndarray:
    """CSR row pointers of entries sorted by row."""
    return np.concatenate([[0], np.cumsum(np.bincount(row_of_entry, minlength=n_rows))])


def _softmax_rows(scores: np.ndarray, paths: np.ndarray, temperature: float = 1.0) -> Tuple[np.ndarray, np.ndarray]:
    """Column of each row's best score (ties: the lower path index, as the exact argmax) and the row's softmax.

    The softmax is that of ``scores / temperature``; the best column is chosen before (calibration never
    changes the path).
    """
    top = scores.max(axis=1)
    k = np.argmin(np.where(scores == top[:, None], paths, np.iinfo(np.int64).max), axis=1)
    post = np.exp((scores - top[:, None]) * (1.0 / temperature))
    post /= post.sum(axis=1, keepdims=True)
    return k, post


def beam_predict_paths(X, tables: Union[BeamTables, BeamScorer], beam: int) -> Tuple[np.ndarray, np.ndarray]:
    """Best path by a beam search down the tree: keep the ``beam`` best nodes per depth (:func:`beam_candidates`).

    With ``beam`` >= the number of nodes at every depth this is the exact
    argmax of Eq. 5 and its posterior; otherwise the probability is the
    posterior among the scored paths.

    Returns
    -------
    best : int ndarray (n,), prob : ndarray (n,)
    """
    paths, scores = beam_candidates(X, tables, beam)
    if paths.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    k, post = _softmax_rows(scores, paths)
    rows = np.arange(len(k))
    return paths[rows, k], post[rows, k]


def beam_path_details(
    X,
    scorer: BeamScorer,
    beam: int,
    doc_length: float = 0.0,
    path_nodes: Optional[np.ndarray] = None,
    min_probability: float = 0.0,
    top_k: int = 0,
    node_probabilities: bool = False,
) -> PathPredictions:
    """:func:`~pcem_spark.core.decoding.predict_path_details` by a beam: over the scored paths only.

    ``probability``, ``top_index`` / ``top_probability`` (at most ``top_k``,
    fewer when the beam scored fewer paths: -1 / 0 pad the rest) and the node
    marginals that decide ``kept`` are those of the posterior renormalised
    over the paths the beam scored. ``path_nodes`` (M, D), -1 at dummies
    (:func:`~pcem_spark.core.path_nodes.path_node_table`), is needed with
    ``min_probability`` > 0 or ``node_probabilities``. The scorer's
    ``temperature`` (calibration) divides the scored paths' joint
    log-likelihoods before that softmax; the beam and the path are unchanged.
    """
    X = length_normalize(X, doc_length) if doc_length > 0 else sp.csr_matrix(X, dtype=np.float64)
    paths, scores = beam_candidates(X, scorer, beam)
    n = paths.shape[0]
    rows = np.arange(n)
    if n == 0:
        k, post = np.zeros(0, dtype=np.int64), np.zeros(paths.shape)
    else:
        k, post = _softmax_rows(scores, paths, getattr(scorer, "temperature", 1.0))
    mapping = getattr(scorer, "probability_map", None)
    best = paths[rows, k]
    prob = map_paths(post[rows, k], mapping, best)
    kept = kept_prob = top_index = top_prob = node_prob = top_post = None
    if min_probability > 0 or node_probabilities:
        marg, real = _beam_marginals(best, paths, post, path_nodes)
        node_prob, kept, kept_prob = path_node_outputs(
            map_nodes(marg, mapping), real, min_probability, node_probabilities
        )
    if top_k > 0:
        top_index, top_post = _beam_top(paths, post, top_k, scorer.n_paths)
        top_prob = np.where(top_index >= 0, map_paths(top_post, mapping, top_index), 0.0)
    return PathPredictions(best, prob, kept, kept_prob, top_index, top_prob, node_prob, top_post)


def _beam_marginals(best, paths, post, path_nodes):
    """(n, D) marginal of each depth's node of ``best`` summed over the scored paths, and where it is real."""
    if path_nodes is None:
        raise ValueError("min_probability > 0 or node probabilities need path_nodes")
    best_nodes = path_nodes[best]  # (n, D)
    safe = np.maximum(paths, 0)
    marg = np.zeros(best_nodes.shape)
    for d in range(best_nodes.shape[1]):  # one (n, C) comparison per depth
        same = (path_nodes[safe, d] == best_nodes[:, d : d + 1]) & (paths >= 0)
        marg[:, d] = np.where(same, post, 0.0).sum(axis=1)
    return np.clip(marg, 0.0, 1.0), best_nodes >= 0


def _beam_top(paths, post, top_k: int, n_paths: int):
    """Each row's ``top_k`` most probable scored paths (ties: the lower path index); -1 / 0 where there are fewer."""
    k = min(int(top_k), paths.shape[1], n_paths)
    order = np.lexsort((np.where(paths >= 0, paths, n_paths), np.where(paths >= 0, -post, 1.0)), axis=-1)[:, :k]
    index = np.take_along_axis(paths, order, axis=1)
    prob = np.where(index >= 0, np.take_along_axis(post, order, axis=1), 0.0)
    return np.ascontiguousarray(index, dtype=np.int64), prob


# ---------------------------------------------------------------- the per-document reference
def _rows_jll(X, params: PathParameters, rows: np.ndarray) -> np.ndarray:
    """(n, len(rows)) joint log-likelihood of ``X`` under the components ``rows`` of ``params``."""
    ratio = params.log_ratio[rows]
    lengths = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
    out = lengths[:, None] * params.log_base[rows][None, :] + params.log_prior[rows][None, :]
    out += (X @ ratio.T).toarray() if ratio.nnz else 0.0
    return out


def beam_predict_paths_reference(X, tables: BeamTables, beam: int) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`beam_predict_paths` written per document (Python lists per row): the definition it is tested against.

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
        at_top = np.flatnonzero(s == s.max())
        k = int(at_top[np.argmin(c[at_top])])  # ties: the lower path index, as the exact argmax
        best[i] = c[k]
        prob[i] = 1.0 / np.exp(s - s[k]).sum()
    return best, prob


def _candidate_scores(X, kept: np.ndarray, parent: np.ndarray, params: PathParameters, n_comp: int):
    """Per row: scores and ids of the components whose parent slot is among that row's kept slots."""
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
