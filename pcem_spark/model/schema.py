"""The predictions table: its columns (``path``, ``leaf``, ``probability`` and the optional
``path_probability`` / ``top_paths``) and the checks of the prediction options that add them."""

from __future__ import annotations

import logging
from typing import Dict, NamedTuple

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.errors import InputError

__all__ = [
    "OutputOptions",
    "LEVEL1",
    "check_output_columns",
    "PREDICTION_SCHEMA",
    "PATH_PROBABILITY_FIELD",
    "TOP_PATHS_FIELD",
    "NODE_PROBABILITIES_FIELD",
    "check_prediction_options",
    "check_multi_path",
    "PATHS_FIELD",
    "prediction_schema",
    "abstention_counts",
    "prediction_source",
]

log = logging.getLogger(__name__)


PREDICTION_SCHEMA = T.StructType(
    [
        T.StructField("id", T.StringType(), False),
        T.StructField("path", T.ArrayType(T.StringType(), False), False),
        T.StructField("leaf", T.StringType(), False),
        T.StructField("probability", T.DoubleType(), False),
        T.StructField("labels", T.ArrayType(T.StringType(), True), True),
        # How much better the predicted path explains the document's tokens than the training corpus does:
        # nats per token (pcem_spark.core.in_taxonomy); null for a model without the score (saved before it,
        # or a baseline whose components are not paths).
        T.StructField("in_taxonomy", T.DoubleType(), True),
    ]
)


# Columns added by abstaining (min_probability > 0) and top-k (top_k > 0) predictions.
PATH_PROBABILITY_FIELD = T.StructField("path_probability", T.DoubleType(), False)


# Added with multi_path > 0: every path whose membership probability (core.multi_path) is >= it, the predicted
# path first.
PATHS_FIELD = T.StructField("paths", T.ArrayType(T.ArrayType(T.StringType(), False), False), False)


# Added with node_probabilities: the marginal probability of each node of ``path`` (same length, root first).
NODE_PROBABILITIES_FIELD = T.StructField("node_probabilities", T.ArrayType(T.DoubleType(), False), False)


# Added with typicality: -KL (nats) of the document's words from its predicted path's word distribution
# (pcem_spark.core.density); null for a document with no word the model knows.
TYPICALITY_FIELD = T.StructField("typicality", T.DoubleType(), True)

# Added with fingerprint: a hash of the document's bag of known words (pcem_spark.core.fingerprints), equal for
# documents the model reads as the same; null for a document with no word the model knows.
FINGERPRINT_FIELD = T.StructField("bag_fingerprint", T.LongType(), True)


TOP_PATHS_FIELD = T.StructField(
    "top_paths",
    T.ArrayType(
        T.StructType(
            [
                T.StructField("path", T.ArrayType(T.StringType(), False), False),
                T.StructField("probability", T.DoubleType(), False),
            ]
        ),
        False,
    ),
    False,
)


def check_multi_path(multi_path: float, name: str = "multi_path") -> None:
    """Refuse a ``multi_path`` that is not a number in [0, 1] (InputError naming ``name``)."""
    if isinstance(multi_path, bool) or not isinstance(multi_path, (int, float)) or not 0.0 <= float(multi_path) <= 1.0:
        raise InputError(f"{name} must be a number in [0, 1] (0 = one path per document), got {multi_path!r}")


def check_prediction_options(min_probability: float, top_k: int, names=("min_probability", "top_k")) -> None:
    """Refuse a ``min_probability`` outside [0, 1] or a ``top_k`` that is not an integer >= 0 (ValueError
    naming ``names``, e.g. the CLI's flags)."""
    p_name, k_name = names
    if (
        isinstance(min_probability, bool)
        or not isinstance(min_probability, (int, float))
        or not 0.0 <= float(min_probability) <= 1.0
    ):
        raise InputError(f"{p_name} must be a number in [0, 1] (0 = always the full path), got {min_probability!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise InputError(f"{k_name} must be an integer >= 0 (0 = no top-k column), got {top_k!r}")


def prediction_schema(
    min_probability: float = 0.0,
    top_k: int = 0,
    node_probabilities: bool = False,
    multi_path: float = 0.0,
    typicality: bool = False,
    fingerprint: bool = False,
    verdict: bool = False,
) -> T.StructType:
    """The predictions table's schema: :data:`PREDICTION_SCHEMA` (the default), ``leaf`` nullable and a
    ``path_probability`` column with ``min_probability`` > 0, a ``top_paths`` column with ``top_k`` > 0, a
    ``node_probabilities`` column with ``node_probabilities``, a ``paths`` column with ``multi_path`` > 0,
    a ``typicality`` column with ``typicality``, a ``bag_fingerprint`` column with ``fingerprint``; ``leaf`` is
    nullable too with ``verdict`` (a minimum ``in_taxonomy``: a document below it has an empty path)."""
    fields = [
        T.StructField(f.name, f.dataType, f.nullable or (f.name == "leaf" and (min_probability > 0 or verdict)))
        for f in PREDICTION_SCHEMA.fields
    ]
    if min_probability > 0:
        fields.append(PATH_PROBABILITY_FIELD)
    if top_k > 0:
        fields.append(TOP_PATHS_FIELD)
    if node_probabilities:
        fields.append(NODE_PROBABILITIES_FIELD)
    if multi_path > 0:
        fields.append(PATHS_FIELD)
    if typicality:
        fields.append(TYPICALITY_FIELD)
    if fingerprint:
        fields.append(FINGERPRINT_FIELD)
    return T.StructType(fields)


class OutputOptions(NamedTuple):
    """What a predictions table holds beyond :data:`PREDICTION_SCHEMA` (:func:`prediction_schema`)."""

    min_probability: float = 0.0  # > 0: abstain below it (path cut, path_probability)
    top_k: int = 0  # > 0: top_paths
    node_probabilities: bool = False  # node_probabilities: each node's marginal along path
    multi_path: float = 0.0  # > 0: paths, every path at least this probable (the predicted one first)
    typicality: bool = False  # typicality: -KL of the document's words from its path's (core.density)
    fingerprint: bool = False  # fingerprint: a hash of the document's bag of known words (core.fingerprints)
    # a document whose in_taxonomy is below it is out of the taxonomy: empty path, null leaf (-inf: no verdict)
    min_in_taxonomy: float = float("-inf")

    def schema(self) -> T.StructType:
        return prediction_schema(
            self.min_probability,
            self.top_k,
            self.node_probabilities,
            self.multi_path,
            self.typicality,
            self.fingerprint,
            self.min_in_taxonomy > float("-inf"),
        )


# --partition-by's value for the first node of the predicted path (a column of that name is added).
LEVEL1 = "level1"


def check_output_columns(
    keep_columns, partition_by: str, min_probability: float, top_k: int, names=("keep_columns", "partition_by")
) -> None:
    """Refuse kept input columns that clash with the predictions' own columns, or a partition column that is
    neither kept nor :data:`LEVEL1` (InputError naming the column and ``names``, e.g. the CLI's flags)."""
    keep_name, partition_name = names
    # text, split and similarities are the documents' own fields (read as such, not as kept columns)
    own = set(prediction_schema(min_probability, top_k, True, 1.0, True, True).names) | {
        LEVEL1,
        "text",
        "split",
        "similarities",
    }
    # Compared case-insensitively, as Spark resolves column names (spark.sql.caseSensitive = false):
    # "Path" would be ambiguous with "path".
    own_folded = {c.lower(): c for c in own}
    seen = set()
    for column in keep_columns:
        if not column or column != column.strip():
            raise InputError(f"{keep_name}: {column!r} is not a column name")
        if column.lower() in own_folded:
            clash = own_folded[column.lower()]
            raise InputError(
                f"{keep_name}: column {column!r} clashes with the predictions' own column {clash!r} (Spark "
                f"compares column names ignoring case); the predictions have {', '.join(sorted(own))}"
            )
        if column.lower() in seen:
            raise InputError(f"{keep_name}: column {column!r} is named twice (names are compared ignoring case)")
        seen.add(column.lower())
    if partition_by and partition_by != LEVEL1 and partition_by.lower() not in seen:
        raise InputError(
            f"{partition_name} = {partition_by!r}: expected a kept column ({keep_name}: "
            f"{', '.join(keep_columns) or 'none'}) or {LEVEL1!r} (the first node of the predicted path)"
        )


def abstention_counts(pred: DataFrame, taxonomy: Taxonomy, path_col: str = "path") -> Dict[str, int]:
    """How many predicted paths reach a leaf (``full_path``), stop above one (``partial_path``) or are
    empty (``no_path``): one aggregation, three numbers reach the driver."""
    size = F.size(F.col(path_col))
    at_leaf = F.coalesce(F.try_element_at(F.col(path_col), F.lit(-1)).isin(sorted(set(taxonomy.leaves))), F.lit(False))
    row = pred.select(
        F.sum(F.when((size > 0) & at_leaf, 1).otherwise(0)).alias("full_path"),
        F.sum(F.when((size > 0) & ~at_leaf, 1).otherwise(0)).alias("partial_path"),
        F.sum(F.when(size == 0, 1).otherwise(0)).alias("no_path"),
    ).first()
    return {k: int(row[k] or 0) for k in ("full_path", "partial_path", "no_path")}


def prediction_source(
    df: DataFrame, id_col: str = "id", text_col: str = "text", labels_col: str = "labels", keep=(), extra=()
) -> DataFrame:
    """``id`` (string), ``text`` and ``labels`` (null when ``df`` has no labels column) of a table to predict,
    then the ``keep`` columns and the ``extra`` ones (Columns: a model's document vectors)."""
    labels = F.col(labels_col) if labels_col in df.columns else F.lit(None).cast("array<string>")
    return df.select(
        F.col(id_col).cast("string").alias("id"),
        F.col(text_col).alias("text"),
        labels.alias("labels"),
        *[F.col(c) for c in keep],
        *extra,
    )
