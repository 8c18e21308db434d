"""TODO docstring (model)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.blocks import RDD_NEEDS, blocks_from_labels, blocks_from_node_scores, cache_blocks
from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary
from pcem_spark.engine.passes import FitResult
from pcem_spark.engine.session import require_classic_session
from pcem_spark.ml.tuning import resolve_auto
from pcem_spark.model.fitting import fit_blocks
from pcem_spark.model.labels import check_label_paths
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import ModelSettings

log = logging.getLogger(__name__)


def train(
    docs: DataFrame,
    taxonomy: Taxonomy,
    feature_settings: FeatureSettings,
    model_settings: ModelSettings,
    vocabulary: Optional[List[str]] = None,
    featurized: Optional[DataFrame] = None,
    tune=None,
    seed: Optional[int] = None,
    extra_grid: Optional[Dict[str, list]] = None,
    init_model=None,
    retune_auto: bool = False,
    estimator_class=None,
) -> Tuple[PathModel, FitResult]:
    """Fit a model on a validated documents DataFrame (``id, text, labels``).

    ``vocabulary``/``featurized`` let several methods share one featurisation
    (the experiment runner); by default the vocabulary is fitted on ``docs``.
    Settings left at ``"auto"`` (unlabelled weight, path weight) and any
    ``extra_grid`` (``pcem train --tune``) are chosen by cross-validation on
    the labelled documents (:func:`pcem_spark.tuning.resolve_auto`, settings
    ``tune``); the chosen values and CV scores go into the training summary.

    ``init_model`` (a model directory or a :class:`pcem_spark.warm.WarmStart`):
    EM starts from that model's parameters (:mod:`pcem_spark.warm`); settings
    left at "auto" take its values, unless ``retune_auto`` (``pcem train
    --tune``) cross-validates the weights again, each fit warm-started.

    ``estimator_class``: what cross-validation fits (:class:`pcem_spark.ml.PathEM`;
    :func:`pcem_spark.ml.train` passes it). Needed only when something is tuned.
    """
    require_classic_session(docs, "model.train", RDD_NEEDS)
    model_settings.validate()
    feature_settings.validate()
    if featurized is None:
        check_label_paths(docs, taxonomy)
        from pcem_spark.model.label_checks import label_coverage, warn_label_coverage

        warn_label_coverage(label_coverage(docs, taxonomy), taxonomy)
        if vocabulary is None:
            vocabulary = fit_vocabulary(docs, feature_settings)
        featurized = featurize(docs.select("id", "text", "labels"), vocabulary, feature_settings)
    from pcem_spark.model.warm import CROSS_VALIDATED_SETTINGS, as_warm_start

    warm = as_warm_start(init_model)
    if warm is not None:
        warm.check(taxonomy, model_settings)
        if not retune_auto:  # the weights left at "auto" are the previous model's, not cross-validated again
            model_settings, _ = warm.inherit(model_settings, CROSS_VALIDATED_SETTINGS)
    info = None
    if model_settings.auto_params() or extra_grid:
        featurized = featurized.cache()
        try:
            model_settings, info, tuned = resolve_auto(
                featurized,
                taxonomy,
                vocabulary,
                feature_settings,
                model_settings,
                tune,
                seed=model_settings.seed if seed is None else seed,
                extra_grid=extra_grid,
                init_model=None if warm is None else warm.path,
                estimator_class=estimator_class,
            )
        except BaseException:
            featurized.unpersist()
            raise
        if tuned is not None:
            featurized.unpersist()
            summary = tuned.training_summary
            result = FitResult(
                tuned.params,
                n_iter=summary.get("n_iter", 0),
                converged=summary.get("converged", False),
                loglik_history=summary.get("loglik_history", []),
                iter_seconds=summary.get("iter_seconds", []),
                n_labeled=summary.get("n_labeled", 0),
                n_unlabeled=summary.get("n_unlabeled", 0),
                smoothing=summary.get("smoothing", 1.0),
            )
            return tuned, result
    blocks = cache_blocks(
        blocks_from_labels(
            featurized,
            taxonomy.path_lookup(),
            taxonomy.path_node_matrix(sparse=True),
            len(vocabulary),
            model_settings.block_size,
        )
    )
    try:
        model, result = fit_blocks(blocks, taxonomy, vocabulary, feature_settings, model_settings, warm_start=warm)
        if info is not None:
            model.training_summary["tuning"] = info
        return model, result
    finally:
        blocks.unpersist()
        if info is not None:
            featurized.unpersist()


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
    from pcem_spark.model.weak_labels import weak_label, weak_label_from_similarities

    require_classic_session(docs, "model.train_weak", RDD_NEEDS)
    model_settings.validate()
    feature_settings.validate()
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
            weak_mode,
            min_similarity,
            model_settings.block_size,
        )
    else:
        weak = weak_label_from_similarities(feats, taxonomy, weak_mode, min_similarity, model_settings.block_size)
    if weak_col:
        weak = weak.withColumn("node_scores", F.when(F.col(weak_col), F.col("node_scores")))
    blocks = cache_blocks(blocks_from_node_scores(weak, taxonomy.n_nodes, len(vocabulary), model_settings.block_size))
    try:
        return fit_blocks(blocks, taxonomy, vocabulary, feature_settings, model_settings, warm_start=warm_start)
    finally:
        blocks.unpersist()
