"""TODO docstring (model)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import List

from pcem_spark.core.methods import EM_METHODS, GENERATIVE
from pcem_spark.errors import InputError

log = logging.getLogger(__name__)


METHODS = GENERATIVE


AUTO = "auto"


def _number_or_auto(name: str, value, low: float, high: float, low_open: bool = False):
    """Validate a setting that is a number in [low, high] (or (low, high]) or the string "auto"."""
    if isinstance(value, str):
        if value != AUTO:
            raise InputError(f'model.{name} must be a number or "auto", got {value!r}')
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f'model.{name} must be a number or "auto", got {value!r}')
    if (value <= low if low_open else value < low) or value > high:
        bound = f"> {low:g}" if high == float("inf") else f"in {'(' if low_open else '['}{low:g}, {high:g}]"
        raise InputError(f'model.{name} must be {bound} or "auto", got {value}')


@dataclass
class ModelSettings:
    method: str = "pcem"
    # Word pseudo-count: "auto" = Dirichlet-multinomial evidence of the labelled
    # counts over core.DEFAULT_SMOOTHING_GRID; a number = Laplace/Lidstone (the paper: 1).
    smoothing: object = AUTO
    # EM-lambda: weight of the unlabelled documents in the M-step (1 = the paper,
    # 0 = naive Bayes); "auto" = cross-validated on the labelled documents ([tune]).
    unlabeled_weight: object = AUTO
    # Share of a labelled document for the other paths through its ancestors
    # (1 = Eq. 2, 0 = flat); "auto" = cross-validated ([tune]). PCNB / PCEM only.
    path_weight: object = AUTO
    # Documents longer than this many tokens count as this long (0 = raw counts, the paper):
    # tempers naive Bayes' over-confident posteriors on long documents (core.length_normalize).
    doc_length: float = 100.0
    max_iter: int = 50
    tol: float = 1e-5  # relative change of the log-likelihood
    block_size: int = 4096  # documents per CSR block
    posterior_floor: float = 0.0  # posteriors below this count as 0 (0 = exact Eq. 5)
    # Keep each unlabelled document's k most probable paths in the E-step (0 = all, exact;
    # tdem / wdem, whose posteriors are per node or per depth, always run exact):
    # the per-path sums then stay sparse with thousands of paths (core.truncate_posteriors).
    # 5 measured on 20NG 1%, 5 seeds: +0.01 / +0.02 micro-F1 vs exact (3: -0.09 with the
    # paper's settings, 1: -0.4 to -1.0); docs/BENCHMARKS.md "Truncated posteriors".
    posterior_top_k: int = 5
    parameter_dtype: str = "float64"  # "float32" halves broadcast and per-path sums (large M x V)
    components: int = 2  # mixture components per leaf (nbmc / emmc only)
    seed: int = 0  # random initial split of those components (nbmc / emmc only)

    def validate(self) -> None:
        if self.method not in METHODS:
            raise InputError(f"model.method must be one of {METHODS}, got {self.method!r}")
        _number_or_auto("smoothing", self.smoothing, 0.0, float("inf"), low_open=True)
        _number_or_auto("unlabeled_weight", self.unlabeled_weight, 0.0, 1.0)
        _number_or_auto("path_weight", self.path_weight, 0.0, 1.0)
        if isinstance(self.doc_length, bool) or not isinstance(self.doc_length, (int, float)) or self.doc_length < 0:
            raise InputError(f"model.doc_length must be a number >= 0 (0 = raw counts), got {self.doc_length!r}")
        if self.max_iter < 0:
            raise InputError(f"model.max_iter must be >= 0, got {self.max_iter}")
        if self.tol < 0:
            raise InputError(f"model.tol must be >= 0, got {self.tol}")
        if self.parameter_dtype not in ("float64", "float32"):
            raise InputError(f"model.parameter_dtype must be 'float64' or 'float32', got {self.parameter_dtype!r}")
        if not 0 <= self.posterior_floor < 1:
            raise InputError(f"model.posterior_floor must be in [0, 1), got {self.posterior_floor}")
        if (
            isinstance(self.posterior_top_k, bool)
            or not isinstance(self.posterior_top_k, int)
            or self.posterior_top_k < 0
        ):
            raise InputError(
                f"model.posterior_top_k must be an integer >= 0 (0 = every path), got {self.posterior_top_k!r}"
            )
        if self.block_size < 1:
            raise InputError(f"model.block_size must be >= 1, got {self.block_size}")
        if self.components < 1:
            raise InputError(f"model.components must be >= 1, got {self.components}")
        if self.posterior_floor > 0 and self.method in PER_NODE_POSTERIOR_METHODS:
            # Their responsibilities are per-node / per-depth distributions, not one per document.
            raise InputError(
                f"model.posterior_floor must be 0 for {self.method} (it applies to methods with "
                "one posterior distribution per document)"
            )

    @property
    def effective_top_k(self) -> int:
        """``posterior_top_k`` where it applies; 0 (exact) for the per-node / per-depth methods."""
        return 0 if self.method in PER_NODE_POSTERIOR_METHODS else int(self.posterior_top_k)

    def auto_params(self) -> List[str]:
        """The settings left to cross-validation ("auto") that matter for this method."""
        out = []
        if self.unlabeled_weight == AUTO and self.method in EM_METHODS:
            out.append("unlabeled_weight")
        if self.path_weight == AUTO and self.method in ("pcnb", "pcem"):
            out.append("path_weight")
        return out

    def resolved(self, **values) -> "ModelSettings":
        """A copy with ``values`` set and every remaining cross-validated "auto" at the paper's value (1)."""
        out = replace(self, **values)
        for name in ("unlabeled_weight", "path_weight"):
            if getattr(out, name) == AUTO:
                setattr(out, name, 1.0)
        return out


# Methods whose E-step responsibilities are per-node / per-depth distributions.
PER_NODE_POSTERIOR_METHODS = ("tdem", "wdem")


# The paper as written: Laplace smoothing, lambda = gamma = 1, raw counts, the exact E-step of Algorithm 1.
PAPER_MODEL_SETTINGS = dict(smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, doc_length=0.0, posterior_top_k=0)


def _weight(value) -> float:
    """A path / unlabelled weight as a number ("auto" not yet resolved counts as the paper's 1)."""
    return 1.0 if value == AUTO else float(value)
