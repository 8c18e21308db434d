"""The EM loop on Spark: broadcast sparse parameters, sum per executor, M-step on the driver.

Execution shape (DESIGN.md):

* the documents are packed once into CSR blocks and cached
  (:mod:`pcem_spark.blocks`, via :mod:`pcem_spark.arrow_io`);
* each pass broadcasts the parameters as :class:`pcem_spark.core.ScoringTables`
  -- sized by the non-zero counts, not by paths x vocabulary -- plus the score
  matrix once per fit;
* ``mapPartitions`` runs the E-step of :mod:`pcem_spark.pathnb` per block;
  the cached partitions are coalesced to one task per core, so each task
  combines the sums of all the blocks it reads before anything is shuffled
  (the shuffle grows with cores, not with partitions);
* the per-path sums travel as row chunks (sparse when the posteriors are
  truncated or M x V is large), are summed by ``reduceByKey`` and collected
  after a check against ``spark.driver.maxResultSize``;
* the driver builds the next sparse parameters (Eqs. 6-7) in
  ``O(nnz + M)``, tracks the log-likelihood (Eq. 8), tests convergence and
  unpersists the old broadcast.

Spark only moves blocks, broadcasts and sums; the math is in ``pathnb``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, NamedTuple, Optional, Union

import numpy as np
import scipy.sparse as sp
from pyspark import RDD

from pcem_spark.core.estep import e_step, length_normalize, scoring_tables
from pcem_spark.core.parameters import (
    DEFAULT_SMOOTHING_GRID,
    PathParameters,
    choose_smoothing,
    sparse_log_parameters,
    sparse_log_prior_density,
)
from pcem_spark.core.structure import Structure, path_scores
from pcem_spark.engine.blocks import Block
from pcem_spark.engine.limits import check_result_size
from pcem_spark.errors import InputError

log = logging.getLogger(__name__)

# Per-path sums travel sparse when M x V has at least this many cells (or the
# posteriors are truncated). Measured: with 20 paths x 20k words dense sums are
# ~30% faster per iteration; with 1,000 x 2^18 only sparse sums fit in memory.
SPARSE_SUMS_MIN_CELLS = 1 << 22

# The E-step of a block runs on row slices of at most this many (document, path)
# cells: the (n, M) scores are dense, so 4,096 documents x 10,000 paths would be
# 330 MB per slice; 2^22 cells are 32 MB.
E_STEP_MAX_CELLS = 1 << 22

# Coalesce the cached partitions to one task per core before each pass, so every
# task combines the sums of all the blocks it reads (see sufficient_stats).
COALESCE_TO_CORES = True

# Key of the scalar record next to the row-chunk keys 0..n_chunks-1.
_SCALARS = -1
# loglik, n labelled, n unlabelled, labelled tokens as counted, labelled tokens
# before doc_length, non-zeros of the term counts
_N_SCALARS = 6

# What the EM options mean for a method: "off" = naive Bayes (one pass),
# "labeled" = iterate over the labelled documents only (NBMC: latent
# components), "all" = EM over labelled and unlabelled documents.
EM_MODES = ("off", "labeled", "all")


def em_mode(em: Union[bool, str]) -> str:
    """Normalise ``em`` (True = "all", False = "off", or one of :data:`EM_MODES`)."""
    if em is True:
        return "all"
    if em is False:
        return "off"
    if em not in EM_MODES:
        raise ValueError(f"em must be True, False or one of {EM_MODES}, got {em!r}")
    return em


@dataclass
class FitResult:
    """A fitted model's parameters (sparse, :class:`pcem_spark.core.PathParameters`) and its run."""

    params: PathParameters
    n_iter: int = 0
    converged: bool = False
    loglik_history: List[float] = field(default_factory=list)
    iter_seconds: List[float] = field(default_factory=list)
    n_labeled: int = 0
    n_unlabeled: int = 0
    smoothing: float = 1.0  # the word pseudo-count used (chosen when "auto")
    smoothing_evidence: Optional[Dict[str, float]] = None  # grid value -> log evidence ("auto")
    prior_smoothing: Optional[float] = None  # the path prior's pseudo-count used (None: = smoothing)
    warm_start: bool = False  # the first E-step used init_params, not the naive Bayes ones
    loglik_decreases: int = 0  # iterations whose log-likelihood fell (truncated E-steps)
    # Per path / component (R,): the document mass of the labelled documents as the M-step counts it
    # (Eq. 2 weights), and of all documents in the last E-step (labelled + lambda x unlabelled
    # posteriors); the prior is computed from the latter. What `pcem inspect` reports per node.
    path_mass_labeled: Optional[np.ndarray] = None
    path_mass: Optional[np.ndarray] = None

    @property
    def log_prior(self) -> np.ndarray:
        return self.params.log_prior

    @property
    def log_theta(self) -> np.ndarray:
        """Dense (R, V) log theta -- O(R x V): small models, tests and inspection only."""
        return self.params.log_theta()


class PassSettings(NamedTuple):
    """What every partition of one pass needs besides the broadcast (small, pickled with the closure)."""

    n_paths: int
    vocab_size: int
    use_unlabeled: bool
    posterior_floor: float = 0.0
    top_k: int = 0
    init_seed: Optional[int] = None
    unlabeled_weight: float = 1.0
    doc_length: float = 0.0
    sparse_sums: bool = False
    n_chunks: int = 1
    dtype: str = "float64"


def _add(a, b):
    """Sum of two records: per-path row chunks (dense ndarray or sparse) or scalar vectors."""
    if sp.issparse(a) and sp.issparse(b):
        return (a + b).tocsr()
    if sp.issparse(a):
        a, b = b, a
    if sp.issparse(b):
        out = np.array(a, copy=True)
        coo = b.tocoo()
        out[coo.row, coo.col] += coo.data
        return out
    return a + b


class _SumAccumulator:
    """Per-path word sums of many blocks, dense or sparse.

    Sparse block sums are kept in a list and merged once they hold as many
    entries as the running total (amortised ``O(nnz log)``, never one
    re-sort of the total per block).
    """

    def __init__(self, n_paths: int, vocab_size: int, sparse_sums: bool, dtype):
        self.shape = (n_paths, vocab_size)
        self.sparse_sums = sparse_sums
        self.dtype = np.dtype(dtype)
        self.dense = None if sparse_sums else np.zeros(self.shape, dtype=self.dtype)
        self.total: Optional[sp.csr_matrix] = None
        self.pending: List[sp.csr_matrix] = []
        self.pending_nnz = 0

    def add(self, word_counts) -> None:
        if not self.sparse_sums:
            if sp.issparse(word_counts):
                coo = word_counts.tocoo()
                self.dense[coo.row, coo.col] += coo.data
            else:
                self.dense += word_counts
            return
        wc = sp.csr_matrix(word_counts)
        self.pending.append(wc)
        self.pending_nnz += wc.nnz
        if self.pending_nnz >= max(1 << 16, 0 if self.total is None else self.total.nnz):
            self._merge()

    def _merge(self) -> None:
        parts = ([] if self.total is None else [self.total]) + self.pending
        if parts:
            coo = sp.vstack([p.tocoo() for p in parts]).tocoo() if len(parts) > 1 else parts[0].tocoo()
            # Stack then fold rows back: row r of part p is row r of the sum.
            rows = coo.row % self.shape[0]
            self.total = sp.csr_matrix((coo.data, (rows, coo.col)), shape=self.shape)
            self.total.sum_duplicates()
        self.pending, self.pending_nnz = [], 0

    def result(self):
        if not self.sparse_sums:
            return self.dense
        self._merge()
        return self.total if self.total is not None else sp.csr_matrix(self.shape, dtype=self.dtype)


def _row_chunks(n_paths: int, n_chunks: int) -> np.ndarray:
    """Boundaries of ``n_chunks`` contiguous row ranges of the M paths."""
    return (np.arange(n_chunks + 1, dtype=np.int64) * n_paths) // n_chunks


def _pass_partition(index: int, blocks: Iterable[Block], bc, static_bc, cfg: PassSettings):
    from pcem_spark.util.faults import maybe_fail

    maybe_fail("em_pass")  # no-op unless a test sets PCEM_INJECT_FAULT
    tables = bc.value
    score_matrix, structure = static_bc.value
    dtype = np.dtype(cfg.dtype)
    sums = _SumAccumulator(cfg.n_paths, cfg.vocab_size, cfg.sparse_sums, dtype)
    totals = np.zeros(cfg.n_paths)
    scalars = np.zeros(_N_SCALARS)
    seen = False
    # Random initial split of multi-component classes: seeded per partition, so
    # a rerun on the same cached blocks gives the same model.
    rng = None if cfg.init_seed is None else np.random.default_rng([cfg.init_seed, index])
    rows_per_slice = max(1, E_STEP_MAX_CELLS // max(cfg.n_paths, 1))
    for blk in blocks:
        for lo in range(0, blk.X.shape[0], rows_per_slice):
            seen = True
            hi = lo + rows_per_slice
            X, labeled = blk.X[lo:hi], blk.labeled[lo:hi]
            fixed = path_scores(blk.node_scores[lo:hi], score_matrix)
            raw_tokens = float(X[labeled].sum()) if tables is None else 0.0
            n_terms = X.nnz
            if cfg.doc_length > 0:
                X = length_normalize(X, cfg.doc_length)
            if dtype != np.float64:
                X = X.astype(dtype)
            st = e_step(
                X,
                fixed,
                labeled,
                None,
                None,
                cfg.use_unlabeled,
                cfg.posterior_floor,
                1.0 if cfg.sparse_sums else 0.0,
                structure,
                rng,
                cfg.unlabeled_weight,
                cfg.top_k,
                tables,
            )
            sums.add(st.word_counts)
            totals += st.path_totals
            n_lab = int(labeled.sum())
            counted = float(X[labeled].sum()) if tables is None else 0.0
            scalars += (st.loglik, n_lab, len(labeled) - n_lab, counted, raw_tokens, n_terms)
    if not seen:
        return
    word_counts = sums.result()
    del sums
    bounds = _row_chunks(cfg.n_paths, cfg.n_chunks)
    for c in range(cfg.n_chunks):
        lo, hi = bounds[c], bounds[c + 1]  # never empty: n_chunks <= n_paths
        # Each chunk carries its paths' word sums with the path totals as column V.
        if sp.issparse(word_counts):
            chunk = sp.hstack([word_counts[lo:hi], sp.csr_matrix(totals[lo:hi, None].astype(dtype))]).tocsr()
        else:
            chunk = np.hstack([word_counts[lo:hi], totals[lo:hi, None].astype(dtype)])
        yield c, chunk
    yield _SCALARS, scalars


def _record_bytes(record) -> int:
    _, value = record
    if sp.issparse(value):
        return int(value.data.nbytes + value.indices.nbytes + value.indptr.nbytes)
    return int(np.asarray(value).nbytes)


def sufficient_stats(
    blocks: RDD,
    params: Optional[PathParameters],
    score_matrix: np.ndarray,
    vocab_size: int,
    use_unlabeled: bool,
    posterior_floor: float = 0.0,
    dtype: str = "float64",
    structure: Optional[Structure] = None,
    init_seed: Optional[int] = None,
    unlabeled_weight: float = 1.0,
    doc_length: float = 0.0,
    top_k: int = 0,
    stats: Optional[dict] = None,
    n_terms: Optional[int] = None,
    static_bc=None,
):
    """One distributed pass: returns ``(word_counts (M, V), path_totals (M,), loglik, n_lab, n_unlab)``.

    ``word_counts`` is a CSR matrix when the sums travelled sparse (truncated
    posteriors or M x V >= :data:`SPARSE_SUMS_MIN_CELLS`), an ndarray otherwise.
    With ``params=None`` only labelled rows count (the NB initialisation) and
    no log-likelihood is computed. ``structure`` / ``init_seed``: the
    baselines' components (see :mod:`pcem_spark.methods`); ``M`` is then the
    number of components. ``stats`` (a dict) receives the pass's token and
    non-zero counts and its broadcast / collected sizes in bytes;
    ``n_terms`` (non-zeros of all term counts, from an earlier pass) bounds
    the collected size before the pass runs. ``static_bc``: a broadcast of
    ``(score_matrix, structure)`` made once per fit (one is made for this pass
    if None) -- only the parameters change between passes.
    """
    import pickle

    sc = blocks.context
    n_paths = score_matrix.shape[0]
    itemsize = np.dtype(dtype).itemsize
    # Small models keep dense sums even when truncated (zeroed paths cost nothing in a dense
    # product; scipy's sparse x sparse one is ~10x dearer per multiply-add).
    sparse_sums = n_paths * vocab_size >= SPARSE_SUMS_MIN_CELLS
    # What comes back in one collect: dense (M x (V+1)) cells, or at most every
    # (term occurrence, path) pair a document can give weight to.
    dense_bytes = n_paths * (vocab_size + 1) * itemsize
    what = f"the per-path sums of {n_paths:,} paths x {vocab_size:,} terms ({dtype})"
    if not sparse_sums:
        check_result_size(sc, dense_bytes, what)  # dense sums: the bound is exact, refuse before any work
    n_tasks = max(1, sc.defaultParallelism)
    n_reducers = max(1, min(n_paths, n_tasks))
    cfg = PassSettings(
        n_paths,
        vocab_size,
        use_unlabeled,
        posterior_floor,
        top_k,
        init_seed,
        unlabeled_weight,
        doc_length,
        sparse_sums,
        max(1, min(n_paths, 4 * n_reducers)),
        dtype,
    )
    bound = dense_bytes
    if sparse_sums and n_terms is not None:
        k_unlab = top_k if 0 < top_k < n_paths else n_paths
        nonzero = sp.csr_matrix(score_matrix) != 0
        k_lab = min(
            n_paths,
            int(np.asarray(nonzero.sum(axis=0)).max(initial=1)) * int(np.asarray(nonzero.sum(axis=1)).max(initial=1)),
        )
        bound = min(dense_bytes * (itemsize + 4) / itemsize, (n_terms * max(k_unlab, k_lab) + n_paths) * (itemsize + 4))
    tables = None if params is None else scoring_tables(params, dtype)
    own_static = static_bc is None
    if own_static:
        static_bc = sc.broadcast((score_matrix, structure))
    bc = sc.broadcast(tables)
    if stats is not None:
        stats["broadcast_bytes"] = len(pickle.dumps(tables, protocol=pickle.HIGHEST_PROTOCOL))
    del tables
    try:
        # One task per core: each combines the sums of every cached partition it
        # reads (coalesce keeps the cached blocks' locations), so what is
        # shuffled grows with executors x cores, not with partitions.
        src = blocks.coalesce(n_tasks) if COALESCE_TO_CORES and blocks.getNumPartitions() > n_tasks else blocks
        reduced = src.mapPartitionsWithIndex(lambda i, it: _pass_partition(i, it, bc, static_bc, cfg)).reduceByKey(
            _add, numPartitions=n_reducers
        )
        if bound * 1.1 + (1 << 20) > _limit_or_inf(sc):
            # The bound says it might not fit: size the summed records exactly first
            # (the shuffle output is reused; only the small reduce side runs twice).
            reduced = reduced.persist()
            exact = reduced.map(_record_bytes).sum()
            check_result_size(sc, exact, what)
            bound = exact
        records = reduced.collect()  # a few summed row chunks: O(nnz(sums) + M) on the driver, never documents
        if stats is not None:
            stats["collected_bytes"] = int(sum(_record_bytes(r) for r in records))
        reduced.unpersist()
    finally:
        bc.unpersist()
        if own_static:
            static_bc.unpersist()
    return _assemble(records, n_paths, vocab_size, sparse_sums, stats)


def _limit_or_inf(sc) -> float:
    from pcem_spark.engine.limits import max_result_size

    limit = max_result_size(sc)
    return float("inf") if limit <= 0 else float(limit)


def _assemble(records, n_paths: int, vocab_size: int, sparse_sums: bool, stats: Optional[dict]):
    """Per-path word sums (CSR or dense float64), totals and scalars from the collected chunk records."""
    scalars = np.zeros(_N_SCALARS)
    chunks = {}
    while records:
        key, value = records.pop()  # each record is freed once placed
        if key == _SCALARS:
            scalars = value
        else:
            chunks[key] = value
    if sparse_sums:
        mats = []
        for c in sorted(chunks):
            mats.append((c, sp.csr_matrix(chunks.pop(c), dtype=np.float64)))
        full = _stack_chunks(mats, n_paths, vocab_size + 1, sparse=True)
        totals = full[:, vocab_size].toarray().ravel()
        word_counts = full[:, :vocab_size].tocsr()
    else:
        mats = [(c, np.asarray(chunks.pop(c), dtype=np.float64)) for c in sorted(chunks)]
        full = _stack_chunks(mats, n_paths, vocab_size + 1, sparse=False)
        totals = full[:, vocab_size].copy()
        word_counts = full[:, :vocab_size]
    if stats is not None:
        stats.update(labeled_tokens=float(scalars[3]), labeled_raw_tokens=float(scalars[4]), n_terms=int(scalars[5]))
    return word_counts, totals, float(scalars[0]), int(scalars[1]), int(scalars[2])


def _stack_chunks(mats, n_paths: int, width: int, sparse: bool):
    """Stack the row chunks (key order = row order, every chunk present) into (M, width)."""
    if not mats:  # no document at all
        return sp.csr_matrix((n_paths, width)) if sparse else np.zeros((n_paths, width))
    full = sp.vstack([m for _, m in mats]).tocsr() if sparse else np.vstack([m for _, m in mats])
    if full.shape != (n_paths, width):
        raise RuntimeError(f"per-path sums came back as {full.shape}, expected {(n_paths, width)}")
    return full


def fit(
    blocks: RDD,
    score_matrix: np.ndarray,
    vocab_size: int,
    em: Union[bool, str] = True,
    smoothing=1.0,
    max_iter: int = 50,
    tol: float = 1e-5,
    label: str = "PCEM",
    posterior_floor: float = 0.0,
    dtype: str = "float64",
    structure: Optional[Structure] = None,
    seed: int = 0,
    unlabeled_weight: float = 1.0,
    prior_smoothing: Optional[float] = None,
    smoothing_grid=DEFAULT_SMOOTHING_GRID,
    doc_length: float = 0.0,
    top_k: int = 0,
    stats: Optional[List[dict]] = None,
    init_params: Optional[PathParameters] = None,
) -> FitResult:
    """PCNB (``em=False``) or PCEM (Algorithm 1) on cached blocks -- or a baseline.

    ``score_matrix`` (M, K) turns node scores into path scores (Eq. 2): the
    path-node matrix for PCNB/PCEM, the leaf indicator for flat NB/EM.
    Convergence: relative change of the log-likelihood (Eq. 8) below ``tol``,
    or ``max_iter`` EM iterations.

    ``em`` (see :data:`EM_MODES`): False / "off" naive Bayes, True / "all" EM
    over all documents, "labeled" iterations over the labelled documents only
    (NBMC, whose labelled documents' components are latent, started from a
    split drawn with ``seed``). Baselines (:mod:`pcem_spark.methods`) pass
    their ``structure``.

    ``smoothing="auto"``: the word pseudo-count of ``smoothing_grid`` with the
    largest Dirichlet-multinomial evidence of the labelled counts
    (:func:`pcem_spark.core.choose_smoothing`), fixed for all EM
    iterations; the path prior then keeps Laplace's 1 unless
    ``prior_smoothing`` says otherwise. ``unlabeled_weight`` (EM-lambda)
    scales the unlabelled documents' share of the M-step; 0 returns the naive
    Bayes parameters without iterating. ``doc_length`` > 0 scales longer
    documents down to that many tokens (:func:`pcem_spark.core.length_normalize`);
    the "auto" smoothing is then chosen on the labelled counts scaled back to
    their raw token total, so the evidence sees counts on the scale it models.
    ``posterior_floor`` / ``top_k`` truncate the unlabelled posteriors
    (:func:`pcem_spark.core.truncate_posteriors`); a fall of the
    log-likelihood is then possible and logged as a warning.
    ``stats`` (a list) receives one dict of sizes per pass.

    ``init_params`` (R, V) -- a warm start, e.g. a previous model's parameters
    on this vocabulary (:func:`pcem_spark.core.warm_start_parameters`): the
    naive Bayes pass still runs (it counts the documents and the labelled
    sums, and its parameters are what ``smoothing="auto"`` is chosen from),
    but the first E-step uses ``init_params``. The labelled documents enter
    every M-step as usual; the previous data do not. With ``init_params`` a
    batch without labelled documents is allowed (EM over the unlabelled
    documents from the given parameters) unless no EM runs (naive Bayes,
    ``unlabeled_weight`` 0) or ``smoothing`` is "auto". ``max_iter=0``
    returns ``init_params`` themselves.
    """
    t0 = time.perf_counter()
    mode = em_mode(em)
    init_seed = seed if structure is not None and structure.restrict_labeled else None
    init_stats: Dict[str, float] = {}
    # The score matrix and the method's structure do not change between passes: broadcast once.
    static_bc = blocks.context.broadcast((score_matrix, structure))
    try:
        return _fit(
            blocks,
            static_bc,
            score_matrix,
            vocab_size,
            mode,
            smoothing,
            max_iter,
            tol,
            label,
            posterior_floor,
            dtype,
            structure,
            init_seed,
            unlabeled_weight,
            prior_smoothing,
            smoothing_grid,
            doc_length,
            top_k,
            stats,
            t0,
            init_stats,
            init_params,
        )
    finally:
        static_bc.unpersist()


def _fit(
    blocks,
    static_bc,
    score_matrix,
    vocab_size,
    mode,
    smoothing,
    max_iter,
    tol,
    label,
    posterior_floor,
    dtype,
    structure,
    init_seed,
    unlabeled_weight,
    prior_smoothing,
    smoothing_grid,
    doc_length,
    top_k,
    stats,
    t0,
    init_stats,
    init_params=None,
) -> FitResult:
    """The body of :func:`fit` once the per-fit broadcast exists."""
    use_unlabeled = mode == "all"
    groups = None if structure is None else structure.groups
    wc, totals, _, n_lab, n_unlab = sufficient_stats(
        blocks,
        None,
        score_matrix,
        vocab_size,
        False,
        structure=structure,
        init_seed=init_seed,
        doc_length=doc_length,
        stats=init_stats,
        static_bc=static_bc,
    )
    if stats is not None:
        stats.append(dict(init_stats))
    if init_params is not None and init_params.shape != (score_matrix.shape[0], vocab_size):
        raise ValueError(
            f"{label}: init_params are {init_params.shape[0]} x {init_params.shape[1]}, the fit needs "
            f"{score_matrix.shape[0]} components x {vocab_size} terms"
        )
    if n_lab == 0 and init_params is not None and smoothing == "auto":
        raise InputError(
            f'{label}: smoothing "auto" is chosen from the labelled counts and this batch has no '
            "labelled document; give a number (e.g. the previous model's)"
        )
    if n_lab == 0 and init_params is None:
        raise InputError(
            f"{label}: no labelled document in the training data; naive Bayes needs at least one labelled document"
        )
    evidence = None
    if smoothing == "auto":
        counted, raw = init_stats.get("labeled_tokens", 0.0), init_stats.get("labeled_raw_tokens", 0.0)
        scale = raw / counted if doc_length > 0 and counted > 0 else 1.0
        smoothing, ev = choose_smoothing(wc * scale if scale != 1.0 else wc, smoothing_grid)
        evidence = {f"{a:g}": float(e) for a, e in zip(sorted(smoothing_grid), ev)}
        if prior_smoothing is None:
            prior_smoothing = 1.0
        log.info(
            "%s: smoothing %g chosen by Dirichlet-multinomial evidence of the labelled counts (grid %s)",
            label,
            smoothing,
            ", ".join(f"{a}: {e:.4g}" for a, e in evidence.items()),
        )
    smoothing = float(smoothing)
    if not 0.0 <= unlabeled_weight <= 1.0:
        raise InputError(f"unlabeled_weight must be in [0, 1], got {unlabeled_weight}")
    n_terms = int(init_stats.get("n_terms", 0)) or None
    params = sparse_log_parameters(wc, totals, smoothing, groups, prior_smoothing)
    del wc
    result = FitResult(
        params,
        n_labeled=n_lab,
        n_unlabeled=n_unlab,
        smoothing=smoothing,
        smoothing_evidence=evidence,
        path_mass_labeled=np.asarray(totals, dtype=np.float64),
        path_mass=np.asarray(totals, dtype=np.float64),
    )
    log.info(
        "%s: naive Bayes initialisation on %d labelled documents (%d unlabelled) in %.2fs; "
        "%d non-zero word parameters of %d paths x %d terms",
        label,
        n_lab,
        n_unlab,
        time.perf_counter() - t0,
        params.log_ratio.nnz,
        params.shape[0],
        vocab_size,
    )
    if use_unlabeled and unlabeled_weight == 0.0 and structure is None:
        mode = "off"  # EM-lambda with lambda = 0: the unlabelled documents never count, naive Bayes it is
    result.prior_smoothing = smoothing if prior_smoothing is None else float(prior_smoothing)
    if init_params is not None and mode == "off":
        if n_lab == 0:
            raise InputError(
                f"{label}: no labelled document and no EM iterations (naive Bayes"
                f"{', unlabeled_weight 0' if use_unlabeled else ''}): a warm start needs EM over "
                "the unlabelled documents"
            )
        log.warning("%s: naive Bayes, no EM iterations: the warm start parameters are not used", label)
    elif init_params is not None and n_lab == 0 and not use_unlabeled:
        raise InputError(f"{label}: no labelled document and EM over the labelled documents only: nothing to fit")
    elif init_params is not None:
        result.warm_start = True
        log.info(
            "%s: warm start: the first E-step uses the given parameters (%d non-zero word parameters), "
            "not the naive Bayes ones",
            label,
            init_params.log_ratio.nnz,
        )
        params = init_params
        if max_iter == 0:
            result.params = init_params
    if mode == "off":
        result.converged = True
        return result
    if n_unlab == 0 and use_unlabeled:
        log.warning("%s: no unlabelled documents, EM reduces to naive Bayes", label)
    prev = None
    for it in range(1, max_iter + 1):
        t_it = time.perf_counter()
        pass_stats: Dict[str, float] = {}
        wc, totals, data_ll, _, _ = sufficient_stats(
            blocks,
            params,
            score_matrix,
            vocab_size,
            use_unlabeled,
            posterior_floor,
            dtype,
            structure,
            unlabeled_weight=unlabeled_weight,
            doc_length=doc_length,
            top_k=top_k,
            stats=pass_stats,
            n_terms=n_terms,
            static_bc=static_bc,
        )
        loglik = data_ll + sparse_log_prior_density(params, smoothing, prior_smoothing)
        # Let the old parameters (the naive-Bayes ones on the first pass) go before the new ones exist.
        params = result.params = None
        params = sparse_log_parameters(wc, totals, smoothing, groups, prior_smoothing)
        del wc
        result.path_mass = np.asarray(totals, dtype=np.float64)
        if not (np.isfinite(loglik) and np.isfinite(params.log_prior).all()):
            raise FloatingPointError(
                f"{label}: EM iteration {it} produced non-finite parameters "
                f"(log-likelihood {loglik}); check the input counts and settings"
            )
        secs = time.perf_counter() - t_it
        rel = float("nan") if prev is None else abs(loglik - prev) / max(abs(prev), 1e-300)
        result.loglik_history.append(loglik)
        result.iter_seconds.append(secs)
        result.n_iter = it
        if stats is not None:
            pass_stats["nnz_parameters"] = int(params.log_ratio.nnz)
            stats.append(pass_stats)
        log.info(
            "%s EM iteration %d: log-likelihood %.6e, relative change %.3e, %.2fs, %d non-zero word parameters",
            label,
            it,
            loglik,
            rel,
            secs,
            params.log_ratio.nnz,
        )
        if prev is not None and loglik < prev - 1e-9 * abs(prev):
            result.loglik_decreases += 1
            log.warning(
                "%s EM iteration %d: the log-likelihood fell (%.6e -> %.6e)%s",
                label,
                it,
                prev,
                loglik,
                "; expected now and then with truncated posteriors (posterior_top_k / posterior_floor)"
                if posterior_floor > 0 or 0 < top_k < score_matrix.shape[0]
                else "; exact EM never does this: check the input for NaN or negative counts",
            )
        if prev is not None and rel < tol:
            result.converged = True
            break
        prev = loglik
    if not result.converged:
        log.warning("%s: EM stopped at max_iter=%d before the relative change fell below tol=%g", label, max_iter, tol)
    result.params = params
    return result
