"""Settings chosen from the user's own data: cross-validation with Spark ML's own tuner.

``model.unlabeled_weight`` and ``model.path_weight`` default to ``"auto"``:
they are chosen by :class:`pyspark.ml.tuning.CrossValidator` over
:class:`pcem_spark.ml.PathEM` with a ``ParamGridBuilder`` grid and the
:class:`pcem_spark.evaluation.HierarchicalF1Evaluator` -- no hand-rolled grid
search. What this module adds is what CrossValidator cannot know:

* folds over the **labelled** documents only, stratified by leaf (a seeded
  hash order within each leaf, dealt round-robin from a per-leaf offset), in
  a ``fold`` column given to CrossValidator as ``foldCol``;
* every **unlabelled** document in every fold's training set: they are not
  part of the cross-validated DataFrame but a temporary view that PathEM adds
  to each fit (``unlabeledTable``);
* the features are computed once (``featuresCol``), and
  ``PathEM.fitMultiple`` packs each fold's blocks once for the whole grid.

``model.smoothing = "auto"`` needs no folds: it is chosen inside every fit by
the Dirichlet-multinomial evidence of the labelled counts
(:func:`pcem_spark.pathnb.choose_smoothing`).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Tuple

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.features import FeatureSettings
from pcem_spark.errors import InputError
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import ModelSettings

log = logging.getLogger(__name__)

METRICS = ("microF1", "macroF1", "meanF1")
SELECTIONS = ("one_se", "best")

# ModelSettings field -> PathEM Param name, for the [tune] grid.
PARAM_OF_SETTING = {
    "smoothing": "smoothing",
    "unlabeled_weight": "unlabeledWeight",
    "path_weight": "pathWeight",
    "doc_length": "docLength",
    "max_iter": "maxIter",
    "tol": "tol",
    "components": "components",
    "method": "method",
    "posterior_floor": "posteriorFloor",
    "posterior_top_k": "posteriorTopK",
}


@dataclass
class TuneSettings:
    folds: int = 3
    metric: str = "meanF1"  # microF1 | macroF1 | meanF1 (their mean)
    # Values tried for the settings left at "auto": each grid point costs one EM fit per fold.
    # Measured on 20NG (docs/RESULTS.md): lambda 0.1 ~ 0.3, and gamma 0.5 never beat both ends.
    # lambda 0 (PCNB, no EM: a cheap fit) is last, so "one_se" takes it only when it is clearly better --
    # when the unlabelled documents cluster by something other than the classes (RESULTS.md, stop words).
    unlabeled_weights: List[float] = field(default_factory=lambda: [0.3, 1.0, 0.0])
    path_weights: List[float] = field(default_factory=lambda: [0.0, 1.0])
    # Extra grid of `pcem train --tune`: model setting -> values, e.g. {smoothing = [0.03, 0.1, 0.3]}.
    grid: Dict[str, list] = field(default_factory=dict)
    parallelism: int = 1  # models fitted at once by CrossValidator
    # "one_se": the most preferred grid point (earliest in the lists above) whose CV score is within one
    # standard error of the best (Hastie et al., ESL 7.10); "best": the highest CV score. With few labelled
    # documents the folds are small and CV scores differ by noise: "best" then flips between grid points
    # from seed to seed (docs/RESULTS.md, 20NG at 1%).
    selection: str = "one_se"
    min_labeled_per_fold: int = 2  # fewer labelled documents per fold: no CV, the paper's values

    def validate(self) -> None:
        if self.folds < 2:
            raise InputError(f"tune.folds must be >= 2, got {self.folds}")
        if self.metric not in METRICS:
            raise InputError(f"tune.metric must be one of {METRICS}, got {self.metric!r}")
        for name, values in (("unlabeled_weights", self.unlabeled_weights), ("path_weights", self.path_weights)):
            if not values or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1 for v in values
            ):
                raise InputError(f"tune.{name} must be a non-empty list of numbers in [0, 1], got {values}")
        for key, values in self.grid.items():
            if key not in PARAM_OF_SETTING:
                raise InputError(f"tune.grid: {key!r} cannot be tuned; tunable: {sorted(PARAM_OF_SETTING)}")
            if not isinstance(values, list) or not values:
                raise InputError(f"tune.grid.{key} must be a non-empty list, got {values!r}")
        if self.selection not in SELECTIONS:
            raise InputError(f"tune.selection must be one of {SELECTIONS}, got {self.selection!r}")
        if self.parallelism < 1:
            raise InputError(f"tune.parallelism must be >= 1, got {self.parallelism}")


def stratified_folds(
    labeled: DataFrame, n_folds: int, seed: int, labels_col: str = "labels", id_col: str = "id", fold_col: str = "fold"
) -> DataFrame:
    """Add an int ``fold`` in [0, n_folds) to labelled rows, stratified by leaf, deterministic for ``seed``.

    Within a leaf the rows are ordered by a seeded hash of their id and dealt
    round-robin starting at a seeded per-leaf offset, so every leaf with at
    least ``n_folds`` labelled documents is in every fold and singletons
    spread over the folds instead of piling into fold 0.
    """
    leaf = F.element_at(F.col(labels_col), -1)
    order = Window.partitionBy(leaf).orderBy(F.xxhash64(F.col(id_col), F.lit(seed)), F.col(id_col))
    offset = F.pmod(F.xxhash64(leaf, F.lit(seed + 1)), F.lit(n_folds))
    return labeled.withColumn(fold_col, F.pmod(F.row_number().over(order) - 1 + offset, F.lit(n_folds)).cast("int"))


def select_grid_point(
    scores: List[float], stds: List[float], preference: List[int], n_folds: int, selection: str = "one_se"
) -> int:
    """Index of the chosen grid point.

    ``scores``/``stds``: mean and (population) standard deviation over the
    folds of each grid point's CV metric (larger is better), as
    CrossValidatorModel's ``avgMetrics``/``stdMetrics``. ``preference``: a
    rank per grid point, lower = preferred. ``"best"`` returns the argmax
    (ties: lowest index); ``"one_se"`` returns the most preferred point whose
    score is at least the best score minus the best point's standard error
    ``std / sqrt(n_folds - 1)``.
    """
    if selection not in SELECTIONS:
        raise InputError(f"selection must be one of {SELECTIONS}, got {selection!r}")
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    if selection == "best":
        return best
    se = stds[best] / math.sqrt(max(n_folds - 1, 1))
    within = [i for i in range(len(scores)) if scores[i] >= scores[best] - se]
    return min(within, key=lambda i: (preference[i], -scores[i], i))


def _preference(grid_rows: List[dict], grid_spec: Dict[str, list]) -> List[int]:
    """Rank of each grid point: by the sum of its values' positions in their lists, then lexicographically."""
    keys = [tuple(values.index(row[k]) for k, values in grid_spec.items()) for row in grid_rows]
    order = sorted(range(len(keys)), key=lambda i: (sum(keys[i]), keys[i]))
    rank = [0] * len(keys)
    for r, i in enumerate(order):
        rank[i] = r
    return rank


def _estimator(
    estimator_class,
    taxonomy: Taxonomy,
    model_settings: ModelSettings,
    features_col: str,
    unlabeled_view: Optional[str],
    init_model: Optional[str] = None,
):
    ms = model_settings
    return estimator_class(
        featuresCol=features_col,
        taxonomy=taxonomy.to_json(),
        method=ms.method,
        smoothing=ms.smoothing,
        unlabeledWeight=ms.unlabeled_weight,
        pathWeight=ms.path_weight,
        docLength=ms.doc_length,
        maxIter=ms.max_iter,
        tol=ms.tol,
        blockSize=ms.block_size,
        posteriorFloor=ms.posterior_floor,
        posteriorTopK=ms.posterior_top_k,
        components=ms.components,
        parameterDtype=ms.parameter_dtype,
        seed=ms.seed,
        unlabeledTable=unlabeled_view or "",
        initModel=init_model or "",
    )


def resolve_auto(
    feats: DataFrame,
    taxonomy: Taxonomy,
    vocabulary: List[str],
    feature_settings: FeatureSettings,
    model_settings: ModelSettings,
    tune: Optional[TuneSettings] = None,
    seed: int = 0,
    extra_grid: Optional[Dict[str, list]] = None,
    features_col: str = "features",
    labels_col: str = "labels",
    id_col: str = "id",
    init_model: Optional[str] = None,
    estimator_class=None,
) -> Tuple[ModelSettings, Dict[str, object], Optional[PathModel]]:
    """Choose the "auto" settings (and ``extra_grid``) by k-fold CV on the labelled rows of ``feats``.

    ``feats`` holds every training document: ``features`` (term counts),
    ``labels`` (null = unlabelled) and ``id``. Returns ``(settings, info,
    model)``: the settings with every tuned value filled in, what was tried
    (``info["grid"]``, mean CV score per grid point, the metric, the folds,
    seconds), and the model CrossValidator refitted on all of ``feats`` with
    the best values (a :class:`PathModel` with ``vocabulary`` and
    ``feature_settings``) -- or None when nothing was tuned (a taxonomy of
    one leaf is never tuned: ``info["skipped"]`` and ``info["reason"]`` say
    so, and the settings take the paper's values). ``init_model`` (a
    model directory): every fit, in every fold, starts EM from it (PathEM
    ``initModel``, :mod:`pcem_spark.model.warm`). ``estimator_class``: the
    estimator CrossValidator fits (:class:`pcem_spark.ml.PathEM`, passed in by
    its callers so that this module does not import the estimator that calls it).
    """
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    from pcem_spark.evaluation.evaluator import HierarchicalF1Evaluator

    tune = tune or TuneSettings()
    tune.validate()
    grid_spec: Dict[str, list] = {}
    auto = model_settings.auto_params()
    if "unlabeled_weight" in auto:
        grid_spec["unlabeled_weight"] = [float(v) for v in tune.unlabeled_weights]
    if "path_weight" in auto:
        grid_spec["path_weight"] = [float(v) for v in tune.path_weights]
    for key, values in (extra_grid or {}).items():
        if key not in PARAM_OF_SETTING:
            raise InputError(f"tune.grid: {key!r} cannot be tuned; tunable: {sorted(PARAM_OF_SETTING)}")
        grid_spec[key] = list(values)
    if not grid_spec or all(len(v) == 1 for v in grid_spec.values()):
        chosen = {k: v[0] for k, v in grid_spec.items()}
        return model_settings.resolved(**chosen), {"chosen": chosen, "tuned": False}, None
    if taxonomy.n_paths == 1:
        # Every path of every grid point is the one leaf's: all CV scores are equal, there is nothing to
        # choose. Every caller (model.train, PathEM, the experiment runner) comes through here.
        leaf = taxonomy.leaves[0]
        reason = (
            f"the taxonomy has one leaf, {leaf!r}: every setting gives every document its path, so "
            "cross-validation has nothing to choose"
        )
        log.warning(
            "tuning skipped: %s; %s keep their fallback values (unlabeled_weight, path_weight: the paper's "
            '1; smoothing: "auto" by evidence, or the number set)',
            reason,
            ", ".join(grid_spec),
        )
        return (
            model_settings.resolved(),
            {"chosen": {}, "tuned": False, "skipped": True, "reason": reason, "not_tuned": sorted(grid_spec)},
            None,
        )
    if init_model:
        # The warm start maps terms by name: the fits read the names from the column's ML attributes.
        feats = feats.withColumn(
            features_col,
            F.col(features_col).alias(
                features_col,
                metadata={
                    "ml_attr": {
                        "num_attrs": len(vocabulary),
                        "attrs": {"numeric": [{"idx": i, "name": term} for i, term in enumerate(vocabulary)]},
                    }
                },
            ),
        )
    labeled = feats.where(F.col(labels_col).isNotNull())
    n_labeled = labeled.count()
    if n_labeled < tune.folds * tune.min_labeled_per_fold:
        log.warning(
            "tuning: only %d labelled documents for %d folds; %s keep the paper's value 1",
            n_labeled,
            tune.folds,
            ", ".join(grid_spec),
        )
        return model_settings.resolved(), {"chosen": {}, "tuned": False, "reason": "too few labelled documents"}, None
    t0 = time.perf_counter()
    spark = feats.sparkSession
    view = f"_pcem_unlabeled_{uuid.uuid4().hex[:12]}"
    unlabeled = (
        feats.where(F.col(labels_col).isNull()).select(F.col(id_col), F.col(features_col), F.col(labels_col)).cache()
    )
    unlabeled.createOrReplaceTempView(view)
    folded = stratified_folds(
        labeled.select(id_col, features_col, labels_col), tune.folds, seed, labels_col, id_col
    ).cache()
    base = replace(model_settings.resolved(), smoothing=model_settings.smoothing)
    if estimator_class is None:
        raise TypeError("resolve_auto: estimator_class is required to cross-validate (pcem_spark.ml.PathEM)")
    est = _estimator(estimator_class, taxonomy, base, features_col, view, init_model)
    builder = ParamGridBuilder()
    for key, values in grid_spec.items():
        builder.addGrid(est.getParam(PARAM_OF_SETTING[key]), values)
    param_maps = builder.build()
    evaluator = HierarchicalF1Evaluator(
        predictionCol="path", labelCol=labels_col, metricName=tune.metric, taxonomy=taxonomy.to_json()
    )
    cv = CrossValidator(
        estimator=est,
        estimatorParamMaps=param_maps,
        evaluator=evaluator,
        numFolds=tune.folds,
        foldCol="fold",
        seed=seed,
        parallelism=tune.parallelism,
    )
    log.info(
        "tuning %s by %d-fold cross-validation on %d labelled documents (metric %s, %d grid points)",
        ", ".join(f"{k} in {v}" for k, v in grid_spec.items()),
        tune.folds,
        n_labeled,
        tune.metric,
        len(param_maps),
    )
    grid_rows = []
    try:
        cv_model = cv.fit(folded)
        scores = [float(v) for v in cv_model.avgMetrics]
        stds = [float(v) for v in (cv_model.stdMetrics or [0.0] * len(scores))]
        for pm, score, std in zip(param_maps, scores, stds):
            grid_rows.append(
                {**{k: pm[est.getParam(PARAM_OF_SETTING[k])] for k in grid_spec}, "cv_score": score, "cv_std": std}
            )
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        pick = select_grid_point(scores, stds, _preference(grid_rows, grid_spec), tune.folds, tune.selection)
        best_model = cv_model.bestModel
        if pick != best:
            # CrossValidator refitted its argmax; the one-SE choice needs its own refit on all the data.
            best_model = est.fit(folded, params=param_maps[pick])
    finally:
        spark.catalog.dropTempView(view)
        unlabeled.unpersist()
        folded.unpersist()
    chosen = {k: grid_rows[pick][k] for k in grid_spec}
    secs = time.perf_counter() - t0
    info = {
        "tuned": True,
        "chosen": chosen,
        "metric": tune.metric,
        "folds": tune.folds,
        "n_labeled": n_labeled,
        "selection": tune.selection,
        "best_cv": {k: grid_rows[best][k] for k in grid_spec},
        "grid": grid_rows,
        "seconds": round(secs, 2),
    }
    log.info(
        "tuning chose %s (CV %s %.4f, %s; highest %.4f at %s) in %.1fs; grid: %s",
        chosen,
        tune.metric,
        scores[pick],
        tune.selection,
        scores[best],
        info["best_cv"],
        secs,
        "; ".join(f"{ {k: r[k] for k in grid_spec} }: {r['cv_score']:.4f} +- {r['cv_std']:.4f}" for r in grid_rows),
    )
    resolved = model_settings.resolved(**chosen)
    fitted = best_model.path_model
    model = PathModel(
        taxonomy,
        vocabulary,
        None,
        fitted.params,
        feature_settings,
        replace(resolved, smoothing=fitted.model_settings.smoothing),
        {**fitted.training_summary, "tuning": info},
    )
    return resolved, info, model
