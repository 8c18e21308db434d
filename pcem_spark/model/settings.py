"""The model's settings: :class:`ModelSettings`, the ``"auto"`` values chosen from the data, the paper's values.

A settings object is validated once, when it is built from a config file, flags or
Params; everything below trusts it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Dict, List

from pcem_spark.core.methods import EM_METHODS, GENERATIVE
from pcem_spark.errors import InputError
from pcem_spark.util.constraints import Interval, Options, check_constraints

__all__ = [
    "METHODS",
    "AUTO",
    "CALIBRATIONS",
    "NAMES",
    "FAMILIES",
    "LINEAR_WEIGHTS",
    "ONE_COMPONENT_PER_PATH",
    "PER_NODE_POSTERIOR_METHODS",
    "PAPER_MODEL_SETTINGS",
    "ModelSettings",
]

log = logging.getLogger(__name__)


METHODS = GENERATIVE


AUTO = "auto"


# How prediction's probabilities are calibrated (ModelSettings.calibration).
CALIBRATIONS = (
    "temperature",
    "temperature+isotonic",
    "temperature+logistic",
    "temperature+logistic-depth",
    "none",
)
# Whether category names count as evidence (ModelSettings.names).
NAMES = ("auto", "on", "off")
# The model family (ModelSettings.family): the generative path model alone (PCNB / PCEM), pooled with a
# discriminative one (a softmax regression over paths on sublinear tf-idf, pcem_spark.core.logistic), or
# the discriminative one alone.
FAMILIES = ("generative", "combined", "discriminative", "vmf")
# The softmax regression's weights: "dense" (every path x term), "observed" (the (path, term) pairs seen in a
# labelled document, pcem_spark.core.logistic.observed_support), "auto" = dense while it fits
# (pcem_spark.model.linear_family.LINEAR_MAX_CELLS), observed for wider taxonomies.
LINEAR_WEIGHTS = ("auto", "dense", "observed")
# beta of a combined model when "auto" cannot be cross-validated (too few labelled documents): the generative
# posterior keeps a large share where the regression has little to learn from.
GENERATIVE_WEIGHT_FALLBACK = 0.3
# The scale of the document vectors when it is "auto" and not cross-validated (too few labelled documents):
# a unit-length vector then weighs as much as the unit-length tf-idf row beside it.
EMBEDDING_WEIGHT_FALLBACK = 1.0


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
    # Probabilities: "temperature" = Eq. 5's joint log-likelihoods divided by one temperature fitted
    # on out-of-fold predictions of the labelled documents (core.calibration; the paths never
    # change), then a monotone map of node marginals to precision, isotonic, logistic or logistic per
    # node depth, whichever predicts held-out out-of-fold nodes best ("temperature+<kind>" forces one);
    # "none" = the raw naive-Bayes posterior (over-confident).
    calibration: str = "temperature"
    # Category names as evidence (model.names): each path's node names (and --descriptions) as one more
    # labelled document of it; "auto" = decided from the labelled documents (pcem_spark.model.names).
    names: str = "auto"
    # ... each name document weighing this many average labelled documents while its path has at most one; at n,
    # the tokens of each average document beyond names_kept_tokens (a short text's length) fade as
    # 1 / n ** names_fade (0 = a fixed weight); pcem_spark.model.names.faded_name_weights.
    names_weight: float = 2.0
    names_fade: float = 1.0
    names_kept_tokens: float = 10.0
    # The model family (FAMILIES): "combined" scores a path by generative_weight * log P_gen(path | doc)
    # plus a softmax regression's path score, fitted on the labelled documents (core.logistic);
    # "vmf" adds a von Mises-Fisher mixture of the document vectors to the words' generative model
    # (model.vmf_family); "auto" = cross-validated over tune.families ([tune]), and over "vmf" too when the
    # documents have vectors.
    family: str = "auto"
    # The softmax regression's inverse L2 strength, scikit-learn's C: the penalty is 1 / (C * labelled docs).
    linear_c: float = 10.0
    # beta: the weight of the generative log posterior in the combined family's scores; "auto" =
    # cross-validated over tune.generative_weights (the fallback without folds: GENERATIVE_WEIGHT_FALLBACK).
    generative_weight: object = AUTO
    # Which of the regression's weights are free (LINEAR_WEIGHTS).
    linear_weights: str = "auto"
    # The scale of the document vectors (features.embedding) beside the regression's unit-length tf-idf rows
    # (core.logistic.regression_features); 0 = the words alone; "auto" = cross-validated over
    # tune.embedding_weights when the documents have vectors (EMBEDDING_WEIGHT_FALLBACK without folds).
    embedding_weight: object = AUTO

    # What each setting accepts (pcem_spark.util.constraints), checked in this order by validate().
    CONSTRAINTS: ClassVar[Dict[str, Any]] = {
        "method": Options(METHODS),
        "smoothing": [Interval(float, 0, None, closed="neither"), AUTO],
        "unlabeled_weight": [Interval(float, 0, 1), AUTO],
        "path_weight": [Interval(float, 0, 1), AUTO],
        "doc_length": Interval(float, 0, None, note="(0 = raw counts)"),
        "max_iter": Interval(int, 0, None),
        "tol": Interval(float, 0, None),
        "parameter_dtype": Options(("float64", "float32")),
        "posterior_floor": Interval(float, 0, 1, closed="left"),
        "posterior_top_k": Interval(int, 0, None, note="(0 = every path)"),
        "block_size": Interval(int, 1, None),
        "components": Interval(int, 1, None),
        "calibration": Options(CALIBRATIONS),
        "names": Options(NAMES),
        "names_weight": Interval(float, 0, None, closed="neither"),
        "names_fade": Interval(float, 0, None, note="(0 = the same weight at every label count)"),
        "names_kept_tokens": Interval(float, 0, None),
        "family": [Options(FAMILIES), AUTO],
        "linear_c": Interval(float, 0, None, closed="neither"),
        "generative_weight": [Interval(float, 0, None), AUTO],
        "linear_weights": Options(LINEAR_WEIGHTS),
        "embedding_weight": [Interval(float, 0, None), AUTO],
    }

    def validate(self) -> None:
        check_constraints(self, self.CONSTRAINTS, "model")
        if self.family not in ("generative", AUTO) and self.method not in ONE_COMPONENT_PER_PATH:
            raise InputError(
                f"model.family = {self.family!r} needs a method with one component per path "
                f"({', '.join(ONE_COMPONENT_PER_PATH)}), got method {self.method!r}"
            )
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
        if self.family == AUTO and self.method in ONE_COMPONENT_PER_PATH:
            out.append("family")
        pooled = self.family in (AUTO, "combined") and self.method in ONE_COMPONENT_PER_PATH
        if self.generative_weight == AUTO and pooled:
            out.append("generative_weight")
        return out

    def tunes_embedding_weight(self) -> bool:
        """Whether the cross-validation chooses ``embedding_weight`` -- when the documents have vectors
        (:func:`pcem_spark.ml.tuning.resolve_auto` adds it then; without vectors it is no setting to tune)."""
        regression = self.family in (AUTO, "combined", "discriminative") and self.method in ONE_COMPONENT_PER_PATH
        return self.embedding_weight == AUTO and regression

    def resolved(self, **values) -> "ModelSettings":
        """A copy with ``values`` set and every remaining cross-validated "auto" at the paper's value (1)."""
        out = replace(self, **values)
        for name in ("unlabeled_weight", "path_weight"):
            if getattr(out, name) == AUTO:
                setattr(out, name, 1.0)
        if out.family == AUTO:
            out.family = "generative"
        if out.generative_weight == AUTO:
            out.generative_weight = GENERATIVE_WEIGHT_FALLBACK
        if out.embedding_weight == AUTO:
            out.embedding_weight = EMBEDDING_WEIGHT_FALLBACK
        return out


# Methods whose components are the M paths, so a discriminative model over paths can be pooled with them.
ONE_COMPONENT_PER_PATH = ("pcnb", "pcem", "flat-nb", "flat-em")


# Methods whose E-step responsibilities are per-node / per-depth distributions.
PER_NODE_POSTERIOR_METHODS = ("tdem", "wdem")


# The paper as written: Laplace smoothing, lambda = gamma = 1, raw counts, the exact E-step of Algorithm 1.
PAPER_MODEL_SETTINGS = dict(smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, doc_length=0.0, posterior_top_k=0)


def _weight(value) -> float:
    """A path / unlabelled weight as a number ("auto" not yet resolved counts as the paper's 1)."""
    return 1.0 if value == AUTO else float(value)
