"""The two shapes of a ``labels`` column: one path per document, or several.

A documents table's ``labels`` is either

* ``array<string>`` -- one path from level 1 to the leaf (null = unlabelled), or
* ``array<array<string>>`` -- one or more such paths (a document in several
  categories; null = unlabelled).

The second shape comes from input that writes labels as a list of paths
(:mod:`pcem_spark.io.documents`). Code that needs every path reads
:func:`label_paths_col` (always the nested shape); code that needs one path to
stratify or sample by reads :func:`first_label_path` (always one path).
Training counts a document with ``k`` paths as ``k`` documents of weight
``1/k`` (:func:`pcem_spark.engine.arrow_io.node_score_rows`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.errors import InputError

__all__ = [
    "LABEL_PATH_TYPE",
    "LABEL_PATHS_TYPE",
    "has_label_paths",
    "label_paths_col",
    "first_label_path",
    "one_path_per_row",
    "closest_label_path",
    "refuse_label_paths",
]

LABEL_PATH_TYPE = T.ArrayType(T.StringType(), True)
LABEL_PATHS_TYPE = T.ArrayType(T.ArrayType(T.StringType(), True), True)


def _is_paths_type(dtype: T.DataType) -> bool:
    return (
        isinstance(dtype, T.ArrayType)
        and isinstance(dtype.elementType, T.ArrayType)
        and isinstance(dtype.elementType.elementType, T.StringType)
    )


def has_label_paths(df: DataFrame, labels_col: str = "labels") -> bool:
    """True if ``df[labels_col]`` holds several paths per document (``array<array<string>>``)."""
    if labels_col not in df.columns:
        return False
    return _is_paths_type(df.schema[labels_col].dataType)


def label_paths_col(df: DataFrame, labels_col: str = "labels") -> Column:
    """``df[labels_col]`` as ``array<array<string>>`` (every path of a document; null = unlabelled)."""
    col = F.col(labels_col)
    if has_label_paths(df, labels_col):
        return col
    return F.when(col.isNotNull(), F.array(col))


def first_label_path(df: DataFrame, labels_col: str = "labels") -> Column:
    """``df[labels_col]`` as ``array<string>``: the path, or the first of several (null = unlabelled).

    For what needs one path per document: stratifying folds, sampling by leaf.
    """
    col = F.col(labels_col)
    return F.try_element_at(col, F.lit(1)) if has_label_paths(df, labels_col) else col


def one_path_per_row(df: DataFrame, labels_col: str = "labels") -> DataFrame:
    """``df`` with one row per label path (``labels_col`` then array<string>); unlabelled rows kept once.

    For checks and counts over paths (known paths, leaf coverage, the
    inferred taxonomy): a document with ``k`` paths is ``k`` rows.
    """
    if not has_label_paths(df, labels_col):
        return df
    others = [F.col(c) for c in df.columns if c != labels_col]
    # A null path inside a list stays a path, [null], which no taxonomy knows: checks report it, never
    # read it as an unlabelled row. An empty list is one such path too.
    paths = F.transform(labels_col, lambda p: F.coalesce(p, F.array(F.lit(None).cast("string"))))
    paths = F.when(F.size(labels_col) == 0, F.array(F.array(F.lit(None).cast("string")))).otherwise(paths)
    return df.select(*others, F.explode_outer(paths).alias(labels_col))


def closest_label_path(df: DataFrame, path: Column, labels_col: str = "labels") -> Column:
    """``df[labels_col]`` as one path: the true path sharing most levels with ``path`` (the first on ties).

    For a per-level confusion table, where a document in several categories
    is one row: a prediction of any of its paths is a hit at the levels it
    shares. Node names are unique in a taxonomy, so a shared node at a level
    means a shared prefix down to it.
    """
    if not has_label_paths(df, labels_col):
        return F.col(labels_col)

    def shared(t):
        levels = F.sequence(F.lit(1), F.greatest(F.size(t), F.lit(1)))
        return F.size(F.filter(levels, lambda k: F.try_element_at(t, k) == F.try_element_at(path, k)))

    ranked = F.transform(labels_col, lambda t, i: F.struct((-shared(t)).alias("miss"), i.alias("i"), t.alias("t")))
    return F.array_min(ranked)["t"]


def refuse_label_paths(df: DataFrame, what: str, labels_col: str = "labels") -> None:
    """Raise :class:`InputError` if ``df`` has several label paths per document and ``what`` needs one."""
    if has_label_paths(df, labels_col):
        raise InputError(
            f"{what} takes one label path per document (labels: array<string>), but the documents' "
            f"{labels_col!r} is a list of paths (array<array<string>>). Train PCNB / PCEM (pcem train) "
            "for documents in several categories, or give one path per document"
        )
