"""An HTTP response block of a crawl record -> (status, content type, charset, body), with the codings undone.

FastWARC parses the headers and undoes the transfer and content codings. Real crawlers' quirks are forgiven
where the bytes are clear: a declared coding the body shows no sign of is skipped (ClueWeb09 stored bodies
decoded but kept the server's ``Content-Encoding: gzip``; browser-driven crawlers keep ``Transfer-Encoding:
chunked`` over de-chunked bodies), and a status line FastWARC does not parse is read by a regex. Each quirk
forgiven is counted by the caller's Counter. No Spark here.
"""

from __future__ import annotations

import collections
import re
from typing import Optional, Tuple

__all__ = ["QUIRK_NOT_GZIP", "QUIRK_NOT_CHUNKED", "QUIRK_STATUS_LINE", "split_content_type", "http_payload"]

QUIRK_NOT_GZIP = "Content-Encoding {coding} declared, body not encoded: read as it is"
QUIRK_NOT_CHUNKED = "Transfer-Encoding chunked declared, body not chunked: read as it is"
QUIRK_STATUS_LINE = "HTTP status line FastWARC does not parse (no reason phrase, extra spaces): status read from it"


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


# A chunked body starts with a chunk-size line: hex digits, optional extensions, CRLF (or a bare LF).
_CHUNK_LINE = re.compile(rb"[0-9A-Fa-f]{1,16}[ \t]*(;[^\r\n]*)?\r?\n")
# What FastWARC's status line parser misses: extra spaces, a lower-case protocol name.
_STATUS_LINE = re.compile(rb"\s*HTTP/\d+(?:\.\d+)?[ \t]+(\d{3})(?:[ \t]|\r|\n|$)", re.IGNORECASE)
# Bytes that never occur in text (ESC, 0x1b, is kept: ISO-2022-JP uses it); compressed data has them within
# a few bytes, an HTML or text body has none.
_NOT_TEXT = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")


def _looks_like_text(body: bytes) -> bool:
    """True when the first KiB of ``body`` holds no control byte: plain text or HTML in any charset."""
    return _NOT_TEXT.search(body[:1024]) is None


def _has_coding_signature(coding: str, body: bytes) -> bool:
    """Whether ``body`` shows the declared content coding: gzip's and zstd's magic, a zlib header; brotli and
    raw deflate have no magic, so there the sign is a body that does not read as text."""
    if coding in ("gzip", "x-gzip"):
        return body[:2] == b"\x1f\x8b"
    if coding == "zstd":
        return body[:4] == b"\x28\xb5\x2f\xfd"
    if coding == "deflate" and len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] * 256 + body[1]) % 31 == 0:
        return True
    return not _looks_like_text(body)


def _parse_http(block: bytes, mode: str):
    from fastwarc.warc import WarcRecord

    http = WarcRecord()
    http.set_bytes_content(block)
    http.is_http = True
    http.parse_http(auto_decode=mode, quirks_mode=True)  # quirks: LF-only header lines, as browsers accept
    return http.http_headers, http.reader.read()


def http_payload(block: bytes, quirks: Optional[collections.Counter] = None):
    """(status, content type, charset, body) of an HTTP response block; OSError if it cannot be decoded.

    A fresh FastWARC record parses the headers and undoes the transfer and
    content codings (chunked, gzip, deflate, brotli, zstd), so the record the
    file iterator owns is never touched. When that fails, a coding the body
    clearly does not have is skipped (counted in ``quirks``): crawlers such as
    ClueWeb09's stored bodies decoded but kept the server's headers. A body
    that has the coding's signature and still does not decode is an OSError.
    """
    try:
        headers, body = _parse_http(block, "all")
        moved = []
    except OSError as error:
        headers, raw = _parse_http(block, "none")  # headers only: the codings are undone below, one at a time
        transfer = (headers.get("Transfer-Encoding") or "").lower()
        coding = (headers.get("Content-Encoding") or "").strip().lower()
        not_chunked = "chunked" in transfer and _CHUNK_LINE.match(raw) is None
        if not_chunked:
            dechunked = raw
        else:
            try:
                dechunked = _parse_http(block, "transfer")[1]
            except OSError:
                raise error from None  # chunk-size lines that do not add up: not a quirk, a broken body
        not_coded = coding not in ("", "identity") and not _has_coding_signature(coding, dechunked)
        if not (not_chunked or not_coded):
            raise
        if not_coded:
            body = dechunked  # the transfer coding undone, or none to undo: the body as it is
        else:  # only the chunking was a quirk: undo the content coding (an OSError if it does not decode either)
            body = _parse_http(block, "content")[1]
        moved = [QUIRK_NOT_CHUNKED] * not_chunked + [QUIRK_NOT_GZIP.format(coding=coding)] * not_coded
    status = headers.status_code if headers is not None else None
    if status is None:
        match = _STATUS_LINE.match(block)
        if match:
            status = int(match.group(1))
            moved.append(QUIRK_STATUS_LINE)
    if quirks is not None:
        quirks.update(moved)
    mime, charset = split_content_type(headers.get("Content-Type") if headers is not None else None)
    return status, mime, charset, body
