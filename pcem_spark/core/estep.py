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

from typing import NamedTuple, Optional

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.parameters import PathParameters
from pcem_spark.core.structure import Structure, labeled_responsibilities, random_component_split, responsibilities

__all__ = [
    "DENSE_TERM_SHARE",
    "length_normalize",
    "ScoringTables",
    "scoring_tables",
    "tables_joint_log_likelihood",
    "truncate_posteriors",
    "truncated_dense",
    "joint_log_likelihood",
    "BlockStats",
    "EStepOptions",
    "e_step",
]


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
    them); ``log_prior`` / ``log_base`` stay float64. ``temperature``: the
    model's calibration (:mod:`pcem_spark.core.calibration`), which prediction
    divides the joint log-likelihoods by before a softmax (1 = none), and
    ``probability_map``, the monotone map every reported probability then goes
    through (:func:`pcem_spark.core.calibration.apply_map`).
    """

    log_prior: np.ndarray
    log_base: np.ndarray
    dense_terms: Optional[np.ndarray]
    dense_t: np.ndarray
    sparse_t: Optional[sp.csr_matrix]
    temperature: float = 1.0
    # and then the (x, y) breakpoints of the monotone map of probabilities to precision (None = identity)
    probability_map: Optional[tuple] = None
    # The discriminative path model pooled into prediction's scores (pcem_spark.core.logistic.LinearTables;
    # None: the generative model alone). Prediction only: the E-step never reads it.
    linear: Optional[object] = None

    @property
    def dtype(self):
        return self.dense_t.dtype

    @property
    def n_components(self) -> int:
        return len(self.log_prior)


def scoring_tables(params: PathParameters, dtype="float64", dense_share: float = DENSE_TERM_SHARE) -> ScoringTables:
    """Split ``params.log_ratio`` into dense columns for frequent terms and a sparse rest.

    Parameters
    ----------
    params : PathParameters
        Sparse parameters with an (R, V) ``log_ratio``
        (:func:`~pcem_spark.core.parameters.sparse_log_parameters`).
    dtype : "float64" or "float32"
        dtype of the tables (float32 halves the broadcast).
    dense_share : float
        A term non-zero in more than this share of components is dense.

    Returns
    -------
    ScoringTables
        ``dense_t`` (Vd, R) for the ``dense_terms`` (Vd,) and ``sparse_t``
        (V, R) CSR for the rest; ``dense_terms`` None when every term is dense
        (``dense_t`` then (V, R)).

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> from pcem_spark.core.parameters import sparse_log_parameters
    >>> word_counts = sp.csr_matrix(np.array([[4.0, 0.0, 0.0, 1.0], [0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 2.0, 2.0]]))
    >>> params = sparse_log_parameters(word_counts, np.array([2.0, 1.0, 1.0]))
    >>> tables = scoring_tables(params, dtype="float32")
    >>> tables.n_components, tables.dtype, tables.dense_t.shape
    (3, dtype('float32'), (4, 3))
    """
    dtype = np.dtype(dtype)
    ratio = params.log_ratio
    R, V = ratio.shape
    per_term = np.bincount(ratio.indices, minlength=V)
    dense = per_term > dense_share * R
    if ratio.nnz >= dense_share * R * V or dense.all():
        # Mostly filled (few paths, soft posteriors): one dense table is cheapest.
        return ScoringTables(
            params.log_prior, params.log_base, None, np.ascontiguousarray(ratio.T.toarray(), dtype=dtype), None
        )
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
    X : sparse matrix, shape (n, V)
        Term counts, any numeric dtype.
    tables : ScoringTables
        The parameters of R components (:func:`scoring_tables`).

    Returns
    -------
    ndarray, shape (n, R)
        float64; equal to :func:`joint_log_likelihood` of the dense parameters
        (up to the tables' dtype).

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> from pcem_spark.core.parameters import sparse_log_parameters
    >>> word_counts = sp.csr_matrix(np.array([[4.0, 0.0, 0.0, 1.0], [0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 2.0, 2.0]]))
    >>> params = sparse_log_parameters(word_counts, np.array([2.0, 1.0, 1.0]))
    >>> X = sp.csr_matrix(np.array([[3, 0, 0, 1], [0, 2, 1, 0]]))
    >>> jll = tables_joint_log_likelihood(X, scoring_tables(params))
    >>> print(jll.round(2))
    [[-4.11 -9.57 -8.47]
     [-7.44 -4.03 -6.39]]
    >>> bool(np.allclose(jll, joint_log_likelihood(X, params.log_prior, params.log_theta())))
    True
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
        Term counts of the documents.
    log_prior : ndarray, shape (M,)
        ``log P(p_j)``.
    log_theta : ndarray, shape (M, V)
        ``log P(w_t | p_j)``.

    Returns
    -------
    ndarray, shape (n, M)
        float64.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> from pcem_spark.core.parameters import log_parameters
    >>> word_counts = np.array([[4.0, 0.0, 0.0, 1.0], [0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 2.0, 2.0]])
    >>> log_prior, log_theta = log_parameters(word_counts, np.array([2.0, 1.0, 1.0]))
    >>> X = sp.csr_matrix(np.array([[3, 0, 0, 1], [0, 2, 1, 0]]))
    >>> print(joint_log_likelihood(X, log_prior, log_theta).round(2))
    [[-4.11 -9.57 -8.47]
     [-7.44 -4.03 -6.39]]
    """
    jll = X @ log_theta.T
    return np.asarray(jll, dtype=np.float64) + log_prior[None, :]


class BlockStats(NamedTuple):
    """Sufficient statistics of one block for the M-step and Eq. 8."""

    word_counts: np.ndarray  # (M, V)  sum_i R_ij x_it
    path_totals: np.ndarray  # (M,)    sum_i R_ij
    loglik: float  # data part of Eq. 8 for the block


class EStepOptions(NamedTuple):
    """How :func:`e_step` treats the unlabelled rows and returns its sums (the settings of one E-step)."""

    use_unlabeled: bool = True
    """False for plain NB: unlabelled rows contribute nothing."""
    posterior_floor: float = 0.0
    """Unlabelled posteriors below this are dropped, the rest renormalised (0 = keep all)."""
    sparse_density: float = 0.0
    """When at most this fraction of the responsibilities is non-zero, the word sums are sparse (0 = always dense)."""
    unlabeled_weight: float = 1.0
    """Nigam et al. (2000)'s EM-lambda in [0, 1]: the unlabelled rows' weight (1 = the paper)."""
    top_k: int = 0
    """Keep at most this many paths per unlabelled posterior (0 = all)."""


def e_step(
    X,
    fixed_scores: np.ndarray,
    labeled: np.ndarray,
    log_prior: Optional[np.ndarray],
    log_theta: Optional[np.ndarray],
    options: EStepOptions = EStepOptions(),
    *,
    structure: Optional[Structure] = None,
    rng: Optional[np.random.Generator] = None,
    tables: Optional[ScoringTables] = None,
) -> BlockStats:
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
    options : :class:`EStepOptions`
        ``use_unlabeled``: False for plain NB, unlabelled rows contribute
        nothing.
        ``posterior_floor``, ``top_k``: truncation of the unlabelled posteriors
        (:func:`truncate_posteriors`): keep at most ``top_k`` paths per row
        (0 = all) whose posterior is >= ``posterior_floor``, renormalised.
        Both 0 = exact Eq. 5. Truncated rows make the sums sparse when
        ``sparse_density`` > 0; with ``sparse_density = 0`` the dropped paths are
        zeroed in the dense responsibilities (cheaper for a few paths).
        ``sparse_density``: when at most this fraction of the responsibilities
        is non-zero, the word sums are computed and returned as a sparse
        matrix (0 = always dense, the faster choice while M x V is small).
        ``unlabeled_weight`` in [0, 1]: Nigam et al. (2000)'s EM-lambda,
        unlabelled rows' responsibilities (and their log-evidence term of
        Eq. 8) are scaled by it; 1 = the paper, 0 = unlabelled rows contribute
        nothing (naive Bayes).
    structure : :class:`Structure` or None
        The baselines' component structure (None = PCNB/PCEM, flat).
    rng : numpy Generator or None
        Initialisation pass of a ``restrict_labeled`` structure only: each
        labelled row starts in one random component of its path.
    tables : :class:`ScoringTables` or None
        The current parameters in sparse form (used instead of
        ``log_prior`` / ``log_theta``).

    Returns
    -------
    BlockStats
        ``word_counts`` (M, V): ``sum_i R_ij x_it``, an ndarray or a scipy
        sparse matrix, float64 (float32 when ``X`` is float32);
        ``path_totals`` (M,): ``sum_i R_ij``; ``loglik``: the block's part of Eq. 8.

    Examples
    --------
    One labelled document (path scores of ``sci/space`` from Eq. 2: 2 on its
    path, 1 on its sibling) and one unlabelled document, three paths:

    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> from pcem_spark.core.parameters import log_parameters
    >>> word_counts = np.array([[4.0, 0.0, 0.0, 1.0], [0.0, 3.0, 1.0, 0.0], [0.0, 0.0, 2.0, 2.0]])
    >>> log_prior, log_theta = log_parameters(word_counts, np.array([2.0, 1.0, 1.0]))
    >>> X = sp.csr_matrix(np.array([[0, 0, 2, 2], [3, 0, 0, 1]]))
    >>> fixed_scores = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]])
    >>> labeled = np.array([True, False])
    >>> stats = e_step(X, fixed_scores, labeled, log_prior, log_theta)
    >>> print(stats.path_totals.round(3))  # labelled scores + the unlabelled posterior
    [0.983 1.004 2.013]
    >>> stats.word_counts.shape
    (3, 4)
    >>> print(e_step(X, fixed_scores, labeled, log_prior, log_theta, EStepOptions(use_unlabeled=False)).path_totals)
    [0. 1. 2.]
    """
    use_unlabeled, posterior_floor, sparse_density, unlabeled_weight, top_k = options
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
        jll = (
            tables_joint_log_likelihood(X, tables)
            if tables is not None
            else joint_log_likelihood(X, log_prior, log_theta)
        )
        if labeled.any():
            lab_resp, lab_ll = labeled_responsibilities(fixed_scores[labeled], jll[labeled], structure)
            resp[labeled] = lab_resp
            loglik += lab_ll
        if use_unlabeled and unlabeled_weight > 0 and (~labeled).any():
            post, log_ev = responsibilities(jll[~labeled], structure)
            if (posterior_floor > 0 or top_k > 0) and structure is not None and not structure.single_softmax:
                raise ValueError(
                    "posterior_floor / posterior_top_k apply to methods whose responsibilities are "
                    "one distribution per document (not top-down / win-driven)"
                )
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
