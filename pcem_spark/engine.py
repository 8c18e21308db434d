"""The Spark engine: CSR blocks, broadcast parameters, EM passes.

Execution shape (DESIGN.md):

* each partition's rows are packed once into scipy CSR blocks and cached;
* each pass broadcasts ``(log_prior, log_theta, score_matrix)``;
* ``mapPartitions`` runs the E-step of :mod:`pcem_spark.pathnb` per block and
  emits per-path sums, combined by ``reduceByKey`` (key = path id) into the
  M x V count matrix on the driver;
* the driver updates theta (Eqs. 6-7), tracks the log-likelihood (Eq. 8),
  tests convergence and unpersists the old broadcast.

Spark only moves blocks, broadcasts and sums; the math is in ``pathnb``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np
import scipy.sparse as sp
from pyspark import RDD, StorageLevel
from pyspark.sql import DataFrame

from . import pathnb
from .limits import check_result_size
from .session import require_classic_session

log = logging.getLogger(__name__)

# Per-path sums may travel sparse only when M x V has at least this many cells.
SPARSE_SUMS_MIN_CELLS = 1 << 22

# Key of the scalar record (log-likelihood, counts) next to the path keys 0..M-1.
_SCALARS = -1

# What the EM passes use that a Spark Connect session lacks (pcem_spark.session.require_classic_session).
RDD_NEEDS = "the RDD API (packed blocks cached as an RDD, log theta broadcast to mapPartitions, reduceByKey)"


def _compact(values: np.ndarray) -> np.ndarray:
    """The smallest dtype that holds ``values`` exactly (term counts fit in uint8/uint16)."""
    if values.size and np.all(values >= 0) and np.all(values == np.floor(values)):
        top = values.max()
        for dtype in (np.uint8, np.uint16):
            if top <= np.iinfo(dtype).max:
                return values.astype(dtype)
    return values


class Block:
    """A partition's documents as matrices.

    X : csr_matrix (n, V) term counts; node_scores : csr_matrix (n, K) of
    ``S_i(c)``; labeled : bool (n,) -- rows with any supervision.

    Pickled compactly (counts as uint8/uint16 when exact, int32 indices):
    cached blocks cross from the JVM to Python every EM iteration, and the
    bytes moved are the main cost of an iteration after the math.
    """

    __slots__ = ("X", "node_scores", "labeled")

    def __init__(self, X: sp.csr_matrix, node_scores: sp.csr_matrix, labeled: np.ndarray):
        self.X = X
        self.node_scores = node_scores
        self.labeled = labeled

    def __getstate__(self):
        X = self.X
        return (X.shape, X.indptr, X.indices.astype(np.int32, copy=False), _compact(X.data),
                self.node_scores, self.labeled)

    def __setstate__(self, state):
        shape, indptr, indices, data, node_scores, labeled = state
        self.X = sp.csr_matrix((data.astype(np.float64, copy=False), indices, indptr), shape=shape)
        self.node_scores = node_scores
        self.labeled = labeled


_BLOCK_ROW = ("n int, indptr binary, indices binary, data binary, "
              "ns_indptr binary, ns_indices binary, ns_data binary")


def sparse_vector_arrays(vectors) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR ``(indptr, indices, data)`` of an Arrow column of ml SparseVectors.

    Spark sends a VectorUDT column to Arrow as its SQL struct
    ``{type, size, indices, values}``; the list offsets are the CSR row
    pointers, so no Python object is made per row.
    """
    import pyarrow.compute as pc
    kinds = np.asarray(pc.struct_field(vectors, "type").to_numpy(zero_copy_only=False))
    if kinds.size and kinds.max() != 0:
        raise ValueError("expected sparse term-count vectors, got dense vectors")
    idx = pc.struct_field(vectors, "indices")
    vals = pc.struct_field(vectors, "values")
    offsets = np.asarray(idx.offsets, dtype=np.int64)
    indptr = offsets - offsets[0]
    indices = np.asarray(idx.flatten().to_numpy(zero_copy_only=False), dtype=np.int32)
    data = np.asarray(vals.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    return indptr, indices, data


def arrow_blocks(batches, block_size: int):
    """Slices of at most ``block_size`` rows of each Arrow batch (a block = one matrix product)."""
    for batch in batches:
        for start in range(0, batch.num_rows, block_size):
            yield batch.slice(start, block_size)


def csr_of(vectors, vocab_size: int) -> sp.csr_matrix:
    """(n, V) CSR matrix of an Arrow column of ml SparseVectors."""
    indptr, indices, data = sparse_vector_arrays(vectors)
    return sp.csr_matrix((data, indices, indptr), shape=(len(vectors), vocab_size))


def predicted_path_batches(batches, n_keep: int, vocab_size: int, block_size: int, paths, names, predict):
    """mapInArrow body shared by every model's prediction: Arrow in, Arrow out.

    Each batch has ``n_keep`` passthrough columns, then the term-count
    vectors. Per block of ``block_size`` rows, ``predict(X)`` (X: CSR
    (n, V)) returns ``(best, prob)``: an index into ``paths`` (real label
    paths) and a score per row. Yields the passthrough columns plus path,
    leaf and probability; rows are never dropped or reordered.
    """
    import pyarrow as pa
    path_arr = pa.array(paths, pa.list_(pa.string()))
    leaf_arr = pa.array([p[-1] for p in paths], pa.string())
    for b in arrow_blocks(batches, block_size):
        best, prob = predict(csr_of(b.column(n_keep), vocab_size))
        take = pa.array(best, pa.int64())
        cols = [b.column(i) for i in range(n_keep)] + [
            path_arr.take(take), leaf_arr.take(take), pa.array(prob, pa.float64())]
        yield pa.RecordBatch.from_arrays(cols, names=names)


def label_path_index(labels, path_keys) -> np.ndarray:
    """Path index of each label list (``-1`` for null = unlabelled), vectorised with Arrow compute."""
    import pyarrow as pa
    import pyarrow.compute as pc
    # Spark marks the element type non-nullable, which binary_join has no kernel for.
    joined = pc.binary_join(labels.cast(pa.list_(pa.string())), "\x1f")
    found = pc.index_in(joined, value_set=pa.array(path_keys, pa.string()))
    idx = np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    unknown = np.asarray(labels.is_valid().to_numpy(zero_copy_only=False)) & (idx < 0)
    if unknown.any():
        bad = labels[int(np.flatnonzero(unknown)[0])].as_py()
        raise ValueError(f"label path {bad} is not a path of the taxonomy (validate labels before packing)")
    return idx


def node_score_rows(labels, path_keys, path_nodes: np.ndarray):
    """CSR ``(indptr, indices, data)`` node scores of true label paths (null = no row entries)."""
    d = path_nodes.shape[1]
    q = label_path_index(labels, path_keys)
    lab = q >= 0
    indptr = np.concatenate([[0], np.cumsum(np.where(lab, d, 0))]).astype(np.int64)
    indices = path_nodes[q[lab]].ravel().astype(np.int32)
    return indptr, indices, np.ones(len(indices))


def weak_score_rows(scores):
    """CSR node scores from an Arrow list<double> column of K scores per row (null = unlabelled)."""
    import pyarrow.compute as pc
    lengths = np.asarray(pc.list_value_length(scores).fill_null(0).to_numpy(zero_copy_only=False))
    flat = np.asarray(scores.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    k = int(lengths.max()) if lengths.size else 0
    dense = np.zeros((len(lengths), k))
    rows = lengths > 0
    if rows.any():
        dense[rows] = flat.reshape(-1, k)
    m = sp.csr_matrix(dense)
    return m.indptr.astype(np.int64), m.indices.astype(np.int32), m.data


def _pack_arrow_partition(batches, supervision, block_size: int):
    """mapInArrow body: each slice of <= block_size rows becomes one row of CSR bytes."""
    import pyarrow as pa
    for b in arrow_blocks(batches, block_size):
        indptr, indices, data = sparse_vector_arrays(b.column(0))
        ns_indptr, ns_indices, ns_data = supervision(b.column(1))
        cols = [pa.array([b.num_rows], pa.int32())] + [
            pa.array([a.tobytes()], pa.binary())
            for a in (indptr, indices, data, ns_indptr, ns_indices, ns_data)]
        yield pa.RecordBatch.from_arrays(cols, names=["n", "indptr", "indices", "data", "ns_indptr",
                                                      "ns_indices", "ns_data"])


def _block_from_row(row, vocab_size: int, n_nodes: int) -> Block:
    n = row[0]
    indptr, indices, data, ns_indptr, ns_indices, ns_data = (
        np.frombuffer(row[i], dtype=t) for i, t in
        zip(range(1, 7), (np.int64, np.int32, np.float64, np.int64, np.int32, np.float64)))
    X = sp.csr_matrix((data, indices, indptr), shape=(n, vocab_size))
    ns = sp.csr_matrix((ns_data, ns_indices, ns_indptr), shape=(n, n_nodes))
    return Block(X, ns, np.diff(ns_indptr) > 0)


def blocks_from_labels(df: DataFrame, path_lookup: Dict[Tuple[str, ...], int], path_node: np.ndarray,
                       vocab_size: int, block_size: int = 4096, features_col: str = "features",
                       labels_col: str = "labels") -> RDD:
    """RDD of :class:`Block` from a featurised DataFrame with true label paths.

    ``labels`` must already be validated against the taxonomy (see
    :func:`pcem_spark.model.check_label_paths`); null labels = unlabelled.
    The node scores of a labelled row are the nodes of its (padded) path.
    Rows go to Python as Arrow batches and are packed with numpy only; each
    block crosses back as one row of bytes.
    """
    require_classic_session(df, "engine.blocks_from_labels", RDD_NEEDS)
    n_paths, n_nodes = path_node.shape
    keys = [None] * n_paths
    for labels, j in path_lookup.items():
        keys[j] = "\x1f".join(labels)
    path_nodes = np.array([np.flatnonzero(path_node[j]) for j in range(n_paths)], dtype=np.int32)

    def pack(batches):
        return _pack_arrow_partition(batches, lambda col: node_score_rows(col, keys, path_nodes), block_size)

    packed = df.select(features_col, labels_col).mapInArrow(pack, _BLOCK_ROW)
    return packed.rdd.map(lambda row: _block_from_row(row, vocab_size, n_nodes))


def blocks_from_node_scores(df: DataFrame, n_nodes: int, vocab_size: int, block_size: int = 4096,
                            features_col: str = "features", scores_col: str = "node_scores") -> RDD:
    """RDD of :class:`Block` from weak supervision: ``node_scores`` is array<double> of the
    taxonomy's K node columns (``Taxonomy.nodes`` order) or null for an unlabelled row."""
    require_classic_session(df, "engine.blocks_from_node_scores", RDD_NEEDS)

    def pack(batches):
        return _pack_arrow_partition(batches, weak_score_rows, block_size)

    packed = df.select(features_col, scores_col).mapInArrow(pack, _BLOCK_ROW)
    return packed.rdd.map(lambda row: _block_from_row(row, vocab_size, n_nodes))


@dataclass
class FitResult:
    log_prior: np.ndarray
    log_theta: np.ndarray
    n_iter: int = 0
    converged: bool = False
    loglik_history: List[float] = field(default_factory=list)
    iter_seconds: List[float] = field(default_factory=list)
    n_labeled: int = 0
    n_unlabeled: int = 0
    smoothing: float = 1.0                 # the word pseudo-count used (chosen when "auto")
    smoothing_evidence: Optional[Dict[str, float]] = None   # grid value -> log evidence ("auto")


def _add(a, b):
    """Sum of two per-path records, each a dense ndarray or a sparse (1, V+1) row."""
    if sp.issparse(a) and sp.issparse(b):
        return a + b
    if sp.issparse(a):
        a, b = b, a
    if sp.issparse(b):
        out = a.copy()
        out[b.indices] += b.data
        return out
    return a + b


def _accumulate(acc, x):
    """``acc + x`` for per-path word sums that may be dense ndarrays or sparse matrices."""
    if acc is None:
        return x
    if sp.issparse(acc) and sp.issparse(x):
        acc = (acc + x).tocsr()
        # Past ~30% fill a dense array is cheaper to add to and to ship.
        return acc.toarray() if acc.nnz > 0.3 * acc.shape[0] * acc.shape[1] else acc
    if sp.issparse(acc):
        acc, x = x.copy(), acc  # never write into the caller's block result
    if sp.issparse(x):
        x = x.tocoo()
        acc[x.row, x.col] += x.data  # coo from csr has no duplicate entries
        return acc
    acc += x
    return acc


def _pass_partition(index: int, blocks: Iterable[Block], bc, use_unlabeled: bool, n_paths: int,
                    posterior_floor: float, init_seed: Optional[int] = None, unlabeled_weight: float = 1.0,
                    doc_length: float = 0.0):
    from .faults import maybe_fail
    maybe_fail("em_pass")  # no-op unless a test sets PCEM_INJECT_FAULT
    log_prior, log_theta_t, score_matrix, structure = bc.value
    dtype = np.float64 if log_theta_t is None else log_theta_t.dtype
    # Broadcast as (V, M) C-ordered, so X @ log_theta.T needs no per-block copy.
    log_theta = None if log_theta_t is None else log_theta_t.T
    word_counts = None
    totals = np.zeros(n_paths)
    # loglik, n labelled, n unlabelled, labelled tokens as counted, labelled tokens before doc_length
    scalars = np.zeros(5)
    sparse_density = None
    # Random initial split of multi-component classes: seeded per partition, so
    # a rerun on the same cached blocks gives the same model.
    rng = None if init_seed is None else np.random.default_rng([init_seed, index])
    for blk in blocks:
        if sparse_density is None:
            # Measured: with 20 paths x 20k words dense sums are ~30% faster per
            # iteration; with 1,000 x 2^18 only sparse sums fit in memory.
            sparse_density = 0.1 if n_paths * blk.X.shape[1] >= SPARSE_SUMS_MIN_CELLS else 0.0
        fixed = pathnb.path_scores(blk.node_scores, score_matrix).astype(dtype, copy=False)
        X = blk.X
        raw_tokens = float(X[blk.labeled].sum()) if log_theta is None else 0.0
        if doc_length > 0:
            X = pathnb.length_normalize(X, doc_length)
        if dtype != np.float64:
            X = X.astype(dtype)
        st = pathnb.e_step(X, fixed, blk.labeled, log_prior, log_theta, use_unlabeled, posterior_floor,
                           sparse_density, structure, rng, unlabeled_weight)
        word_counts = _accumulate(word_counts, st.word_counts)
        totals += st.path_totals
        n_lab = int(blk.labeled.sum())
        counted = float(X[blk.labeled].sum()) if log_theta is None else 0.0
        scalars += (st.loglik, n_lab, len(blk.labeled) - n_lab, counted, raw_tokens)
    if word_counts is None:
        return
    vocab_size = word_counts.shape[1]
    if sp.issparse(word_counts):
        word_counts = word_counts.tocsr()
        for j in range(n_paths):
            # One record per path: its word sums with the path total appended.
            lo, hi = word_counts.indptr[j], word_counts.indptr[j + 1]
            idx = np.append(word_counts.indices[lo:hi], vocab_size)
            val = np.append(word_counts.data[lo:hi], totals[j])
            yield j, sp.csr_matrix((val, idx, [0, len(idx)]), shape=(1, vocab_size + 1))
    else:
        for j in range(n_paths):
            yield j, np.append(word_counts[j], word_counts.dtype.type(totals[j]))
    yield _SCALARS, scalars


def sufficient_stats(blocks: RDD, log_prior: Optional[np.ndarray], log_theta: Optional[np.ndarray],
                     score_matrix: np.ndarray, vocab_size: int, use_unlabeled: bool,
                     posterior_floor: float = 0.0, dtype: str = "float64",
                     structure: Optional[pathnb.Structure] = None, init_seed: Optional[int] = None,
                     unlabeled_weight: float = 1.0, doc_length: float = 0.0, stats: Optional[dict] = None):
    """One distributed pass: returns (word_counts (M,V), path_totals (M,), loglik, n_lab, n_unlab).

    With ``log_theta=None`` only labelled rows count (the NB initialisation)
    and no log-likelihood is computed. Per-path sums travel sparse when few
    documents carry weight for a path (large taxonomies), dense otherwise.
    ``structure`` / ``init_seed``: the baselines' components (see
    :mod:`pcem_spark.methods`); ``M`` is then the number of components.
    """
    sc = blocks.context
    n_paths = score_matrix.shape[0]
    # The summed records come back to the driver in one collect: (M + 1) rows
    # of V + 1 cells at the pass's dtype (dense when M x V is small).
    check_result_size(sc, (n_paths + 1) * (vocab_size + 1) * np.dtype(dtype).itemsize,
                      f"the per-path sums of {n_paths:,} paths x {vocab_size:,} terms ({dtype})")
    # float32 halves the broadcast, the per-block products and the shuffled
    # per-path sums; the driver keeps float64 for the M-step.
    theta_t = None if log_theta is None else np.ascontiguousarray(log_theta.T, dtype=dtype)
    prior = None if log_prior is None else log_prior.astype(dtype)
    bc = sc.broadcast((prior, theta_t, score_matrix, structure))
    del theta_t
    try:
        n_reducers = max(1, min(n_paths + 1, sc.defaultParallelism))
        records = (blocks.mapPartitionsWithIndex(
            lambda i, it: _pass_partition(i, it, bc, use_unlabeled, n_paths, posterior_floor, init_seed,
                                          unlabeled_weight, doc_length))
                   .reduceByKey(_add, numPartitions=n_reducers)
                   .collect())  # M + 1 summed records: O(M x V) on the driver, never documents
    finally:
        bc.unpersist()
    word_counts = np.zeros((n_paths, vocab_size))
    totals = np.zeros(n_paths)
    scalars = np.zeros(5)
    while records:
        key, arr = records.pop()  # each record is freed once copied into the matrix
        if key == _SCALARS:
            scalars = arr
            continue
        if sp.issparse(arr):
            arr = arr.toarray().ravel()
        word_counts[key] = arr[:-1]
        totals[key] = arr[-1]
    if stats is not None:
        stats.update(labeled_tokens=float(scalars[3]), labeled_raw_tokens=float(scalars[4]))
    return word_counts, totals, float(scalars[0]), int(scalars[1]), int(scalars[2])


def fit(blocks: RDD, score_matrix: np.ndarray, vocab_size: int, em: bool = True, smoothing=1.0,
        max_iter: int = 50, tol: float = 1e-5, label: str = "PCEM", posterior_floor: float = 0.0,
        dtype: str = "float64", structure: Optional[pathnb.Structure] = None, use_unlabeled: Optional[bool] = None,
        seed: int = 0, unlabeled_weight: float = 1.0, prior_smoothing: Optional[float] = None,
        smoothing_grid=pathnb.DEFAULT_SMOOTHING_GRID, doc_length: float = 0.0) -> FitResult:
    """PCNB (``em=False``) or PCEM (Algorithm 1) on cached blocks -- or a baseline.

    ``score_matrix`` (M, K) turns node scores into path scores (Eq. 2): the
    path-node matrix for PCNB/PCEM, the leaf indicator for flat NB/EM.
    Convergence: relative change of the log-likelihood (Eq. 8) below ``tol``,
    or ``max_iter`` EM iterations.

    Baselines (:mod:`pcem_spark.methods`) pass their ``structure``; ``em``
    then means "iterate" and ``use_unlabeled`` (default: ``em``) whether
    unlabelled rows take part (False for NBMC, whose iterations only move
    labelled documents between a class's components, started from a split
    drawn with ``seed``).

    ``smoothing="auto"``: the word pseudo-count of ``smoothing_grid`` with the
    largest Dirichlet-multinomial evidence of the labelled counts
    (:func:`pcem_spark.pathnb.choose_smoothing`), fixed for all EM
    iterations; the path prior then keeps Laplace's 1 unless
    ``prior_smoothing`` says otherwise. ``unlabeled_weight`` (EM-lambda)
    scales the unlabelled documents' share of the M-step; 0 returns the naive
    Bayes parameters without iterating. ``doc_length`` > 0 scales longer
    documents down to that many tokens (:func:`pcem_spark.pathnb.length_normalize`);
    the "auto" smoothing is then chosen on the labelled counts scaled back to
    their raw token total, so the evidence sees counts on the scale it models.
    """
    t0 = time.perf_counter()
    if use_unlabeled is None:
        use_unlabeled = em
    groups = None if structure is None else structure.groups
    init_seed = seed if structure is not None and structure.restrict_labeled else None
    init_stats: Dict[str, float] = {}
    wc, totals, _, n_lab, n_unlab = sufficient_stats(blocks, None, None, score_matrix, vocab_size, False,
                                                     structure=structure, init_seed=init_seed,
                                                     doc_length=doc_length, stats=init_stats)
    if n_lab == 0:
        raise ValueError(f"{label}: no labelled document in the training data; "
                         "naive Bayes needs at least one labelled document")
    evidence = None
    if smoothing == "auto":
        counted, raw = init_stats.get("labeled_tokens", 0.0), init_stats.get("labeled_raw_tokens", 0.0)
        scale = raw / counted if doc_length > 0 and counted > 0 else 1.0
        smoothing, ev = pathnb.choose_smoothing(wc * scale if scale != 1.0 else wc, smoothing_grid)
        evidence = {f"{a:g}": float(e) for a, e in zip(sorted(smoothing_grid), ev)}
        if prior_smoothing is None:
            prior_smoothing = 1.0
        log.info("%s: smoothing %g chosen by Dirichlet-multinomial evidence of the labelled counts "
                 "(grid %s)", label, smoothing, ", ".join(f"{a}: {e:.4g}" for a, e in evidence.items()))
    smoothing = float(smoothing)
    if not 0.0 <= unlabeled_weight <= 1.0:
        raise ValueError(f"unlabeled_weight must be in [0, 1], got {unlabeled_weight}")
    log_prior, log_theta = pathnb.log_parameters(wc, totals, smoothing, groups, prior_smoothing)
    del wc
    result = FitResult(log_prior, log_theta, n_labeled=n_lab, n_unlabeled=n_unlab, smoothing=smoothing,
                       smoothing_evidence=evidence)
    log.info("%s: naive Bayes initialisation on %d labelled documents (%d unlabelled) in %.2fs",
             label, n_lab, n_unlab, time.perf_counter() - t0)
    if use_unlabeled and unlabeled_weight == 0.0 and structure is None:
        em = False  # EM-lambda with lambda = 0: the unlabelled documents never count, naive Bayes it is
    if not em:
        result.converged = True
        return result
    if n_unlab == 0 and use_unlabeled:
        log.warning("%s: no unlabelled documents, EM reduces to naive Bayes", label)
    prev = None
    for it in range(1, max_iter + 1):
        t_it = time.perf_counter()
        wc, totals, data_ll, _, _ = sufficient_stats(
            blocks, log_prior, log_theta, score_matrix, vocab_size, use_unlabeled, posterior_floor, dtype,
            structure, unlabeled_weight=unlabeled_weight, doc_length=doc_length)
        loglik = data_ll + pathnb.log_prior_density(log_prior, log_theta, smoothing, prior_smoothing)
        log_theta = result.log_theta = None  # let the old (M, V) parameters go before the new ones exist
        log_prior, log_theta = pathnb.log_parameters(wc, totals, smoothing, groups, prior_smoothing)
        del wc
        if not (np.isfinite(loglik) and np.isfinite(log_prior).all()):
            raise FloatingPointError(f"{label}: EM iteration {it} produced non-finite parameters "
                                     f"(log-likelihood {loglik}); check the input counts and settings")
        secs = time.perf_counter() - t_it
        rel = float("nan") if prev is None else abs(loglik - prev) / max(abs(prev), 1e-300)
        result.loglik_history.append(loglik)
        result.iter_seconds.append(secs)
        result.n_iter = it
        log.info("%s EM iteration %d: log-likelihood %.6e, relative change %.3e, %.2fs",
                 label, it, loglik, rel, secs)
        if prev is not None and rel < tol:
            result.converged = True
            break
        prev = loglik
    if not result.converged:
        log.warning("%s: EM stopped at max_iter=%d before the relative change fell below tol=%g",
                    label, max_iter, tol)
    result.log_prior, result.log_theta = log_prior, log_theta
    return result


def cache_blocks(blocks: RDD, level: StorageLevel = StorageLevel.MEMORY_AND_DISK) -> RDD:
    """Persist the packed blocks (they are read once per EM iteration)."""
    return blocks.persist(level)
