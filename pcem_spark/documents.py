"""The documents table: reading, schema checks, and rejects.

A documents table has the columns

* ``id``     string, unique, not null;
* ``text``   string, not null;
* ``labels`` array<string> or null -- the path from level 1 to the leaf
  (null = unlabelled);
* ``split``  string, optional (e.g. ``train`` / ``test``).

It is read from Parquet or JSON Lines (plain or ``.gz``). Rows that cannot be
used are never dropped silently: :func:`split_rejects` returns them in a
*rejects* table with a ``reason`` and the source file, and the caller writes
it and logs the counts.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, Optional, Tuple

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

log = logging.getLogger(__name__)

DOCUMENT_SCHEMA = T.StructType([
    T.StructField("id", T.StringType(), True),
    T.StructField("text", T.StringType(), True),
    T.StructField("labels", T.ArrayType(T.StringType(), True), True),
    T.StructField("split", T.StringType(), True),
    # Optional: precomputed node -> similarity scores (bring your own similarity model).
    T.StructField("similarities", T.MapType(T.StringType(), T.DoubleType(), True), True),
])

REJECT_SCHEMA = T.StructType([
    T.StructField("id", T.StringType(), True),
    T.StructField("source_file", T.StringType(), True),
    T.StructField("reason", T.StringType(), False),
    T.StructField("record", T.StringType(), True),
])

_CORRUPT = "_corrupt_record"


class DocumentsError(ValueError):
    """The documents input does not have the expected shape."""


def _is_json_path(path: str) -> bool:
    p = path.rstrip("/").lower()
    return p.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz", ".ndjson", ".ndjson.gz"))


def read_documents(spark: SparkSession, path: str, fmt: Optional[str] = None) -> DataFrame:
    """Read a documents table and check its schema.

    Parameters
    ----------
    path : str
        A Parquet file/directory or a JSON Lines file/directory (``.gz`` ok).
    fmt : {"parquet", "json"}, optional
        Forces the format; inferred from the extension otherwise
        (directories default to Parquet).

    Returns
    -------
    DataFrame with columns ``id, text, labels, split, source_file`` and, for
    JSON input, ``_corrupt_record`` (the raw line of a malformed record).

    Raises
    ------
    DocumentsError
        Missing path, missing ``id``/``text`` column, or a column of the wrong
        type -- naming the path, the column and the expected type.
    """
    fmt = fmt or ("json" if _is_json_path(path) else "parquet")
    if "://" not in path and not os.path.exists(path):
        raise DocumentsError(f"documents input {path!r} does not exist")
    if fmt == "json":
        schema = T.StructType(DOCUMENT_SCHEMA.fields + [T.StructField(_CORRUPT, T.StringType(), True)])
        df = (spark.read.schema(schema)
              .option("mode", "PERMISSIVE")
              .option("columnNameOfCorruptRecord", _CORRUPT)
              .json(path))
        # Type mismatches (e.g. labels given as a string) surface as corrupt
        # records: they are rejected row by row with the raw line.
    elif fmt == "parquet":
        df = spark.read.parquet(path)
        _check_parquet_schema(df.schema, path)
        for field in DOCUMENT_SCHEMA.fields:
            if field.name not in df.columns:
                df = df.withColumn(field.name, F.lit(None).cast(field.dataType))
        df = df.withColumn(_CORRUPT, F.lit(None).cast(T.StringType()))
    else:
        raise DocumentsError(f"unknown documents format {fmt!r}: expected 'parquet' or 'json'")
    return df.select("id", "text", "labels", "split", "similarities", _CORRUPT,
                     F.input_file_name().alias("source_file"))


def _check_parquet_schema(schema: T.StructType, path: str) -> None:
    fields: Dict[str, T.DataType] = {f.name: f.dataType for f in schema.fields}
    for required in ("id", "text"):
        if required not in fields:
            raise DocumentsError(
                f"{path}: column {required!r} is missing (found columns {sorted(fields)}); "
                "a documents table needs id: string, text: string, labels: array<string>")
    expected = {f.name: f.dataType for f in DOCUMENT_SCHEMA.fields}
    for name, want in expected.items():
        # simpleString ignores nullability: array<string> with required
        # elements (parquet-avro, Hive) is as good as the optional kind.
        if name in fields and fields[name].simpleString() != want.simpleString():
            raise DocumentsError(
                f"{path}: column {name!r} has type {fields[name].simpleString()}, "
                f"expected {want.simpleString()}")


def split_rejects(df: DataFrame, require_text: bool = True) -> Tuple[DataFrame, DataFrame]:
    """Split a documents DataFrame into (valid documents, rejects).

    Reasons: malformed record, missing id, missing text, duplicate id (every
    copy is rejected, since no copy is more authoritative than another).
    Label-path validity is checked against the taxonomy by the caller.
    """
    dup_window = Window.partitionBy("id")
    text_blank = F.col("text").isNull() if require_text else F.lit(False)
    reason = (F.when(F.col(_CORRUPT).isNotNull(),
                     F.lit("malformed record: expected a JSON object with id: string, "
                           "text: string, labels: array<string> or null"))
              .when(F.col("id").isNull() | (F.trim(F.col("id")) == ""), F.lit("field 'id' is missing or empty"))
              .when(text_blank, F.lit("field 'text' is missing (null)"))
              .when(F.count(F.lit(1)).over(dup_window) > 1,
                    F.concat(F.lit("duplicate id: "),
                             F.count(F.lit(1)).over(dup_window).cast("string"),
                             F.lit(" rows share this id")))
              .otherwise(F.lit(None)))
    # Persisted on purpose: the JSON reader prunes unused columns, so a query
    # that does not read ``labels`` would not see a row whose labels are
    # malformed. Materialising every column once gives both outputs the same
    # verdict per row (and the caller's counts reuse the cache).
    flagged = df.withColumn("_reason", reason).persist(StorageLevel.MEMORY_AND_DISK)
    good = flagged.where(F.col("_reason").isNull()).select("id", "text", "labels", "split", "similarities")
    rejects = flagged.where(F.col("_reason").isNotNull()).select(
        F.col("id"), F.col("source_file"), F.col("_reason").alias("reason"),
        F.coalesce(F.col(_CORRUPT), F.substring(F.col("text"), 1, 200)).alias("record"))
    return good, rejects


def log_counts(stage: str, n_in: int, n_good: int, rejects: DataFrame) -> Dict[str, int]:
    """Log input/valid/rejected counts and the rejects by reason; return the reason counts."""
    by_reason: Dict[str, int] = {}
    if n_in != n_good:
        # One row per distinct reason: a handful of rows, never documents.
        for row in rejects.groupBy("reason").count().collect():
            by_reason[row["reason"]] = int(row["count"])
    log.info("%s: %d documents read, %d valid, %d rejected%s", stage, n_in, n_good, n_in - n_good,
             "".join(f"\n  {c} x {r}" for r, c in sorted(by_reason.items())))
    return by_reason
