"""The EM loop on Spark: one distributed pass per iteration, the M-step on the driver.

Execution shape (DESIGN.md):

* the documents are packed once into CSR blocks and cached
  (:mod:`pcem_spark.engine.blocks`, via :mod:`pcem_spark.engine.arrow_io`);
* the score matrix (and a baseline's structure) is broadcast once per fit;
* each iteration runs one pass of :func:`pcem_spark.engine.sums.sufficient_stats`:
  the parameters are broadcast sparse, the E-step of
  :mod:`pcem_spark.core.estep` runs per block and the per-path sums come back
  to the driver;
* the driver builds the next sparse parameters (Eqs. 6-7) in
  ``O(nnz + M)``, tracks the log-likelihood (Eq. 8), tests convergence and
  unpersists the old broadcast.

What a fit does is set by one :class:`EMSettings`. Spark only moves blocks,
broadcasts and sums; the math is in :mod:`pcem_spark.core`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
from pyspark import RDD
from pyspark.sql import DataFrame

from pcem_spark.core.convergence import not_converged_advice
from pcem_spark.core.parameters import (
    DEFAULT_SMOOTHING_GRID,
    PathParameters,
    choose_smoothing,
    sparse_log_parameters,
    sparse_log_prior_density,
)
from pcem_spark.core.structure import Structure
from pcem_spark.engine.em_checkpoint import EMState, active_hook
from pcem_spark.engine.frame_sums import frame_sufficient_stats
from pcem_spark.engine.sums import PassOptions, TermCounts, local_sufficient_stats, sufficient_stats
from pcem_spark.errors import InputError

__all__ = ["EM_MODES", "em_mode", "EMSettings", "FitResult", "fit"]

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class EMSettings:
    """What one :func:`fit` does: the method's EM mode, the smoothing, the stopping rule, the truncation."""

    em: Union[bool, str] = True
    """False / "off": naive Bayes; True / "all": EM over all documents; "labeled": over the labelled ones
    only (NBMC). See :data:`EM_MODES`."""
    smoothing: Union[float, str] = 1.0
    """The word pseudo-count, or "auto": chosen from ``smoothing_grid`` by the labelled counts' evidence."""
    max_iter: int = 50
    """At most this many EM iterations (0 with ``init_params``: return them)."""
    tol: float = 1e-5
    """Converged when the relative change of the log-likelihood (Eq. 8) falls below this."""
    label: str = "PCEM"
    """The method's name in log messages and errors."""
    posterior_floor: float = 0.0
    """Unlabelled posteriors below this are dropped (0 = exact E-step)."""
    dtype: str = "float64"
    """dtype of the broadcast parameters and the per-path sums of the EM passes ("float64" or "float32")."""
    seed: int = 0
    """Seed of the random initial component split (structures with ``restrict_labeled``, e.g. NBMC)."""
    unlabeled_weight: float = 1.0
    """EM-lambda in [0, 1]: the unlabelled documents' share of the M-step (0 = naive Bayes)."""
    prior_smoothing: Optional[float] = None
    """The path prior's pseudo-count (None: = ``smoothing``, or Laplace's 1 when ``smoothing`` is "auto")."""
    smoothing_grid: Sequence[float] = DEFAULT_SMOOTHING_GRID
    capped: bool = False
    """``max_iter`` is a deliberate cap (the cross-validation's short fits): not converging is expected there,
    and said at debug level only."""
    """The candidates of ``smoothing="auto"``."""
    doc_length: float = 0.0
    """> 0: documents longer than this many tokens are scaled down to it (0 = raw counts)."""
    top_k: int = 0
    """Keep at most this many paths per unlabelled posterior (0 = all)."""


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


@dataclass
class _FitRun:
    """What stays fixed during one :func:`fit`: the data, the per-fit broadcast and the settings."""

    blocks: Union[RDD, DataFrame, Sequence[Any]]  # cached blocks (RDD or packed DataFrame), or a local list
    static_bc: Any  # broadcast of (score_matrix, structure); None for a local fit or a DataFrame of blocks
    score_matrix: np.ndarray
    vocab_size: int
    settings: EMSettings
    structure: Optional[Structure]
    stats: Optional[List[dict]]
    t0: float

    @property
    def groups(self) -> Optional[np.ndarray]:
        return None if self.structure is None else self.structure.groups

    def run_pass(self, params, options: PassOptions, pass_stats: dict, n_terms: Optional[TermCounts] = None):
        """One distributed pass over the cached blocks (:func:`sufficient_stats`), or a local one."""
        args = (self.blocks, params, self.score_matrix, self.vocab_size, options)
        if isinstance(self.blocks, DataFrame):  # the DataFrame-only pass (Spark Connect)
            if n_terms is not None and pass_stats is not None:
                pass_stats["term_counts"] = n_terms
            n_nodes = self.score_matrix.shape[1]
            return frame_sufficient_stats(
                self.blocks,
                params,
                self.score_matrix,
                self.vocab_size,
                n_nodes,
                options,
                structure=self.structure,
                stats=pass_stats,
            )
        if self.static_bc is None:
            return local_sufficient_stats(*args, structure=self.structure, stats=pass_stats)
        return sufficient_stats(
            *args, structure=self.structure, stats=pass_stats, n_terms=n_terms, static_bc=self.static_bc
        )


def fit(
    blocks: Union[RDD, Sequence[Any]],
    score_matrix: np.ndarray,
    vocab_size: int,
    settings: EMSettings = EMSettings(),
    *,
    structure: Optional[Structure] = None,
    init_params: Optional[PathParameters] = None,
    stats: Optional[List[dict]] = None,
) -> FitResult:
    """PCNB (``em=False``) or PCEM (Algorithm 1) on cached blocks -- or a baseline.

    ``score_matrix`` (M, K) turns node scores into path scores (Eq. 2): the
    path-node matrix for PCNB/PCEM, the leaf indicator for flat NB/EM.
    Convergence: relative change of the log-likelihood (Eq. 8) below
    ``settings.tol``, or ``settings.max_iter`` EM iterations.

    ``settings.em`` (see :data:`EM_MODES`): False / "off" naive Bayes, True /
    "all" EM over all documents, "labeled" iterations over the labelled
    documents only (NBMC, whose labelled documents' components are latent,
    started from a split drawn with ``settings.seed``). Baselines
    (:mod:`pcem_spark.core.methods`) pass their ``structure``.

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
    mode = em_mode(settings.em)
    if isinstance(blocks, DataFrame):  # packed blocks as a DataFrame: every pass on the DataFrame API alone
        return _fit(_FitRun(blocks, None, score_matrix, vocab_size, settings, structure, stats, t0), mode, init_params)
    if not isinstance(blocks, RDD):  # a list of Blocks: every pass runs in this process
        return _fit(
            _FitRun(list(blocks), None, score_matrix, vocab_size, settings, structure, stats, t0), mode, init_params
        )
    # The score matrix and the method's structure do not change between passes: broadcast once.
    static_bc = blocks.context.broadcast((score_matrix, structure))
    try:
        run = _FitRun(blocks, static_bc, score_matrix, vocab_size, settings, structure, stats, t0)
        return _fit(run, mode, init_params)
    finally:
        static_bc.unpersist()


def _check_batch(run: _FitRun, init_params: Optional[PathParameters], n_lab: int) -> None:
    """Refuse a warm start of the wrong shape, and a batch without labelled documents that needs some."""
    label, n_paths = run.settings.label, run.score_matrix.shape[0]
    if init_params is not None and init_params.shape != (n_paths, run.vocab_size):
        raise ValueError(
            f"{label}: init_params are {init_params.shape[0]} x {init_params.shape[1]}, the fit needs "
            f"{n_paths} components x {run.vocab_size} terms"
        )
    if n_lab == 0 and init_params is not None and run.settings.smoothing == "auto":
        raise InputError(
            f'{label}: smoothing "auto" is chosen from the labelled counts and this batch has no '
            "labelled document; give a number (e.g. the previous model's)"
        )
    if n_lab == 0 and init_params is None:
        raise InputError(
            f"{label}: no labelled document in the training data; naive Bayes needs at least one labelled document"
        )


def _auto_smoothing(run: _FitRun, wc, init_stats: dict):
    """``smoothing="auto"``: ``(smoothing, evidence per grid value)`` from the labelled counts ``wc``."""
    s = run.settings
    counted, raw = init_stats.get("labeled_tokens", 0.0), init_stats.get("labeled_raw_tokens", 0.0)
    scale = raw / counted if s.doc_length > 0 and counted > 0 else 1.0
    smoothing, ev = choose_smoothing(wc * scale if scale != 1.0 else wc, s.smoothing_grid)
    evidence = {f"{a:g}": float(e) for a, e in zip(sorted(s.smoothing_grid), ev)}
    log.info(
        "%s: smoothing %g chosen by Dirichlet-multinomial evidence of the labelled counts (grid %s)",
        s.label,
        smoothing,
        ", ".join(f"{a}: {e:.4g}" for a, e in evidence.items()),
    )
    return smoothing, evidence


def _fit(run: _FitRun, mode: str, init_params: Optional[PathParameters] = None) -> FitResult:
    """The body of :func:`fit` once the per-fit broadcast exists: the naive Bayes pass, then EM."""
    s = run.settings
    label = s.label
    use_unlabeled = mode == "all"
    init_seed = s.seed if run.structure is not None and run.structure.restrict_labeled else None
    init_stats: Dict[str, float] = {}
    wc, totals, _, n_lab, n_unlab = run.run_pass(
        None, PassOptions(use_unlabeled=False, init_seed=init_seed, doc_length=s.doc_length), init_stats
    )
    if run.stats is not None:
        run.stats.append(dict(init_stats))
    _check_batch(run, init_params, n_lab)
    smoothing, prior_smoothing, evidence = s.smoothing, s.prior_smoothing, None
    if smoothing == "auto":
        smoothing, evidence = _auto_smoothing(run, wc, init_stats)
        if prior_smoothing is None:
            prior_smoothing = 1.0
    smoothing = float(smoothing)
    # Users set lambda in [0, 1] (ModelSettings); a sampled cross-validation fit scales it up so that
    # its unlabelled sample weighs what all the unlabelled documents weigh (pcem_spark.model.sampled_cv).
    if not (np.isfinite(s.unlabeled_weight) and s.unlabeled_weight >= 0.0):
        raise InputError(f"unlabeled_weight must be >= 0, got {s.unlabeled_weight}")
    n_terms = (
        TermCounts(int(init_stats["n_terms"]), int(init_stats["n_terms_labeled"]), int(init_stats["labeled_entries"]))
        if init_stats.get("n_terms")
        else None
    )
    # The parameters live in result.params only: the first EM iteration lets them go (see _iterate).
    result = FitResult(
        sparse_log_parameters(wc, totals, smoothing, run.groups, prior_smoothing),
        n_labeled=n_lab,
        n_unlabeled=n_unlab,
        smoothing=smoothing,
        smoothing_evidence=evidence,
        path_mass_labeled=np.asarray(totals, dtype=np.float64),
        path_mass=np.asarray(totals, dtype=np.float64),
    )
    del wc
    log.info(
        "%s: naive Bayes initialisation on %d labelled documents (%d unlabelled) in %.2fs; "
        "%d non-zero word parameters of %d paths x %d terms",
        label,
        n_lab,
        n_unlab,
        time.perf_counter() - run.t0,
        result.params.log_ratio.nnz,
        result.params.shape[0],
        run.vocab_size,
    )
    if use_unlabeled and s.unlabeled_weight == 0.0 and run.structure is None:
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
        result.params = init_params  # the first E-step's parameters (the result itself if max_iter is 0)
    if mode == "off":
        result.converged = True
        return result
    if n_unlab == 0 and use_unlabeled:
        log.warning("%s: no unlabelled documents, EM reduces to naive Bayes", label)
    hook = active_hook()
    resumed = hook.resume_state() if hook is not None else None
    if resumed is not None:
        _resume_from(result, resumed, label)
        if resumed.finished:
            return result
    return _iterate(run, result, prior_smoothing, use_unlabeled, n_terms, hook)


def _resume_from(result: FitResult, state: EMState, label: str) -> None:
    """``result`` as it was after ``state.iteration`` EM iterations of an earlier run (a checkpoint)."""
    if state.params.shape != result.params.shape:
        raise ValueError(
            f"{label}: the checkpoint's parameters are {state.params.shape}, this fit's are {result.params.shape}"
        )
    result.params = state.params
    result.n_iter = state.iteration
    result.loglik_history = list(state.loglik_history)
    result.iter_seconds = list(state.iter_seconds)
    result.converged = state.converged
    result.loglik_decreases = state.loglik_decreases
    if state.path_mass is not None:
        result.path_mass = np.asarray(state.path_mass, dtype=np.float64)
    log.info(
        "%s: resumed from the checkpoint after EM iteration %d%s",
        label,
        state.iteration,
        " (EM had finished: no iteration to run)" if state.finished else "",
    )


def _iterate(
    run: _FitRun,
    result: FitResult,
    prior_smoothing: Optional[float],
    use_unlabeled: bool,
    n_terms: Optional[TermCounts],
    hook=None,
) -> FitResult:
    """The EM iterations (Algorithm 1) from ``result.params``, recorded in ``result``.

    Only ``result`` holds the starting parameters, so they are freed as soon
    as the first pass has summed (before the next parameters are built).
    ``result.n_iter`` iterations are already done (a resumed run: their
    log-likelihoods are in ``result.loglik_history``); ``hook``
    (:mod:`pcem_spark.engine.em_checkpoint`) sees the state after each one.
    """
    s = run.settings
    params = result.params
    label, smoothing = s.label, result.smoothing
    options = PassOptions(
        use_unlabeled=use_unlabeled,
        posterior_floor=s.posterior_floor,
        dtype=s.dtype,
        unlabeled_weight=s.unlabeled_weight,
        doc_length=s.doc_length,
        top_k=s.top_k,
    )
    prev = result.loglik_history[-1] if result.loglik_history else None
    for it in range(result.n_iter + 1, s.max_iter + 1):
        t_it = time.perf_counter()
        pass_stats: Dict[str, float] = {}
        wc, totals, data_ll, _, _ = run.run_pass(params, options, pass_stats, n_terms)
        loglik = data_ll + sparse_log_prior_density(params, smoothing, prior_smoothing)
        # Let the old parameters (the naive-Bayes ones on the first pass) go before the new ones exist.
        params = result.params = None
        params = sparse_log_parameters(wc, totals, smoothing, run.groups, prior_smoothing)
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
        if run.stats is not None:
            pass_stats["nnz_parameters"] = int(params.log_ratio.nnz)
            run.stats.append(pass_stats)
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
                if s.posterior_floor > 0 or 0 < s.top_k < run.score_matrix.shape[0]
                else "; exact EM never does this: check the input for NaN or negative counts",
            )
        if prev is not None and rel < s.tol:
            result.converged = True
        if hook is not None:
            finished = result.converged or it == s.max_iter
            hook.iteration_done(_state(result, params, finished))
        if result.converged:
            break
        prev = loglik
    if not result.converged and s.tol > 0:  # tol 0 asks for exactly max_iter iterations
        truncated = s.posterior_floor > 0 or 0 < s.top_k < run.score_matrix.shape[0]
        (log.debug if s.capped else log.warning)(
            "%s: EM stopped at max_iter=%d before the relative change fell below tol=%g: %s",
            label,
            s.max_iter,
            s.tol,
            not_converged_advice(result.loglik_history, s.tol, s.max_iter, truncated),
        )
    result.params = params
    return result


def _state(result: FitResult, params, finished: bool) -> EMState:
    """The state after ``result.n_iter`` iterations whose M-step gave ``params``."""
    return EMState(
        result.n_iter,
        params,
        list(result.loglik_history),
        list(result.iter_seconds),
        result.converged,
        finished,
        result.loglik_decreases,
        result.path_mass,
    )
