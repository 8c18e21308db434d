"""WARC / WET records to documents or rejects, one record at a time (no Spark).

FastWARC reads WARC and WET records, warcio reads ARC files (the Internet Archive's format
before WARC, which FastWARC does not read), and Resiliparse extracts the main text of HTML
pages; :func:`parse_warc_stream` yields one row per document, reject, unreadable file and file
summary, which :mod:`pcem_spark.io.warc` turns into DataFrames.

Real crawlers' quirks are forgiven where the bytes are clear (:data:`QUIRKS`, counted per file)
and are rejects where they are not: a body that has no sign of its declared coding (no gzip /
zlib / zstd magic, bytes that read as text; no chunk-size line) is read as it is; a body that
has the coding's signature but does not decode is a reject.
"""

from __future__ import annotations

import codecs
import collections
import datetime as _dt
import io
import json
import logging
import posixpath
import uuid
import zlib
from typing import Dict, Iterator, NamedTuple, Optional, Tuple
from urllib.parse import urlsplit

from pcem_spark.errors import InputError
from pcem_spark.io.http_payload import (
    QUIRK_NOT_CHUNKED,
    QUIRK_NOT_GZIP,
    QUIRK_STATUS_LINE,
    http_payload,
    split_content_type,
)
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
    "crawler_record",
    "derived_record_id",
    "QUIRKS",
    "parse_warc_stream",
    "record_bytes",
]

log = logging.getLogger(__name__)


INSTALL_HINT = (
    'pip install "fastwarc>=2.0.1" "resiliparse>=2.0.1" "warcio>=1.7" (the warc extra; ".[warc]" in a checkout)'
)


# Record types that can hold a document; every other type is counted and skipped.
DOCUMENT_RECORD_TYPES = ("response", "resource", "conversion")


HTML_TYPES = ("text/html", "application/xhtml+xml")


TEXT_TYPES = ("text/plain",)


ID_FIELDS = ("record", "url")


# URI schemes of the records a crawler writes about itself (wget's metadata://.../wget.log, heritrix's dns:
# lookups, an ARC file's filedesc:// header): never pages. Skipped and counted unless keep_crawler_records.
CRAWLER_SCHEMES = ("metadata", "dns", "filedesc", "warcinfo")


# The crawl quirks that are forgiven, counted per file (the summary's "quirks", ingest-warc's marker and log).
QUIRK_NO_RECORD_ID = "no WARC-Record-ID: id derived from the file, offset and URL"
QUIRK_WHOLE_TEXT = "main-text extraction empty: the page's whole visible text kept"
QUIRK_BAD_DATE = "WARC-Date not an ISO 8601 date: crawl_time and crawl_date left empty"
QUIRK_ARC = "ARC record (read by warcio)"
QUIRKS = (
    QUIRK_NOT_GZIP,
    QUIRK_NOT_CHUNKED,
    QUIRK_STATUS_LINE,
    QUIRK_NO_RECORD_ID,
    QUIRK_WHOLE_TEXT,
    QUIRK_BAD_DATE,
    QUIRK_ARC,
)


# Row kinds of the parser's output.
DOCUMENT, REJECT, FILE_ERROR, FILE_SUMMARY = "document", "reject", "file_error", "file"


class WarcDependencyError(InputError):
    """FastWARC / Resiliparse are not installed (``pip install fastwarc resiliparse``, the ``warc`` extra)."""


class WarcInputError(InputError):
    """A ``--input`` path or setting of ``ingest-warc`` is wrong (names it)."""


class ParsedRow(NamedTuple):
    """One outcome of the parser; field order = :func:`parsed_schema`.

    ``kind`` is :data:`DOCUMENT` (id, text, url, crawl_time: WARC-Date, crawl_date: its UTC day, record:
    where it is), :data:`REJECT` (id when known, reason, record), :data:`FILE_ERROR` (reason, record) or
    :data:`FILE_SUMMARY` (records_read, skipped: WARC-Type or crawler record -> count, quirks: quirk -> count).
    ``record`` is JSON naming the record: its number in the file, byte offset, type, WARC-Record-ID, URL.
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
    quirks: Optional[Dict[str, int]] = None


def require_libraries():
    """Import FastWARC, Resiliparse and warcio; :class:`WarcDependencyError` (exit 2) naming the install command."""
    try:
        from fastwarc.warc import ArchiveIterator, WarcRecord  # noqa: F401
        from resiliparse.extract.html2text import extract_plain_text  # noqa: F401
        from resiliparse.parse.encoding import bytes_to_str, detect_encoding  # noqa: F401
        from resiliparse.parse.html import HTMLTree  # noqa: F401
        from warcio.archiveiterator import ArchiveIterator as _ArcIterator  # noqa: F401
    except ImportError as e:
        raise WarcDependencyError(
            f"reading WARC/WET files needs FastWARC and Resiliparse ({e}); install them with: {INSTALL_HINT}"
        ) from None


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


def html_main_text(body: bytes, charset: Optional[str], quirks: Optional[collections.Counter] = None) -> str:
    """The main text of an HTML page (navigation, footers, scripts left out), whitespace collapsed.

    When the main-content heuristic keeps nothing (a page that is all lists or table cells, a shop's
    product page) the page's whole visible text is kept instead, counted in ``quirks``: an empty
    extraction is the heuristic's verdict, not the page's.
    """
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse(decode_text(body, charset, html=True))
    text = extract_plain_text(tree, main_content=True)
    if not text.strip():
        text = extract_plain_text(tree, main_content=False)
        if text.strip() and quirks is not None:
            quirks[QUIRK_WHOLE_TEXT] += 1
    return text


def text_reason(text: str, kind: str, min_text_chars: int) -> Optional[str]:
    """Why ``text`` is not kept (None if it is): empty, or shorter than ``min_text_chars`` (stripped)."""
    n = len(text.strip())
    if n == 0:
        return "no visible text (main text and whole page empty)" if kind == "html" else "empty text"
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


def crawler_record(url: Optional[str]) -> Optional[str]:
    """What a record of the crawler's own is (the ``skipped`` key), None for a page.

    ``metadata://``, ``dns:``, ``filedesc://`` and ``warcinfo:`` URIs (wget's log and arguments, DNS lookups,
    an ARC file's header), and ``robots.txt`` at a site's root.
    """
    if not url:
        return None
    scheme = url[: url.find(":")].lower() if ":" in url[:10] else ""
    if scheme in CRAWLER_SCHEMES:
        return f"crawler record ({scheme}:)"
    if "robots.txt" not in url.lower():  # what nearly every record takes: no URL parsing (a crawl's hot path)
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() in ("http", "https") and posixpath.normpath(parts.path or "/") == "/robots.txt":
        return "robots.txt"
    return None


def derived_record_id(source_file: str, offset: int, url: Optional[str]) -> str:
    """A stable id for a record without WARC-Record-ID (an ARC record, some crawlers' WARC): a name-based
    UUID (RFC 4122 version 5) of the file's name, the record's byte offset and its URL, in WARC-Record-ID's
    form. The file's name, not its folder: the same file read from another place gives the same ids."""
    name = posixpath.basename(str(source_file).rstrip("/"))
    key = f"{name}#{offset} {url or ''}"
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, key)}>"


def record_outcome(
    headers: Dict[str, str],
    block: bytes,
    is_http: bool,
    source_file: str,
    position: Tuple[int, int],
    id_field: str = "record",
    min_text_chars: int = 1,
    quirks: Optional[collections.Counter] = None,
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
    position : (int, int)
        1-based record number in the file and its byte offset (the row's ``record``).
    quirks : Counter, optional
        Incremented for every crawl quirk forgiven on the way (:data:`QUIRKS`).
    """
    number, offset = position
    warc_type = headers.get("WARC-Type")
    url = _unbracket(headers.get("WARC-Target-URI"))
    record_id = headers.get("WARC-Record-ID")
    if record_id is None:
        record_id = derived_record_id(source_file, offset, url)
        if quirks is not None:
            quirks[QUIRK_NO_RECORD_ID] += 1
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
            status, mime, charset, body = http_payload(block, quirks)
        except OSError as e:  # a coding the body has but that does not decode, chunk sizes that do not add up
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
            text = html_main_text(body, charset, quirks) if kind == "html" else decode_text(body, charset, html=False)
        except (ValueError, LookupError) as e:  # UnicodeError, Resiliparse's HTMLParserException (ValueErrors)
            return reject(f"cannot decode or parse the {mime} payload: {type(e).__name__}: {e}", content_type=mime)
    why = text_reason(text, kind, min_text_chars)
    if why is not None:
        return reject(why, content_type=mime, status=status)
    try:
        date = _warc_date(headers.get("WARC-Date"))
    except ValueError:  # ClueWeb09 writes day-of-year dates ("2008-10-294T..."): the page is fine, the date is not
        date = None
        if quirks is not None:
            quirks[QUIRK_BAD_DATE] += 1
    # crawl_date is the UTC day of WARC-Date: what a daily crawl is partitioned by (one folder per day, not
    # one per second), the full time stays in crawl_time.
    day = None if date is None else date.astimezone(_dt.timezone.utc).date()
    return ParsedRow(
        DOCUMENT,
        id=doc_id,
        text=text,
        url=url,
        crawl_time=date,
        crawl_date=day,
        source_file=source_file,
        # where it is, for the reject row if its id turns out to be repeated (ints: no JSON encoder on the hot path)
        record=f'{{"record": {number}, "offset": {offset}}}',
    )


def _warc_date(value: Optional[str]) -> Optional[_dt.datetime]:
    """WARC-Date (``2024-01-02T03:04:05Z``, WARC 1.1 allows fractions) -> an aware UTC datetime."""
    if value is None or not value.strip():
        return None
    parsed = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None:  # WARC dates are UTC
        parsed = parsed.replace(tzinfo=_dt.timezone.utc)
    return parsed.astimezone(_dt.timezone.utc)


def _is_arc(head: bytes) -> bool:
    """Whether a file's first bytes (plain or gzip) are an ARC file's: its first record is ``filedesc://``."""
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, 64)
        except zlib.error:
            return False
    return head.lstrip()[:11].lower() == b"filedesc://"


def parse_warc_stream(
    stream,
    source_file: str,
    id_field: str = "record",
    min_text_chars: int = 1,
    keep_crawler_records: bool = False,
) -> Iterator[ParsedRow]:
    """Every record of one WARC/WET file (plain, gzip, zstd or lz4; detected) or ARC file (plain or gzip) -> rows.

    Yields one DOCUMENT or REJECT row per document-type record, at most one
    FILE_ERROR row (the file stopped being WARC: the records before it are
    kept), and, last, one FILE_SUMMARY row: ``records_read`` (complete
    records, every type), ``skipped`` (WARC-Type -> count of the
    non-document records; the crawler's own records and robots.txt under
    their own keys, :func:`crawler_record`, unless ``keep_crawler_records``)
    and ``quirks`` (forgiven crawl quirk -> count, :data:`QUIRKS`). So
    ``records_read = documents + rejects + sum(skipped)`` for every file.

    ``stream`` is a binary file-like object (or bytes). Raises ValueError on
    a bad ``id_field``; never on bad bytes.
    """
    if id_field not in ID_FIELDS:
        raise WarcInputError(f"--id must be one of {', '.join(ID_FIELDS)}, got {id_field!r}")
    if isinstance(stream, (bytes, bytearray, memoryview)):
        stream = io.BytesIO(stream)
    elif not stream.seekable():
        stream = io.BytesIO(stream.read())
    head = stream.read(4096)
    stream.seek(0)
    state = _FileState()
    records = _arc_records(stream, source_file, state) if _is_arc(head) else _warc_records(stream, state)
    for number, offset, headers, block, is_http in records:  # document-type records; the others are counted
        crawler = None if keep_crawler_records else crawler_record(_unbracket(headers.get("WARC-Target-URI")))
        if crawler is not None:
            state.skipped[crawler] += 1
            continue
        yield record_outcome(
            headers, block, is_http, source_file, (number, offset), id_field, min_text_chars, state.quirks
        )
    if state.error is None and state.records_read == 0:  # an empty file or gzip stream: most likely a failed copy
        state.error = "holds no WARC record (an empty file?)", None
    if state.error is not None:
        reason, offset = state.error
        yield ParsedRow(
            FILE_ERROR,
            source_file=source_file,
            reason=reason,
            record=_record_json({"file": source_file, "record": state.records_read + 1, "offset": offset}),
        )
    yield ParsedRow(
        FILE_SUMMARY,
        source_file=source_file,
        records_read=state.records_read,
        skipped=dict(state.skipped),
        quirks=dict(state.quirks),
    )


class _FileState:
    """What reading one file has counted so far, and why it stopped (``error``: (reason, byte offset))."""

    def __init__(self):
        self.records_read = 0
        self.last_offset = None
        self.skipped = collections.Counter()
        self.quirks = collections.Counter()
        self.error: Optional[Tuple[str, Optional[int]]] = None

    def stopped(self, exc: Exception, number: int, kind: str = "WARC") -> None:
        where = (
            f"after {self.records_read} complete records (the last one at byte offset {self.last_offset})"
            if self.records_read
            else "before the first record (byte offset 0)"
        )
        self.error = f"not a readable {kind} file: {exc} at record {number}, {where}", self.last_offset

    def checked(self, headers: Dict[str, str], n_bytes: int, number: int, offset: int) -> bool:
        """Whether the record is complete (else ``error`` says why); counts it when it is."""
        declared = headers.get("Content-Length", "").strip()
        if not declared.isdigit() or headers.get("WARC-Type") is None:
            # What FastWARC returns for a file cut inside a record's headers.
            self.error = (
                f"record {number} at byte offset {offset} is truncated or malformed: its WARC headers "
                f"lack WARC-Type or Content-Length (found {sorted(headers)})",
                offset,
            )
        elif n_bytes != int(declared):  # ... and for a file cut inside a record's content
            self.error = (
                f"record {number} at byte offset {offset} is truncated: Content-Length {declared} but {n_bytes} bytes",
                offset,
            )
        else:
            self.records_read += 1
            self.last_offset = offset
            return True
        return False


def _warc_records(stream, state: _FileState):
    """(number, offset, headers, block, is_http) of each complete document-type WARC record, read by FastWARC;
    the other records are counted in ``state.skipped`` by type, their content skipped, not copied: only its
    length is checked."""
    from fastwarc.warc import ArchiveIterator

    records = iter(ArchiveIterator(stream, parse_http=False))
    while state.error is None:
        number = state.records_read + 1
        try:
            record = next(records)
        except StopIteration:
            return
        except (OSError, ValueError) as e:  # FastWARC: "Invalid WARC header", "Gzip decompression error" ...
            state.stopped(e, number)
            return
        offset = record.stream_pos
        headers = dict(record.headers.items())
        is_document = headers.get("WARC-Type") in DOCUMENT_RECORD_TYPES
        try:
            block = record.reader.read() if is_document else None
            n_bytes = len(block) if is_document else record.reader.consume()
        except OSError as e:
            state.error = f"record {number} at byte offset {offset} cannot be read: {e}", offset
            return
        if state.checked(headers, n_bytes, number, offset):
            if is_document:
                yield number, offset, headers, block, record.is_http
            else:
                state.skipped[headers.get("WARC-Type")] += 1


def _arc_records(stream, source_file: str, state: _FileState):
    """The same for an ARC file, read by warcio (FastWARC reads no ARC): each record as warcio's ``arc2warc``
    gives it (the ``filedesc://`` header as warcinfo, the others as responses), its id derived like that of a
    WARC record without one (:func:`derived_record_id`: warcio's own is random)."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    iterator = ArchiveIterator(stream, arc2warc=True, no_record_parse=True, verify_http=False)
    records = iter(iterator)
    while state.error is None:
        number = state.records_read + 1
        try:
            record = next(records)
            headers = {k: v for k, v in record.rec_headers.headers if k != "WARC-Record-ID"}
            block = record.raw_stream.read()
            offset = iterator.get_record_offset()  # known once the record is read
        except StopIteration:
            return
        except (ArchiveLoadFailed, OSError, ValueError, EOFError) as e:
            state.stopped(e, number, "ARC")
            return
        url = _unbracket(headers.get("WARC-Target-URI"))
        headers["WARC-Record-ID"] = derived_record_id(source_file, offset, url)
        # warcio turns the filedesc:// header into a warcinfo record whose content it does not pass on
        n_bytes = int(headers.get("Content-Length") or 0) if record.rec_type == "warcinfo" else len(block)
        if state.checked(headers, n_bytes, number, offset):
            state.quirks[QUIRK_ARC] += 1
            if headers.get("WARC-Type") not in DOCUMENT_RECORD_TYPES:
                state.skipped[headers.get("WARC-Type")] += 1
                continue
            is_http = (url or "").lower().startswith(("http:", "https:")) and block[:5].upper() == b"HTTP/"
            yield number, offset, headers, block, is_http


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


def _parse_file(
    path_and_bytes: Tuple[str, bytes], id_field: str, min_text_chars: int, keep_crawler_records: bool = False
) -> Iterator[ParsedRow]:
    """flatMap body: one ``(path, bytes)`` of ``binaryFiles`` -> its rows."""
    path, data = path_and_bytes
    return parse_warc_stream(io.BytesIO(data), path, id_field, min_text_chars, keep_crawler_records)
