"""The files of a saved model directory: format versions and the readers of its parts.

:meth:`pcem_spark.model.PathModel.save` writes ``metadata/`` (one JSON line),
``vocabulary/`` and ``parameters/`` (Parquet); :meth:`~pcem_spark.model.PathModel.load`
reads them with the functions here, each refusing damaged content with a
ValueError / InputError that names what is wrong.
"""

from __future__ import annotations

import json
import logging
from typing import NamedTuple, Optional

import numpy as np
import scipy.sparse as sp
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pcem_spark.core.calibration import Calibration
from pcem_spark.core.in_taxonomy import CorpusCounts
from pcem_spark.core.logistic import LinearTables
from pcem_spark.core.parameters import PathParameters
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.features import FeatureSettings
from pcem_spark.engine.limits import check_result_size
from pcem_spark.errors import InputError
from pcem_spark.model.settings import ModelSettings
from pcem_spark.util.faults import reached
from pcem_spark.util.strict_json import loads_strict

__all__ = [
    "CORPUS_KEY",
    "write_model_tables",
    "FORMAT_VERSION",
    "MODEL_PARTS",
    "ModelParts",
    "read_model_parts",
    "READABLE_FORMAT_VERSIONS",
    "read_parameters",
    "LINEAR_PART",
    "parameter_rows",
    "LINEAR_SCHEMA",
    "linear_rows",
    "read_linear",
    "in_index_order",
    "calibration_record",
    "calibration_of",
    "feature_settings_of",
]

log = logging.getLogger(__name__)
# Model settings a model saved before they existed was trained with (not today's defaults).
NAMES_BEFORE_FADE = {"names_fade": 0.0, "names_kept_tokens": 0.0}

FORMAT_VERSION = 3

# 3 added the calibration (``temperature``); older models load uncalibrated, with a warning.
READABLE_FORMAT_VERSIONS = (1, 2, 3)

# The sub-directories of a model: each must hold data before the model is marked complete.
MODEL_PARTS = ("metadata", "vocabulary", "parameters")
# ... and of a combined / discriminative family's model: its softmax regression (read_linear)
LINEAR_PART = "linear"
# The metadata's record of the training corpus's totals (core.in_taxonomy.CorpusCounts); the terms' counts are
# the vocabulary table's corpus_count column. Absent (or null) in a model saved before the in_taxonomy score.
CORPUS_KEY = "corpus"


class ModelParts(NamedTuple):
    """What a saved model version holds, read and checked (:func:`read_model_parts`)."""

    meta: dict
    format_version: int
    taxonomy: Taxonomy
    vocabulary: list
    params: PathParameters
    model_settings: ModelSettings
    feature_settings: FeatureSettings
    linear: Optional[LinearTables] = None
    corpus: Optional[CorpusCounts] = None


def write_model_tables(spark: SparkSession, tmp: str, meta: dict, model) -> None:
    """Write ``model``'s tables under ``tmp`` (the staged version of :meth:`pcem_spark.model.PathModel.save`):
    metadata, vocabulary (with each term's corpus count when the model has the in_taxonomy score's counts),
    parameters and the softmax regression of a combined / discriminative family."""
    spark.createDataFrame([(json.dumps(meta),)], "value string").coalesce(1).write.text(f"{tmp}/metadata")
    if model.corpus is None:
        vocabulary = spark.createDataFrame(list(enumerate(model.vocabulary)), "index int, term string")
    else:
        counts = np.asarray(model.corpus.term_counts, dtype=np.float64).tolist()
        vocabulary = spark.createDataFrame(
            list(zip(range(len(model.vocabulary)), model.vocabulary, counts)),
            "index int, term string, corpus_count double",
        )
    vocabulary.write.parquet(f"{tmp}/vocabulary")
    spark.createDataFrame(
        parameter_rows(model.params),
        "path_index int, log_prior double, log_base double, term_indices binary, log_ratio binary",
    ).write.parquet(f"{tmp}/parameters")
    if model.linear is not None:
        spark.createDataFrame(linear_rows(model.linear), LINEAR_SCHEMA).write.parquet(f"{tmp}/{LINEAR_PART}")


def _corpus_of(meta: dict, vocabulary_table) -> Optional[CorpusCounts]:
    """The saved corpus counts (None for a model saved without them); ValueError when they are damaged."""
    totals = meta.get(CORPUS_KEY)
    if totals is None:
        return None
    if "corpus_count" not in vocabulary_table.column_names:
        raise ValueError("the metadata records corpus totals but the vocabulary has no corpus_count column")
    column = vocabulary_table.column("corpus_count")
    terms = column.to_numpy(zero_copy_only=False).astype(np.float64)
    fields = CorpusCounts._fields[1:]
    if column.null_count or set(totals) != set(fields):
        raise ValueError(f"the corpus counts are incomplete: expected {list(fields)}, got {sorted(totals)}")
    values = [totals[k] for k in fields]
    numbers = np.array([terms.sum(), *values], dtype=np.float64) if terms.size else np.array(values, np.float64)
    if not (np.all(np.isfinite(terms)) and np.all(terms >= 0) and np.all(np.isfinite(numbers)) and min(values) >= 0):
        raise ValueError("the corpus counts are not finite non-negative numbers")
    if not np.isclose(terms.sum(), totals["tokens"], rtol=1e-9, atol=1e-6):
        raise ValueError(f"the terms' corpus counts sum to {terms.sum()}, the metadata says {totals['tokens']} tokens")
    return CorpusCounts(
        terms, *[float(v) if k not in ("documents", "labelled_documents") else int(v) for k, v in zip(fields, values)]
    )


def read_model_parts(spark: SparkSession, snap) -> ModelParts:
    """The parts of one pinned model version (a :class:`pcem_spark.io.snapshots.Snapshot`), each checked.

    Reads only that version's files (:meth:`~pcem_spark.io.snapshots.Snapshot.table`); raises
    :class:`~pcem_spark.errors.InputError` naming what is damaged.
    """
    path = snap.path
    meta_rows = snap.table(spark, "metadata", "text").collect()
    reached("model:read:metadata")
    try:
        meta = loads_strict(meta_rows[0]["value"], f"{path}/metadata", allow_nan=True)
        version = meta.get("format_version")
    except (IndexError, KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise InputError(
            f"{path}/metadata: not a pcem-spark model metadata line ({type(exc).__name__}: "
            f"{exc}); the model directory is damaged, retrain it"
        ) from None
    if version not in READABLE_FORMAT_VERSIONS:
        raise InputError(
            f"{path}: model format version {version}, this pcem-spark reads "
            f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}"
        )
    try:
        taxonomy = Taxonomy(meta["taxonomy"]["children"], root=meta["taxonomy"]["root"])
        vocab = snap.table(spark, "vocabulary")
        if "term" not in vocab.columns or "index" not in vocab.columns:
            raise KeyError("the vocabulary table has no index / term column")
        # As one Arrow table, not a Row per term (a 2**18-term vocabulary collects in a second, not
        # ~20), and put in order here rather than by a Spark sort (one job instead of three).
        wanted = ["index", "term"] + (["corpus_count"] if "corpus_count" in vocab.columns else [])
        vocabulary_table = in_index_order(vocab.select(*wanted).toArrow(), "index", "the vocabulary")
        vocabulary = vocabulary_table.column("term").to_pylist()
        corpus = _corpus_of(meta, vocabulary_table)
        reached("model:read:vocabulary")
        params = read_parameters(spark, snap, version, len(vocabulary))
        reached("model:read:parameters")
        # Models written before unlabeled_weight / path_weight existed were trained with the paper's 1; before
        # names_fade, with a fixed names weight (names_fade 0): a missing key reads as what trained the model.
        model_settings = ModelSettings(**{**NAMES_BEFORE_FADE, **meta["model_settings"]}).resolved()
        feature_settings = feature_settings_of(meta["feature_settings"])
        linear = None
        if meta.get(LINEAR_PART):
            linear = read_linear(spark, snap, params.shape[0], len(vocabulary))
            # the von Mises-Fisher family's tables score unit-length vectors (model.vmf_family.vmf_tables)
            linear = linear._replace(unit_vectors=model_settings.family == "vmf")
            reached("model:read:linear")
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: damaged model ({type(exc).__name__}: {exc}); retrain it") from None
    if params.shape[1] != len(vocabulary) or len(vocabulary) != meta.get("vocab_size", len(vocabulary)):
        raise InputError(
            f"{path}: damaged model: parameters are {params.shape[0]} x {params.shape[1]}, "
            f"the vocabulary has {len(vocabulary)} terms and the metadata says "
            f"{meta.get('vocab_size')}; retrain it"
        )
    return ModelParts(meta, version, taxonomy, vocabulary, params, model_settings, feature_settings, linear, corpus)


def calibration_record(temperature: Optional[float], probability_map=None) -> Optional[dict]:
    """The metadata's ``calibration`` entry of a model calibrated so (None: uncalibrated)."""
    return None if temperature is None else Calibration(temperature, probability_map).as_record()


def read_parameters(spark: SparkSession, snap, version: int, vocab_size: int) -> PathParameters:
    """The ``parameters/`` table of a pinned model version as sparse parameters (either format version)."""
    import scipy.sparse as sp

    path = snap.path
    table = snap.table(spark, "parameters")
    if version == 1:
        # Format 1 stored dense log theta rows.
        n_rows = table.count()
        check_result_size(
            spark,
            n_rows * vocab_size * 8.0,
            f"{path}: the model's parameters ({n_rows:,} rows x {vocab_size:,} terms)",
        )
        rows = table.orderBy("path_index").collect()
        log_theta = np.vstack([np.frombuffer(r["log_theta"], dtype="<f8") for r in rows])
        return PathParameters.from_log_theta(np.array([r["log_prior"] for r in rows]), log_theta)
    # Rows and bytes in one job, checked against the driver's limit before anything is collected.
    size = table.select(F.count(F.lit(1)), F.sum(F.length("term_indices") + F.length("log_ratio"))).first()
    n_rows, size = int(size[0]), int(size[1] or 0)
    check_result_size(
        spark,
        float(size) + n_rows * 32.0,
        f"{path}: the model's parameters ({n_rows:,} rows, {size:,} bytes of non-zero entries)",
    )
    # One Arrow table (no Row per path), put in path order here.
    rows = in_index_order(
        table.select("path_index", "log_prior", "log_base", "term_indices", "log_ratio").toArrow(),
        "path_index",
        "the parameter rows",
    )
    indices = [np.frombuffer(b, dtype="<i4") for b in rows.column("term_indices").to_pylist()]
    values = [np.frombuffer(b, dtype="<f8") for b in rows.column("log_ratio").to_pylist()]
    if any(len(i) != len(v) for i, v in zip(indices, values)) or any(
        len(i) and (i.min() < 0 or i.max() >= vocab_size) for i in indices
    ):
        raise InputError("parameter rows have mismatched or out-of-vocabulary term indices")
    indptr = np.concatenate([[0], np.cumsum([len(i) for i in indices])]).astype(np.int64)
    ratio = sp.csr_matrix(
        (
            np.concatenate(values) if values else np.zeros(0),
            np.concatenate(indices) if indices else np.zeros(0, np.int32),
            indptr,
        ),
        shape=(rows.num_rows, vocab_size),
    )
    return PathParameters(
        rows.column("log_prior").to_numpy(zero_copy_only=False).astype(np.float64),
        rows.column("log_base").to_numpy(zero_copy_only=False).astype(np.float64),
        ratio,
    )


def parameter_rows(params: PathParameters) -> list:
    """The ``parameters/`` table's rows: one per path / component (index, log_prior, log_base, and the
    non-zero ``log_ratio`` entries as little-endian int32 term indices and float64 values)."""
    # Bytes, not Python lists: a list per row would cost ~30 bytes per float on the driver; the
    # parameters are O(nnz), never R x V.
    ratio = params.log_ratio
    return [
        (
            j,
            float(params.log_prior[j]),
            float(params.log_base[j]),
            ratio.indices[ratio.indptr[j] : ratio.indptr[j + 1]].astype("<i4").tobytes(),
            ratio.data[ratio.indptr[j] : ratio.indptr[j + 1]].astype("<f8").tobytes(),
        )
        for j in range(params.shape[0])
    ]


# The linear/ table's schema: ``terms`` is null for a dense regression (every term of the vocabulary).
LINEAR_SCHEMA = "index int, bias double, weights binary, terms binary"


def linear_rows(linear: LinearTables) -> list:
    """The ``linear/`` table's rows (:data:`LINEAR_SCHEMA`): one per path (index, bias, its weights as
    little-endian float64 bytes, and for a sparse regression the terms they belong to as int32
    bytes), then index -1 holding the idf weights, with the generative weight as its bias; a regression fitted
    with document vectors (its last D weights per path are theirs) has index -2 too: D as one little-endian
    int64, with the vectors' scale as its bias."""
    if sp.issparse(linear.weights_t):
        W = sp.csr_matrix(linear.weights_t.T, dtype="<f8")  # (M, V): one row per path
        W.sort_indices()
        rows = [
            (
                j,
                float(linear.bias[j]),
                W.data[W.indptr[j] : W.indptr[j + 1]].astype("<f8").tobytes(),
                W.indices[W.indptr[j] : W.indptr[j + 1]].astype("<i4").tobytes(),
            )
            for j in range(W.shape[0])
        ]
    else:
        weights = np.asarray(linear.weights_t, dtype="<f8").T
        rows = [(j, float(linear.bias[j]), weights[j].tobytes(), None) for j in range(weights.shape[0])]
    rows.append((-1, float(linear.generative_weight), np.asarray(linear.idf, dtype="<f8").tobytes(), None))
    if linear.embedding_dim:
        rows.append((-2, float(linear.embedding_weight), np.array([linear.embedding_dim], "<i8").tobytes(), None))
    return rows


def read_linear(spark: SparkSession, snap, n_paths: int, vocab_size: int) -> LinearTables:
    """The ``linear/`` table of a pinned model version (:func:`linear_rows`), checked against its shape."""
    import pyarrow as pa

    table = snap.table(spark, LINEAR_PART)
    sparse = "terms" in table.columns and table.where("terms is not null").limit(1).count() > 0
    if sparse:
        cells = table.selectExpr("coalesce(sum(length(weights)), 0) as bytes").first()["bytes"] / 8.0
        check_result_size(
            spark, cells * 12.0, f"{snap.path}: the model's sparse softmax regression ({cells:,.0f} weights)"
        )
    else:
        check_result_size(
            spark,
            (n_paths + 1) * vocab_size * 8.0,
            f"{snap.path}: the model's softmax regression ({n_paths:,} x {vocab_size:,})",
        )
    columns = ["index", "bias", "weights"] + (["terms"] if sparse else [])
    rows = table.select(*columns).toArrow()
    index = rows.column("index").to_numpy(zero_copy_only=False)
    dim, embedding_weight = 0, 0.0
    if (index == -2).sum() == 1:  # the document vectors' row (linear_rows)
        at = int(np.flatnonzero(index == -2)[0])
        blob = rows.column("weights")[at].as_py() or b""
        if len(blob) != 8:
            raise ValueError("the softmax regression's vector row does not hold one dimension")
        dim, embedding_weight = int(np.frombuffer(blob, "<i8")[0]), float(rows.column("bias")[at].as_py())
        if dim <= 0 or not embedding_weight > 0:
            raise ValueError(f"the softmax regression's vectors: dimension {dim}, weight {embedding_weight}")
        rows = rows.filter(pa.array(index != -2))
        index = rows.column("index").to_numpy(zero_copy_only=False)
    width = vocab_size + dim
    blobs = rows.column("weights").to_pylist()
    bias = rows.column("bias").to_numpy(zero_copy_only=False).astype(np.float64)
    order = np.argsort(index, kind="stable")  # -1 (the idf) first, then the paths in order
    if sorted(index.tolist()) != list(range(-1, n_paths)) or len(blobs[order[0]]) != 8 * vocab_size:
        raise ValueError(f"the softmax regression's rows are not {n_paths} paths + idf of {vocab_size} terms")
    idf = np.frombuffer(blobs[order[0]], dtype="<f8").astype(np.float64)
    if sparse:
        terms = rows.column("terms").to_pylist()
        values = [np.frombuffer(blobs[i], dtype="<f8") for i in order[1:]]
        cols = [np.frombuffer(terms[i] or b"", dtype="<i4") for i in order[1:]]
        if any(len(v) != len(c) for v, c in zip(values, cols)) or any(
            len(c) and (c.min() < 0 or c.max() >= width) for c in cols
        ):
            raise ValueError(f"the sparse softmax regression's terms do not match its weights over {width} columns")
        indptr = np.concatenate([[0], np.cumsum([len(c) for c in cols])])
        W = sp.csr_matrix(
            (np.concatenate(values + [np.zeros(0)]), np.concatenate(cols + [np.zeros(0, "<i4")]), indptr),
            shape=(n_paths, width),
        )
        return LinearTables(sp.csr_matrix(W.T), bias[order[1:]], idf, float(bias[order[0]]), embedding_weight)
    if any(len(blobs[i]) != 8 * width for i in order[1:]):
        raise ValueError(f"the softmax regression's rows are not {n_paths} paths of {width} weights + idf")
    weights = np.vstack([np.frombuffer(blobs[i], dtype="<f8") for i in order[1:]])
    return LinearTables(np.ascontiguousarray(weights.T), bias[order[1:]], idf, float(bias[order[0]]), embedding_weight)


def in_index_order(table, column: str, what: str):
    """``table`` (Arrow) sorted by its integer ``column``, which must number the rows 0..n-1 (else ValueError)."""
    index = table.column(column).to_numpy(zero_copy_only=False)
    order = np.argsort(index, kind="stable")
    if table.column(column).null_count or not np.array_equal(index[order], np.arange(len(index))):
        raise ValueError(f"{what} are not numbered 0..{len(index) - 1} by {column}")
    return table.take(order)


def calibration_of(path: str, meta: dict, version: int) -> Optional[Calibration]:
    """The saved calibration; None (uncalibrated) for models saved before calibration existed, or without one."""
    if version < 3:
        log.warning(
            "%s: a model of format version %d, saved before calibration: its probabilities are uncalibrated "
            "(over-confident); retrain it to calibrate them",
            path,
            version,
        )
        return None
    record = meta.get("calibration")
    if record is None:
        return None
    try:
        return Calibration.from_record(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: damaged model (calibration: {exc}); retrain it") from None


def feature_settings_of(d: dict) -> FeatureSettings:
    """FeatureSettings of saved metadata; keys a newer version added map to the behaviour of the old one."""
    return FeatureSettings.from_dict(d)
