"""WARC / WET records to documents or rejects, one record at a time (no Spark).

FastWARC reads the records and Resiliparse extracts the main text of HTML pages;
:func:`parse_warc_stream` yields one row per document, reject, unreadable file and file summary,
which :mod:`pcem_spark.io.warc` turns into DataFrames.
"""

from __future__ import annotations

import codecs
import collections
import datetime as _dt
import io
import json
import logging
from typing import Dict, Iterator, NamedTuple, Optional, Tuple

from pcem_spark.errors import InputError
from pcem_spark.io.json_lines import RECORD_CHARS

__all__ = [
    "DOCUMENT",
    "REJECT",
    "FILE_ERROR",
    "FILE_SUMMARY",
    "INSTALL_HINT",
    "ID_FIELDS",
    "WarcDependencyError",
    "WarcInputError",
    "ParsedRow",
    "require_libraries",
    "split_content_type",
    "payload_kind",
    "decode_text",
    "html_main_text",
    "text_reason",
    "record_outcome",
    "parse_warc_stream",
    "record_bytes",
]

log = logging.getLogger(__name__)


INSTALL_HINT = 'pip install "fastwarc>=2.0.1" "resiliparse>=2.0.1" (the warc extra; ".[warc]" in a checkout)'


# Record types that can hold a document; every other type is counted and skipped.
DOCUMENT_RECORD_TYPES = ("response", "resource", "conversion")


HTML_TYPES = ("text/html", "application/xhtml+xml")


TEXT_TYPES = ("text/plain",)


ID_FIELDS = ("record", "url")


# Row kinds of the parser's output.
DOCUMENT, REJECT, FILE_ERROR, FILE_SUMMARY = "document", "reject", "file_error", "file"


class WarcDependencyError(InputError):
    """FastWARC / Resiliparse are not installed (``pip install fastwarc resiliparse``, the ``warc`` extra)."""


class WarcInputError(InputError):
    """A ``--input`` path or setting of ``ingest-warc`` is wrong (names it)."""


class ParsedRow(NamedTuple):
    """One outcome of the parser; field order = :func:`parsed_schema`.

    ``kind`` is :data:`DOCUMENT` (id, text, url, crawl_time: WARC-Date, crawl_date: its UTC day), :data:`REJECT`
    (id when known, reason, record), :data:`FILE_ERROR` (reason, record) or
    :data:`FILE_SUMMARY` (records_read, skipped: WARC-Type -> count).
    """

    kind: str
    id: Optional[str] = None
    text: Optional[str] = None
    url: Optional[str] = None
    crawl_time: Optional[_dt.datetime] = None
    crawl_date: Optional[_dt.date] = None
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
        raise WarcDependencyError(
            f"reading WARC/WET files needs FastWARC and Resiliparse ({e}); install them with: {INSTALL_HINT}"
        ) from None


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


def record_outcome(
    headers: Dict[str, str],
    block: bytes,
    is_http: bool,
    source_file: str,
    number: int,
    offset: int,
    id_field: str = "record",
    min_text_chars: int = 1,
) -> ParsedRow:
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
        return ParsedRow(
            REJECT, id=doc_id, source_file=source_file, reason=reason, record=_record_json({**ident, **more})
        )

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
            return reject(f"not valid UTF-8 at byte {e.start} (WET conversion records are UTF-8)", content_type=mime)
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
    # crawl_date is the UTC day of WARC-Date: what a daily crawl is partitioned by (one folder per day, not
    # one per second), the full time stays in crawl_time.
    day = None if date is None else date.astimezone(_dt.timezone.utc).date()
    return ParsedRow(DOCUMENT, id=doc_id, text=text, url=url, crawl_time=date, crawl_date=day, source_file=source_file)


def _warc_date(value: Optional[str]) -> Optional[_dt.datetime]:
    """WARC-Date (``2024-01-02T03:04:05Z``, WARC 1.1 allows fractions) -> an aware UTC datetime."""
    if value is None or not value.strip():
        return None
    parsed = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None:  # WARC dates are UTC
        parsed = parsed.replace(tzinfo=_dt.timezone.utc)
    return parsed.astimezone(_dt.timezone.utc)


def parse_warc_stream(
    stream, source_file: str, id_field: str = "record", min_text_chars: int = 1
) -> Iterator[ParsedRow]:
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
            where = (
                f"after {records_read} complete records (the last one at byte offset {last_offset})"
                if records_read
                else "before the first record (byte offset 0)"
            )
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
            error = (
                (
                    f"record {number} at byte offset {offset} is truncated or malformed: its WARC headers "
                    f"lack WARC-Type, WARC-Record-ID or Content-Length (found {sorted(headers)})"
                ),
                offset,
            )
        elif n_bytes != int(declared):  # ... and for a file cut inside a record's content
            error = (
                (
                    f"record {number} at byte offset {offset} is truncated: Content-Length {declared} "
                    f"but {n_bytes} bytes"
                ),
                offset,
            )
        else:
            records_read += 1
            last_offset = offset
            if is_document:
                yield record_outcome(
                    headers, block, record.is_http, source_file, number, offset, id_field, min_text_chars
                )
            else:
                skipped[warc_type] += 1
    if error is None and records_read == 0:  # an empty file or gzip stream: most likely a failed copy
        error = "holds no WARC record (an empty file?)", None
    if error is not None:
        reason, offset = error
        yield ParsedRow(
            FILE_ERROR,
            source_file=source_file,
            reason=reason,
            record=_record_json({"file": source_file, "record": records_read + 1, "offset": offset}),
        )
    yield ParsedRow(FILE_SUMMARY, source_file=source_file, records_read=records_read, skipped=dict(skipped))


def record_bytes(
    warc_type: str,
    record_id: str,
    url: Optional[str] = None,
    content: bytes = b"",
    http: bool = False,
    content_type: Optional[str] = None,
    date: str = "2024-03-01T10:00:00Z",
) -> bytes:
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
