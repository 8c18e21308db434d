"""The ``[tune]`` settings: how cross-validation chooses the model settings left at "auto".

Below both :mod:`pcem_spark.ml.params` (PathEM's ``tuneFolds`` /
``tuneMetric`` Params) and :mod:`pcem_spark.ml.tuning` (which runs the
cross-validation); ``from pcem_spark.ml.tuning import TuneSettings`` keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Tuple

from pcem_spark.errors import InputError
from pcem_spark.util.constraints import Interval, ListOf, Options, check_constraints

__all__ = [
    "METRICS",
    "MIN_SAMPLE",
    "SELECTIONS",
    "STRATEGIES",
    "TUNABLE_SETTINGS",
    "TuneSettings",
    "check_grid",
]

METRICS = ("microF1", "macroF1", "meanF1")
SELECTIONS = ("one_se", "one_se_pooled", "best")
STRATEGIES = ("sampled", "exhaustive")
# The fewest documents of each kind a wide taxonomy's sampled cross-validation draws (TuneSettings.sample_caps):
# below it the fold scores and EM's unlabelled statistics are noise, whatever the cost.
MIN_SAMPLE = 1000

# The ModelSettings fields that the [tune] grid (`pcem train --tune`) may vary.
TUNABLE_SETTINGS = (
    "smoothing",
    "unlabeled_weight",
    "path_weight",
    "doc_length",
    "max_iter",
    "tol",
    "components",
    "method",
    "posterior_floor",
    "posterior_top_k",
    "family",
    "linear_c",
    "generative_weight",
)


def check_grid(grid: Dict[str, Any]) -> None:
    """Raise :class:`InputError` unless ``grid`` maps tunable model settings to non-empty lists of values."""
    for key, values in grid.items():
        if key not in TUNABLE_SETTINGS:
            raise InputError(f"tune.grid: {key!r} cannot be tuned; tunable: {sorted(TUNABLE_SETTINGS)}")
        if not isinstance(values, list) or not values:
            raise InputError(f"tune.grid.{key} must be a non-empty list, got {values!r}")


@dataclass
class TuneSettings:
    folds: int = 3
    metric: str = "meanF1"  # microF1 | macroF1 | meanF1 (their mean)
    # Values tried for the settings left at "auto": each grid point costs one EM fit per fold.
    # Measured on 20NG (docs/RESULTS.md): lambda 0.1 ~ 0.3, and gamma 0.5 never beat both ends.
    # lambda 0 (PCNB, no EM: a cheap fit) is last, so the one-SE rules take it only when it is clearly better --
    # when the unlabelled documents cluster by something other than the classes (RESULTS.md, stop words).
    unlabeled_weights: List[float] = field(default_factory=lambda: [0.3, 1.0, 0.0])
    path_weights: List[float] = field(default_factory=lambda: [0.0, 1.0])
    # The model families tried when model.family = "auto", the most preferred first: the paired rule keeps the
    # combined family unless the folds show the generative one clearly better, the discriminative one (a single
    # grid point: EM-lambda and gamma change nothing for it) only when clearly better than both. Combined first:
    # it holds the generative posterior (weighted by beta), and on 20NG and its subject lines it was never more
    # than 0.2 behind the generative family and up to 1.8 ahead (docs/RESULTS.md, "Model families").
    # "vmf" (the vectors' generative model, model.vmf_family) is tried only when the documents have vectors.
    families: List[str] = field(default_factory=lambda: ["combined", "generative", "discriminative", "vmf"])
    # beta of the combined family tried when model.generative_weight = "auto", the most generative first. The
    # raw naive-Bayes log posterior is far more peaked than the regression's scores, so the best beta is small
    # and falls as labels grow (20NG, docs/RESULTS.md "Model families": 0.3 at 30% trails 0.03 by 0.75
    # micro-F1, at 90% by 1.0). The points share each fold's EM and regression: each costs a scoring only.
    generative_weights: List[float] = field(default_factory=lambda: [0.3, 0.1, 0.03, 0.01])
    # The scale of the document vectors tried when model.embedding_weight = "auto" and the documents have vectors,
    # the most regularised first (a larger scale is a weaker penalty on the vectors' weights). The points share
    # each fold's EM; each costs one regression fit per fold.
    embedding_weights: List[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])
    # Extra grid of `pcem train --tune`: model setting -> values, e.g. {smoothing = [0.03, 0.1, 0.3]}.
    grid: Dict[str, list] = field(default_factory=dict)
    parallelism: int = 1  # models fitted at once by CrossValidator
    # "one_se": the most preferred grid point (earliest in the lists above) whose CV score is within one
    # standard error of the best (Hastie et al., ESL 7.10); "best": the highest CV score. With few labelled
    # documents the folds are small and CV scores differ by noise: "best" then flips between grid points
    # from seed to seed (docs/RESULTS.md, 20NG at 1%). "one_se_pooled" (the default): the same rule, its
    # standard error from the root mean square of every grid point's fold spread rather than the best point's
    # alone -- with 3 folds one point's spread is itself noise (0.015 for a best point whose neighbours' were
    # 0.03 to 0.09, a flip that cost the dotted taxonomy 1.3 points at 1%); docs/RESULTS.md, "The
    # one-standard-error rule with 3 folds".
    selection: str = "one_se_pooled"
    min_labeled_per_fold: int = 2  # fewer labelled documents per fold: no CV, the paper's values
    # "sampled": every grid point x fold fit runs as one task on a seeded sample of at most max_labeled
    # labelled and max_unlabeled unlabelled documents, EM-lambda rescaled so the sample's unlabelled mass
    # per labelled document is the full fit's (pcem_spark.model.sampled_cv): the cost is bounded however
    # large the corpus is, and the refit is the only EM over all documents. "exhaustive": Spark ML's
    # CrossValidator over every document, each fit a distributed EM (the cost grows with the corpus).
    strategy: str = "sampled"
    # The sample's bounds. At few labels EM's gain comes from the diversity of the unlabelled documents,
    # which a rescaled lambda cannot restore: on 20NG at 1% a 5,000-document sample (a third) chose
    # path_weight 1 on 3 of 3 seeds where every document chooses 0; 20,000 covers corpora of that size whole.
    max_labeled: int = 5000
    max_unlabeled: int = 20000
    # ... and, of each kind, at most this many (document, path) pairs: an E-step's time and a labelled
    # document's share of Eq. 2 grow with the paths, so a wide taxonomy samples fewer documents (20,000
    # unlabelled up to 100 paths, 2,000 of each kind at 1,000 paths, never fewer than MIN_SAMPLE):
    # each task's memory stays bounded (sample_caps).
    max_doc_paths: int = 2_000_000
    # EM iterations of each cross-validation fit ("sampled" only; 0 = the model's max_iter). What pays for
    # the larger sample: after 8 iterations the grid ranks as after convergence on 20NG at 1% (3 of 3 seeds,
    # docs/BENCHMARKS.md), after 5 it does not. The refit always runs to the model's convergence.
    max_iter: int = 8
    # path_weight > 0 spreads each labelled document's words over every path under its level-1 node: with
    # many labels on a wide taxonomy the parameters outgrow the machine (10,000 labelled documents at
    # 10,000 leaves: ~750 M non-zeros, a refit killed at 11 GB). Above this many estimated non-zero word
    # parameters (~12 bytes each per copy) the grid leaves path_weight > 0 out (pcem_spark.model.path_spread);
    # 0 = no bound. A path_weight set by hand is not checked.
    max_parameters: int = 250_000_000

    # What each setting accepts (pcem_spark.util.constraints), checked in this order by validate();
    # the grid by check_grid.
    CONSTRAINTS: ClassVar[Dict[str, Any]] = {
        "folds": Interval(int, 2, None),
        "metric": Options(METRICS),
        "unlabeled_weights": ListOf(Interval(float, 0, 1), non_empty=True),
        "path_weights": ListOf(Interval(float, 0, 1), non_empty=True),
        "families": ListOf(Options(("generative", "combined", "discriminative", "vmf")), non_empty=True),
        "generative_weights": ListOf(Interval(float, 0, None), non_empty=True),
        "embedding_weights": ListOf(Interval(float, 0, None, closed="neither"), non_empty=True),
        "selection": Options(SELECTIONS),
        "parallelism": Interval(int, 1, None),
        "strategy": Options(STRATEGIES),
        "max_labeled": Interval(int, 1, None),
        "max_unlabeled": Interval(int, 1, None),
        "max_doc_paths": Interval(int, 1, None),
        "max_iter": Interval(int, 0, None),
        "max_parameters": Interval(int, 0, None),
    }

    def validate(self) -> None:
        check_constraints(self, self.CONSTRAINTS, "tune")
        check_grid(self.grid)

    def sample_caps(self, n_paths: int) -> Tuple[int, int]:
        """``(labelled, unlabelled)`` documents the sampled cross-validation draws at most, at ``n_paths`` paths.

        ``max_labeled`` and ``max_unlabeled``, each lowered to
        ``max_doc_paths // n_paths`` on wide taxonomies (an E-step scores every
        path of every document; with path_weight 1 a labelled document's words
        reach every path under its top-level node), but not below
        ``MIN_SAMPLE`` (nor above the ``max_*`` bound).

        >>> [TuneSettings().sample_caps(p) for p in (20, 1000, 10000)]
        [(5000, 20000), (2000, 2000), (1000, 1000)]
        """
        by_work = max(self.max_doc_paths // max(int(n_paths), 1), MIN_SAMPLE)
        return min(self.max_labeled, by_work), min(self.max_unlabeled, by_work)
