"""Training from documents, the one path shared by ``PathEM.fit`` and ``pcem train``.

:func:`train` fits on labelled and unlabelled documents: vocabulary, label
checks, warm start, cross-validation of the settings left at "auto"
(:mod:`pcem_spark.ml.tuning`), then the fit on packed blocks
(:func:`pcem_spark.model.fitting.fit_blocks`); :class:`TrainOptions` bundles
what it does beyond the settings. :func:`train_weak` fits on weak labels from
label descriptions or precomputed similarities (the dataless setting).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.blocks import EMBEDDING_COL, label_blocks, node_score_blocks, packed_blocks
from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary
from pcem_spark.engine.passes import FitResult
from pcem_spark.errors import InputError
from pcem_spark.ml.calibrating import fit_calibration
from pcem_spark.ml.tune_settings import TuneSettings
from pcem_spark.ml.tuning import resolve_auto
from pcem_spark.model.fitting import fit_blocks
from pcem_spark.model.in_taxonomy import record_in_taxonomy
from pcem_spark.model.labels import check_label_paths
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import ModelSettings
from pcem_spark.model.stop_words import fallback_stop_words, resolve_stop_words

__all__ = ["TrainOptions", "train", "train_weak"]

log = logging.getLogger(__name__)


@dataclass
class TrainOptions:
    """What :func:`train` does beyond the settings; every field is optional.

    ``vocabulary`` / ``featurized``: let several fits share one featurisation
    (``featurized``: ``id, features, labels`` term counts over
    ``vocabulary``); by default the vocabulary is fitted on the documents.
    ``tune``: the cross-validation of the settings left at "auto" (default
    :class:`TuneSettings`); ``seed``: of its folds (default
    ``model_settings.seed``); ``extra_grid``: more settings to cross-validate
    (``pcem train --tune``). ``init_model``: a model directory or a
    :class:`pcem_spark.model.warm.WarmStart` that EM starts from; settings
    left at "auto" take its values, unless ``retune_auto`` (``pcem train
    --tune``) cross-validates the weights again, each fit warm-started.
    ``estimator_class``: what cross-validation fits
    (:class:`pcem_spark.ml.PathEM`; :func:`pcem_spark.ml.train` passes it),
    needed only when something is tuned. ``descriptions``: node -> text, added
    to the node names' words when ``model.names`` uses them; ``node_vectors``:
    node -> vector of the same encoder as the documents' (``--node-embeddings``),
    the name documents' vectors (:func:`_name_vectors`).
    """

    vocabulary: Optional[List[str]] = None
    featurized: Optional[DataFrame] = None
    tune: Optional[TuneSettings] = None
    seed: Optional[int] = None
    extra_grid: Optional[Dict[str, list]] = None
    init_model: Any = None
    retune_auto: bool = False
    estimator_class: Any = None
    descriptions: Optional[Dict[str, str]] = None
    node_vectors: Optional[Dict[str, List[float]]] = None  # --node-embeddings: node -> vector (name documents')
    checkpoint: Any = None  # a pcem_spark.ml.checkpointing.TrainCheckpoint: stages skipped on a resume


def _stage(opts: TrainOptions, name: str, compute):
    """``compute()``, or the result an earlier run recorded in ``opts.checkpoint`` for stage ``name``."""
    return compute() if opts.checkpoint is None else opts.checkpoint.stage(name, compute)


def _fit_result(model: PathModel) -> FitResult:
    """The :class:`FitResult` of a model that cross-validation refitted, from its training summary."""
    summary = model.training_summary
    return FitResult(
        model.params,
        n_iter=summary.get("n_iter", 0),
        converged=summary.get("converged", False),
        loglik_history=summary.get("loglik_history", []),
        iter_seconds=summary.get("iter_seconds", []),
        n_labeled=summary.get("n_labeled", 0),
        n_unlabeled=summary.get("n_unlabeled", 0),
        smoothing=summary.get("smoothing", 1.0),
    )


def train(
    docs: DataFrame,
    taxonomy: Taxonomy,
    feature_settings: FeatureSettings,
    model_settings: ModelSettings,
    options: Optional[TrainOptions] = None,
) -> Tuple[PathModel, FitResult]:
    """Fit a model on a validated documents DataFrame (``id, text, labels``).

    Settings left at ``"auto"`` (unlabelled weight, path weight) and any
    ``options.extra_grid`` are chosen by cross-validation on the labelled
    documents (:func:`pcem_spark.ml.tuning.resolve_auto`, settings
    ``options.tune``); the chosen values and CV scores go into the training
    summary. ``options``: shared features, tuning, warm start
    (:class:`TrainOptions`).
    """
    opts = options or TrainOptions()
    model_settings.validate()
    feature_settings.validate()
    vocabulary, featurized = opts.vocabulary, opts.featurized
    stop_words_info, coverage = None, None
    if featurized is None:
        check_label_paths(docs, taxonomy)
        from pcem_spark.model.label_checks import label_coverage, warn_label_coverage

        coverage = label_coverage(docs, taxonomy)  # also what the category names fade with
        warn_label_coverage(coverage, taxonomy)
        if vocabulary is None:
            # stop_words = "auto": decided from the labelled documents before the vocabulary is fitted.
            given = feature_settings
            feature_settings, stop_words_info = _stage(
                opts,
                "stop_words",
                lambda: resolve_stop_words(
                    docs, taxonomy, given, model_settings.seed if opts.seed is None else opts.seed
                ),
            )
            chosen = feature_settings
            vocabulary = _stage(opts, "vocabulary", lambda: fit_vocabulary(docs, chosen))
        else:
            feature_settings, stop_words_info = fallback_stop_words(
                feature_settings, "the vocabulary was given: the list it was built with is not known"
            )
        featurized = featurize(
            docs.select("id", "text", "labels", *_train_vectors(docs, feature_settings.embedding)),
            vocabulary,
            feature_settings,
        )
    else:
        # Features given (PathEM on featuresCol): no text is tokenised here; a model never stores "auto".
        feature_settings, stop_words_info = fallback_stop_words(
            feature_settings, "features were given: the caller's featurisation decides the stop words"
        )
    from pcem_spark.model.warm import CROSS_VALIDATED_SETTINGS, as_warm_start

    warm = as_warm_start(opts.init_model)
    if warm is not None:
        warm.check(taxonomy, model_settings)
        if not opts.retune_auto:  # the weights left at "auto" are the previous model's, not cross-validated again
            model_settings, taken = warm.inherit(model_settings, CROSS_VALIDATED_SETTINGS)
            model_settings = _generative_without_labels(model_settings, taken, featurized, warm)
    with ExitStack() as cleanup:
        names_info, names_apply = None, opts.featurized is None and model_settings.names != "off"
        if opts.featurized is None and model_settings.names == "off":
            names_info = {"setting": "off", "choice": "off", "reason": "model.names = off"}
        if _cross_validated(model_settings, opts, featurized) or model_settings.calibration != "none" or names_apply:
            # Read again by the names' decision, the cross-validation sample(s) and the refit.
            featurized = featurized.cache()
            cleanup.callback(featurized.unpersist)
        if names_apply:  # features given (PathEM on featuresCol): their featuriser is not this one, no names
            featurized, names_info = _with_names(
                featurized, taxonomy, vocabulary, feature_settings, model_settings, opts, coverage
            )
        model, result = _tune_and_fit(featurized, taxonomy, vocabulary, feature_settings, model_settings, opts, warm)
        # the in_taxonomy score's background: the training documents as read (text), else the given features
        if opts.featurized is None:
            record_in_taxonomy(model, docs.select("id", "text", "labels"))
        else:
            record_in_taxonomy(model, opts.featurized.select("id", "features", "labels"), "features")
    model.feature_settings = _recorded_vectors(model, feature_settings)
    if stop_words_info is not None:
        model.training_summary["stop_words"] = stop_words_info
    if names_info is not None:
        model.training_summary["names"] = names_info
    return model, result


def _cross_validated(model_settings: ModelSettings, opts: TrainOptions, featurized) -> bool:
    """Whether the fit cross-validates: settings left at "auto", an extra grid, or the vectors' scale (only
    when the documents have vectors: without them it is no setting, and nothing is cached for it)."""
    scale = model_settings.tunes_embedding_weight() and EMBEDDING_COL in featurized.columns
    return bool(model_settings.auto_params() or opts.extra_grid or scale)


def _train_vectors(docs: DataFrame, setting: str) -> List:
    """The documents' vectors as the fit reads them (``embedding``, array<float>), or nothing.

    ``setting`` is ``features.embedding`` (:func:`pcem_spark.io.embeddings.resolve_embedding_column`).
    ``docs`` read by :func:`pcem_spark.io.documents.read_documents` have the column named ``embedding`` whatever
    the input called it, and checked row by row (rejects). Documents built another way (``PathEM.fit`` on a
    DataFrame) are checked here: a row whose vector is missing, of another length or not finite is an
    InputError naming its id -- the fit would otherwise weigh a wrong vector.
    """
    from pcem_spark.io.embeddings import as_float_array, embedding_reason, resolve_embedding_column, usual_dimension

    if str(setting).strip().lower() in ("none", ""):
        return []
    column = EMBEDDING_COL if EMBEDDING_COL in docs.columns else resolve_embedding_column(docs.columns, setting)
    if column is None:
        return []
    vectors = docs.select("id", as_float_array(docs, column).alias(EMBEDDING_COL))
    dimension = usual_dimension(vectors, EMBEDDING_COL)
    if dimension is None:
        return []
    bad = vectors.select("id", embedding_reason(F.col(EMBEDDING_COL), dimension).alias("reason")).where(
        F.col("reason").isNotNull()
    )
    first = bad.first()
    if first is not None:
        raise InputError(f"document {first['id']!r}: {first['reason']} (and {bad.count() - 1} more such rows)")
    return [as_float_array(docs, column).alias(EMBEDDING_COL)]


def _recorded_vectors(model: PathModel, feature_settings: FeatureSettings) -> FeatureSettings:
    """The feature settings a model records: ``embedding`` names the column its vectors came from when its
    regression scores with them, "none" when it does not (a generative model never needs vectors)."""
    uses = model.linear is not None and model.linear.embedding_dim > 0
    name = feature_settings.embedding if uses else "none"
    if uses and name.strip().lower() == "auto":
        name = EMBEDDING_COL
    return replace(model.feature_settings, embedding=name, embedding_model=feature_settings.embedding_model)


def _with_names(featurized, taxonomy, vocabulary, feature_settings, model_settings, opts, coverage=None):
    """``featurized`` (cached) with the name documents when ``model.names`` uses them (the union is not cached
    again: its large part is), and what was decided (:func:`pcem_spark.model.names.resolve_names`)."""
    from pcem_spark.model.names import resolve_names

    seed = model_settings.seed if opts.seed is None else opts.seed
    name_docs, info = resolve_names(
        featurized,
        taxonomy,
        vocabulary,
        feature_settings,
        model_settings,
        opts.descriptions,
        seed,
        coverage,
    )
    if name_docs is None:
        return featurized, info
    columns = ["id", "features", "labels"]
    if EMBEDDING_COL in featurized.columns:
        columns.append(EMBEDDING_COL)
        if opts.node_vectors:
            first = featurized.where(F.col(EMBEDDING_COL).isNotNull()).select(F.size(EMBEDDING_COL)).first()
            given = len(next(iter(opts.node_vectors.values())))
            if first is not None and first[0] != given:
                raise InputError(
                    f"--node-embeddings: the node vectors have {given} values and the documents' {first[0]}: "
                    "embed the category names with the documents' encoder"
                )
        name_docs, info["node_vectors"] = _name_vectors(name_docs, taxonomy, opts.node_vectors)
    return featurized.select(*columns).unionByName(name_docs, allowMissingColumns=True), info


def _name_vectors(name_docs: DataFrame, taxonomy: Taxonomy, node_vectors) -> Tuple[DataFrame, int]:
    """The name documents with their path's vector (:func:`pcem_spark.io.embeddings.path_vectors` of
    ``--node-embeddings``), and how many got one. Without node vectors, or for a path none of whose nodes has
    one, a name document has no vector: its row of the vectors is zeros (engine.arrow_io.vector_rows), so its
    words alone are its evidence."""
    if not node_vectors:
        return name_docs, 0
    from pyspark.sql import types as T

    from pcem_spark.io.embeddings import path_vectors
    from pcem_spark.model.names import NAME_ID_PREFIX

    by_path = path_vectors(node_vectors, taxonomy)
    rows = [(f"{NAME_ID_PREFIX}{j}", [float(x) for x in v]) for j, v in by_path.items()]
    schema = T.StructType(
        [T.StructField("id", T.StringType()), T.StructField(EMBEDDING_COL, T.ArrayType(T.FloatType()))]
    )
    vectors = name_docs.sparkSession.createDataFrame(rows, schema)
    with_vectors = name_docs.join(F.broadcast(vectors), on="id", how="left")
    return with_vectors, len(rows)


def _generative_without_labels(model_settings: ModelSettings, taken: Dict[str, object], featurized, warm):
    """``model_settings`` with the generative family when the family inherited from a warm start ("auto" left
    to the previous model) has a regression and this batch has no labelled document to fit it on.

    A daily crawl's batch is often unlabelled: under ``model.family = "auto"`` it still trains (EM from the
    previous parameters), where an explicit combined or discriminative family exits 2 (it needs labels).
    """
    if taken.get("family") in (None, "generative") or featurized is None or "labels" not in featurized.columns:
        return model_settings
    if featurized.where(F.col("labels").isNotNull()).limit(1).count():
        return model_settings
    log.warning(
        "warm start: the init model's family is %s, whose regression needs labelled documents, and this batch has "
        "none: model.family = auto trains the generative family (EM from the previous parameters)",
        taken["family"],
    )
    warm.inherited["family"] = "generative"
    return replace(model_settings, family="generative")


def _tune_and_fit(
    featurized: DataFrame,
    taxonomy: Taxonomy,
    vocabulary: List[str],
    feature_settings: FeatureSettings,
    model_settings: ModelSettings,
    opts: TrainOptions,
    warm,
) -> Tuple[PathModel, FitResult]:
    """Cross-validate the settings left at "auto" (if any), fit on every document, then calibrate."""
    seed = model_settings.seed if opts.seed is None else opts.seed
    if model_settings.family == "vmf" and EMBEDDING_COL not in featurized.columns:
        raise InputError(
            "model.family = vmf models the documents' vectors, and the documents have none: give them an "
            "embedding column (features.embedding), or use another family"
        )
    # train() cached featurized when it is read more than once (the cross-validation, the refit, calibration).
    info = None
    if _cross_validated(model_settings, opts, featurized):
        given = model_settings

        def cross_validate():
            return resolve_auto(
                featurized,
                taxonomy,
                vocabulary,
                feature_settings,
                given,
                opts.tune,
                seed=seed,
                extra_grid=opts.extra_grid,
                init_model=None if warm is None else warm.path,
                estimator_class=opts.estimator_class,
            )

        if opts.checkpoint is None:
            model_settings, info, tuned = cross_validate()
        else:
            # The choice and its scores are recorded, not a model CrossValidator refitted (the exhaustive
            # strategy): a resume past this stage refits the chosen settings below instead.
            refitted: list = []

            def choice():
                chosen, scores, tuned = cross_validate()
                refitted.append(tuned)
                return chosen, scores

            model_settings, info = opts.checkpoint.stage("cross_validation", choice)
            tuned = refitted[0] if refitted else None
        if tuned is not None:
            return _calibrated(tuned, featurized, opts, seed), _fit_result(tuned)
    lookup, path_node = taxonomy.path_lookup(), taxonomy.path_node_matrix(sparse=True)
    from pcem_spark.engine.em_checkpoint import em_hook

    with (
        packed_blocks(
            label_blocks(featurized, lookup, path_node, len(vocabulary), model_settings.block_size)
        ) as blocks,
        em_hook(opts.checkpoint),
    ):
        model, result = fit_blocks(blocks, taxonomy, vocabulary, feature_settings, model_settings, warm_start=warm)
    if info is not None:
        model.training_summary["tuning"] = info
    return _calibrated(model, featurized, opts, seed), result


def _calibrated(model: PathModel, featurized: DataFrame, opts: TrainOptions, seed: int) -> PathModel:
    """``model`` with its probabilities' calibration fitted (:func:`pcem_spark.ml.calibrating.fit_calibration`)."""
    # The refit's own settings: its smoothing is the number "auto" resolved to.
    calibration, model.training_summary["calibration"] = _stage(
        opts,
        "calibration",
        lambda: fit_calibration(
            featurized, model.taxonomy, len(model.vocabulary), model.model_settings, opts.tune, seed
        ),
    )
    model.temperature, model.probability_map = calibration if calibration is not None else (None, None)
    return model


def train_weak(
    docs: DataFrame,
    taxonomy: Taxonomy,
    descriptions: Optional[Dict[str, str]],
    feature_settings: FeatureSettings,
    model_settings: ModelSettings,
    weak_mode: str = "argmax",
    min_similarity: float = 0.0,
    weak_col: Optional[str] = None,
    warm_start=None,
) -> Tuple[PathModel, FitResult]:
    """Fit on weak labels from label descriptions (the dataless setting).

    Every document (or, with ``weak_col``, those where that boolean column is
    true) gets node scores from its cosine similarity to the descriptions --
    or, with ``descriptions=None``, from its precomputed ``similarities`` map;
    documents without a confident weak label stay unlabelled. True labels in
    ``docs`` are ignored.
    """
    from pcem_spark.model.weak_labels import WeakLabelSettings, weak_label, weak_label_from_similarities

    model_settings.validate()
    feature_settings.validate()
    feature_settings, stop_words_info = fallback_stop_words(
        feature_settings, "weak supervision: no true labels to decide on, the list is kept"
    )
    cols = ["id", "text"] + ([] if descriptions else ["similarities"]) + ([weak_col] if weak_col else [])
    vocabulary = fit_vocabulary(
        docs.select("id", "text", F.lit(None).cast("array<string>").alias("labels")),
        replace(feature_settings, vocabulary_docs="all"),
    )
    feats = featurize(docs.select(*cols), vocabulary, feature_settings)
    if descriptions:
        weak = weak_label(
            feats,
            vocabulary,
            feature_settings,
            taxonomy,
            descriptions,
            WeakLabelSettings(weak_mode, min_similarity, model_settings.block_size),
        )
    else:
        weak = weak_label_from_similarities(feats, taxonomy, weak_mode, min_similarity, model_settings.block_size)
    if weak_col:
        weak = weak.withColumn("node_scores", F.when(F.col(weak_col), F.col("node_scores")))
    with packed_blocks(node_score_blocks(weak, taxonomy.n_nodes, len(vocabulary), model_settings.block_size)) as blocks:
        model, result = fit_blocks(
            blocks, taxonomy, vocabulary, feature_settings, model_settings, warm_start=warm_start
        )
    record_in_taxonomy(model, docs.select("id", "text"))  # no true labels: no suggested threshold
    model.feature_settings = _recorded_vectors(model, feature_settings)
    if stop_words_info is not None:
        model.training_summary["stop_words"] = stop_words_info
    if model_settings.calibration != "none":
        log.warning("calibration skipped: weak supervision has no true labels to calibrate on")
    model.training_summary["calibration"] = {"method": "none", "reason": "weak supervision: no true labels"}
    return model, result
