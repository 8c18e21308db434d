"""Decoding (Eq. 5 and the abstaining / top-k variants): from joint log-likelihoods to paths.

The scores of a block, the most probable path and its probability, posteriors over paths, and each
row's likelihood under its path; what a posterior says about nodes (marginals, abstaining, top-k) is
:mod:`.path_nodes`. Pure numpy on one block.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.calibration import map_nodes, map_paths
from pcem_spark.core.estep import ScoringTables, joint_log_likelihood, length_normalize
from pcem_spark.core.logistic import pooled_scores
from pcem_spark.core.path_nodes import node_marginals, path_membership, path_node_outputs, top_k_paths
from pcem_spark.core.structure import Structure, group_log_softmax, posterior

# Prediction scores a block in row chunks of at most this many (rows x components) cells (16 MB in
# float64): the (n, R) scores of a 4,096-document block would be 328 MB with 10,000 paths.
PREDICT_BLOCK_CELLS = 1 << 21


def block_scores(X, tables: ScoringTables, row_chunk: Optional[int] = None, generative: bool = False):
    """Joint log-likelihoods (n, R) of ``X`` under ``tables``, in row chunks: yields ``(start, jll)``.

    The same numbers as :func:`~pcem_spark.core.estep.tables_joint_log_likelihood`
    (up to the order of the sums), computed for prediction: the frequent
    (dense-table) terms of the whole block are taken out once and, when they
    fill at least an eighth of their columns, multiplied as a dense array
    (one BLAS product, ~15x cheaper per multiply-add than scipy's sparse x
    dense); the other terms by one sparse product per chunk. A chunk has at
    most :data:`PREDICT_BLOCK_CELLS` // R rows (``row_chunk`` overrides), so
    the working set stays bounded whatever the number of paths. With
    ``tables.linear`` (the combined or discriminative family) each chunk's scores
    are :func:`pcem_spark.core.logistic.pooled_scores` of its joint log-likelihoods.

    Parameters
    ----------
    X : csr_matrix (n, V), float64 (length-normalised already if wanted)
    tables : ScoringTables (:func:`~pcem_spark.core.estep.scoring_tables`)
    row_chunk : int or None
    generative : bool
        Also yield the generative joint log-likelihoods (the pooled scores' input; ``jll`` itself
        without ``tables.linear``).

    Yields
    ------
    start : int, the first row of the chunk
    jll : ndarray (rows, R), float64
    generative_jll : ndarray (rows, R), with ``generative`` only
    """
    X = sp.csr_matrix(X)
    n = X.shape[0]
    R = tables.n_components
    chunk = int(row_chunk) if row_chunk else max(1, PREDICT_BLOCK_CELLS // max(R, 1))
    lengths = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
    # Multiply at the tables' dtype: scipy would otherwise upcast (copy) the table per block.
    Xt = X if X.dtype == tables.dtype else X.astype(tables.dtype)
    if tables.dense_terms is None:
        dense_x, sparse_x = Xt, None
    else:
        dense_x = Xt[:, tables.dense_terms] if len(tables.dense_terms) else None
        has_sparse = tables.sparse_t is not None and tables.sparse_t.nnz
        sparse_x = Xt if has_sparse else None
    if dense_x is not None and dense_x.shape[1] and dense_x.nnz * 8 >= dense_x.shape[0] * dense_x.shape[1]:
        dense_x = dense_x.toarray()
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        jll = lengths[start:stop, None] * tables.log_base[None, :]
        jll += tables.log_prior[None, :]
        if dense_x is not None:
            jll += dense_x[start:stop] @ tables.dense_t
        if sparse_x is not None:
            jll += (sparse_x[start:stop] @ tables.sparse_t).toarray()
        generative_jll = jll
        if tables.linear is not None:
            vectors = tables.linear.vectors  # a block's document vectors, bound per block (with_vectors)
            E = None if vectors is None else vectors[start:stop]
            jll = pooled_scores(jll, X[start:stop], tables.linear, E)
        yield (start, jll, generative_jll) if generative else (start, jll)
    if n == 0:
        empty = np.zeros((0, R)) + tables.log_prior[None, :]
        yield (0, empty, empty) if generative else (0, empty)


def _best_and_probability(
    jll: np.ndarray, temperature: float = 1.0, top_out: Optional[np.ndarray] = None
) -> Tuple[np.ndarray, np.ndarray]:
    """Argmax of each row and its probability ``1 / sum_j exp((jll_j - max) / T)``; overwrites ``jll``.

    The argmax is taken before the temperature is applied: calibration never
    changes the path. ``top_out`` (n,): receives each row's maximum ``jll``.
    """
    n = jll.shape[0]
    best = np.argmax(jll, axis=1) if jll.shape[1] else np.zeros(n, dtype=np.int64)
    if n == 0 or jll.shape[1] == 0:
        return best, np.ones(n)
    top = jll[np.arange(n), best]
    if top_out is not None:
        top_out[:] = top
    jll -= top[:, None]
    if temperature != 1.0:
        jll *= 1.0 / temperature
    np.exp(jll, out=jll)
    return best, 1.0 / jll.sum(axis=1)


__all__ = [
    "PREDICT_BLOCK_CELLS",
    "block_scores",
    "predict_paths",
    "decode",
    "path_posteriors",
    "PathPredictions",
    "predict_path_details",
    "best_path_log_likelihood",
]


def predict_paths(
    X,
    log_prior: Optional[np.ndarray],
    log_theta: Optional[np.ndarray],
    structure: Optional[Structure] = None,
    doc_length: float = 0.0,
    tables: Optional[ScoringTables] = None,
    temperature: Optional[float] = None,
    path_log_likelihood: bool = False,
):
    """Argmax path of Eq. 5 and its posterior probability (or a baseline's decoding rule).

    The parameters are dense (``log_prior``, ``log_theta``) or ``tables``
    (:func:`scoring_tables`, what prediction broadcasts).

    Parameters
    ----------
    X : sparse matrix, shape (n, V)
        Term counts of the documents.
    log_prior : ndarray, shape (R,), or None
        ``log P(p_j)`` (None when ``tables`` is given).
    log_theta : ndarray, shape (R, V), or None
        ``log P(w_t | p_j)`` (None when ``tables`` is given).
    structure : Structure or None
        The baselines' component structure and decoding rule (None = Eq. 5).
    doc_length : float >= 0
        Scale longer documents down to this many tokens first
        (:func:`~pcem_spark.core.estep.length_normalize`; 0 = raw counts).
    tables : ScoringTables or None
        The parameters in sparse form, used instead of ``log_prior`` / ``log_theta``.
    temperature : float > 0 or None
        Calibration (:mod:`pcem_spark.core.calibration`): the probability is
        that of ``softmax(jll / temperature)``; the path is the same. Eq. 5
        only (``structure`` None); the baselines' rules ignore it. None: the
        tables' own (``tables.temperature``), 1 without tables.
    path_log_likelihood : bool
        Also return each document's log-likelihood under its path, taken
        from the generative scores the decoder computed
        (:func:`best_path_log_likelihood`): then a :class:`PathPredictions`
        with ``path_log_likelihood``. One component per path only
        (``structure`` None); with ``tables.linear`` the path is the pooled
        scores' and its likelihood the generative model's.

    Returns
    -------
    best : int ndarray, shape (n,)
        Path index of each document.
    prob : ndarray, shape (n,)
        Its posterior probability; for ``win`` the mean over depths of the
        path's node probabilities.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> from pcem_spark.core.parameters import log_parameters
    >>> word_counts = np.array([[4.0, 0.0, 0.0, 1.0], [0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 2.0, 2.0]])
    >>> log_prior, log_theta = log_parameters(word_counts, np.array([2.0, 1.0, 1.0]))
    >>> X = sp.csr_matrix(np.array([[3, 0, 0, 1], [0, 2, 1, 0]]))
    >>> best, prob = predict_paths(X, log_prior, log_theta)
    >>> print(best, prob.round(3))
    [0 1] [0.983 0.888]
    """
    raw = X
    X = length_normalize(X, doc_length) if doc_length > 0 else sp.csr_matrix(X)
    if temperature is None:
        temperature = 1.0 if tables is None else tables.temperature
    top = None
    if path_log_likelihood:
        _check_generative(structure)
        top = np.zeros(X.shape[0])
    if tables is None:
        jll = joint_log_likelihood(X, log_prior, log_theta)
        if top is None:
            return decode(jll, structure, temperature=temperature)
        best, prob = _best_and_probability(jll, temperature, top)
        return PathPredictions(
            best, prob, path_log_likelihood=best_path_log_likelihood(raw, top, log_prior, best, doc_length)
        )
    best = np.zeros(X.shape[0], dtype=np.int64)
    prob = np.zeros(X.shape[0])
    for start, jll, generative_jll in block_scores(X, tables, generative=True):
        stop = start + jll.shape[0]
        if top is not None and generative_jll is jll:  # Eq. 5: the argmax's own score
            best[start:stop], prob[start:stop] = _best_and_probability(jll, temperature, top[start:stop])
            continue
        best[start:stop], prob[start:stop] = decode(jll, structure, overwrite=True, temperature=temperature)
        if top is not None:  # a linear head's pooled scores: the generative score of the path they chose
            top[start:stop] = generative_jll[np.arange(stop - start), best[start:stop]]
    if structure is None:
        prob = map_paths(prob, tables.probability_map, best)
    if top is None:
        return best, prob
    ll = best_path_log_likelihood(raw, top, tables.log_prior, best, doc_length)
    return PathPredictions(best, prob, path_log_likelihood=ll)


def _check_generative(structure: Optional[Structure]) -> None:
    """A path's log-likelihood is read off the scores only when there is one component per path."""
    if structure is not None:
        raise ValueError("path_log_likelihood needs one generative component per path (Eq. 5), not a structure")


def best_path_log_likelihood(
    X, best_jll: np.ndarray, log_prior: np.ndarray, best: np.ndarray, doc_length: float = 0.0
) -> np.ndarray:
    """``log P(x_i | p_best_i) = sum_w x_iw log theta_{best_i w}`` of the raw counts, from the argmax's score.

    Eq. 5's score of the best path is ``log P(p_b) + s_i log P(x_i | p_b)`` with ``s_i`` the
    length normalisation's scale of row ``i`` (``min(1, doc_length / |x_i|)``; 1 without it), so the
    likelihood is read off it, with no second pass over the parameters.

    Parameters
    ----------
    X : sparse matrix (n, V), the raw term counts
    best_jll : ndarray (n,), each row's maximum joint log-likelihood (before any temperature)
    log_prior : ndarray (R,)
    best : int ndarray (n,)
    doc_length : float >= 0, as the scores were computed

    Returns
    -------
    ndarray (n,), float64
    """
    ll = np.asarray(best_jll, dtype=np.float64) - np.asarray(log_prior, dtype=np.float64)[best]
    if doc_length > 0:
        lengths = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
        long_rows = lengths > doc_length
        ll[long_rows] *= lengths[long_rows] / doc_length
    return ll


def decode(
    jll: np.ndarray, structure: Optional[Structure] = None, overwrite: bool = False, temperature: float = 1.0
) -> Tuple[np.ndarray, np.ndarray]:
    """Best path and its score from component joint log-likelihoods (n, R); see :class:`Structure`.

    Eq. 5 (``structure`` None) needs only each row's maximum and one pass of
    ``exp`` (no (n, R) posterior); ``overwrite``: ``jll`` may be used as the
    work array. ``temperature``: Eq. 5's probability is that of
    ``softmax(jll / temperature)`` (the argmax is unchanged); the baselines'
    rules ignore it.
    """
    n = jll.shape[0]
    if structure is None:
        return _best_and_probability(jll if overwrite else np.array(jll, dtype=np.float64), temperature)
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
        win = local[:, pn].sum(axis=2)  # (n, M): sum over depths
        best = np.argmax(win, axis=1)
        return best, win[np.arange(n), best] / pn.shape[1]
    if structure.decoder == "greedy":
        alive = np.ones((n, pn.shape[0]), dtype=bool)
        for d in range(pn.shape[1]):
            s = np.where(alive, log_local[:, pn[:, d]], -np.inf)
            alive &= s >= s.max(axis=1, keepdims=True)
        best = np.argmax(alive, axis=1)  # first surviving path on ties
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
      ``P(path | x)``, so a node's marginal (:func:`~pcem_spark.core.path_nodes.node_marginals`) is the
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
    jll : ndarray, shape (n, R)
        Component joint log-likelihoods
        (:func:`~pcem_spark.core.estep.joint_log_likelihood`).
    structure : Structure or None
        The method's component structure (None: R = M, Eq. 5).

    Returns
    -------
    ndarray, shape (n, M)
        float64, rows summing to 1.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> from pcem_spark.core.parameters import log_parameters
    >>> word_counts = np.array([[4.0, 0.0, 0.0, 1.0], [0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 2.0, 2.0]])
    >>> log_prior, log_theta = log_parameters(word_counts, np.array([2.0, 1.0, 1.0]))
    >>> X = sp.csr_matrix(np.array([[3, 0, 0, 1], [0, 2, 1, 0]]))
    >>> from pcem_spark.core.estep import joint_log_likelihood
    >>> post = path_posteriors(joint_log_likelihood(X, log_prior, log_theta))
    >>> print(post.round(3))
    [[0.983 0.004 0.013]
     [0.029 0.888 0.083]]
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
    for d in range(pn.shape[1]):  # one (n, M) gather per depth, not an (n, M, D) array
        log_path += log_local[:, pn[:, d]]
    return posterior(log_path)[0] if n else log_path


class PathPredictions(NamedTuple):
    """What one block's prediction holds with abstaining / top-k (:func:`predict_path_details`).

    Attributes
    ----------
    best : int64 (n,)
        The decoded path (as :func:`predict_paths`).
    probability : (n,)
        Its score (as :func:`predict_paths`).
    kept : int64 (n,) or None
        Nodes of ``best`` kept (:func:`~pcem_spark.core.path_nodes.abstain_depth`).
    kept_probability : (n,) or None
        Marginal of the last kept node (1 for an empty path: the root).
    top_index, top_probability : (n, min(k, M)) or None
        The k best paths and their probabilities (:func:`~pcem_spark.core.path_nodes.top_k_paths`).
    node_probability : (n, D) or None
        The marginal of each depth's node of ``best`` (NaN at dummies).
    top_posterior : (n, min(k, M)) or None
        The top paths' tempered posteriors before the probability map.
    member_probability : (n, min(k, M)) or None
        The probability that each top path is one of the document's paths
        (:func:`pcem_spark.core.multi_path.with_membership`).
    path_log_likelihood : (n,) or None
        ``log P(x | best)`` of the raw counts (:func:`best_path_log_likelihood`).
    """

    best: np.ndarray
    probability: np.ndarray
    kept: Optional[np.ndarray] = None
    kept_probability: Optional[np.ndarray] = None
    top_index: Optional[np.ndarray] = None
    top_probability: Optional[np.ndarray] = None
    node_probability: Optional[np.ndarray] = None
    top_posterior: Optional[np.ndarray] = None
    member_probability: Optional[np.ndarray] = None
    path_log_likelihood: Optional[np.ndarray] = None


def predict_path_details(
    X,
    structure: Optional[Structure],
    doc_length: float,
    tables: ScoringTables,
    path_nodes: np.ndarray,
    min_probability: float = 0.0,
    top_k: int = 0,
    node_probabilities: bool = False,
) -> PathPredictions:
    """:func:`predict_paths` plus the abstained prefix, the top-k paths and the node marginals of every row.

    Parameters
    ----------
    X : sparse matrix (n, V)
    structure, doc_length, tables : as :func:`predict_paths` (the tables'
        temperature also scales the posteriors behind the marginals and the
        top-k paths)
    path_nodes : int ndarray (M, D), -1 at dummies (:func:`path_node_table`)
    min_probability : float in [0, 1]; 0 = no abstaining (``kept`` None)
    top_k : int >= 0; 0 = no top-k (``top_index`` None)
    node_probabilities : bool; the marginal of each node of the decoded path (``node_probability``)

    With one component per path (``structure`` None) ``path_log_likelihood`` is ``log P(x | best)`` too, as
    :func:`predict_paths` gives it.
    """
    raw = X
    X = length_normalize(X, doc_length) if doc_length > 0 else sp.csr_matrix(X)
    options = (min_probability, top_k, tables.temperature, node_probabilities, tables.probability_map)
    path_node = path_membership(path_nodes)
    top = np.zeros(X.shape[0]) if structure is None else None
    parts = [
        _chunk_details(
            jll, structure, path_node, path_nodes, options, None if top is None else (g, top[s : s + len(jll)])
        )
        for s, jll, g in block_scores(X, tables, generative=True)
    ]
    fields = len(PathPredictions._fields)
    out = PathPredictions(
        *(None if parts[0][f] is None else np.concatenate([p[f] for p in parts]) for f in range(fields))
    )
    if top is None:
        return out
    return out._replace(path_log_likelihood=best_path_log_likelihood(raw, top, tables.log_prior, out.best, doc_length))


def _chunk_details(jll, structure, path_node, path_nodes, options, top=None) -> PathPredictions:
    """:func:`predict_path_details` of one chunk of rows' joint log-likelihoods; ``top``: None, or
    ``(generative_jll, out)`` and ``out`` (n,) receives the generative score of each row's path."""
    min_probability, top_k, temperature, node_probabilities, mapping = options
    best, prob = decode(jll, structure, temperature=temperature)
    if top is not None:
        generative_jll, out = top
        out[:] = generative_jll[np.arange(len(best)), best]
    if structure is None:
        prob = map_paths(prob, mapping, best)
    else:  # the baselines' rules are not calibrated
        temperature, mapping = 1.0, None
    if min_probability <= 0 and top_k <= 0 and not node_probabilities:
        return PathPredictions(best, prob)
    if temperature != 1.0:
        jll = jll / temperature
    path_post = path_posteriors(jll, structure)
    del jll
    kept = kept_prob = top_index = top_prob = node_prob = top_post = None
    if min_probability > 0 or node_probabilities:
        nodes = path_nodes[best]  # (n, D)
        real = nodes >= 0
        # The (calibrated) marginal of each node of the decoded path, never above its parent's.
        along = map_nodes(
            np.take_along_axis(node_marginals(path_post, path_node), np.maximum(nodes, 0), axis=1), mapping
        )
        node_prob, kept, kept_prob = path_node_outputs(along, real, min_probability, node_probabilities)
    if top_k > 0:
        top_index, top_post = top_k_paths(path_post, top_k)
        top_prob = map_paths(top_post, mapping, top_index)
    return PathPredictions(best, prob, kept, kept_prob, top_index, top_prob, node_prob, top_post)
