"""The discriminative path model's mathematics: a softmax (multinomial logistic) regression over paths.

Where labels suffice, a discriminative model of the path beats naive Bayes on
short texts: naive Bayes takes every word as independent evidence, so on an
eight-word query one misweighted word decides the class. This module is the
math of one block, as pure functions (the engine moves blocks and sums):

* features are sublinear tf-idf rows of unit length (:func:`tfidf_features`), the
  representation scikit-learn's ``TfidfVectorizer(sublinear_tf=True)`` gives a linear model;
* the path scores of a block are ``S = F W^T + b`` (:func:`path_logits`), one
  column per path, so they decode, calibrate and abstain through the same
  functions as the generative ``jll`` (:mod:`pcem_spark.core.decoding`): a
  softmax of ``S`` is the path posterior;
* the objective is the weighted soft-label cross-entropy plus an L2 penalty
  (:func:`softmax_objective`): a labelled document's target is its path, an
  unlabelled one's target may be a posterior (PCEM's, as soft labels) with its
  own weight -- Nigam et al.'s observation that EM posteriors are good soft
  labels for a discriminative learner;
* :func:`fit_softmax` minimises it with L-BFGS from any function that returns
  the summed loss and gradient, so a Spark pass over many blocks and a local
  fit over one matrix share the optimiser.

Shapes: ``n`` documents, ``V`` terms, ``M`` paths. ``W`` is (M, V), ``b`` (M,).

``W`` is a dense array, or -- for taxonomies too wide for a dense one -- a
``csr_matrix`` whose stored entries are the only free weights (the *observed
support*, :func:`observed_support`: the (path, term) pairs seen together in a
labelled document, as CRFsuite and other maximum-entropy toolkits restrict their
features); every other weight stays 0. The same functions take either: the
logits, the objective and L-BFGS work on the stored entries, and a gradient is
never materialised as a dense (M, V) array (:func:`support_gradient`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Tuple

import numpy as np
import scipy.sparse as sp

from pcem_spark.core.similarity import tfidf_rows

__all__ = [
    "tfidf_features",
    "regression_features",
    "path_logits",
    "log_softmax_rows",
    "SoftmaxTerms",
    "softmax_terms",
    "softmax_objective",
    "SoftmaxFit",
    "fit_softmax",
    "one_hot_targets",
    "observed_support",
    "with_values",
    "support_gradient",
    "LinearTables",
    "linear_tables",
    "pooled_scores",
    "with_vectors",
]


def tfidf_features(X, idf: np.ndarray) -> sp.csr_matrix:
    """Sublinear tf-idf rows of unit Euclidean length: ``(1 + log(tf / tf_min)) * idf``, each row scaled to norm 1.

    X : (n, V) term counts (csr_matrix or dense); idf : (V,), e.g.
    :func:`pcem_spark.core.similarity.idf_weights`. Returns a float64 csr_matrix (n, V); an
    empty document stays an empty row (its scores are the biases alone).

    ``tf_min`` is the row's smallest non-zero count, so the features do not change when a row
    is scaled: the generative scoring scales long documents down
    (:func:`pcem_spark.core.estep.length_normalize`) and the discriminative scores are computed
    on the same rows. A document with a term seen once (nearly every one) gets exactly
    scikit-learn's ``TfidfVectorizer(sublinear_tf=True)`` weights.
    """
    X = sp.csr_matrix(X, dtype=np.float64, copy=True)
    X.eliminate_zeros()
    if X.nnz:
        lengths = np.diff(X.indptr)
        row_min = np.minimum.reduceat(X.data, X.indptr[:-1][lengths > 0])
        X.data = 1.0 + np.log(X.data / np.repeat(row_min, lengths[lengths > 0]))
    return tfidf_rows(X, np.asarray(idf, dtype=np.float64))


def regression_features(X, idf: np.ndarray, E=None, embedding_weight: float = 0.0) -> sp.csr_matrix:
    """The regression's rows: :func:`tfidf_features` of ``X``, then ``embedding_weight * E`` beside them.

    X : (n, V) term counts; idf : (V,); E : (n, D) document vectors (float32 or float64) or None. Returns a
    csr_matrix (n, V) without vectors, (n, V + D) with them: the weights of a model fitted with vectors are
    (M, V + D), the last D columns the vectors'. A sentence encoder's vectors are of unit length, as the
    tf-idf rows are, so ``embedding_weight`` 1 gives both parts the same norm; a larger weight lets the
    penalty hold the vectors' weights less than the words' (the same ``C`` for both).
    """
    F = tfidf_features(X, idf)
    if E is None:
        return F
    E = np.asarray(E, dtype=np.float64)
    if E.ndim != 2 or E.shape[0] != F.shape[0]:
        raise ValueError(f"document vectors of shape {E.shape} for {F.shape[0]} rows")
    return sp.hstack([F, sp.csr_matrix(embedding_weight * E)], format="csr")


def path_logits(F, W, b: np.ndarray) -> np.ndarray:
    """Path scores ``S = F W^T + b``: F (n, V) features, W (M, V) dense or csr, b (M,) -> float64 (n, M)."""
    S = F @ W.T
    S = S.toarray() if sp.issparse(S) else np.asarray(S, dtype=np.float64)
    return S + b[None, :]


def log_softmax_rows(S: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of (n, M) scores, computed stably (the log path posteriors)."""
    top = S.max(axis=1, keepdims=True)
    shifted = S - top
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def one_hot_targets(paths: np.ndarray, n_paths: int) -> sp.csr_matrix:
    """Targets of labelled documents: (n,) path indices -> csr_matrix (n, M) with one 1 per row."""
    paths = np.asarray(paths, dtype=np.int64)
    n = len(paths)
    return sp.csr_matrix((np.ones(n), (np.arange(n), paths)), shape=(n, n_paths))


def observed_support(X, Y) -> sp.csr_matrix:
    """The (path, term) pairs a sparse regression may weigh: those seen together in a labelled document.

    X : (n, V) term counts (or features) of the labelled documents; Y : (n, M) their targets.
    Returns a csr_matrix (M, V) with sorted indices whose stored entries (all 0.0) are the
    pattern of ``Y^T X``: a term of a path's labelled documents. Its size is at most the
    labelled documents' non-zeros times the paths a row's target spreads over, whatever V and M.
    """
    X = sp.csr_matrix(X)
    Y = sp.csr_matrix(Y)
    pattern = (abs(Y).T @ (X != 0).astype(np.float64)).tocsr()
    pattern.eliminate_zeros()
    pattern.sort_indices()
    return sp.csr_matrix((np.zeros(pattern.nnz), pattern.indices, pattern.indptr), shape=pattern.shape)


def with_values(support: sp.csr_matrix, values: np.ndarray) -> sp.csr_matrix:
    """The csr_matrix with ``support``'s pattern and ``values`` as its stored entries (no copy of the pattern)."""
    return sp.csr_matrix((values, support.indices, support.indptr), shape=support.shape)


# A gradient on a support is computed a few paths at a time: at most this many dense cells at once.
_SUPPORT_CHUNK_CELLS = 1 << 22


def support_gradient(F, residual: np.ndarray, support: sp.csr_matrix) -> np.ndarray:
    """``residual^T F`` at the stored entries of ``support`` only: (nnz,) aligned with ``support.data``.

    F : (n, V) features (csr); residual : (n, M) dense; support : csr (M, V) with sorted indices.
    The dense (M, V) product is never formed: a chunk of paths at a time (at most
    2^22 cells), ``F^T residual[:, chunk]`` is computed and its support entries taken.
    Time ``O(M nnz(F))``, the dense gradient's; memory ``O(nnz(support) + 2^22)``.
    """
    M, V = support.shape
    Ft = sp.csr_matrix(F).T.tocsr()  # (V, n)
    out = np.zeros(support.nnz)
    step = max(1, _SUPPORT_CHUNK_CELLS // max(V, 1))
    for a in range(0, M, step):
        z = min(M, a + step)
        lo, hi = support.indptr[a], support.indptr[z]
        if lo == hi:
            continue
        D = np.asarray(Ft @ residual[:, a:z])  # (V, z - a)
        paths = np.repeat(np.arange(z - a), np.diff(support.indptr[a : z + 1]))
        out[lo:hi] = D[support.indices[lo:hi], paths]
    return out


class SoftmaxTerms(NamedTuple):
    """One block's share of the objective: sums over its documents, before the penalty.

    loss : float, ``-sum_i w_i sum_m Y_im log p_im`` (the weighted soft-label cross-entropy)
    grad_W : (M, V), ``sum_i w_i (p_i - y_i) f_i^T`` scaled by the targets' row mass (for a sparse W,
    its stored entries only: (nnz,), aligned with ``W.data``)
    grad_b : (M,), ``sum_i w_i (m_i p_i - y_i)``, m_i the row sum of ``Y_i``
    weight : float, ``sum_i w_i m_i`` (the mass the loss is a sum over)
    """

    loss: float
    grad_W: np.ndarray
    grad_b: np.ndarray
    weight: float


def softmax_terms(F, Y, sample_weight: np.ndarray, W: np.ndarray, b: np.ndarray) -> SoftmaxTerms:
    """Loss and gradient sums of one block (:class:`SoftmaxTerms`).

    F : (n, V) features; Y : (n, M) targets (csr_matrix or dense, non-negative; a row sums to 1
    for a labelled document or a posterior, to 0 for a document that does not count);
    sample_weight : (n,) weights w_i >= 0; W (M, V) dense, or a csr_matrix whose stored entries
    are the free weights (the gradient is then (nnz,), :func:`support_gradient`); b (M,).

    With ``m_i = sum_m Y_im``, the loss of a row is ``-sum_m Y_im log p_im`` and its gradient
    in the scores is ``m_i p_i - Y_i`` -- a soft target of any mass is a mixture of one-hot ones.
    """
    w = np.asarray(sample_weight, dtype=np.float64)
    log_p = log_softmax_rows(path_logits(F, W, b))
    Yd = Y.toarray() if sp.issparse(Y) else np.asarray(Y, dtype=np.float64)
    mass = Yd.sum(axis=1)
    wY = Yd * w[:, None]
    # 0 * log p is 0 even where p underflows to 0 (log p = -inf would give NaN).
    loss = -float(np.sum(np.where(wY > 0, wY * log_p, 0.0)))
    residual = np.exp(log_p) * (w * mass)[:, None] - wY  # (n, M): dLoss/dS
    if sp.issparse(W):
        grad_W = support_gradient(F, residual, W)
    else:
        grad_W = np.asarray(F.T @ residual).T if sp.issparse(F) else residual.T @ np.asarray(F)
    return SoftmaxTerms(loss, np.asarray(grad_W, dtype=np.float64), residual.sum(axis=0), float(np.sum(w * mass)))


def softmax_objective(terms: SoftmaxTerms, W: np.ndarray, l2: float) -> Tuple[float, np.ndarray, np.ndarray]:
    """The objective from summed :class:`SoftmaxTerms`: ``loss / weight + (l2 / 2) ||W||^2``.

    ``W`` is the dense (M, V) weights or a sparse W's stored entries (``W.data``), matching
    ``terms.grad_W``. Returns (objective, grad_W, grad_b (M,)). The loss is a mean over the targets' mass,
    so ``l2`` means the same at any corpus size; the biases are not penalised (as in LIBLINEAR's
    and scikit-learn's multinomial models, whose ``C`` is ``1 / (l2 * weight)``).
    """
    scale = 1.0 / terms.weight if terms.weight > 0 else 0.0
    objective = terms.loss * scale + 0.5 * l2 * float(np.sum(W * W))
    return objective, terms.grad_W * scale + l2 * W, terms.grad_b * scale


class SoftmaxFit(NamedTuple):
    """A fitted softmax: W (M, V), b (M,), the objective reached, L-BFGS's iterations and whether it converged."""

    W: np.ndarray
    b: np.ndarray
    objective: float
    n_iter: int
    converged: bool


def fit_softmax(
    summed_terms: Callable[[np.ndarray, np.ndarray], SoftmaxTerms],
    n_paths: int,
    n_terms: int,
    l2: float,
    max_iter: int = 100,
    tol: float = 1e-6,
    start: Optional[Tuple[np.ndarray, np.ndarray]] = None,
    support: Optional[sp.csr_matrix] = None,
) -> SoftmaxFit:
    """Minimise :func:`softmax_objective` with L-BFGS (scipy), from ``start`` = (W0, b0) (default zeros).

    ``summed_terms(W, b)`` returns the :class:`SoftmaxTerms` summed over every block: a local
    call of :func:`softmax_terms`, or one Spark pass that broadcasts W and b and sums the
    blocks' terms. The objective is strictly convex for ``l2 > 0``, so the optimum does not
    depend on the start (W is unique; the biases only up to a common shift, which no
    probability sees); a warm start (W0, b0) only saves iterations. ``tol`` is scipy's
    ``gtol`` on the projected gradient; scipy's ``ftol`` (relative change of the objective)
    also stops it.

    With ``support`` (a csr (M, V), :func:`observed_support`) only its stored entries are
    free: ``summed_terms`` gets W as a csr_matrix of that pattern, L-BFGS works on its
    ``nnz + M`` numbers, and the fit's W is that csr_matrix (``W0``, if given, too).
    """
    from scipy.optimize import minimize

    if l2 <= 0:
        raise ValueError(f"l2 must be > 0 (the objective is then strictly convex), got {l2}")
    M, V = n_paths, n_terms
    W0, b0 = (None, None) if start is None else start
    if support is not None:
        support = sp.csr_matrix(support, dtype=np.float64)
        support.sort_indices()
        if support.shape != (M, V):
            raise ValueError(f"the support is {support.shape}, the model ({M}, {V})")
    n_w = M * V if support is None else support.nnz

    def weights(theta: np.ndarray):
        if support is None:
            return theta[:n_w].reshape(M, V)
        return with_values(support, theta[:n_w])

    if W0 is None:
        w0 = np.zeros(n_w)
    elif support is None:
        w0 = np.asarray(W0, dtype=np.float64).ravel()
    else:
        w0 = _on_support(W0, support)
    start = np.concatenate([w0, np.zeros(M) if b0 is None else np.asarray(b0, dtype=np.float64)])

    def objective(theta: np.ndarray):
        W, b = weights(theta), theta[n_w:]
        value, gW, gb = softmax_objective(summed_terms(W, b), W if support is None else theta[:n_w], l2)
        return value, np.concatenate([np.ravel(gW), gb])

    result = minimize(objective, start, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "gtol": tol})
    theta = result.x
    return SoftmaxFit(weights(theta), theta[n_w:], float(result.fun), int(result.nit), bool(result.success))


def _on_support(W, support: sp.csr_matrix) -> np.ndarray:
    """The entries of W (dense or sparse, (M, V)) at ``support``'s stored positions, in its order."""
    rows = np.repeat(np.arange(support.shape[0]), np.diff(support.indptr))
    if sp.issparse(W):
        return np.asarray(sp.csr_matrix(W)[rows, support.indices]).ravel()
    return np.asarray(W, dtype=np.float64)[rows, support.indices]


class LinearTables(NamedTuple):
    """The discriminative path model laid out for scoring a block (broadcast beside :class:`ScoringTables`).

    weights_t : (V, M) ``W^T`` (at the scoring dtype), a dense array or, for a model fitted on
    its observed support, a csr_matrix; bias : (M,) ``b``; idf : (V,);
    generative_weight : ``beta`` >= 0, the weight of the generative model's log path posterior
    in the pooled score (:func:`pooled_scores`): 0 is the discriminative model alone;
    embedding_weight : the scale of the document vectors beside the tf-idf rows
    (:func:`regression_features`), 0 when the model was fitted without vectors. With vectors,
    ``weights_t`` is (V + D, M): :attr:`embedding_dim` = D; vectors : the (n, D) document vectors
    of the block being scored, bound to a copy of the tables per block (:func:`with_vectors`), None
    in the tables a model broadcasts; unit_vectors : the vectors are scaled to unit length before the
    product (the von Mises-Fisher family's tables, :mod:`pcem_spark.model.vmf_family`).
    """

    weights_t: np.ndarray
    bias: np.ndarray
    idf: np.ndarray
    generative_weight: float = 1.0
    embedding_weight: float = 0.0
    vectors: Optional[np.ndarray] = None
    unit_vectors: bool = False

    @property
    def embedding_dim(self) -> int:
        """D, the length of the document vectors the weights expect (0: words only)."""
        return int(self.weights_t.shape[0]) - len(self.idf)


def linear_tables(
    fit: SoftmaxFit, idf: np.ndarray, generative_weight: float, dtype="float64", embedding_weight: float = 0.0
) -> LinearTables:
    """:class:`LinearTables` of a fitted softmax (W transposed once, for ``F @ W^T`` per block)."""
    if generative_weight < 0:
        raise ValueError(f"generative_weight must be >= 0, got {generative_weight}")
    if sp.issparse(fit.W):
        weights_t = sp.csr_matrix(fit.W.T, dtype=np.dtype(dtype))
    else:
        weights_t = np.ascontiguousarray(np.asarray(fit.W).T, dtype=np.dtype(dtype))
    return LinearTables(
        weights_t,
        np.asarray(fit.b, dtype=np.float64),
        np.asarray(idf, np.float64),
        generative_weight,
        float(embedding_weight),
    )


def with_vectors(linear: Optional[LinearTables], E, n_rows: Optional[int] = None) -> Optional[LinearTables]:
    """``linear`` with a block's (n, D) document vectors bound for scoring it (unchanged when it was fitted
    without vectors, or is None). ``E`` None with ``n_rows``: a block none of whose rows has a vector, scored
    as zero vectors (its words alone), as a single row without one is (engine.arrow_io.vector_rows)."""
    if linear is None or not linear.embedding_dim:
        return linear
    if E is None and n_rows is not None:
        E = np.zeros((n_rows, linear.embedding_dim), np.float32)
    return linear._replace(vectors=None if E is None else np.asarray(E))


def pooled_scores(jll: np.ndarray, X, linear: LinearTables, E=None) -> np.ndarray:
    """Path scores of the combined family: ``beta * log p_gen(path | x) + F W^T + b``, shape (n, M).

    jll : (n, M) the generative joint log-likelihoods of the rows of X (n, V); the first term
    is their log-softmax, so a softmax of the result is the log-linear pool (a product of
    experts) of the generative posterior, raised to ``beta``, and the discriminative one.
    E : (n, D) the rows' document vectors (default: ``linear.vectors``), required when the model was
    fitted with them (``linear.embedding_dim`` > 0) and ignored otherwise; ``F`` is
    :func:`regression_features`.
    """
    V = len(linear.idf)
    if linear.embedding_dim:
        E = linear.vectors if E is None else E
        if E is None and X.shape[0] == 0:
            E = np.zeros((0, linear.embedding_dim))
        if E is None or np.shape(E) != (X.shape[0], linear.embedding_dim):
            got = "none" if E is None else f"shape {np.shape(E)}"
            raise ValueError(f"the regression needs ({X.shape[0]}, {linear.embedding_dim}) document vectors, got {got}")
    F = tfidf_features(X, linear.idf)
    # [F, w E] @ W^T as two products: the vectors' part is one dense BLAS product, never a sparse copy of E.
    S = F @ linear.weights_t[:V] if linear.embedding_dim else F @ linear.weights_t
    S = (S.toarray() if sp.issparse(S) else np.asarray(S, dtype=np.float64)) + linear.bias[None, :]
    if linear.embedding_dim:
        vector_weights = linear.weights_t[V:]
        vector_weights = vector_weights.toarray() if sp.issparse(vector_weights) else vector_weights
        E = np.asarray(E, dtype=vector_weights.dtype)
        if linear.unit_vectors:
            norms = np.linalg.norm(E, axis=1, keepdims=True)
            E = np.divide(E, norms, out=np.zeros_like(E), where=norms > 0)
        S += linear.embedding_weight * (E @ vector_weights)
    if linear.generative_weight > 0:
        S += linear.generative_weight * log_softmax_rows(jll)
    return S
