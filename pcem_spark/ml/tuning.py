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
(:func:`pcem_spark.core.choose_smoothing`).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.blocks import EMBEDDING_COL
from pcem_spark.engine.features import FeatureSettings
from pcem_spark.engine.label_columns import first_label_path
from pcem_spark.errors import InputError
from pcem_spark.ml.grid_choice import (
    family_choice,
    fold_scores,
    grid_points,
    grid_row,
    names_only_choice,
    preference,
    select_grid_point,
    without_ignored,
)
from pcem_spark.ml.params import MODEL_PARAMS, param_values
from pcem_spark.ml.tune_settings import METRICS, SELECTIONS, TuneSettings, check_grid
from pcem_spark.model.names import is_name_document
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.sampled_cv import (
    KEPT_PART,
    UNLABELED_PART,
    CVSample,
    em_key,
    run_sampled_cv,
    sample_rows,
    with_weight,
)
from pcem_spark.model.settings import ModelSettings

__all__ = [
    "METRICS",
    "SELECTIONS",
    "TuneSettings",
    "stratified_folds",
    "select_grid_point",
    "resolve_auto",
    "draw_cv_sample",
]

log = logging.getLogger(__name__)

# The columns of the documents resolve_auto cross-validates on.
FEATURES_COL, LABELS_COL, ID_COL = "features", "labels", "id"


def stratified_folds(
    labeled: DataFrame, n_folds: int, seed: int, labels_col: str = "labels", id_col: str = "id", fold_col: str = "fold"
) -> DataFrame:
    """Add an int ``fold`` in [0, n_folds) to labelled rows, stratified by leaf, deterministic for ``seed``.

    Within a leaf the rows are ordered by a seeded hash of their id and dealt
    round-robin starting at a seeded per-leaf offset, so every leaf with at
    least ``n_folds`` labelled documents is in every fold and a leaf's few
    documents go to different folds. A leaf's only labelled document gets
    :data:`~pcem_spark.model.sampled_cv.KEPT_PART`: every fold trains on it and
    none holds it out (the fewest-labels rule), so every held-out document's
    leaf has a labelled document in its fold's training set, as a test
    document's leaf has in the final model's.
    """
    leaf = F.element_at(first_label_path(labeled, labels_col), -1)  # several paths: by the first one's leaf
    # A name document (model.names) trains every fold and is never held out: it is dealt last and kept.
    name = is_name_document(id_col)
    order = Window.partitionBy(leaf).orderBy(name, F.xxhash64(F.col(id_col), F.lit(seed)), F.col(id_col))
    offset = F.pmod(F.xxhash64(leaf, F.lit(seed + 1)), F.lit(n_folds))
    dealt = F.pmod(F.row_number().over(order) - 1 + offset, F.lit(n_folds))
    # The only labelled document of a leaf is held out only when the leaf keeps evidence without it: its
    # name document. Then, as for a test document, the leaf is known -- by its name alone.
    leaf_rows = Window.partitionBy(leaf)
    alone = (F.count(F.when(~name, 1)).over(leaf_rows) == 1) & ~F.max(name).over(leaf_rows)
    return labeled.withColumn(fold_col, F.when(name | alone, F.lit(KEPT_PART)).otherwise(dealt).cast("int"))


def _estimator(
    estimator_class, taxonomy: Taxonomy, model_settings: ModelSettings, unlabeled_view: str, init_model: Optional[str]
):
    """The estimator CrossValidator fits: ``model_settings`` as its Params (``MODEL_PARAMS``), on ``features``."""
    return estimator_class(
        featuresCol=FEATURES_COL,
        taxonomy=taxonomy.to_json(),
        unlabeledTable=unlabeled_view,
        initModel=init_model or "",
        **param_values(model_settings, MODEL_PARAMS),
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
    tune = tune or TuneSettings()
    tune.validate()
    grid_spec: Dict[str, list] = {}
    auto = model_settings.auto_params()
    if "unlabeled_weight" in auto:
        grid_spec["unlabeled_weight"] = [float(v) for v in tune.unlabeled_weights]
    if "path_weight" in auto:
        grid_spec["path_weight"] = [float(v) for v in tune.path_weights]
    if "family" in auto:
        # the vectors' generative model is no family to try without vectors
        vectors = EMBEDDING_COL in feats.columns
        grid_spec["family"] = [str(v) for v in tune.families if vectors or v != "vmf"]
        if not grid_spec["family"]:
            raise InputError(
                "tune.families = ['vmf'] needs documents with vectors (features.embedding), and these have none: "
                "add another family to tune.families, or set model.family"
            )
    if "generative_weight" in auto:
        grid_spec["generative_weight"] = [float(v) for v in tune.generative_weights]
    if model_settings.tunes_embedding_weight() and EMBEDDING_COL in feats.columns:  # no vectors: nothing to scale
        grid_spec["embedding_weight"] = [float(v) for v in tune.embedding_weights]
    check_grid(extra_grid or {})
    for key, values in (extra_grid or {}).items():
        grid_spec[key] = list(values)
    grid_spec, budget = _bound_path_weight(feats, taxonomy, len(vocabulary), grid_spec, tune)
    fixed = (feature_settings, model_settings, tune)
    result = _resolve(feats, taxonomy, vocabulary, *fixed, grid_spec, seed, init_model, estimator_class)
    if budget is not None:
        result[1]["path_weight_budget"] = budget
    return result


def _bound_path_weight(feats, taxonomy: Taxonomy, vocab_size: int, grid_spec: Dict[str, list], tune: TuneSettings):
    """``(grid_spec, record)``: the grid without path_weight > 0 when its parameters would exceed the bound.

    ``record`` (None when nothing needed checking) goes to the training
    summary: the estimate (:func:`pcem_spark.model.path_spread.spread_parameters`),
    the bound ``tune.max_parameters`` and the weights left out.
    """
    from pcem_spark.model.path_spread import labelled_terms_per_top, spread_parameters

    weights = grid_spec.get("path_weight") or []
    bound = tune.max_parameters
    # Nothing to spread, no bound, or even a dense (paths x terms) table fits: no pass over the data.
    if not any(w > 0 for w in weights) or bound == 0 or taxonomy.n_paths * vocab_size <= bound:
        return grid_spec, None
    estimate = spread_parameters(labelled_terms_per_top(feats, vocab_size, LABELS_COL, FEATURES_COL), taxonomy)
    record = {"estimated_parameters": estimate, "max_parameters": bound, "left_out": []}
    if estimate <= bound:
        return grid_spec, record
    kept = [w for w in weights if w == 0] or [0.0]
    record["left_out"] = [w for w in weights if w > 0]
    log.warning(
        "tuning: path_weight %s left out of the grid: the labelled documents' words would make ~%s non-zero "
        "parameters over %d paths, above tune.max_parameters = %s (path_weight 0 keeps each word on its own path)",
        record["left_out"],
        f"{estimate:,}",
        taxonomy.n_paths,
        f"{bound:,}",
    )
    return dict(grid_spec, path_weight=kept), record


def _resolve(
    feats: DataFrame,
    taxonomy: Taxonomy,
    vocabulary: List[str],
    feature_settings: FeatureSettings,
    model_settings: ModelSettings,
    tune: TuneSettings,
    grid_spec: Dict[str, list],
    seed: int,
    init_model: Optional[str],
    estimator_class,
) -> Tuple[ModelSettings, Dict[str, object], Optional[PathModel]]:
    """:func:`resolve_auto` once the grid is known."""
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    from pcem_spark.evaluation.evaluator import HierarchicalF1Evaluator

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
            FEATURES_COL,
            F.col(FEATURES_COL).alias(
                FEATURES_COL,
                metadata={
                    "ml_attr": {
                        "num_attrs": len(vocabulary),
                        "attrs": {"numeric": [{"idx": i, "name": term} for i, term in enumerate(vocabulary)]},
                    }
                },
            ),
        )
    labeled = feats.where(F.col(LABELS_COL).isNotNull())
    # One pass over the (cached) features counts both kinds.
    counts = {bool(r[0]): int(r[1]) for r in feats.groupBy(F.col(LABELS_COL).isNull()).count().collect()}
    n_labeled, n_unlabeled = counts.get(False, 0), counts.get(True, 0)
    if n_labeled < tune.folds * tune.min_labeled_per_fold:
        log.warning(
            "tuning: only %d labelled documents for %d folds; %s keep the paper's value 1%s",
            n_labeled,
            tune.folds,
            ", ".join(k for k in grid_spec if k != "family") or "the settings",
            " (family: generative)" if "family" in grid_spec else "",
        )
        return model_settings.resolved(), {"chosen": {}, "tuned": False, "reason": "too few labelled documents"}, None
    if tune.strategy == "sampled" and not init_model:
        return _sampled_cv(
            feats, taxonomy, model_settings, tune, grid_spec, (n_labeled, n_unlabeled), len(vocabulary), seed
        )
    if tune.strategy == "sampled":
        log.info("tuning: warm-started fits (init_model) are cross-validated exhaustively")
    grid_spec = _without_families(grid_spec, model_settings)
    if not grid_spec or all(len(v) == 1 for v in grid_spec.values()):
        chosen = {k: v[0] for k, v in grid_spec.items()}
        return model_settings.resolved(**chosen), {"chosen": chosen, "tuned": False}, None
    t0 = time.perf_counter()
    spark = feats.sparkSession
    view = f"_pcem_unlabeled_{uuid.uuid4().hex[:12]}"
    unlabeled = feats.where(F.col(LABELS_COL).isNull()).select(*_fit_columns(feats)).cache()
    unlabeled.createOrReplaceTempView(view)
    folded = stratified_folds(labeled.select(*_fit_columns(labeled)), tune.folds, seed, LABELS_COL, ID_COL).cache()
    # A leaf's only labelled document: in every fit, held out by none (PathEM labeledTable), not in a fold.
    kept_view = f"_pcem_kept_{uuid.uuid4().hex[:12]}"
    folded.where(F.col("fold") == KEPT_PART).createOrReplaceTempView(kept_view)
    n_held = folded.where(F.col("fold") >= 0).count()
    if n_held < tune.folds * tune.min_labeled_per_fold:
        spark.catalog.dropTempView(view)
        spark.catalog.dropTempView(kept_view)
        unlabeled.unpersist()
        folded.unpersist()
        drawn = CVSample(n_labeled, n_unlabeled, n_labeled, n_unlabeled, seed, n_held)
        return _not_scorable(model_settings, grid_spec, drawn)
    # The fold fits are scored by their paths only: no calibration of their probabilities (the refit's is fitted once).
    base = replace(model_settings.resolved(), smoothing=model_settings.smoothing, calibration="none")
    if estimator_class is None:
        raise TypeError("resolve_auto: estimator_class is required to cross-validate (pcem_spark.ml.PathEM)")
    est = _estimator(estimator_class, taxonomy, base, view, init_model)
    est.set(est.labeledTable, kept_view)
    builder = ParamGridBuilder()
    for key, values in grid_spec.items():
        builder.addGrid(est.getParam(MODEL_PARAMS[key]), values)
    param_maps = builder.build()
    evaluator = HierarchicalF1Evaluator(
        predictionCol="path", labelCol=LABELS_COL, metricName=tune.metric, taxonomy=taxonomy.to_json()
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
        cv_model = cv.fit(folded.where(F.col("fold") >= 0))
        scores = [float(v) for v in cv_model.avgMetrics]
        stds = [float(v) for v in (cv_model.stdMetrics or [0.0] * len(scores))]
        for pm, score, std in zip(param_maps, scores, stds):
            grid_rows.append(
                {**{k: pm[est.getParam(MODEL_PARAMS[k])] for k in grid_spec}, "cv_score": score, "cv_std": std}
            )
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        pick = select_grid_point(scores, stds, preference(grid_rows, grid_spec), tune.folds, tune.selection)
        best_model = cv_model.bestModel
        if pick != best:
            # CrossValidator refitted its argmax; the one-SE choice needs its own refit on all the data.
            best_model = est.fit(folded.where(F.col("fold") >= 0), params=param_maps[pick])
    finally:
        spark.catalog.dropTempView(view)
        spark.catalog.dropTempView(kept_view)
        unlabeled.unpersist()
        folded.unpersist()
    info = _record_choice(grid_rows, grid_spec, tune, (best, pick), {"strategy": "exhaustive", "n_labeled": n_labeled})
    info["seconds"] = round(time.perf_counter() - t0, 2)
    _log_choice(info, grid_spec, "")
    chosen = info["chosen"]
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
    model.linear = fitted.linear  # the combined / discriminative family's regression, fitted with it
    return resolved, info, model


def _alone_held_out(sample: DataFrame) -> int:
    """Held-out documents of ``sample`` (:func:`draw_cv_sample`) that are their leaf's only labelled one."""
    held = sample.where(F.col("fold") >= 0)
    leaf = F.element_at(first_label_path(held, LABELS_COL), -1)
    return held.groupBy(leaf.alias("leaf")).count().where(F.col("count") == 1).count()


def _fit_columns(feats: DataFrame) -> List[str]:
    """What a fit reads of ``feats``: id, features, labels, and the document vectors when it has them."""
    return [ID_COL, FEATURES_COL, LABELS_COL] + ([EMBEDDING_COL] if EMBEDDING_COL in feats.columns else [])


def draw_cv_sample(
    feats: DataFrame, taxonomy: Taxonomy, tune: TuneSettings, n_docs: Tuple[int, int], seed: int
) -> Tuple[DataFrame, CVSample]:
    """The bounded, seeded cross-validation sample of ``feats`` (cached; the caller unpersists it) and its counts.

    ``id, features, labels, fold`` rows: at most ``tune.sample_caps`` labelled
    documents in stratified folds and unlabelled ones with fold
    :data:`UNLABELED_PART`. ``n_docs``: (labelled, unlabelled) documents in ``feats``.
    """
    n_labeled, n_unlabeled = n_docs
    labeled_cap, unlabeled_cap = tune.sample_caps(taxonomy.n_paths)
    labelled = feats.where(F.col(LABELS_COL).isNotNull()).select(*_fit_columns(feats))
    # Name documents are in every sample (one per path at most): never sampled out.
    lab = sample_rows(labelled.where(~is_name_document(ID_COL)), n_labeled, labeled_cap, seed).unionByName(
        labelled.where(is_name_document(ID_COL))
    )
    unl = sample_rows(
        feats.where(F.col(LABELS_COL).isNull()).select(*_fit_columns(feats)),
        max(n_unlabeled, 1),
        unlabeled_cap,
        seed + 1,
    )
    sample = (
        stratified_folds(lab, tune.folds, seed, LABELS_COL, ID_COL)
        .unionByName(unl.withColumn("fold", F.lit(UNLABELED_PART)))
        .cache()
    )
    counts = {int(r[0]): int(r[1]) for r in sample.groupBy("fold").count().collect()}
    n_lab = sum(n for fold, n in counts.items() if fold != UNLABELED_PART)
    held = sum(n for fold, n in counts.items() if fold >= 0)
    return sample, CVSample(n_labeled, n_unlabeled, n_lab, counts.get(UNLABELED_PART, 0), seed, held)


def _sampled_cv(
    feats: DataFrame,
    taxonomy: Taxonomy,
    model_settings: ModelSettings,
    tune: TuneSettings,
    grid_spec: Dict[str, list],
    n_docs: Tuple[int, int],
    vocab_size: int,
    seed: int,
) -> Tuple[ModelSettings, Dict[str, object], None]:
    """``tune.strategy = "sampled"``: every (grid point, fold) fit is a task on a bounded seeded sample.

    Returns the chosen settings and what was tried; no model -- the caller's
    refit is the only EM over every document (:mod:`pcem_spark.model.sampled_cv`).
    """
    t0 = time.perf_counter()
    n_labeled, n_unlabeled = n_docs
    labeled_cap, unlabeled_cap = tune.sample_caps(taxonomy.n_paths)
    sample, drawn = draw_cv_sample(feats, taxonomy, tune, n_docs, seed)
    try:
        if drawn.n_labeled_sampled < tune.folds * tune.min_labeled_per_fold:
            raise InputError(
                f"tuning: the sample drew {drawn.n_labeled_sampled} labelled documents for {tune.folds} folds; "
                f"raise tune.max_labeled (now {tune.max_labeled})"
            )
        if drawn.n_held_out < tune.folds * tune.min_labeled_per_fold:
            return _not_scorable(model_settings, grid_spec, drawn)
        log.info(
            "tuning: sampled %d of %d labelled and %d of %d unlabelled documents (seed %d) in %.1fs",
            drawn.n_labeled_sampled,
            n_labeled,
            drawn.n_unlabeled_sampled,
            n_unlabeled,
            seed,
            time.perf_counter() - t0,
        )
        scale = drawn.unlabeled_scale
        base = replace(model_settings.resolved(), smoothing=model_settings.smoothing)
        if tune.max_iter:  # the CV fits only; the caller's refit keeps model_settings.max_iter
            base = replace(base, max_iter=min(base.max_iter, tune.max_iter))
        points = grid_points(grid_spec)
        points = without_ignored(points, grid_spec, model_settings.family)
        unscaled = [replace(base, **point) for point in points]
        for point in unscaled:  # a grid value the settings refuse fails here, before any fit
            point.validate()  # before the sample's scale, which may lift EM-lambda above 1 on purpose
        grid = [with_weight(point, scale) for point in unscaled]
        log.info(
            "tuning %s by %d-fold cross-validation on a sample of %d of %d labelled and %d of %d unlabelled "
            "documents (EM-lambda x %.4g; metric %s, %d grid points, %d fits as tasks)",
            ", ".join(f"{k} in {v}" for k, v in grid_spec.items()),
            tune.folds,
            drawn.n_labeled_sampled,
            n_labeled,
            drawn.n_unlabeled_sampled,
            n_unlabeled,
            scale,
            tune.metric,
            len(points),
            len({em_key(point) for point in grid}) * tune.folds,
        )
        results = run_sampled_cv(sample, taxonomy, vocab_size, grid, tune.folds, base.block_size)
        grid_rows = [grid_row(point, per_fold, tune.metric) for point, per_fold in zip(points, results)]
        scores = [r["cv_score"] for r in grid_rows]
        stds = [r["cv_std"] for r in grid_rows]
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        pick = select_grid_point(scores, stds, preference(grid_rows, grid_spec), tune.folds, tune.selection)
        # The families are compared fold by fold: their gaps are smaller than the folds' spread (grid_choice).
        family_pick, families = (
            family_choice(grid_rows, [fold_scores(r, tune.metric) for r in results], grid_spec, tune)
            if "family" in grid_spec and tune.selection != "best"
            else (None, None)
        )
        pick = pick if family_pick is None else family_pick
        # Only an uncapped sample says that leaves have one labelled document (a capped one thins every leaf).
        if "family" in grid_spec and EMBEDDING_COL in sample.columns and n_labeled <= labeled_cap:
            n_alone = _alone_held_out(sample)
            if 2 * n_alone >= drawn.n_held_out:
                names_pick, names_record = names_only_choice(grid_rows, grid_spec, tune, n_alone, drawn.n_held_out)
                if names_pick is not None:
                    pick, families = names_pick, {**names_record, "folds_chose": (families or {}).get("chosen")}
    finally:
        sample.unpersist()
    info = _record_choice(
        grid_rows,
        grid_spec,
        tune,
        (best, pick),
        {
            "strategy": "sampled",
            "n_labeled": n_labeled,
            "sample": drawn.as_dict(),
            "fit_max_iter": base.max_iter,
            "sample_caps": [labeled_cap, unlabeled_cap],
        },
    )
    if families is not None:
        info["families"] = families
    info["seconds"] = round(time.perf_counter() - t0, 2)
    _log_choice(info, grid_spec, " on the sample")
    chosen = info["chosen"]
    return model_settings.resolved(**chosen), info, None


def _without_families(grid_spec: Dict[str, list], model_settings: ModelSettings) -> Dict[str, list]:
    """The exhaustive grid under ``model.family = "auto"`` over several families: the generative family's points.

    Families are compared fold by fold (:func:`pcem_spark.ml.grid_choice.family_choice`), and
    CrossValidator keeps only each point's mean and spread over the folds; without the pairs the
    comparison would favour whichever family is noisier. An explicit family is cross-validated as set.
    """
    if len(set(grid_spec.get("family", []))) < 2 or model_settings.family != "auto":
        return grid_spec  # one family (an explicit one, or tune.families of one): nothing to compare
    log.warning(
        "tuning: the exhaustive cross-validation (tune.strategy = exhaustive, or a warm start) does not compare "
        "model families; model.family = auto stays generative (set model.family to compare one by hand)"
    )
    return {k: v for k, v in grid_spec.items() if k not in ("family", "generative_weight", "embedding_weight")}


def _not_scorable(model_settings: ModelSettings, grid_spec: Dict[str, list], drawn: CVSample):
    """No tuning: too few labelled documents can be held out (most leaves have one); the fallback values."""
    reason = (
        f"only {drawn.n_held_out} of the {drawn.n_labeled_sampled} sampled labelled documents can be held out (a "
        "leaf's only labelled document never is: its leaf would have none to train on, unlike a test document's)"
    )
    fallback = model_settings.resolved()
    log.warning(
        "tuning skipped: %s; %s keep their fallback values (%s)",
        reason,
        ", ".join(grid_spec),
        ", ".join(f"{k} {getattr(fallback, k)}" for k in grid_spec),
    )
    info = {"chosen": {}, "tuned": False, "skipped": True, "reason": reason, "sample": drawn.as_dict()}
    return fallback, info, None


def _record_choice(
    grid_rows: List[dict], grid_spec: Dict[str, list], tune: TuneSettings, best_pick: Tuple[int, int], extra: dict
) -> Dict[str, object]:
    """The training summary's ``tuning`` record: what was chosen, the argmax, every grid point's scores."""
    best, pick = best_pick
    return {
        "tuned": True,
        **extra,
        "chosen": {k: grid_rows[pick][k] for k in grid_spec},
        "metric": tune.metric,
        "folds": tune.folds,
        "selection": tune.selection,
        "best_cv": {k: grid_rows[best][k] for k in grid_spec},
        "pick_score": grid_rows[pick]["cv_score"],
        "grid": grid_rows,
    }


def _log_choice(info: Dict[str, object], grid_spec: Dict[str, list], where: str) -> None:
    grid_rows = info["grid"]
    log.info(
        "tuning chose %s (CV %s %.4f, %s; highest %.4f at %s) in %.1fs%s; grid: %s",
        info["chosen"],
        info["metric"],
        info["pick_score"],
        info["selection"],
        max(r["cv_score"] for r in grid_rows),
        info["best_cv"],
        info["seconds"],
        where,
        "; ".join(f"{ {k: r[k] for k in grid_spec} }: {r['cv_score']:.4f} +- {r['cv_std']:.4f}" for r in grid_rows),
    )
