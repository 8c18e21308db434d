"""Crawl input: WARC and WET files (Common Crawl's format) -> the documents table.

``pcem ingest-warc --input 'crawl/*.warc.gz' --output docs`` reads many WARC
or WET files in parallel and writes the documents table (Parquet) and its
rejects table.

Library
-------
FastWARC reads the records and Resiliparse decodes and extracts the main text
of HTML pages (``extract_plain_text(tree, main_content=True)``): both are C++
with thin Python bindings. On the same realistic HTML pages (scripts/bench_warc.py:
news-site boilerplate around 20 Newsgroups texts) they read and extract ~7x more
pages per second per core than warcio + trafilatura (3.7-11x over four runs,
default and ``fast=True`` trafilatura; ~2,000 vs ~250 pages/s), keeping the
same article text, and read WET files 2x faster. A crawl is parsed record by
record in Python either way, so the per-record cost is the whole cost. Both
are optional dependencies (``pip install "pcem-spark[warc]"``), imported
lazily by :func:`require_libraries`.

Records -> rows
---------------
:func:`parse_warc_stream` (pure: a stream of bytes in, rows out; tested
without Spark) turns every record of one file into exactly one outcome:

* ``response`` / ``resource`` / ``conversion`` records are document
  candidates. Their content type is the HTTP ``Content-Type`` for HTTP
  responses (falling back to Common Crawl's ``WARC-Identified-Payload-Type``),
  else the record's own ``Content-Type``:

  - ``text/html``, ``application/xhtml+xml`` -> the main text of the page
    (charset: HTTP header, else the HTML ``<meta>``, else detected; the HTTP
    ``Content-Encoding`` / chunked transfer coding is undone first);
  - ``text/plain`` -> the text (a WET ``conversion`` record is UTF-8, as
    Common Crawl writes it; other text is decoded like HTML);
  - anything else (``image/jpeg``, ``application/pdf`` ...), a non-2xx HTTP
    status, a payload that cannot be decoded, a text that is empty (or shorter
    than ``min_text_chars``) -> a reject with a reason;

* every other record type (``warcinfo``, ``request``, ``metadata``,
  ``revisit``, ...) is not a document: counted by type, never a reject;
* a file that stops being WARC (garbage bytes, a truncated gzip member, a
  record shorter than its ``Content-Length``) ends with one reject row for the
  file (``id`` null; the reason names the error, the record number and the
  byte offset reached); the records read before it are kept.

Each file ends with one summary row (records read, skipped by type), so the
identity ``records read = documents + rejects + skipped`` is checked over the
whole run (:func:`ingest_warc`), and a file Spark did not read is noticed.

Spark
-----
:func:`read_warc_files` reads the files with ``SparkContext.binaryFiles``
(Hadoop's file systems: local paths, ``hdfs://``, ``s3a://``, ``gs://``, ...)
and runs the parser in a ``flatMap``, one file per task at a time. **A task
holds one whole file in memory, twice** (the JVM's byte array and Python's
``bytes``): Common Crawl's WARC files are ~1 GB each (WET ~150 MB), so give
executors ``spark.executor.memory`` and ``spark.executor.pyspark.memory``
(or ``memoryOverhead``) of ~2-3 x the largest file per core. Files over 2 GB
cannot be read (a Java array's limit). The ``binaryFile`` data source with
``mapInArrow`` would move the rows as Arrow batches instead of pickles, but
measured no faster here (within 10% of CPU) and holds a file in the JVM two
or three times (byte array, row, Arrow vector), so the RDD reader is used.

The parsed rows are persisted once (memory and disk); the documents, the
rejects and every count are read from that copy, and a repeated id is found
by shuffling the ids alone.
"""

from __future__ import annotations

import codecs
import collections
import datetime as _dt
import io
import json
import logging
import time
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from .errors import InputError

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "pcem-spark[warc]"'

# Record types that can hold a document; every other type is counted and skipped.
DOCUMENT_RECORD_TYPES = ("response", "resource", "conversion")
HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("text/plain",)
ID_FIELDS = ("record", "url")
# Up to this many repeated ids (~100 bytes each) are broadcast to flag their copies; more are joined by a shuffle.
BROADCAST_REPEATED_IDS = 1_000_000
RECORD_CHARS = 1000  # as pcem_spark.documents.RECORD_CHARS: how much of a reject's record is kept

# Row kinds of the parser's output.
DOCUMENT, REJECT, FILE_ERROR, FILE_SUMMARY = "document", "reject", "file_error", "file"


class WarcDependencyError(InputError):
    """FastWARC / Resiliparse are not installed (``pip install "pcem-spark[warc]"``)."""


class WarcInputError(InputError):
    """A ``--input`` path or setting of ``ingest-warc`` is wrong (names it)."""


class ParsedRow(NamedTuple):
    """One outcome of the parser; field order = :func:`parsed_schema`.

    ``kind`` is :data:`DOCUMENT` (id, text, url, crawl_date), :data:`REJECT`
    (id when known, reason, record), :data:`FILE_ERROR` (reason, record) or
    :data:`FILE_SUMMARY` (records_read, skipped: WARC-Type -> count).
    """
    kind: str
    id: Optional[str] = None
    text: Optional[str] = None
    url: Optional[str] = None
    crawl_date: Optional[_dt.datetime] = None
    source_file: Optional[str] = None
    reason: Optional[str] = None
    record: Optional[str] = None
    records_read: Optional[int] = None
    skipped: Optional[Dict[str, int]] = None


def require_libraries():
    """Import FastWARC and Resiliparse; :class:`WarcDependencyError` (exit 2) naming the install command."""
    try:
        from fastwarc.warc import ArchiveIterator, WarcRecord  # noqa: F401
        from resiliparse.extract.html2text import extract_plain_text  # noqa: F401
        from resiliparse.parse.encoding import bytes_to_str, detect_encoding  # noqa: F401
        from resiliparse.parse.html import HTMLTree  # noqa: F401
    except ImportError as e:
        raise WarcDependencyError(f"reading WARC/WET files needs FastWARC and Resiliparse ({e}); "
                                  f"install them with: {INSTALL_HINT}") from None


# ---------------------------------------------------------------------------
# Pure functions: content types, decoding, text extraction
# ---------------------------------------------------------------------------

def split_content_type(value: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """``"Text/HTML; charset=ISO-8859-1"`` -> ``("text/html", "iso-8859-1")``; (None, None) if empty."""
    if not value or not value.strip():
        return None, None
    parts = value.split(";")
    mime = parts[0].strip().lower() or None
    charset = None
    for param in parts[1:]:
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset":
            charset = val.strip().strip("\"'").lower() or None
    return mime, charset


def payload_kind(content_type: Optional[str]) -> Optional[str]:
    """``"html"``, ``"text"`` or None (not a document) for a lower-case MIME type."""
    if content_type in HTML_TYPES:
        return "html"
    if content_type in TEXT_TYPES:
        return "text"
    return None


def _known_codec(charset: Optional[str]) -> Optional[str]:
    """``charset`` if Python can decode it, else None (servers send typos and inventions)."""
    if not charset:
        return None
    try:
        codecs.lookup(charset)
    except LookupError:
        return None
    return charset


def decode_text(body: bytes, charset: Optional[str], html: bool) -> str:
    """Bytes -> str: the given charset when Python knows it, else the HTML ``<meta>`` (html only) or detected.

    Resiliparse's ``bytes_to_str`` falls back to UTF-8 and Windows-1252 when the
    charset does not fit the bytes, so a wrong header does not lose the page.
    """
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    encoding = _known_codec(charset) or detect_encoding(body, from_html_meta=html)
    return bytes_to_str(body, encoding)


def html_main_text(body: bytes, charset: Optional[str]) -> str:
    """The main text of an HTML page (navigation, footers, scripts left out), whitespace collapsed."""
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree
    return extract_plain_text(HTMLTree.parse(decode_text(body, charset, html=True)), main_content=True)


def text_reason(text: str, kind: str, min_text_chars: int) -> Optional[str]:
    """Why ``text`` is not kept (None if it is): empty, or shorter than ``min_text_chars`` (stripped)."""
    n = len(text.strip())
    if n == 0:
        return "empty after main-text extraction" if kind == "html" else "empty text"
    if n < min_text_chars:
        return f"text shorter than --min-text-chars {min_text_chars} ({n} characters)"
    return None


def _record_json(fields: Dict[str, object]) -> str:
    """What identifies a record in the rejects table: its non-null fields as JSON, at most RECORD_CHARS."""
    return json.dumps({k: v for k, v in fields.items() if v is not None}, ensure_ascii=False)[:RECORD_CHARS]


def _unbracket(value: Optional[str]) -> Optional[str]:
    """A WARC-Target-URI without the ``<...>`` some WARC 1.0 writers put around it."""
    if value is None:
        return None
    value = value.strip()
    if value.startswith("<") and value.endswith(">"):
        value = value[1:-1].strip()
    return value or None


# ---------------------------------------------------------------------------
# Pure functions: one record, one file
# ---------------------------------------------------------------------------

def _http_payload(block: bytes):
    """(status, content type, charset, body) of an HTTP response block; OSError if it cannot be decoded.

    A fresh FastWARC record parses the headers and undoes the transfer and
    content codings (chunked, gzip, deflate, brotli, zstd), so the record the
    file iterator owns is never touched.
    """
    from fastwarc.warc import WarcRecord
    http = WarcRecord()
    http.set_bytes_content(block)
    http.is_http = True
    http.parse_http(auto_decode="all", quirks_mode=True)  # quirks: LF-only header lines, as browsers accept
    headers = http.http_headers
    status = headers.status_code if headers is not None else None
    mime, charset = split_content_type(headers.get("Content-Type") if headers is not None else None)
    body = http.reader.read()
    return status, mime, charset, body


def record_outcome(headers: Dict[str, str], block: bytes, is_http: bool, source_file: str, number: int,
                   offset: int, id_field: str = "record", min_text_chars: int = 1) -> ParsedRow:
    """A document-type record (response, resource, conversion) -> one DOCUMENT or REJECT row.

    Parameters
    ----------
    headers : dict
        The record's WARC headers (WARC-Type, WARC-Record-ID, WARC-Target-URI,
        WARC-Date, Content-Type, ...).
    block : bytes
        The record's whole content block (for HTTP: status line, headers, body).
    is_http : bool
        The block is an HTTP message (``Content-Type: application/http``).
    number, offset : int
        1-based record number in the file and its byte offset (for the reject's ``record``).
    """
    warc_type = headers.get("WARC-Type")
    record_id = headers.get("WARC-Record-ID")
    url = _unbracket(headers.get("WARC-Target-URI"))
    doc_id = record_id if id_field == "record" else url
    ident = {"record": number, "offset": offset, "warc_type": warc_type, "record_id": record_id, "url": url}

    def reject(reason: str, **more) -> ParsedRow:
        return ParsedRow(REJECT, id=doc_id, source_file=source_file, reason=reason,
                         record=_record_json({**ident, **more}))

    if doc_id is None:
        return reject("no WARC-Target-URI (needed by --id url)")
    status = None
    if is_http and warc_type == "response":
        try:
            status, mime, charset, body = _http_payload(block)
        except OSError as e:  # a broken Content-Encoding, bad chunking ...
            return reject(f"cannot decode the HTTP payload: {e}")
        if mime is None:  # Common Crawl's own detection when the server sent no Content-Type
            mime = split_content_type(headers.get("WARC-Identified-Payload-Type"))[0]
        if status is None:
            return reject("no HTTP status line", content_type=mime)
        if not 200 <= status < 300:
            return reject(f"HTTP status {status}", content_type=mime, status=status)
    else:
        mime, charset = split_content_type(headers.get("Content-Type"))
        body = block
    kind = payload_kind(mime)
    if kind is None:
        if mime is None:
            return reject("no Content-Type (neither a header nor WARC-Identified-Payload-Type)", status=status)
        return reject(f"content type {mime} is not text or HTML", content_type=mime, status=status)
    if kind == "text" and warc_type == "conversion":
        try:
            text = body.decode("utf-8")  # Common Crawl's WET text is UTF-8
        except UnicodeDecodeError as e:
            return reject(f"not valid UTF-8 at byte {e.start} (WET conversion records are UTF-8)",
                          content_type=mime)
    else:
        try:
            text = html_main_text(body, charset) if kind == "html" else decode_text(body, charset, html=False)
        except (ValueError, LookupError) as e:  # UnicodeError, Resiliparse's HTMLParserException (ValueErrors)
            return reject(f"cannot decode or parse the {mime} payload: {type(e).__name__}: {e}", content_type=mime)
    why = text_reason(text, kind, min_text_chars)
    if why is not None:
        return reject(why, content_type=mime, status=status)
    try:
        date = _warc_date(headers.get("WARC-Date"))
    except ValueError:
        return reject(f"WARC-Date {headers.get('WARC-Date')!r} is not an ISO 8601 date", content_type=mime)
    return ParsedRow(DOCUMENT, id=doc_id, text=text, url=url, crawl_date=date, source_file=source_file)


def _warc_date(value: Optional[str]) -> Optional[_dt.datetime]:
    """WARC-Date (``2024-01-02T03:04:05Z``, WARC 1.1 allows fractions) -> an aware UTC datetime."""
    if value is None or not value.strip():
        return None
    parsed = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None:  # WARC dates are UTC
        parsed = parsed.replace(tzinfo=_dt.timezone.utc)
    return parsed.astimezone(_dt.timezone.utc)


def parse_warc_stream(stream, source_file: str, id_field: str = "record",
                      min_text_chars: int = 1) -> Iterator[ParsedRow]:
    """Every record of one WARC/WET file (plain, gzip, zstd or lz4; detected) -> rows.

    Yields one DOCUMENT or REJECT row per document-type record, at most one
    FILE_ERROR row (the file stopped being WARC: the records before it are
    kept), and, last, one FILE_SUMMARY row: ``records_read`` (complete
    records, every type) and ``skipped`` (WARC-Type -> count of the
    non-document records). So ``records_read = documents + rejects +
    sum(skipped)`` for every file.

    ``stream`` is a binary file-like object (or bytes). Raises ValueError on
    a bad ``id_field``; never on bad bytes.
    """
    from fastwarc.warc import ArchiveIterator
    if id_field not in ID_FIELDS:
        raise WarcInputError(f"--id must be one of {', '.join(ID_FIELDS)}, got {id_field!r}")
    if isinstance(stream, (bytes, bytearray, memoryview)):
        stream = io.BytesIO(stream)
    records_read, skipped = 0, collections.Counter()
    last_offset = None
    error: Optional[Tuple[str, Optional[int]]] = None  # (reason, byte offset) when the file stops being WARC
    records = iter(ArchiveIterator(stream, parse_http=False))
    while error is None:
        number = records_read + 1
        try:
            record = next(records)
        except StopIteration:
            break
        except (OSError, ValueError) as e:  # FastWARC: "Invalid WARC header", "Gzip decompression error" ...
            where = (f"after {records_read} complete records (the last one at byte offset {last_offset})"
                     if records_read else "before the first record (byte offset 0)")
            error = f"not a readable WARC file: {e} at record {number}, {where}", last_offset
            break
        offset = record.stream_pos
        headers = dict(record.headers.items())
        warc_type = headers.get("WARC-Type")
        is_document = warc_type in DOCUMENT_RECORD_TYPES
        try:  # a non-document record's content is skipped, not copied: only its length is checked
            block = record.reader.read() if is_document else None
            n_bytes = len(block) if is_document else record.reader.consume()
        except OSError as e:
            error = f"record {number} at byte offset {offset} cannot be read: {e}", offset
            break
        declared = headers.get("Content-Length", "").strip()
        if not declared.isdigit() or warc_type is None or "WARC-Record-ID" not in headers:
            # What FastWARC returns for a file cut inside a record's headers.
            error = (f"record {number} at byte offset {offset} is truncated or malformed: its WARC headers "
                     f"lack WARC-Type, WARC-Record-ID or Content-Length (found {sorted(headers)})"), offset
        elif n_bytes != int(declared):  # ... and for a file cut inside a record's content
            error = (f"record {number} at byte offset {offset} is truncated: Content-Length {declared} "
                     f"but {n_bytes} bytes"), offset
        else:
            records_read += 1
            last_offset = offset
            if is_document:
                yield record_outcome(headers, block, record.is_http, source_file, number, offset, id_field,
                                     min_text_chars)
            else:
                skipped[warc_type] += 1
    if error is None and records_read == 0:  # an empty file or gzip stream: most likely a failed copy
        error = "holds no WARC record (an empty file?)", None
    if error is not None:
        reason, offset = error
        yield ParsedRow(FILE_ERROR, source_file=source_file, reason=reason,
                        record=_record_json({"file": source_file, "record": records_read + 1, "offset": offset}))
    yield ParsedRow(FILE_SUMMARY, source_file=source_file, records_read=records_read, skipped=dict(skipped))


def record_bytes(warc_type: str, record_id: str, url: Optional[str] = None, content: bytes = b"",
                 http: bool = False, content_type: Optional[str] = None,
                 date: str = "2024-03-01T10:00:00Z") -> bytes:
    """One uncompressed WARC record written by FastWARC (fixtures for tests and scripts/bench_warc.py).

    ``warc_type``: a FastWARC record type name (``"response"``, ``"conversion"``, ``"warcinfo"`` ...);
    ``http=True``: ``content`` is a full HTTP message (status line, headers, body); otherwise
    ``content_type`` becomes the record's own Content-Type. A fresh record per call: writing
    consumes the payload.
    """
    require_libraries()
    from fastwarc.warc import WarcRecord, WarcRecordType
    rec = WarcRecord()
    rec.init_headers(getattr(WarcRecordType, warc_type), record_urn=record_id.encode())
    rec.headers["WARC-Date"] = date
    if url:
        rec.headers["WARC-Target-URI"] = url
    rec.set_bytes_content(content)
    if http:
        rec.is_http = True
    elif content_type:
        rec.headers["Content-Type"] = content_type
    buf = io.BytesIO()
    rec.write(buf)
    return buf.getvalue()


def _parse_file(path_and_bytes: Tuple[str, bytes], id_field: str, min_text_chars: int) -> Iterator[ParsedRow]:
    """flatMap body: one ``(path, bytes)`` of ``binaryFiles`` -> its rows."""
    path, data = path_and_bytes
    return parse_warc_stream(io.BytesIO(data), path, id_field, min_text_chars)


# ---------------------------------------------------------------------------
# Spark: inputs, parallel read, the two tables
# ---------------------------------------------------------------------------

def split_inputs(values: Iterable[str]) -> List[str]:
    """``--input`` values (repeatable, comma-separated) -> paths/globs; commas inside ``{a,b}`` globs stay."""
    out: List[str] = []
    for value in values:
        depth, start = 0, 0
        for i, ch in enumerate(value):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth = max(depth - 1, 0)
            elif ch == "," and depth == 0:
                out.append(value[start:i])
                start = i + 1
        out.append(value[start:])
    paths = [p.strip() for p in out if p.strip()]
    if not paths:
        raise WarcInputError("--input: no path given")
    return paths


_GLOB_CHARS = "\\{}[]*?"


def _escape_glob(path: str) -> str:
    """A file name as a Hadoop glob that matches only itself (binaryFiles globs its input)."""
    return "".join("\\" + ch if ch in _GLOB_CHARS else ch for ch in path)


def expand_inputs(spark, patterns: Sequence[str]) -> List[Tuple[str, int]]:
    """Paths / globs / directories (any Hadoop URI) -> (file, size in bytes), sorted, without duplicates.

    A directory contributes every file below it, except hidden ones (``_x``,
    ``.x``, ``.crc``) which Hadoop's input formats skip anyway.

    Raises
    ------
    WarcInputError
        A pattern matches nothing, a directory holds no file, a named file is
        hidden (Hadoop would skip it silently) or a file name holds a comma.
    """
    from .documents import _hadoop_fs, _is_ignored
    found: Dict[str, int] = {}
    for pattern in patterns:
        fs, hpath = _hadoop_fs(spark, pattern)
        statuses = fs.globStatus(hpath)
        if (statuses is None or len(statuses) == 0) and fs.exists(hpath):
            statuses = [fs.getFileStatus(hpath)]  # a name holding glob characters, e.g. "page[1].warc"
        if statuses is None or len(statuses) == 0:
            raise WarcInputError(f"--input {pattern!r} matches no file")
        before = len(found)
        for status in statuses:
            if status.isDirectory():
                root = status.getPath().toUri().getPath().rstrip("/")
                it = fs.listFiles(status.getPath(), True)
                while it.hasNext():
                    file = it.next()
                    if not _is_ignored(file.getPath().toUri().getPath()[len(root):]):
                        found[file.getPath().toString()] = int(file.getLen())
            else:
                name = status.getPath().getName()
                if _is_ignored("/" + name):
                    raise WarcInputError(f"--input {pattern!r}: {status.getPath().toString()!r} is a hidden file "
                                         "(name starting with '_' or '.', or .crc), which Hadoop skips; rename it")
                found[status.getPath().toString()] = int(status.getLen())
        if len(found) == before:
            raise WarcInputError(f"--input {pattern!r} holds no files (hidden files, _SUCCESS and .crc are skipped)")
    for path in found:
        if "," in path:
            raise WarcInputError(f"--input file {path!r}: Hadoop's input formats cannot read a file name "
                                 "holding a comma; rename it")
    return sorted(found.items())


# Columns of the documents table ingest-warc writes: the documents table's, then the crawl's.
def output_schema():
    from pyspark.sql import types as T
    from .documents import DOCUMENT_SCHEMA
    return T.StructType(DOCUMENT_SCHEMA.fields + [
        T.StructField("url", T.StringType(), True),          # WARC-Target-URI
        T.StructField("crawl_date", T.TimestampType(), True),  # WARC-Date
        T.StructField("source_file", T.StringType(), True),  # the WARC/WET file
    ])


def parsed_schema():
    """Spark schema of :class:`ParsedRow` (same field order)."""
    from pyspark.sql import types as T
    return T.StructType([
        T.StructField("kind", T.StringType(), False),
        T.StructField("id", T.StringType(), True),
        T.StructField("text", T.StringType(), True),
        T.StructField("url", T.StringType(), True),
        T.StructField("crawl_date", T.TimestampType(), True),
        T.StructField("source_file", T.StringType(), True),
        T.StructField("reason", T.StringType(), True),
        T.StructField("record", T.StringType(), True),
        T.StructField("records_read", T.LongType(), True),
        T.StructField("skipped", T.MapType(T.StringType(), T.LongType(), True), True),
    ])


def read_warc_files(spark, files: Sequence[str], id_field: str = "record", min_text_chars: int = 1):
    """WARC/WET files (full URIs, no globs needed) -> DataFrame of :func:`parsed_schema` rows, lazily.

    ``binaryFiles`` gives each task whole files (never split; small files are
    packed together up to ``spark.files.maxPartitionBytes``), so files are
    parsed in parallel, one file per task at a time.
    """
    import functools
    sc = spark.sparkContext
    rdd = sc.binaryFiles(",".join(_escape_glob(f) for f in files), minPartitions=max(len(files), 1))
    rows = rdd.flatMap(functools.partial(_parse_file, id_field=id_field, min_text_chars=min_text_chars))
    return spark.createDataFrame(rows, parsed_schema())


def _top_reasons(df, limit: int = 20) -> Dict[str, int]:
    from pyspark.sql import functions as F
    rows = df.groupBy("reason").count().orderBy(F.desc("count"), "reason").limit(limit).collect()
    return {r["reason"]: int(r["count"]) for r in rows}


def ingest_warc(spark, inputs: Sequence[str], output: str, rejects_path: str, id_field: str = "record",
                min_text_chars: int = 1, overwrite: bool = False) -> Dict[str, object]:
    """Read WARC/WET files into the documents table (Parquet) and its rejects table; return the counts.

    Both outputs are written with :func:`pcem_spark.outputs.atomic_output`;
    their markers hold the counts (by reason, by record type). Every id must be
    unique: copies of one id (``--id url`` and a URL crawled twice, or a file
    given twice under two names) are all rejected, the rule
    :func:`pcem_spark.documents.split_rejects` applies when the table is read.

    Raises
    ------
    WarcInputError / WarcDependencyError (ValueError: exit 2)
        Bad settings, inputs that match nothing, missing libraries, no document at all.
    RuntimeError
        The counts do not add up (a bug): nothing is written.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from .outputs import atomic_output, check_writable
    t0 = time.perf_counter()
    require_libraries()
    if id_field not in ID_FIELDS:
        raise WarcInputError(f"--id must be one of {', '.join(ID_FIELDS)}, got {id_field!r}")
    if min_text_chars < 0:
        raise WarcInputError(f"--min-text-chars must be >= 0, got {min_text_chars}")
    min_text_chars = max(min_text_chars, 1)  # an empty text is never a document
    if output.rstrip("/") == rejects_path.rstrip("/"):
        raise WarcInputError(f"--rejects {rejects_path!r} is the same path as --output")
    check_writable(spark, output, overwrite)
    files = expand_inputs(spark, split_inputs(inputs))
    total_bytes = sum(size for _, size in files)
    log.info("ingest-warc: %d files, %.1f MB (largest %.1f MB: a task holds a whole file in memory)",
             len(files), total_bytes / 1e6, max(size for _, size in files) / 1e6)

    parsed = read_warc_files(spark, [f for f, _ in files], id_field, min_text_chars) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    copies = None
    try:
        candidates = parsed.where(F.col("kind") == DOCUMENT)
        # Every copy of a repeated id is a reject (documents.split_rejects' rule, same wording). Only the ids
        # are shuffled to find them; the repeats (usually none) are broadcast, so the texts never move.
        copies = candidates.groupBy("id").agg(F.count(F.lit(1)).alias("_copies")).where(F.col("_copies") > 1) \
            .persist(StorageLevel.MEMORY_AND_DISK)
        n_repeated_ids = copies.count()
        flagged = candidates.join(F.broadcast(copies) if n_repeated_ids <= BROADCAST_REPEATED_IDS else copies,
                                  "id", "left")
        documents = flagged.where(F.col("_copies").isNull()).select(
            "id", "text", F.lit(None).cast("array<string>").alias("labels"), F.lit(None).cast("string").alias("split"),
            F.lit(None).cast("map<string,double>").alias("similarities"), "url", "crawl_date", "source_file")
        duplicate_reason = F.concat(F.lit("duplicate id: "), F.col("_copies").cast("string"),
                                    F.lit(" rows share this id"))
        duplicates = flagged.where(F.col("_copies").isNotNull()).select(
            "id", "source_file", duplicate_reason.alias("reason"),
            F.substring(F.to_json(F.struct("url", "crawl_date")), 1, RECORD_CHARS).alias("record"))
        rejects = parsed.where(F.col("kind").isin(REJECT, FILE_ERROR)) \
            .select("id", "source_file", "reason", "record").unionByName(duplicates) \
            .withColumn("line", F.lit(None).cast("long"))

        # Counts from the persisted parse, before anything is written, so a failed check writes nothing.
        by_kind: Dict[str, Tuple[int, int]] = {
            r["kind"]: (int(r["rows"]), int(r["records"] or 0)) for r in parsed.groupBy("kind").agg(
                F.count(F.lit(1)).alias("rows"), F.sum("records_read").alias("records")).collect()}
        n_files_read, n_records = by_kind.get(FILE_SUMMARY, (0, 0))
        if n_files_read != len(files):
            raise RuntimeError(f"ingest-warc: {len(files)} input files but Spark read {n_files_read}")
        skipped_by_type = {r["key"]: int(r["n"]) for r in parsed.where(F.col("kind") == FILE_SUMMARY)
                           .select(F.explode("skipped")).groupBy("key").agg(F.sum("value").alias("n")).collect()}
        n_skipped = sum(skipped_by_type.values())
        n_candidates, n_record_rejects, n_file_errors = (by_kind.get(k, (0, 0))[0]
                                                         for k in (DOCUMENT, REJECT, FILE_ERROR))
        if n_file_errors:
            for row in parsed.where(F.col("kind") == FILE_ERROR).select("source_file", "reason").limit(20).collect():
                log.warning("ingest-warc: %s: %s", row["source_file"], row["reason"])
        # The contract: every complete record read is a document candidate, a reject or a skipped type.
        if n_records != n_candidates + n_record_rejects + n_skipped:
            raise RuntimeError(f"ingest-warc: {n_records} records read but {n_candidates} documents + "
                               f"{n_record_rejects} rejected + {n_skipped} skipped by type")
        n_duplicates = int(copies.agg(F.sum("_copies")).first()[0] or 0) if n_repeated_ids else 0
        n_documents = n_candidates - n_duplicates
        n_rejects = n_record_rejects + n_duplicates + n_file_errors
        summary = {"files": len(files), "bytes": total_bytes, "records_read": n_records,
                   "documents": n_documents, "rejected": n_rejects, "rejected_records": n_record_rejects,
                   "duplicate_ids": n_duplicates, "unreadable_files": n_file_errors,
                   "skipped_by_type": skipped_by_type, "id": id_field, "min_text_chars": min_text_chars,
                   "inputs": list(inputs)}
        # The rejects first: when nothing is a document they are what the user needs to see.
        with atomic_output(spark, rejects_path, "rejects", overwrite=True) as staged_rejects:
            rejects.write.parquet(staged_rejects.tmp)
            written = spark.read.parquet(staged_rejects.tmp)
            if written.count() != n_rejects:
                raise RuntimeError(f"ingest-warc: {n_rejects} rejects but {written.count()} written")
            summary["rejected_by_reason"] = _top_reasons(written) if n_rejects else {}
            # "source": a retry of the same ingest may replace these rejects without --overwrite
            # (pcem_spark.output_paths, rule 3).
            staged_rejects.info.update({**summary, "documents_output": output, "source": ",".join(inputs)})
        if n_documents == 0:
            raise WarcInputError(f"ingest-warc: no documents in {len(files)} files ({n_records} records, "
                                 f"{n_skipped} of them skipped by type {skipped_by_type}); the {n_rejects} "
                                 f"rejects, with their reasons, are in {rejects_path}")
        with atomic_output(spark, output, "documents", overwrite=overwrite) as staged:
            documents.write.parquet(staged.tmp)
            n_written = spark.read.parquet(staged.tmp).count()
            if n_written != n_documents:
                raise RuntimeError(f"ingest-warc: {n_documents} documents but {n_written} written")
            staged.info.update({**summary, "rejects": rejects_path})
    finally:
        parsed.unpersist()
        if copies is not None:
            copies.unpersist()
    seconds = time.perf_counter() - t0
    summary["seconds"] = round(seconds, 1)
    log.info("ingest-warc: %d files, %d records read -> %d documents, %d rejected (%d records, %d repeated ids, "
             "%d unreadable files), %d skipped by type (%s) -> %s in %.1fs (%.0f records/s)",
             len(files), n_records, n_documents, n_rejects, n_record_rejects, n_duplicates, n_file_errors,
             n_skipped, ", ".join(f"{k}: {v}" for k, v in sorted(skipped_by_type.items())) or "none",
             output, seconds, n_records / seconds if seconds > 0 else 0.0)
    if summary["rejected_by_reason"]:
        log.info("ingest-warc: rejects by reason (%s):%s", rejects_path,
                 "".join(f"\n  {c} x {r}" for r, c in summary["rejected_by_reason"].items()))
    return summary
