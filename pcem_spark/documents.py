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

import json
import logging
import math
import os
import re
from typing import Dict, List, Optional, Tuple

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .errors import InputError

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
    # 1-based line in source_file (JSON Lines, any split size); null for Parquet.
    T.StructField("line", T.LongType(), True),
])

_CORRUPT = "_corrupt_record"   # raw line of a row the parser rejected (truncated)
_REASON = "_reject_reason"     # why the parser / element checks rejected the row
_SPLIT_START = "_split_start"  # byte offset where the line's split of source_file starts; null for Parquet
_SPLIT_LINE = "_split_line"    # 1-based line number within that split, in file order; null for Parquet

# Columns of read_documents' result, in order, for both formats.
RAW_SCHEMA = T.StructType(DOCUMENT_SCHEMA.fields + [
    T.StructField(_CORRUPT, T.StringType(), True),
    T.StructField(_REASON, T.StringType(), True),
    T.StructField(_SPLIT_START, T.LongType(), True),
    T.StructField(_SPLIT_LINE, T.LongType(), True),
    T.StructField("source_file", T.StringType(), True),
])

RECORD_CHARS = 1000  # how much of a rejected line the rejects table keeps
_LOGGED_REASONS = 20  # distinct reject reasons log_counts lists

_JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".ndjson", ".ndjson.gz")
_PARQUET_SUFFIXES = (".parquet",)
_PARQUET_MAGIC = b"PAR1"
_SNIFF_LIMIT = 16  # extension-less files opened to look for the Parquet magic


class DocumentsError(InputError):
    """The documents input does not have the expected shape."""


# ---------------------------------------------------------------------------
# Format detection (driver side: file names and at most a few 4-byte reads)
# ---------------------------------------------------------------------------

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


def _hadoop_fs(spark: SparkSession, path: str):
    """(FileSystem, Path) for ``path`` -- local or remote alike, as Spark will read it."""
    from .session import require_classic_session
    require_classic_session(spark, "Detecting the documents format (read_documents / count_input_rows without fmt)",
                            "the driver JVM's Hadoop FileSystem")
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath


def _data_files(spark: SparkSession, path: str) -> List[str]:
    """The data files under ``path`` (itself if it is a file), ignoring hidden files and checksums."""
    fs, hpath = _hadoop_fs(spark, path)
    if not fs.exists(hpath):
        raise DocumentsError(f"documents input {path!r} does not exist")
    if not fs.getFileStatus(hpath).isDirectory():
        return [hpath.toString()]
    # Compared as URI paths: the listing's scheme/authority spelling may differ from the argument's.
    root = fs.makeQualified(hpath).toUri().getPath().rstrip("/")
    found, it = [], fs.listFiles(hpath, True)
    while it.hasNext():
        file = it.next().getPath()
        if not _is_ignored(file.toUri().getPath()[len(root):]):
            found.append(file.toString())
    return found


def _has_parquet_magic(spark: SparkSession, path: str) -> bool:
    """True if the file starts with the Parquet magic bytes ``PAR1``."""
    fs, hpath = _hadoop_fs(spark, path)
    stream = fs.open(hpath)
    try:
        head = bytes(max(stream.read(), 0) for _ in range(len(_PARQUET_MAGIC)))
    finally:
        stream.close()
    return head == _PARQUET_MAGIC


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
        raise DocumentsError(f"documents input {path!r} holds no data files "
                             "(hidden files, _SUCCESS and .crc are ignored)")
    by_kind: Dict[str, List[str]] = {}
    for f in files:
        by_kind.setdefault(_kind_by_name(f) or "unknown", []).append(f)
    for f in by_kind.pop("unknown", [])[:_SNIFF_LIMIT]:
        if not _has_parquet_magic(spark, f):
            raise DocumentsError(
                f"documents input {path!r}: cannot tell the format of {f!r} (expected .parquet, "
                f".json, .jsonl or .ndjson, optionally .gz); pass the format explicitly")
        by_kind.setdefault("parquet", []).append(f)
    if len(by_kind) > 1:
        raise DocumentsError(
            f"documents input {path!r} mixes JSON Lines files (e.g. {by_kind['json'][0]!r}) and "
            f"Parquet files (e.g. {by_kind['parquet'][0]!r}); keep one format per directory")
    return next(iter(by_kind))


# ---------------------------------------------------------------------------
# Strict JSON Lines parsing (executor side, one physical line at a time)
# ---------------------------------------------------------------------------

class _LineReject(Exception):
    """A line that is not a valid document; ``doc_id`` when it parsed far enough to have one."""

    def __init__(self, reason: str, doc_id: Optional[str] = None):
        super().__init__(reason)
        self.reason = reason
        self.doc_id = doc_id


def _json_type(value) -> str:
    """The JSON name of a decoded value's type (bool before number: bool is an int in Python)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _quoted(s: str) -> str:
    """A string as a JSON literal -- unambiguous about whitespace, same form as the Parquet checks.

    A lone surrogate is written as its escape (``\\ud800``): the result goes
    into a reason, which must be encodable as UTF-8.
    """
    return _escape_surrogates(json.dumps(s, ensure_ascii=False))


def _escape_surrogates(s: str) -> str:
    """``s`` with each lone surrogate written as its ``\\udXXX`` escape: always encodable as UTF-8."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _lone_surrogate(s: str) -> Optional[int]:
    """Index of the first lone surrogate in ``s`` (None if there is none).

    A surrogate is the only thing a Python str can hold that UTF-8 -- and so
    Arrow, Spark and Parquet -- cannot encode. Python's ``json`` turns a
    ``\\ud83d\\ude80`` pair into one character but keeps a lone escape such
    as ``\\ud800`` (valid JSON) as a surrogate.
    """
    try:
        s.encode("utf-8")
        return None
    except UnicodeEncodeError as e:
        return e.start


def _is_padded(s: str) -> bool:
    return s[:1].isspace() or s[-1:].isspace()


def _reject_constant(name: str):
    # json accepts NaN / Infinity / -Infinity by default; RFC 8259 does not.
    raise _LineReject(f"invalid JSON: {name} is not a JSON value")


_JSON_WS = re.compile(r"[ \t\n\r]*")  # JSON's whitespace only, not Unicode's


def _first_repeated(keys) -> str:
    seen = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    raise AssertionError("no repeated key")


class _StrictDecoder:
    """``json`` decoding that notes repeated keys instead of letting the last one win."""

    def __init__(self):
        self.duplicates: List[str] = []
        self._decoder = json.JSONDecoder(object_pairs_hook=self._object, parse_constant=_reject_constant)

    def _object(self, pairs):
        obj = dict(pairs)
        # Cheap test first: only an object with a repeated key pays for finding it.
        if len(obj) != len(pairs) and not self.duplicates:
            self.duplicates.append(_first_repeated(k for k, _ in pairs))
        return obj

    def decode_at(self, line: str, pos: int):
        """(value, end) of the JSON value starting at ``pos``; ``_LineReject`` if it is not valid JSON."""
        try:
            return self._decoder.raw_decode(line, pos)
        except json.JSONDecodeError as e:
            raise _LineReject(f"invalid JSON: {e.msg} at column {e.colno}") from None
        except RecursionError:
            raise _LineReject("invalid JSON: nested too deeply") from None
        except ValueError as e:  # e.g. an integer literal over Python's 4300-digit limit
            raise _LineReject(f"invalid JSON: {e}") from None


def _string_id(value) -> Optional[str]:
    """The ``id`` of a decoded line if it is an object with a string ``id`` (encodable as UTF-8)."""
    if isinstance(value, dict) and isinstance(value.get("id"), str):
        doc_id = value["id"]
        return doc_id if _lone_surrogate(doc_id) is None else None
    return None


def _decode_one_object(decoder: _StrictDecoder, line: str) -> dict:
    """The single JSON object a line holds, or ``_LineReject`` saying why not."""
    start = _JSON_WS.match(line).end()
    if start == len(line):
        raise _LineReject("empty line (one JSON object per line expected)")
    decoder.duplicates.clear()
    value, end = decoder.decode_at(line, start)
    pos = _JSON_WS.match(line, end).end()
    if pos < len(line):
        _reject_trailing(decoder, line, pos, _string_id(value))
    if not isinstance(value, dict):
        raise _LineReject(f"not a JSON object (got {_json_type(value)}); one JSON object per line expected")
    if decoder.duplicates:
        key = decoder.duplicates[0]
        # The id is not trustworthy when it is the repeated key.
        raise _LineReject(f"duplicate key {key!r}", None if key == "id" else _string_id(value))
    return value


def _reject_trailing(decoder: _StrictDecoder, line: str, pos: int, doc_id: Optional[str]) -> None:
    """Reject a line with content after its first value, counting the values if they all parse."""
    n = 1
    while pos < len(line):
        try:
            _, end = decoder.decode_at(line, pos)
        except _LineReject:
            raise _LineReject(f"unexpected content after the JSON value at column {pos + 1}: "
                              f"{line[pos:pos + 20]!r} (one JSON object per line expected)", doc_id) from None
        n += 1
        pos = _JSON_WS.match(line, end).end()
    raise _LineReject(f"line holds {n} JSON values (one JSON object per line expected)", doc_id)


def _optional_string(obj: dict, field: str) -> Optional[str]:
    value = obj.get(field)
    if value is not None and not isinstance(value, str):
        raise _LineReject(f"field {field!r}: expected a string, got {_json_type(value)}", _string_id(obj))
    return value


def _check_labels(obj: dict) -> Optional[List[str]]:
    """``labels``: null or a non-empty array of non-empty, unpadded strings."""
    labels = obj.get("labels")
    if labels is None:
        return None
    doc_id = _string_id(obj)
    if not isinstance(labels, list):
        raise _LineReject(f"field 'labels': expected an array of strings or null, got {_json_type(labels)}",
                          doc_id)
    if not labels:
        raise _LineReject("field 'labels': expected a non-empty array of strings (null for unlabelled), "
                          "got an empty array", doc_id)
    for i, label in enumerate(labels):
        if not isinstance(label, str):
            raise _LineReject(f"labels[{i}]: expected a non-empty string, got {_json_type(label)}", doc_id)
        if not label:
            raise _LineReject(f"labels[{i}]: expected a non-empty string, got an empty string", doc_id)
        if _is_padded(label):
            raise _LineReject(f"labels[{i}]: {_quoted(label)} has leading or trailing whitespace", doc_id)
    return labels


def _check_similarities(obj: dict) -> Optional[List[Tuple[str, float]]]:
    """``similarities``: null or an object of node -> finite number, as (key, float) pairs."""
    sims = obj.get("similarities")
    if sims is None:
        return None
    doc_id = _string_id(obj)
    if not isinstance(sims, dict):
        raise _LineReject(f"field 'similarities': expected an object of node -> number, got {_json_type(sims)}",
                          doc_id)
    pairs = []
    for node, score in sims.items():
        if _json_type(score) != "number":
            raise _LineReject(f"similarities[{_quoted(node)}]: expected a number, got {_json_type(score)}", doc_id)
        try:
            value = float(score)
        except OverflowError:  # an integer literal beyond double range
            value = math.inf
        if not math.isfinite(value):
            raise _LineReject(f"similarities[{_quoted(node)}]: expected a finite number, got one out of range",
                              doc_id)
        pairs.append((node, value))
    return pairs


def _document_of(obj: dict) -> tuple:
    """(id, text, labels, split, similarities) of a decoded object, type-checked, never coerced."""
    return (_optional_string(obj, "id"), _optional_string(obj, "text"), _check_labels(obj),
            _optional_string(obj, "split"), _check_similarities(obj))


_SURROGATE_ESCAPES = ("\\ud", "\\uD")  # how a surrogate (U+D800..U+DFFF) is written in JSON
_SURROGATE_HELP = ("(not encodable as UTF-8; expected a string of Unicode characters, where a \\ud800-\\udbff "
                   "escape is always followed by a \\udc00-\\udfff escape)")


def _surrogate_reject(where: str, s: str, of: str, doc_id: Optional[str]) -> None:
    """Raise ``_LineReject`` if ``s`` holds a lone surrogate, naming ``where`` it is and its position."""
    i = _lone_surrogate(s)
    if i is not None:
        raise _LineReject(f"{where}: lone surrogate \\u{ord(s[i]):04x} at character {i}{of} {_SURROGATE_HELP}",
                          doc_id)


def _check_encodable(doc: tuple) -> None:
    """Reject a type-checked document whose strings Arrow cannot take (a lone surrogate).

    Checks every string :func:`_parse_line` returns: id, text, each label,
    split and the similarity keys. Keys other than the five are never
    returned, so a surrogate there is ignored like the rest of them.
    """
    doc_id, text, labels, split, sims = doc
    _surrogate_reject("field 'id'", doc_id or "", "", None)
    _surrogate_reject("field 'text'", text or "", "", doc_id)
    for i, label in enumerate(labels or ()):
        _surrogate_reject(f"labels[{i}]", label, "", doc_id)
    _surrogate_reject("field 'split'", split or "", "", doc_id)
    for node, _ in sims or ():
        _surrogate_reject(f"similarities[{_quoted(node)}]", node, " of the key", doc_id)


def _parse_line(decoder: _StrictDecoder, data: bytes, first_line: bool) -> tuple:
    """One raw line -> (id, text, labels, split, similarities, raw_record, reason).

    ``raw_record`` and ``reason`` are null for a line that is a well-typed
    document (its id and text may still be missing: :func:`split_rejects`
    decides those). A rejected line has only its id (when known), the first
    :data:`RECORD_CHARS` characters of the raw line and the reason.
    """
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raw = data[:4 * RECORD_CHARS].decode("utf-8", "backslashreplace")[:RECORD_CHARS]
        return None, None, None, None, None, raw, f"invalid UTF-8 at byte {e.start + 1}"
    if line.startswith("\ufeff"):
        if not first_line:  # e.g. files concatenated with their byte-order marks
            return None, None, None, None, None, line[:RECORD_CHARS], \
                "byte-order mark (U+FEFF) at the start of a line other than line 1"
        line = line[1:]  # a UTF-8 byte-order mark, written by some Windows tools
    try:
        doc = _document_of(_decode_one_object(decoder, line))
        # Only a line with a surrogate escape can decode to a str that is not valid Unicode text:
        # the others pay one substring search, not an encoding of every string.
        if _SURROGATE_ESCAPES[0] in line or _SURROGATE_ESCAPES[1] in line:
            _check_encodable(doc)
        return doc + (None, None)
    except _LineReject as e:
        # The raw line came from valid UTF-8, so it is encodable; a reason or an id built from decoded
        # strings may hold a lone surrogate (e.g. a repeated key "\ud800"), which Arrow cannot take.
        doc_id = e.doc_id if e.doc_id is None or _lone_surrogate(e.doc_id) is None else None
        return doc_id, None, None, None, None, line[:RECORD_CHARS], _escape_surrogates(e.reason)


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
    arrow_schema = pa.schema([
        ("id", pa.string()), ("text", pa.string()), ("labels", pa.list_(pa.string())),
        ("split", pa.string()), ("similarities", pa.map_(pa.string(), pa.float64())),
        (_CORRUPT, pa.string()), (_REASON, pa.string()), (_SPLIT_START, pa.int64()), (_SPLIT_LINE, pa.int64()),
        ("source_file", pa.string())])
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
        F.input_file_block_start().alias("block_start"))
    return lines.mapInArrow(_parse_line_batches, RAW_SCHEMA)


# ---------------------------------------------------------------------------
# Parquet
# ---------------------------------------------------------------------------

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
    return (F.when(F.size(labels) == 0,
                   F.lit("field 'labels': expected a non-empty array of strings (null for unlabelled), "
                         "got an empty array"))
            .when(pos > 0, F.concat(prefix, F.when(label.isNull(), F.lit("expected a non-empty string, got null"))
                                    .when(label == "", F.lit("expected a non-empty string, got an empty string"))
                                    .otherwise(F.concat(_json_quoted(label),
                                                        F.lit(" has leading or trailing whitespace"))))))


def _similarities_reason(sims: Column) -> Column:
    """Why a Parquet ``similarities`` map is unusable: a null, NaN or infinite score."""
    bad = F.filter(F.map_entries(sims), lambda e: e["value"].isNull() | F.isnan(e["value"])
                   | (F.abs(e["value"]) == float("inf")))
    first = F.element_at(bad, 1)
    return F.when(F.size(bad) > 0, F.concat(
        F.lit("similarities["), _json_quoted(first["key"]), F.lit("]: expected a finite number, got "),
        F.coalesce(first["value"].cast("string"), F.lit("null"))))


def _read_parquet(spark: SparkSession, path: str) -> DataFrame:
    """Parquet documents with the per-row checks its types do not guarantee, as RAW_SCHEMA rows."""
    df = spark.read.parquet(path)
    _check_parquet_schema(df.schema, path)
    for field in DOCUMENT_SCHEMA.fields:
        if field.name not in df.columns:
            df = df.withColumn(field.name, F.lit(None).cast(field.dataType))
    return df.select(
        "id", "text", "labels", "split", "similarities",
        F.lit(None).cast(T.StringType()).alias(_CORRUPT),
        F.coalesce(_labels_reason(F.col("labels")), _similarities_reason(F.col("similarities"))).alias(_REASON),
        F.lit(None).cast(T.LongType()).alias(_SPLIT_START),
        F.lit(None).cast(T.LongType()).alias(_SPLIT_LINE),
        F.input_file_name().alias("source_file"))


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------

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


def split_rejects(df: DataFrame, require_text: bool = True) -> Tuple[DataFrame, DataFrame]:
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
    """
    if _REASON not in df.columns:  # a frame built by hand, not by read_documents
        df = df.withColumn(_REASON, F.when(F.col(_CORRUPT).isNotNull(), F.lit(
            "malformed record: expected a JSON object with id: string, text: string, "
            "labels: array<string> or null")))
    for name in (_SPLIT_START, _SPLIT_LINE):
        if name not in df.columns:
            df = df.withColumn(name, F.lit(None).cast(T.LongType()))
    dup_window = Window.partitionBy("id")
    text_blank = F.col("text").isNull() if require_text else F.lit(False)
    reason = (F.when(F.col(_REASON).isNotNull(), F.col(_REASON))
              .when(F.col("id").isNull() | (F.trim(F.col("id")) == ""), F.lit("field 'id' is missing or empty"))
              .when(text_blank, F.lit("field 'text' is missing (null)"))
              .when(F.count(F.lit(1)).over(dup_window) > 1,
                    F.concat(F.lit("duplicate id: "),
                             F.count(F.lit(1)).over(dup_window).cast("string"),
                             F.lit(" rows share this id")))
              .otherwise(F.lit(None)))
    # Persisted so that both outputs (and the caller's counts) share one
    # parse of the input and one verdict per row.
    flagged = df.withColumn("_reason", reason).persist(StorageLevel.MEMORY_AND_DISK)
    good = flagged.where(F.col("_reason").isNull()).select("id", "text", "labels", "split", "similarities")
    parsed = F.to_json(F.struct("id", "text", "labels", "split", "similarities"))
    rejects = flagged.where(F.col("_reason").isNotNull()).join(
        F.broadcast(_lines_before_split(flagged)), on=["source_file", _SPLIT_START], how="left").select(
        F.col("id"), F.col("source_file"), F.col("_reason").alias("reason"),
        F.coalesce(F.col(_CORRUPT), F.substring(parsed, 1, RECORD_CHARS)).alias("record"),
        (F.col("_lines_before") + F.col(_SPLIT_LINE)).alias("line"))
    return good, rejects


def _lines_before_split(rows: DataFrame) -> DataFrame:
    """(source_file, _split_start, _lines_before): lines of the same file in the splits before each split.

    One row per split (file, split start). Hadoop's line reader gives each
    line to exactly one split and a file's splits follow each other in the
    order of their start byte, so the lines before a split are the lines of
    the file's splits with a smaller start. ``rows`` has one row per input
    line (the parser's output), so counting its rows per split counts lines.
    """
    before = Window.partitionBy("source_file").orderBy(_SPLIT_START).rowsBetween(Window.unboundedPreceding, -1)
    per_split = (rows.where(F.col(_SPLIT_START).isNotNull())
                 .groupBy("source_file", _SPLIT_START).agg(F.count(F.lit(1)).alias("_lines")))
    return per_split.select("source_file", _SPLIT_START,
                            F.coalesce(F.sum("_lines").over(before), F.lit(0)).alias("_lines_before"))


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
    log.info("%s: %d documents read, %d valid, %d rejected%s%s", stage, n_in, n_good, n_in - n_good,
             "".join(f"\n  {c} x {r}" for r, c in sorted(by_reason.items(), key=lambda rc: (-rc[1], rc[0]))),
             more)
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
