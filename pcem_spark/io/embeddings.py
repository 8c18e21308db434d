"""Document embeddings beside the words: the vector column of a documents table, checked row by row.

A documents table may carry one fixed-length vector per document (what a crawl pipeline computes anyway for
deduplication or retrieval: a sentence encoder's output). Its column is named by ``features.embedding``:
``"auto"`` (the default) takes a column named ``embedding`` when there is one, ``"none"`` ignores any, and any
other value names the column, which must then exist. Its type is ``array<float>``, ``array<double>`` or a Spark
ML ``Vector``; every row has the same dimension -- the one most rows have, or the model's -- and finite values.
A row whose vector is missing, of another dimension, or holds a NaN or an infinity is a reject naming the
column, the position and what was expected: :func:`embedding_reason`, a Spark SQL expression (no Python per row).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.engine.blocks import EMBEDDING_COL
from pcem_spark.errors import InputError

__all__ = [
    "load_node_vectors",
    "path_vectors",
    "AUTO",
    "NONE",
    "DEFAULT_COLUMN",
    "EMBEDDING_COL",
    "CHECKED_ROWS",
    "EmbeddingColumnError",
    "resolve_embedding_column",
    "check_embedding_type",
    "as_float_array",
    "embedding_reason",
    "usual_dimension",
    "vectors_of",
]

AUTO, NONE = "auto", "none"
DEFAULT_COLUMN = "embedding"  # what "auto" looks for
CHECKED_ROWS = 1000  # rows whose vectors' length is compared with a model's before predicting
# EMBEDDING_COL: the vectors' column in the documents read (array<float>), whatever the input named it.


class EmbeddingColumnError(InputError):
    """The embedding column named by ``features.embedding`` is missing or of a type that holds no vector."""


def resolve_embedding_column(columns, setting: Optional[str], where: str = "the documents") -> Optional[str]:
    """The column to read vectors from, or None: ``setting`` against the table's ``columns`` (names).

    ``"auto"`` (or None): ``embedding`` when the table has it, else None. ``"none"`` or ``""``: None. Any
    other value names a column the table must have (:class:`EmbeddingColumnError` naming it and the columns).
    """
    names = list(columns)
    if setting is None or setting.strip().lower() == AUTO:
        return DEFAULT_COLUMN if DEFAULT_COLUMN in names else None
    if setting.strip().lower() in (NONE, ""):
        return None
    if setting not in names:
        raise EmbeddingColumnError(
            f"features.embedding = {setting!r}: {where} have no such column (their columns are {sorted(names)}); "
            f"name one of them, or 'auto' (a column named {DEFAULT_COLUMN!r} when there is one) or 'none'"
        )
    return setting


def _is_vector(dtype: T.DataType) -> bool:
    from pyspark.ml.linalg import VectorUDT

    return isinstance(dtype, VectorUDT)


def check_embedding_type(name: str, dtype: T.DataType, where: str = "the documents") -> None:
    """:class:`EmbeddingColumnError` unless ``dtype`` holds a vector: array<float>, array<double>, a ML Vector."""
    if _is_vector(dtype):
        return
    if isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, (T.FloatType, T.DoubleType)):
        return
    raise EmbeddingColumnError(
        f"{where}: column {name!r} has type {dtype.simpleString()}, expected array<float>, array<double> "
        "or a Spark ML Vector (one fixed-length vector per document)"
    )


def as_float_array(df: DataFrame, name: str) -> Column:
    """The column ``name`` of ``df`` as array<float> (a ML Vector through ``vector_to_array``)."""
    dtype = df.schema[name].dataType
    check_embedding_type(name, dtype)
    if _is_vector(dtype):
        from pyspark.ml.functions import vector_to_array

        return vector_to_array(F.col(name), "float32")
    return F.col(name).cast(T.ArrayType(T.FloatType()))


def embedding_reason(vector: Column, dimension: int, name: str = DEFAULT_COLUMN) -> Column:
    """Why a row's vector is unusable (null when it is fine), as the rejects' ``reason``.

    ``vector`` is array<float> or array<double>; ``dimension`` the length every row must have. The first
    problem found is named: a missing vector, another length, then the first value that is null, NaN or
    infinite, with its position.
    """
    bad = F.transform(vector, lambda x: x.isNull() | F.isnan(x) | (F.abs(x) == float("inf")))
    position = F.array_position(bad, True)  # 1-based; 0 when every value is finite
    value = F.element_at(vector, position.cast("int"))
    # Cheap first: native array functions (no lambda per value) tell a row has a null, NaN (Spark orders NaN
    # above every number) or infinite value; only such a row computes the position (a CASE evaluates lazily).
    top, bottom = F.array_max(vector), F.array_min(vector)
    suspect = (
        (F.size(F.array_compact(vector)) != F.size(vector))
        | F.isnan(top)
        | (top == float("inf"))
        | (bottom == float("-inf"))
    )
    return (
        F.when(vector.isNull(), F.lit(f"{name}: expected a vector of {dimension} numbers, got null"))
        .when(
            F.size(vector) != dimension,
            F.concat(
                F.lit(f"{name}: expected {dimension} values (the dimension of the other vectors), got "),
                F.size(vector).cast("string"),
            ),
        )
        .when(
            suspect & (position > 0),
            F.concat(
                F.lit(f"{name}["),
                (position - 1).cast("string"),
                F.lit("]: expected a finite number, got "),
                F.coalesce(value.cast("string"), F.lit("null")),
            ),
        )
    )


def usual_dimension(vectors: DataFrame, column: str) -> Optional[int]:
    """The length most non-null vectors of ``column`` have (ties: the smaller), None when every vector is null.

    One aggregation over the lengths (a few rows reach the driver), so a bad first row does not decide the
    dimension for every other.
    """
    row = (
        vectors.where(F.col(column).isNotNull())
        .groupBy(F.size(column).alias("n"))
        .count()
        .orderBy(F.desc("count"), "n")
        .first()
    )
    return None if row is None else int(row["n"])


def load_node_vectors(path: str, taxonomy) -> Dict[str, List[float]]:
    """``--node-embeddings``: a JSON object node name -> vector (an array of finite numbers), every vector of one
    length, every name a node of ``taxonomy`` (the root's is ignored). InputError naming the file and the node."""
    from pcem_spark.util.strict_json import StrictJSONError, load_strict

    try:
        with open(path, "r", encoding="utf-8") as fh:
            obj = load_strict(fh, path)
    except StrictJSONError as exc:  # a node given twice: the first vector would silently vanish
        raise InputError(str(exc)) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: cannot read node embeddings ({exc})") from None
    if not isinstance(obj, dict) or not obj:
        raise InputError(f"{path}: expected a JSON object node name -> vector (an array of numbers)")
    unknown = sorted(set(obj) - set(taxonomy.real_nodes) - {taxonomy.root})
    if unknown:
        raise InputError(f"{path}: {len(unknown)} names are not nodes of the taxonomy: {unknown[:10]}")
    out: Dict[str, List[float]] = {}
    dims = set()
    for node, vector in obj.items():
        if node == taxonomy.root:
            continue
        if not isinstance(vector, list) or not vector:
            raise InputError(f"{path}: node {node!r}: expected a non-empty array of numbers")
        for i, value in enumerate(vector):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"{path}: node {node!r}[{i}]: expected a finite number, got {value!r}")
        dims.add(len(vector))
        out[node] = [float(v) for v in vector]
    if len(dims) > 1:
        raise InputError(f"{path}: the node vectors have several lengths: {sorted(dims)} (one encoder gives one)")
    return out


def path_vectors(node_vectors: Dict[str, List[float]], taxonomy) -> Dict[int, List[float]]:
    """Path index -> the vector of its category names: the mean of the unit-length vectors of its real nodes
    that have one, scaled to unit length (paths none of whose nodes has one are left out)."""
    import numpy as np

    out: Dict[int, List[float]] = {}
    for j in range(taxonomy.n_paths):
        found = [np.asarray(node_vectors[n], dtype=np.float64) for n in taxonomy.real_path(j) if n in node_vectors]
        found = [v / np.linalg.norm(v) for v in found if np.linalg.norm(v) > 0]
        if found:
            mean = np.mean(found, axis=0)
            norm = np.linalg.norm(mean)
            if norm > 0:
                out[j] = (mean / norm).tolist()
    return out


def vectors_of(df: DataFrame, setting: Optional[str]) -> list:
    """The column of ``df`` that ``setting`` (``features.embedding``) names, as ``embedding``, in a list (empty
    when it names none): what a fit selects beside the features (``PathEM``, a cross-validation fold)."""
    name = resolve_embedding_column(df.columns, setting)
    return [] if name is None else [F.col(name).alias(EMBEDDING_COL)]
