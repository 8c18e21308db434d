"""The documents table: reading, strict input checks, and rejects.

A documents table has the columns

* ``id``     string, unique, not null, not empty;
* ``text``   string, not null;
* ``labels`` array<string> or null -- the path from level 1 to the leaf
  (null = unlabelled);
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
  a number. Keys other than these five are ignored.

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
from typing import Dict, List, Optional, Tuple

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.errors import InputError
from pcem_spark.io.hadoop_fs import FILESYSTEM_NEEDS, HadoopFS
from pcem_spark.io.json_lines import RECORD_CHARS, _parse_line, _StrictDecoder

__all__ = [
    "DOCUMENT_SCHEMA",
    "REJECT_SCHEMA",
    "RAW_SCHEMA",
    "DocumentsError",
    "detect_format",
    "read_documents",
    "split_rejects",
    "log_counts",
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


_CORRUPT = "_corrupt_record"  # raw line of a row the parser rejected (truncated)


_REASON = "_reject_reason"  # why the parser / element checks rejected the row


_SPLIT_START = "_split_start"  # byte offset where the line's split of source_file starts; null for Parquet


_SPLIT_LINE = "_split_line"  # 1-based line number within that split, in file order; null for Parquet


# Columns of read_documents' result, in order, for both formats.
RAW_SCHEMA = T.StructType(
    DOCUMENT_SCHEMA.fields
    + [
        T.StructField(_CORRUPT, T.StringType(), True),
        T.StructField(_REASON, T.StringType(), True),
        T.StructField(_SPLIT_START, T.LongType(), True),
        T.StructField(_SPLIT_LINE, T.LongType(), True),
        T.StructField("source_file", T.StringType(), True),
    ]
)


_LOGGED_REASONS = 20  # distinct reject reasons log_counts lists


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


def input_fs(spark: SparkSession, path: str) -> HadoopFS:
    """The Hadoop file system of an input ``path`` -- local or remote alike, as Spark will read it."""
    return HadoopFS(spark, path, _INPUT_FS_USE, FILESYSTEM_NEEDS)


def _data_files(spark: SparkSession, path: str) -> List[str]:
    """The data files under ``path`` (itself if it is a file), ignoring hidden files and checksums."""
    fs = input_fs(spark, path)
    if not fs.exists():
        raise DocumentsError(f"documents input {path!r} does not exist")
    if not fs.is_directory():
        return [fs.path.toString()]
    # Compared as URI paths: the listing's scheme/authority spelling may differ from the argument's.
    root = fs.qualified().toUri().getPath().rstrip("/")
    found = []
    for status in fs.files_under():
        file = status.getPath()
        if not _is_ignored(file.toUri().getPath()[len(root) :]):
            found.append(file.toString())
    return found


def _has_parquet_magic(spark: SparkSession, path: str) -> bool:
    """True if the file starts with the Parquet magic bytes ``PAR1``."""
    return input_fs(spark, path).read_head(n=len(_PARQUET_MAGIC)) == _PARQUET_MAGIC


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
    for f in by_kind.pop("unknown", [])[:_SNIFF_LIMIT]:
        if not _has_parquet_magic(spark, f):
            raise DocumentsError(
                f"documents input {path!r}: cannot tell the format of {f!r} (expected .parquet, "
                f".json, .jsonl or .ndjson, optionally .gz); pass the format explicitly"
            )
        by_kind.setdefault("parquet", []).append(f)
    if len(by_kind) > 1:
        raise DocumentsError(
            f"documents input {path!r} mixes JSON Lines files (e.g. {by_kind['json'][0]!r}) and "
            f"Parquet files (e.g. {by_kind['parquet'][0]!r}); keep one format per directory"
        )
    return next(iter(by_kind))


def _parse_line_batches(batches):
    """mapInArrow body: ``value`` (raw line bytes), ``source_file``, ``block_start`` -> RAW_SCHEMA rows.

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
            ("labels", pa.list_(pa.string())),
            ("split", pa.string()),
            ("similarities", pa.map_(pa.string(), pa.float64())),
            (_CORRUPT, pa.string()),
            (_REASON, pa.string()),
            (_SPLIT_START, pa.int64()),
            (_SPLIT_LINE, pa.int64()),
            ("source_file", pa.string()),
        ]
    )
    for batch in batches:
        files = batch.column("source_file").to_pylist()
        starts = batch.column("block_start").to_pylist()
        columns: List[list] = [[] for _ in range(7)]
        lines: List[int] = []
        for data, file, start in zip(batch.column("value").to_pylist(), files, starts):
            n = seen.get((file, start), 0) + 1
            seen[(file, start)] = n
            for col, value in zip(columns, _parse_line(decoder, data, start == 0 and n == 1)):
                col.append(value)
            lines.append(n)
        arrays = [pa.array(col, type=arrow_schema.field(i).type) for i, col in enumerate(columns)]
        arrays += [pa.array(starts, pa.int64()), pa.array(lines, pa.int64()), pa.array(files, pa.string())]
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _read_json_lines(spark: SparkSession, path: str) -> DataFrame:
    """Strictly parsed JSON Lines: one RAW_SCHEMA row per physical line, rejects included."""
    lines = spark.read.text(path).select(
        # The binary cast keeps the bytes as read, so invalid UTF-8 is still visible to the parser.
        F.col("value").cast(T.BinaryType()).alias("value"),
        F.input_file_name().alias("source_file"),
        F.input_file_block_start().alias("block_start"),
    )
    return lines.mapInArrow(_parse_line_batches, RAW_SCHEMA)


def _check_parquet_schema(schema: T.StructType, path: str) -> None:
    fields: Dict[str, T.DataType] = {f.name: f.dataType for f in schema.fields}
    for required in ("id", "text"):
        if required not in fields:
            raise DocumentsError(
                f"{path}: column {required!r} is missing (found columns {sorted(fields)}); "
                "a documents table needs id: string, text: string, labels: array<string>"
            )
    expected = {f.name: f.dataType for f in DOCUMENT_SCHEMA.fields}
    for name, want in expected.items():
        # simpleString ignores nullability: array<string> with required
        # elements (parquet-avro, Hive) is as good as the optional kind.
        if name in fields and fields[name].simpleString() != want.simpleString():
            raise DocumentsError(
                f"{path}: column {name!r} has type {fields[name].simpleString()}, expected {want.simpleString()}"
            )


def _json_quoted(col: Column) -> Column:
    """A string column as a JSON literal (same form as :func:`_quoted` in the JSON parser)."""
    return F.regexp_extract(F.to_json(F.array(col)), r"^\[(.*)\]$", 1)


def _labels_reason(labels: Column) -> Column:
    """Why a Parquet ``labels`` value is unusable (null if it is fine); same wording as for JSON."""
    # (?U): Unicode whitespace, as Python's str.isspace in the JSON parser.
    bad = F.transform(labels, lambda x: x.isNull() | (x == "") | x.rlike(r"(?U)^\s|\s$"))
    pos = F.array_position(bad, True)  # 1-based; 0 when every label is fine
    label = F.element_at(labels, pos.cast("int"))
    prefix = F.concat(F.lit("labels["), (pos - 1).cast("string"), F.lit("]: "))
    return F.when(
        F.size(labels) == 0,
        F.lit("field 'labels': expected a non-empty array of strings (null for unlabelled), got an empty array"),
    ).when(
        pos > 0,
        F.concat(
            prefix,
            F.when(label.isNull(), F.lit("expected a non-empty string, got null"))
            .when(label == "", F.lit("expected a non-empty string, got an empty string"))
            .otherwise(F.concat(_json_quoted(label), F.lit(" has leading or trailing whitespace"))),
        ),
    )


def _similarities_reason(sims: Column) -> Column:
    """Why a Parquet ``similarities`` map is unusable: a null, NaN or infinite score."""
    bad = F.filter(
        F.map_entries(sims), lambda e: e["value"].isNull() | F.isnan(e["value"]) | (F.abs(e["value"]) == float("inf"))
    )
    first = F.element_at(bad, 1)
    return F.when(
        F.size(bad) > 0,
        F.concat(
            F.lit("similarities["),
            _json_quoted(first["key"]),
            F.lit("]: expected a finite number, got "),
            F.coalesce(first["value"].cast("string"), F.lit("null")),
        ),
    )


def _read_parquet(spark: SparkSession, path: str) -> DataFrame:
    """Parquet documents with the per-row checks its types do not guarantee, as RAW_SCHEMA rows."""
    df = spark.read.parquet(path)
    _check_parquet_schema(df.schema, path)
    for field in DOCUMENT_SCHEMA.fields:
        if field.name not in df.columns:
            df = df.withColumn(field.name, F.lit(None).cast(field.dataType))
    return df.select(
        "id",
        "text",
        "labels",
        "split",
        "similarities",
        F.lit(None).cast(T.StringType()).alias(_CORRUPT),
        F.coalesce(_labels_reason(F.col("labels")), _similarities_reason(F.col("similarities"))).alias(_REASON),
        F.lit(None).cast(T.LongType()).alias(_SPLIT_START),
        F.lit(None).cast(T.LongType()).alias(_SPLIT_LINE),
        F.input_file_name().alias("source_file"),
    )


def read_documents(spark: SparkSession, path: str, fmt: Optional[str] = None) -> DataFrame:
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

    Raises
    ------
    DocumentsError
        Missing path, undetectable or mixed format, missing ``id``/``text``
        Parquet column, or a Parquet column of the wrong type -- naming the
        path, the column and the expected type.
    """
    if "://" not in path and not os.path.exists(path):
        raise DocumentsError(f"documents input {path!r} does not exist")
    fmt = fmt or detect_format(spark, path)
    if fmt == "json":
        return _read_json_lines(spark, path)
    if fmt == "parquet":
        return _read_parquet(spark, path)
    raise DocumentsError(f"unknown documents format {fmt!r}: expected 'parquet' or 'json'")


def split_rejects(
    df: DataFrame, require_text: bool = True, counts: Optional[Dict[str, int]] = None
) -> Tuple[DataFrame, DataFrame]:
    """Split a documents DataFrame into (valid documents, rejects).

    Reasons, first match wins: the parser's / element checks' reason
    (``_reject_reason``), missing or empty id, missing text, duplicate id.
    Every copy of a duplicate id is rejected, since no copy is more
    authoritative than another -- rows rejected for another reason count as
    copies too when their id is known. Label-path validity is checked against
    the taxonomy by the caller.

    The rejects have :data:`REJECT_SCHEMA`; ``record`` is the raw line when
    the parser kept it, else the parsed row as JSON (both at most
    :data:`RECORD_CHARS` characters). ``line`` is the line in the file:
    the line within the split plus the lines of the same file's earlier
    splits, counted per split over the parsed rows (one row per split, joined
    onto the rejects only). A frame without ``_split_start`` /
    ``_split_line`` (built by hand) gets null lines.

    ``counts`` (a dict) gets ``parsed`` (rows) and ``valid``, both counted
    in one job; when no row is rejected, the rejects are then an empty
    table that reads nothing.
    """
    if _REASON not in df.columns:  # a frame built by hand, not by read_documents
        df = df.withColumn(
            _REASON,
            F.when(
                F.col(_CORRUPT).isNotNull(),
                F.lit(
                    "malformed record: expected a JSON object with id: string, text: string, "
                    "labels: array<string> or null"
                ),
            ),
        )
    for name in (_SPLIT_START, _SPLIT_LINE):
        if name not in df.columns:
            df = df.withColumn(name, F.lit(None).cast(T.LongType()))
    # One persisted, fully parsed copy: the duplicate-id count below, the rejects, the valid rows and the
    # callers' counts all read it.
    parsed = df.persist(StorageLevel.MEMORY_AND_DISK)
    copies, broadcast = _repeated_ids(parsed)
    text_blank = F.col("text").isNull() if require_text else F.lit(False)
    reason = (
        F.when(F.col(_REASON).isNotNull(), F.col(_REASON))
        .when(F.col("id").isNull() | (F.trim(F.col("id")) == ""), F.lit("field 'id' is missing or empty"))
        .when(text_blank, F.lit("field 'text' is missing (null)"))
    )
    if copies is not None:
        parsed = parsed.join(copies, on="id", how="left")
        reason = reason.when(
            F.col(_COPIES).isNotNull(),
            F.concat(F.lit("duplicate id: "), F.col(_COPIES).cast("string"), F.lit(" rows share this id")),
        )
    flagged = parsed.withColumn("_reason", reason.otherwise(F.lit(None)))
    if copies is not None and not broadcast:
        flagged = flagged.persist(StorageLevel.MEMORY_AND_DISK)  # a shuffle join: done once, not per reader
    good = flagged.where(F.col("_reason").isNull()).select("id", "text", "labels", "split", "similarities")
    if counts is not None:
        row = flagged.agg(F.count(F.lit(1)), F.count(F.when(F.col("_reason").isNull(), 1))).first()
        counts.update(parsed=int(row[0]), valid=int(row[1]))
        if counts["parsed"] == counts["valid"]:
            return good, flagged.sparkSession.createDataFrame([], REJECT_SCHEMA)
    as_json = F.to_json(F.struct("id", "text", "labels", "split", "similarities"))
    rejects = (
        flagged.where(F.col("_reason").isNotNull())
        .join(F.broadcast(_lines_before_split(flagged)), on=["source_file", _SPLIT_START], how="left")
        .select(
            F.col("id"),
            F.col("source_file"),
            F.col("_reason").alias("reason"),
            F.coalesce(F.col(_CORRUPT), F.substring(as_json, 1, RECORD_CHARS)).alias("record"),
            (F.col("_lines_before") + F.col(_SPLIT_LINE)).alias("line"),
        )
    )
    return good, rejects


# Rows sharing an id: at most this many distinct repeated ids go to every task as a broadcast table; more
# are joined by a shuffle (a crawl with millions of repeated ids), whose result is then persisted.
BROADCAST_REPEATED_IDS = 1_000_000
_COPIES = "_id_copies"


def _repeated_ids(parsed: DataFrame) -> Tuple[Optional[DataFrame], bool]:
    """((id, _id_copies) of the ids more than one row has, or None when every id is unique; broadcast?).

    Only the id column is shuffled, never the rows: the usual input has no
    repeated id, and then nothing is joined at all. One Spark job.
    """
    copies = (
        parsed.where(F.col("id").isNotNull())
        .groupBy("id")
        .agg(F.count(F.lit(1)).alias(_COPIES))
        .where(F.col(_COPIES) > 1)
    )
    n_repeated = copies.count()
    if n_repeated == 0:
        return None, False
    if n_repeated <= BROADCAST_REPEATED_IDS:
        return F.broadcast(copies), True
    return copies, False


def _lines_before_split(rows: DataFrame) -> DataFrame:
    """(source_file, _split_start, _lines_before): lines of the same file in the splits before each split.

    One row per split (file, split start). Hadoop's line reader gives each
    line to exactly one split and a file's splits follow each other in the
    order of their start byte, so the lines before a split are the lines of
    the file's splits with a smaller start. ``rows`` has one row per input
    line (the parser's output), so counting its rows per split counts lines.
    """
    before = Window.partitionBy("source_file").orderBy(_SPLIT_START).rowsBetween(Window.unboundedPreceding, -1)
    per_split = (
        rows.where(F.col(_SPLIT_START).isNotNull())
        .groupBy("source_file", _SPLIT_START)
        .agg(F.count(F.lit(1)).alias("_lines"))
    )
    return per_split.select(
        "source_file", _SPLIT_START, F.coalesce(F.sum("_lines").over(before), F.lit(0)).alias("_lines_before")
    )


def log_counts(stage: str, n_in: int, n_good: int, rejects: DataFrame) -> Dict[str, int]:
    """Log input/valid/rejected counts and the most frequent reject reasons; return their counts."""
    by_reason: Dict[str, int] = {}
    more = ""
    if n_in != n_good:
        # Reasons name positions and keys, so they can be as many as the
        # rejects: collect only the most frequent ones, never documents.
        counts = rejects.groupBy("reason").count()
        for row in counts.orderBy(F.desc("count"), "reason").limit(_LOGGED_REASONS).collect():
            by_reason[row["reason"]] = int(row["count"])
        if len(by_reason) == _LOGGED_REASONS:
            n_reasons = counts.count()
            if n_reasons > _LOGGED_REASONS:
                more = f"\n  ... and {n_reasons - _LOGGED_REASONS} more distinct reasons"
    log.info(
        "%s: %d documents read, %d valid, %d rejected%s%s",
        stage,
        n_in,
        n_good,
        n_in - n_good,
        "".join(f"\n  {c} x {r}" for r, c in sorted(by_reason.items(), key=lambda rc: (-rc[1], rc[0]))),
        more,
    )
    return by_reason


def count_input_rows(spark: SparkSession, path: str, fmt: Optional[str] = None) -> int:
    """Rows in the input as stored -- physical lines of JSON Lines, rows of Parquet -- without parsing.

    Independent of the parser, so ``valid + rejected == count_input_rows``
    is a real check that no row was lost, and cheap (JVM only).
    """
    fmt = fmt or detect_format(spark, path)
    if fmt == "json":
        return spark.read.text(path).count()
    return spark.read.parquet(path).count()
