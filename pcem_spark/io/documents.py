"""The documents table: reading, strict input checks, and rejects.

A documents table has the columns

* ``id``     string, unique, not null, not empty;
* ``text``   string, not null;
* ``labels`` array<string> or null -- the path from level 1 to the leaf
  (null = unlabelled); or, for documents in several categories,
  array<array<string>> -- a non-empty list of such paths, none repeated
  (see "Several label paths" below);
* ``split``  string, optional (e.g. ``train`` / ``test``);
* ``similarities`` map<string, double>, optional -- precomputed node ->
  similarity scores.

It is read from Parquet or JSON Lines (plain or ``.gz``). Rows that cannot be
used are never dropped or coerced silently: :func:`split_rejects` returns them
in a *rejects* table (:data:`REJECT_SCHEMA`) with a ``reason`` naming the field
and what was expected, the source file, the record and -- when it is known --
the line number. The caller writes it and logs the counts. Every row read is
either valid or rejected: ``rows read = valid + rejected``, always.

Format
------
``fmt`` forces ``"json"`` or ``"parquet"``. Otherwise a file is recognised by
its extension (``.json``, ``.jsonl``, ``.ndjson``, each optionally ``.gz``;
``.parquet``), and a directory by the files inside it (hidden files, names
starting with ``_`` or ``.`` such as ``_SUCCESS``, and ``.crc`` checksums are
ignored). A file without a known extension is Parquet if it starts with the
Parquet magic bytes. A directory holding both kinds, or a file of unknown
kind, is a :class:`DocumentsError` naming it.

Strict JSON Lines
-----------------
Lines are read with Spark's text reader and parsed in bulk on the executors
(:func:`_parse_line_batches`, Python's ``json`` inside ``mapInArrow``); the
driver never sees a document. Each physical line (``\\n``, ``\\r\\n`` or
``\\r`` terminated) must be exactly one JSON object:

* the line must be valid UTF-8 (a byte-order mark is allowed on line 1 only)
  and valid JSON (RFC 8259: no ``NaN``/``Infinity``);
* a blank line is rejected as ``empty line`` -- never skipped, so it counts;
* only JSON whitespace may follow the object: two objects on one line (a file
  ``cat``-ed after one without a final newline) or trailing garbage is
  rejected, never half-read;
* a line holding an array, a string, a number ... is rejected
  (``not a JSON object``); it is never unpacked into several documents;
* a key repeated in any object is rejected (``duplicate key``) rather than
  letting the last copy win;
* values are never coerced: ``id``, ``text`` and ``split`` must be strings
  (or null), ``labels`` a non-empty array of non-empty strings without
  leading or trailing whitespace (or null), ``similarities`` an object of
  node -> finite number (or null). A number is not a string, ``true`` is not
  a number. Keys other than these five are ignored -- but for ``embedding``
  (or the key ``features.embedding`` names) when the caller reads vectors: an
  array of finite numbers (or null), checked for its length by :func:`split_rejects`.

A rejected line keeps its raw text (first :data:`RECORD_CHARS` characters) and
its ``id`` when the line parsed far enough to hold a string ``id``.

A string holding a lone surrogate -- valid JSON such as ``"\\ud800"`` without
its ``\\udc00``-``\\udfff`` partner, which some crawlers emit -- cannot be
encoded as UTF-8, so it is rejected too, naming the field (``id``, ``text``,
``split``, a label, a similarities key) and the position; a surrogate in a key
that is ignored is ignored with it.

Every reject of a JSON Lines file has its exact 1-based line number, at any
split size. Spark reads a large plain file in splits (byte ranges; a ``.gz``
file is one split) and Hadoop's line reader gives each line to exactly one
split, so the parser numbers the lines within their split (``_split_start``,
``_split_line``) and :func:`split_rejects` adds the number of lines of the
same file's earlier splits: one count per split, over the already parsed
rows, joined onto the rejects only.

Several label paths
-------------------
In JSON Lines a line's ``labels`` is either one path (``["sci", "space"]``)
or a list of paths (``[["sci", "space"], ["rec", "autos"]]``; one path may
be written ``[["sci", "space"]]``). Each path follows the rules above, the
list is non-empty and names no path twice; an array of strings with an
array inside, or a list holding a string, is rejected naming the element.
In Parquet the column's type decides: ``array<string>`` or
``array<array<string>>``. The valid documents' ``labels`` is
``array<array<string>>`` when any valid row of the input wrote a list of
paths (every Parquet row when the column is of that type), else
``array<string>`` as always -- so a table without lists of paths reads
exactly as before. Training counts a document with ``k`` paths as ``k``
documents of weight ``1/k``; evaluation scores the union of their nodes.

Parquet
-------
Column types are checked up front (a wrong type is a :class:`DocumentsError`);
what Parquet types do not guarantee is checked per row with the same reasons
as for JSON: an empty ``labels`` array, a null, empty or whitespace-padded
label, a null or non-finite similarity.

Rejects that need the whole table (missing or empty ``id``, null ``text``,
duplicate ``id``) are decided by :func:`split_rejects` for both formats.
"""

from __future__ import annotations

import logging
import os
import re
from functools import partial
from typing import Dict, List, Optional, Sequence, Tuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.engine.label_columns import LABEL_PATHS_TYPE
from pcem_spark.errors import InputError
from pcem_spark.io.embeddings import AUTO, DEFAULT_COLUMN, EMBEDDING_COL, NONE, as_float_array, resolve_embedding_column
from pcem_spark.io.file_system import file_system, session_path
from pcem_spark.io.hadoop_fs import FILESYSTEM_NEEDS
from pcem_spark.io.json_lines import _parse_line, _StrictDecoder
from pcem_spark.io.parquet_checks import label_paths_reason, labels_reason, similarities_reason

__all__ = [
    "DOCUMENT_SCHEMA",
    "REJECT_SCHEMA",
    "RAW_SCHEMA",
    "KEPT_PREFIX",
    "CORRUPT_COL",
    "REASON_COL",
    "SPLIT_START_COL",
    "SPLIT_LINE_COL",
    "NESTED_LABELS_COL",
    "DocumentsError",
    "detect_format",
    "read_documents",
    "count_input_rows",
    "input_fs",
]

log = logging.getLogger(__name__)


DOCUMENT_SCHEMA = T.StructType(
    [
        T.StructField("id", T.StringType(), True),
        T.StructField("text", T.StringType(), True),
        T.StructField("labels", T.ArrayType(T.StringType(), True), True),
        T.StructField("split", T.StringType(), True),
        # Optional: precomputed node -> similarity scores (bring your own similarity model).
        T.StructField("similarities", T.MapType(T.StringType(), T.DoubleType(), True), True),
    ]
)


REJECT_SCHEMA = T.StructType(
    [
        T.StructField("id", T.StringType(), True),
        T.StructField("source_file", T.StringType(), True),
        T.StructField("reason", T.StringType(), False),
        T.StructField("record", T.StringType(), True),
        # 1-based line in source_file (JSON Lines, any split size); null for Parquet.
        T.StructField("line", T.LongType(), True),
    ]
)


CORRUPT_COL = "_corrupt_record"  # raw line of a row the parser rejected (truncated)


REASON_COL = "_reject_reason"  # why the parser / element checks rejected the row


SPLIT_START_COL = "_split_start"  # byte offset where the line's split of source_file starts; null for Parquet


SPLIT_LINE_COL = "_split_line"  # 1-based line number within that split, in file order; null for Parquet


# Whether the row's labels were written as a list of paths (True), as one path (False), or are null.
NESTED_LABELS_COL = "_nested_labels"


# Columns of read_documents' result, in order, for both formats. ``labels`` is always a list of paths
# here (one path = a one-element list); split_rejects gives the valid rows the input's shape back.
RAW_SCHEMA = T.StructType(
    [
        T.StructField("id", T.StringType(), True),
        T.StructField("text", T.StringType(), True),
        T.StructField("labels", LABEL_PATHS_TYPE, True),
        T.StructField("split", T.StringType(), True),
        T.StructField("similarities", T.MapType(T.StringType(), T.DoubleType(), True), True),
    ]
    + [
        T.StructField(CORRUPT_COL, T.StringType(), True),
        T.StructField(REASON_COL, T.StringType(), True),
        T.StructField(SPLIT_START_COL, T.LongType(), True),
        T.StructField(SPLIT_LINE_COL, T.LongType(), True),
        T.StructField("source_file", T.StringType(), True),
        T.StructField(NESTED_LABELS_COL, T.BooleanType(), True),
    ]
)


# Input columns kept for the output (read_documents' ``keep``) travel under this prefix.
KEPT_PREFIX = "_keep_"


_JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".ndjson", ".ndjson.gz")


_PARQUET_SUFFIXES = (".parquet",)


_PARQUET_MAGIC = b"PAR1"


_SNIFF_LIMIT = 16  # extension-less files opened to look for the Parquet magic


class DocumentsError(InputError):
    """The documents input does not have the expected shape."""


def _kind_by_name(name: str) -> Optional[str]:
    """``"json"`` / ``"parquet"`` from a file name's extension, None if it tells nothing."""
    lower = name.lower()
    if lower.endswith(_JSON_SUFFIXES):
        return "json"
    if lower.endswith(_PARQUET_SUFFIXES):
        return "parquet"
    return None


def _is_ignored(relative: str) -> bool:
    """Files Spark skips or that are not data: hidden (``_x``, ``.x``) anywhere in the path, ``.crc``."""
    parts = [p for p in relative.split("/") if p]
    return any(p.startswith(("_", ".")) for p in parts) or relative.lower().endswith(".crc")


# What needs the file system, named when a Spark Connect session (no driver JVM) asks for it.
_INPUT_FS_USE = "Detecting the documents format (read_documents / count_input_rows without fmt)"


def input_fs(spark: SparkSession, path: str):
    """The file system of an input ``path`` -- local or remote alike, as Spark will read it
    (:func:`pcem_spark.io.file_system.file_system`: the driver JVM's, or over Connect the client's)."""
    return file_system(spark, path, _INPUT_FS_USE, FILESYSTEM_NEEDS)


def _data_files(spark: SparkSession, path: str) -> List[str]:
    """The data files under ``path`` (itself if it is a file), ignoring hidden files and checksums."""
    fs = input_fs(spark, path)
    if not fs.exists():
        raise DocumentsError(f"documents input {path!r} does not exist")
    if not fs.is_directory():
        return [fs.path_string()]
    return [file for file, relative in fs.files_below() if not _is_ignored(relative)]


def _has_parquet_magic(spark: SparkSession, path: str) -> bool:
    """True if the file starts with the Parquet magic bytes ``PAR1``."""
    return input_fs(spark, path).read_head(n=len(_PARQUET_MAGIC)) == _PARQUET_MAGIC


_DELIMITED = re.compile(r"\.(csv|tsv|tab)(\.gz|\.bz2)?$", re.I)  # delimited text: refused with how to convert


def detect_format(spark: SparkSession, path: str) -> str:
    """``"json"`` or ``"parquet"`` for a file or directory, from the data files' names.

    Extension-less files are opened to look for the Parquet magic (Hive-style
    ``000000_0`` files); at most :data:`_SNIFF_LIMIT` of them, the rest are
    assumed to be like those.

    Raises
    ------
    DocumentsError
        The directory holds no data file, both JSON and Parquet files, or a
        file that is neither.
    """
    files = _data_files(spark, path)
    if not files:
        raise DocumentsError(
            f"documents input {path!r} holds no data files (hidden files, _SUCCESS and .crc are ignored)"
        )
    by_kind: Dict[str, List[str]] = {}
    for f in files:
        by_kind.setdefault(_kind_by_name(f) or "unknown", []).append(f)
    for f in by_kind.get("unknown", []):
        if _DELIMITED.search(f):
            raise DocumentsError(
                f"documents input {path!r}: {f!r} is CSV/TSV; pcem reads JSON Lines or Parquet, where labels are "
                'a list (["sports", "football"]) and text may hold any character. Convert it once, e.g. with '
                "pyspark: spark.read.option('header', True).option('multiLine', True).csv(IN)"
                ".withColumn('labels', F.split('labels', '/')).write.parquet(OUT) (labels joined by '/'), "
                "then pass OUT as --docs"
            )
    for f in by_kind.pop("unknown", [])[:_SNIFF_LIMIT]:
        if not _has_parquet_magic(spark, f):
            raise DocumentsError(
                f"documents input {path!r}: cannot tell the format of {f!r} (expected .parquet, "
                f".json, .jsonl or .ndjson, optionally .gz); pass --format json or --format parquet"
            )
        by_kind.setdefault("parquet", []).append(f)
    if len(by_kind) > 1:
        raise DocumentsError(
            f"documents input {path!r} mixes JSON Lines files (e.g. {by_kind['json'][0]!r}) and "
            f"Parquet files (e.g. {by_kind['parquet'][0]!r}); keep one format per directory"
        )
    return next(iter(by_kind))


def _parse_line_batches(batches, vector_key: Optional[str] = None):
    """mapInArrow body: ``value`` (raw line bytes), ``source_file``, ``block_start`` -> RAW_SCHEMA rows (and an
    ``embedding`` column, list<float>, of each line's ``vector_key`` when that names one).

    One output row per input row, in order. ``_split_line`` counts the rows
    of each (file, split start) in the order Spark reads them, i.e. the order
    of the file: line 1 of a split is the first line that starts after the
    split's first byte (or at byte 0). :func:`split_rejects` turns it into
    the line number in the file.
    """
    import pyarrow as pa

    decoder = _StrictDecoder()
    seen: Dict[Tuple[str, int], int] = {}
    arrow_schema = pa.schema(
        [
            ("id", pa.string()),
            ("text", pa.string()),
            ("labels", pa.list_(pa.list_(pa.string()))),
            ("split", pa.string()),
            ("similarities", pa.map_(pa.string(), pa.float64())),
            (CORRUPT_COL, pa.string()),
            (REASON_COL, pa.string()),
            (SPLIT_START_COL, pa.int64()),
            (SPLIT_LINE_COL, pa.int64()),
            ("source_file", pa.string()),
            (NESTED_LABELS_COL, pa.bool_()),
        ]
        + ([(EMBEDDING_COL, pa.list_(pa.float32()))] if vector_key else [])
    )
    for batch in batches:
        files = batch.column("source_file").to_pylist()
        starts = batch.column("block_start").to_pylist()
        columns: List[list] = [[] for _ in range(9 if vector_key else 8)]
        lines: List[int] = []
        for data, file, start in zip(batch.column("value").to_pylist(), files, starts):
            n = seen.get((file, start), 0) + 1
            seen[(file, start)] = n
            for col, value in zip(columns, _parse_line(decoder, data, start == 0 and n == 1, vector_key)):
                col.append(value)
            lines.append(n)
        arrays = [pa.array(col, type=arrow_schema.field(i).type) for i, col in enumerate(columns[:7])]
        arrays += [pa.array(starts, pa.int64()), pa.array(lines, pa.int64()), pa.array(files, pa.string())]
        arrays.append(pa.array(columns[7], pa.bool_()))
        if vector_key:
            arrays.append(pa.array(columns[8], pa.list_(pa.float32())))
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _read_json_lines(
    spark: SparkSession, path: str, files: Optional[Sequence[str]] = None, vector_key: Optional[str] = None
) -> DataFrame:
    """Strictly parsed JSON Lines: one RAW_SCHEMA row per physical line, rejects included (and an ``embedding``
    column of the lines' ``vector_key`` arrays when that names one)."""
    lines = spark.read.text(list(files) if files else path).select(
        # The binary cast keeps the bytes as read, so invalid UTF-8 is still visible to the parser.
        F.col("value").cast(T.BinaryType()).alias("value"),
        F.input_file_name().alias("source_file"),
        F.input_file_block_start().alias("block_start"),
    )
    if not vector_key:
        return lines.mapInArrow(_parse_line_batches, RAW_SCHEMA)
    schema = T.StructType(RAW_SCHEMA.fields + [T.StructField(EMBEDDING_COL, T.ArrayType(T.FloatType()), True)])
    return lines.mapInArrow(partial(_parse_line_batches, vector_key=vector_key), schema)


def _check_parquet_schema(schema: T.StructType, path: str, require_text: bool = True) -> None:
    fields: Dict[str, T.DataType] = {f.name: f.dataType for f in schema.fields}
    for required in ("id", "text") if require_text else ("id",):
        if required not in fields:
            raise DocumentsError(
                f"{path}: column {required!r} is missing (found columns {sorted(fields)}); "
                + (
                    "a documents table needs id: string, text: string, labels: array<string>"
                    if require_text
                    else "a labels table needs id: string, labels: array<string> (one path) or array<array<string>>"
                )
            )
    expected = {f.name: [f.dataType.simpleString()] for f in DOCUMENT_SCHEMA.fields}
    expected["labels"].append(LABEL_PATHS_TYPE.simpleString())  # several paths per document
    for name, want in expected.items():
        # simpleString ignores nullability: array<string> with required
        # elements (parquet-avro, Hive) is as good as the optional kind.
        if name in fields and fields[name].simpleString() not in want:
            raise DocumentsError(
                f"{path}: column {name!r} has type {fields[name].simpleString()}, expected {' or '.join(want)}"
            )


def _parquet(spark: SparkSession, path: str, files: Optional[Sequence[str]]) -> DataFrame:
    """The Parquet table at ``path``: all of it, or only ``files`` (partition columns kept)."""
    from pcem_spark.io.checksums import VERIFY_PAGES

    # Every page's CRC is checked as it is read (Spark writes one per page): a damaged page is an error.
    reader = spark.read.option(*VERIFY_PAGES)
    if files:
        return reader.option("basePath", path).parquet(*files)
    return reader.parquet(path)


def _read_parquet(
    spark: SparkSession,
    path: str,
    keep: Sequence[str] = (),
    files: Optional[Sequence[str]] = None,
    require_text: bool = True,
    embedding: Optional[str] = None,
) -> DataFrame:
    """Parquet documents with the per-row checks its types do not guarantee, as RAW_SCHEMA rows (+ ``keep``)."""
    df = _parquet(spark, path, files)
    _check_parquet_schema(df.schema, path, require_text)
    vector = resolve_embedding_column(df.columns, embedding, f"documents {path!r}") if embedding else None
    vectors = [as_float_array(df, vector).alias(EMBEDDING_COL)] if vector else []
    for name in keep:
        if name not in df.columns:
            raise DocumentsError(
                f"{path}: column {name!r} (to keep in the output) is not in the documents; "
                f"their columns are {sorted(df.columns)}"
            )
    for field in DOCUMENT_SCHEMA.fields:
        if field.name not in df.columns:
            df = df.withColumn(field.name, F.lit(None).cast(field.dataType))
    if isinstance(df.schema["labels"].dataType.elementType, T.ArrayType):
        labels, why, nested = F.col("labels"), label_paths_reason(F.col("labels")), F.lit(True)
    else:
        labels = F.when(F.col("labels").isNotNull(), F.array(F.col("labels")))
        why, nested = labels_reason(F.col("labels")), F.lit(False)
    return df.select(
        "id",
        "text",
        labels.cast(LABEL_PATHS_TYPE).alias("labels"),
        "split",
        "similarities",
        F.lit(None).cast(T.StringType()).alias(CORRUPT_COL),
        F.coalesce(why, similarities_reason(F.col("similarities"))).alias(REASON_COL),
        F.lit(None).cast(T.LongType()).alias(SPLIT_START_COL),
        F.lit(None).cast(T.LongType()).alias(SPLIT_LINE_COL),
        F.input_file_name().alias("source_file"),
        F.when(F.col("labels").isNotNull(), nested).alias(NESTED_LABELS_COL),
        *[F.col(name).alias(KEPT_PREFIX + name) for name in keep],
        *vectors,
    )


def read_documents(
    spark: SparkSession,
    path: str,
    fmt: Optional[str] = None,
    keep: Sequence[str] = (),
    files: Optional[Sequence[str]] = None,
    require_text: bool = True,
    embedding: Optional[str] = None,
) -> DataFrame:
    """Read a documents table: one row per input row (per physical line for JSON), rejects included.

    Parameters
    ----------
    path : str
        A Parquet file/directory or a JSON Lines file/directory (``.gz`` ok).
    fmt : {"parquet", "json"}, optional
        Forces the format; detected otherwise (see the module docstring).

    Returns
    -------
    DataFrame with the columns of :data:`RAW_SCHEMA`: ``id, text, labels,
    split, similarities``, then ``_corrupt_record`` (raw line of a line the
    parser rejected), ``_reject_reason`` (why; null if the row passed the
    per-row checks), ``_split_start`` and ``_split_line`` (JSON Lines: the
    byte offset where the line's split starts and the 1-based line number
    within that split; null for Parquet) and ``source_file``. Pass it to
    :func:`split_rejects`, which gives the rejects their line in the file.
    ``keep``: more input columns (Parquet only) that follow, named
    ``KEPT_PREFIX + name`` so they never meet the internal ones;
    :func:`split_rejects` gives them back their names on the valid rows.
    ``require_text=False`` reads a labels table (``pcem train --labels``): a
    Parquet one needs no ``text`` column (JSON Lines never needs one here).

    Raises
    ------
    DocumentsError
        Missing path, undetectable or mixed format, missing ``id``/``text``
        Parquet column, or a Parquet column of the wrong type -- naming the
        path, the column and the expected type.
    """
    path = session_path(spark, path)
    if "://" not in path and not os.path.exists(path):
        raise DocumentsError(f"documents input {path!r} does not exist")
    fmt = fmt or detect_format(spark, path)
    if fmt == "json":
        if keep:
            raise DocumentsError(
                f"{path}: keeping input columns ({', '.join(keep)}) needs a Parquet documents table; "
                "JSON Lines documents are read as id, text, labels, split, similarities only"
            )
        vector_key = None
        if embedding and embedding.strip().lower() not in (NONE, ""):
            vector_key = DEFAULT_COLUMN if embedding.strip().lower() == AUTO else embedding
        return _read_json_lines(spark, path, files, vector_key)
    if fmt == "parquet":
        return _read_parquet(spark, path, keep, files, require_text, embedding)
    raise DocumentsError(f"unknown documents format {fmt!r}: expected 'parquet' or 'json'")


def count_input_rows(
    spark: SparkSession, path: str, fmt: Optional[str] = None, files: Optional[Sequence[str]] = None
) -> int:
    """Rows in the input as stored -- physical lines of JSON Lines, rows of Parquet -- without parsing.

    Independent of the parser, so ``valid + rejected == count_input_rows``
    is a real check that no row was lost, and cheap (JVM only).
    """
    path = session_path(spark, path)
    fmt = fmt or detect_format(spark, path)
    if fmt == "json":
        return spark.read.text(list(files) if files else path).count()
    return _parquet(spark, path, files).count()
