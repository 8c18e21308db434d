"""The ``in_taxonomy`` column on Spark: the corpus counts a train records, the score in each prediction task.

The arithmetic is :mod:`pcem_spark.core.in_taxonomy`. :func:`corpus_counts` is one pass over the training
documents (a ``mapInArrow`` of per-partition sums, summed by Spark: the driver receives one row per term,
never the documents); :func:`in_taxonomy_of_blocks` ships the paths' word distributions and the background
to the executors once; :func:`in_taxonomy_summary` scores the labelled documents and records the
suggested threshold.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Optional

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.core.in_taxonomy import (
    Background,
    CorpusCounts,
    FitWeights,
    background_of,
    held_out_scores,
    in_taxonomy_of_likelihoods,
    path_log_likelihoods,
)
from pcem_spark.engine.arrow_io import arrow_blocks, csr_of
from pcem_spark.engine.shipping import ship
from pcem_spark.model.typicality import _lookup_of

__all__ = [
    "KEPT_IN_SCOPE",
    "corpus_counts",
    "in_taxonomy_of_blocks",
    "in_taxonomy_summary",
    "model_background",
    "model_smoothing",
    "held_out_frame",
    "record_in_taxonomy",
    "resolve_min_in_taxonomy",
]

log = logging.getLogger(__name__)

# The suggested threshold keeps this share of the labelled documents in the taxonomy.
KEPT_IN_SCOPE = 0.95
# Row keys of corpus_counts' sums beside the terms' (>= 0).
_UNKNOWN, _LABELLED_TOKENS, _LABELLED_UNKNOWN, _DOCUMENTS, _LABELLED_DOCUMENTS = -1, -2, -3, -4, -5
_SUMS = T.StructType([T.StructField("key", T.LongType(), False), T.StructField("value", T.DoubleType(), False)])


def _partition_sums(batches, to_counts, vocab_size: int, block_size: int):
    """mapInArrow body: one partition's term counts (key = term) and its totals (negative keys), sparse."""
    import pyarrow as pa

    terms = np.zeros(vocab_size)
    totals = np.zeros(5)  # unknown, labelled tokens, labelled unknown, documents, labelled documents
    for b in arrow_blocks(batches, block_size):
        X, unknown = to_counts(b.column(0))
        labelled = np.asarray(b.column(1).is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        lengths = np.asarray(X.sum(axis=1)).ravel()
        terms += np.asarray(X.sum(axis=0)).ravel()
        u = np.zeros(len(lengths)) if unknown is None else unknown
        totals += [u.sum(), lengths[labelled].sum(), u[labelled].sum(), len(lengths), labelled.sum()]
    nz = np.flatnonzero(terms)
    keys = np.concatenate([nz, [_UNKNOWN, _LABELLED_TOKENS, _LABELLED_UNKNOWN, _DOCUMENTS, _LABELLED_DOCUMENTS]])
    values = np.concatenate([terms[nz], totals])
    yield pa.RecordBatch.from_arrays([pa.array(keys, pa.int64()), pa.array(values, pa.float64())], ["key", "value"])


def corpus_counts(docs: DataFrame, model, features_col: Optional[str] = None) -> CorpusCounts:
    """The training corpus's counts for ``model``'s vocabulary: one pass over ``docs``.

    ``docs`` has ``text`` and ``labels`` (null = unlabelled), or, with ``features_col``, term-count vectors over
    the vocabulary instead of text (then no unknown token is counted: the featuriser was the caller's). Text is
    tokenised as prediction does (:meth:`pcem_spark.model.PathModel.text_featurizer`); a model whose tokenizer
    is Spark ML's counts its terms through Spark ML's featurisation, and no unknown token.
    """
    vocab_size = len(model.vocabulary)
    featurizer = model.text_featurizer() if features_col is None else None
    if featurizer is not None:
        shipped = ship(docs.sparkSession, featurizer)
        source = docs.select(F.col("text"), F.col("labels"))

        def to_counts(column):
            return shipped.value.matrix_and_unknown(column)

    else:
        if features_col is None:
            from pcem_spark.engine.features import featurize

            docs = featurize(docs, model.vocabulary, model.feature_settings, features_col="_pcem_features")
            features_col = "_pcem_features"
        source = docs.select(F.col(features_col), F.col("labels"))

        def to_counts(column):
            return csr_of(column, vocab_size), None

    body = partial(
        _partition_sums, to_counts=to_counts, vocab_size=vocab_size, block_size=model.model_settings.block_size
    )
    rows = source.mapInArrow(body, _SUMS).groupBy("key").agg(F.sum("value").alias("value")).toArrow()
    keys = rows.column("key").to_numpy(zero_copy_only=False)
    values = rows.column("value").to_numpy(zero_copy_only=False)
    terms = np.zeros(vocab_size)
    at = keys >= 0
    terms[keys[at]] = values[at]
    total = dict(zip(keys[~at].tolist(), values[~at].tolist()))
    return CorpusCounts(
        terms,
        float(terms.sum()),
        float(total.get(_UNKNOWN, 0.0)),
        float(total.get(_LABELLED_TOKENS, 0.0)),
        float(total.get(_LABELLED_UNKNOWN, 0.0)),
        int(total.get(_DOCUMENTS, 0)),
        int(total.get(_LABELLED_DOCUMENTS, 0)),
    )


def model_background(model) -> Optional[Background]:
    """The score's background of ``model`` (None: a model saved before the score, or a baseline whose
    components are not one per path, has none)."""
    counts = getattr(model, "corpus", None)
    if counts is None or model.spec.structure is not None:
        return None
    return background_of(counts, model_smoothing(model))


def model_smoothing(model) -> float:
    """The Laplace pseudo-count ``model``'s word distributions were fitted with (its resolved setting)."""
    smoothing = model.model_settings.smoothing
    if isinstance(smoothing, (int, float)) and not isinstance(smoothing, bool) and smoothing > 0:
        return float(smoothing)
    return float(model.training_summary.get("smoothing", 1.0) or 1.0)


def in_taxonomy_of_blocks(spark, model, min_in_taxonomy: float = float("-inf"), from_scores: bool = False):
    """``in_taxonomy(X, unknown, best, path_ll=None)`` of a block for ``model``; None without a background
    (then a verdict, ``min_in_taxonomy`` > -inf, is refused: InputError).

    ``from_scores``: the decoder gives each row's ``path_ll`` (its log-likelihood under its path, read off
    the scores it computed: :func:`pcem_spark.core.decoding.best_path_log_likelihood`), so only the
    background is shipped; else the paths' word distributions are shipped too and each word looked up.
    """
    background = model_background(model)
    if background is None:
        if min_in_taxonomy > float("-inf"):
            resolve_min_in_taxonomy(min_in_taxonomy, model)  # raises: this model has no in_taxonomy score
        return None
    # the background as plain arrays and numbers: what a staged file may hold (engine.shipping)
    params = None if from_scores else (model.params.log_base, model.params.log_ratio)
    bc = ship(spark, (params, tuple(background)))

    def in_taxonomy(X, unknown, best, path_ll=None):
        params, background = bc.value
        if path_ll is None:
            if params is None:
                raise ValueError("in_taxonomy: this decoder was to give each row's path log-likelihood")
            log_base, log_ratio = params
            path_ll = path_log_likelihoods(X, log_base, log_ratio, best, _lookup_of(log_ratio))
        return in_taxonomy_of_likelihoods(X, unknown, path_ll, Background(*background))

    return in_taxonomy


def resolve_min_in_taxonomy(value, model) -> float:
    """``--min-in-taxonomy`` / ``predict.min_in_taxonomy`` as a number: "none" (or None) is no verdict,
    "suggested" the model's suggested threshold; a model without the score refuses a verdict (InputError)."""
    from pcem_spark.errors import InputError

    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return float("-inf")
    if isinstance(value, float) and value == float("-inf"):  # OutputOptions' default: no verdict
        return value
    if model_background(model) is None:
        raise InputError(
            "min_in_taxonomy: this model has no in_taxonomy score (saved before it existed, or a "
            f"{model.model_settings.method} model, whose components are not paths); retrain it with this version"
        )
    if isinstance(value, str) and value.strip().lower() == "suggested":
        suggested = (model.training_summary.get("in_taxonomy") or {}).get("suggested_threshold")
        if suggested is None:
            raise InputError(
                "min_in_taxonomy = suggested: the model recorded no suggested threshold (no labelled document)"
            )
        return float(suggested)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(
            f"min_in_taxonomy must be a number (nats per token), 'suggested' or 'none', got {value!r}"
        ) from None
    if not np.isfinite(number):
        raise InputError(f"min_in_taxonomy must be finite, got {value!r}")
    return number


def record_in_taxonomy(model, docs: DataFrame, features_col: Optional[str] = None) -> None:
    """Give a freshly trained ``model`` its corpus counts (:func:`corpus_counts` of ``docs``: id, text or
    ``features_col``, labels) and the training summary's ``in_taxonomy`` record (:func:`in_taxonomy_summary`);
    nothing for a baseline whose components are not paths (its score would compare a document with a node)."""
    if model.spec.structure is not None:
        return
    if "labels" not in docs.columns:
        docs = docs.withColumn("labels", F.lit(None).cast("array<string>"))
    model.corpus = corpus_counts(docs, model, features_col)
    labelled = docs.where(F.col("labels").isNotNull())
    model.training_summary["in_taxonomy"] = in_taxonomy_summary(model, labelled, features_col)
    record = model.training_summary["in_taxonomy"]
    log.info(
        "in_taxonomy: %d documents (%d labelled), unknown tokens %.1f%% (labelled %.1f%%), suggested threshold %s",
        record["documents"],
        record["labelled_documents"],
        100 * record["unknown_rate"],
        100 * record["labelled_unknown_rate"],
        record.get("suggested_threshold"),
    )


def _held_out_batches(batches, to_counts, shipped, block_size: int):
    """mapInArrow body: each labelled row's held-out score (core.in_taxonomy.held_out_scores), in blocks."""
    import pyarrow as pa

    log_base, log_ratio, background, fit = shipped.value
    background, fit = Background(*background), FitWeights(*fit)
    for b in arrow_blocks(batches, block_size):
        X, unknown = to_counts(b.column(0))
        paths = b.column(1).to_numpy(zero_copy_only=False).astype(np.int64)
        scores = held_out_scores(X, unknown, paths, log_base, log_ratio, background, fit, _lookup_of(log_ratio))
        yield pa.RecordBatch.from_arrays([pa.array(scores, pa.float64())], ["in_taxonomy"])


def held_out_frame(model, labelled: DataFrame, features_col: Optional[str] = None) -> DataFrame:
    """``in_taxonomy`` (one column) of each labelled row of ``labelled`` under its labelled path (the first of
    several), its own counts taken out of that path (:func:`pcem_spark.core.in_taxonomy.held_out_scores`): what
    documents of the taxonomy the model was not fitted on score, which the suggested threshold is set on."""
    from pcem_spark.core.taxonomy import PATH_KEY_SEP
    from pcem_spark.engine.label_columns import first_label_path

    spark = labelled.sparkSession
    taxonomy = model.taxonomy
    keys = [(PATH_KEY_SEP.join(taxonomy.real_path(j)), j) for j in range(taxonomy.n_paths)]
    index = spark.createDataFrame(keys, "path_key string, path_index int")
    featurizer = model.text_featurizer() if features_col is None else None
    source_col = F.col("text") if featurizer is not None else F.col(features_col or "_pcem_features")
    if featurizer is None and features_col is None:
        from pcem_spark.engine.features import featurize

        labelled = featurize(labelled, model.vocabulary, model.feature_settings, features_col="_pcem_features")
    rows = labelled.select(
        source_col.alias("source"), F.array_join(first_label_path(labelled, "labels"), PATH_KEY_SEP).alias("path_key")
    ).join(F.broadcast(index), "path_key")
    background = model_background(model)
    settings = model.model_settings
    path_weight = settings.path_weight if isinstance(settings.path_weight, (int, float)) else 1.0
    fit = FitWeights(
        model_smoothing(model), float(path_weight), float(settings.doc_length), taxonomy.path_node_matrix(sparse=True)
    )
    shipped = ship(spark, (model.params.log_base, model.params.log_ratio, tuple(background), tuple(fit)))
    vocab_size = len(model.vocabulary)
    if featurizer is not None:
        text_featurizer = ship(spark, featurizer)

        def to_counts(column):
            return text_featurizer.value.matrix_and_unknown(column)

    else:

        def to_counts(column):
            return csr_of(column, vocab_size), None

    body = partial(_held_out_batches, to_counts=to_counts, shipped=shipped, block_size=model.model_settings.block_size)
    return rows.select("source", "path_index").mapInArrow(body, "in_taxonomy double")


def in_taxonomy_summary(model, labelled: DataFrame, features_col: Optional[str] = None) -> dict:
    """The training summary's ``in_taxonomy`` record: the corpus rates, the labelled documents' held-out scores'
    quantiles (:func:`held_out_frame`) and the suggested threshold (the one that keeps :data:`KEPT_IN_SCOPE` of
    them)."""
    counts = model.corpus
    background = model_background(model)
    record = {
        "scale": "nats per token: log-likelihood ratio of the predicted path against the training corpus",
        "unknown_rate": counts.unknown / max(counts.tokens + counts.unknown, 1.0),
        "labelled_unknown_rate": counts.labelled_unknown / max(counts.labelled_tokens + counts.labelled_unknown, 1.0),
        "unknown_token_score": background.log_unknown_ratio,
        "documents": counts.documents,
        "labelled_documents": counts.labelled_documents,
    }
    if counts.labelled_documents == 0:
        record["suggested_threshold"] = None
        return record
    scores = held_out_frame(model, labelled, features_col)
    probabilities = [0.0, 1.0 - KEPT_IN_SCOPE, 0.25, 0.5, 0.75, 1.0]
    quantiles = scores.approxQuantile("in_taxonomy", probabilities, 0.001)
    if quantiles:
        record["labelled_quantiles"] = {f"{p:g}": float(q) for p, q in zip(probabilities, quantiles)}
        record["suggested_threshold"] = float(quantiles[1])
        record["kept_in_scope"] = KEPT_IN_SCOPE
    else:
        record["suggested_threshold"] = None
    return record
