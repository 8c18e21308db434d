"""ingest-warc on real crawl files from other projects' test data (tests/data/warc/README.md), compared with
warcio: every page warcio reads is a document or a reject with a reason a person would agree with, under the
same id, with warcio's words; no crawler log or robots.txt is a document. Then the crawl quirks those files
hold, one test each, and the same files through the command, in Spark.
"""

from __future__ import annotations

import collections
import html
import json
import os
import re
import shutil

import pytest
from warc_fixtures import http_response, write_warc  # tests/warc_fixtures.py
from warcio.archiveiterator import ArchiveIterator

from pcem_spark.io.warc_records import (
    DOCUMENT,
    FILE_ERROR,
    FILE_SUMMARY,
    QUIRK_ARC,
    QUIRK_BAD_DATE,
    QUIRK_NO_RECORD_ID,
    QUIRK_NOT_CHUNKED,
    QUIRK_NOT_GZIP,
    QUIRK_STATUS_LINE,
    QUIRK_WHOLE_TEXT,
    REJECT,
    crawler_record,
    decode_text,
    derived_record_id,
    parse_warc_stream,
    record_bytes,
    split_content_type,
)

REAL = os.path.join(os.path.dirname(__file__), "data", "warc")
FILES = sorted(f for f in os.listdir(REAL) if f.endswith((".warc", ".warc.gz", ".arc", ".arc.gz")))
PAGE_TYPES = ("text/html", "application/xhtml+xml", "text/plain")

# The pages warcio reads that are rejects here, and why; every other page warcio reads is a document.
AGREED_REJECTS = {
    # the page is a <title> and an empty <body/>
    ("mutliple-headers.warc", 0): "no visible text",
    # the ARC header says 1591 bytes, the file ends 12 bytes sooner (warcio reads what is there)
    ("example-space-in-url.arc", 151): "is truncated: Content-Length 1591 but 1579 bytes",
}


def warcio_pages(name):
    """(pages, crawler records) as warcio reads ``name``: each page a dict of offset, id, url and decoded text.

    A page: a response (HTTP 2xx), resource or conversion record of an HTML or plain-text type whose content
    warcio reads. warcio's reading stops where it raises (three of the files are broken for warcio, not for
    FastWARC).
    """
    pages, crawler = [], []
    is_arc = ".arc" in name
    with open(os.path.join(REAL, name), "rb") as fh:
        iterator = ArchiveIterator(fh, arc2warc=True)
        try:
            for rec in iterator:
                body = rec.content_stream().read()
                offset = iterator.get_record_offset()
                if rec.rec_type not in ("response", "resource", "conversion"):
                    continue
                url = rec.rec_headers.get_header("WARC-Target-URI")
                http = rec.http_headers if rec.rec_type == "response" else None
                if http is not None and not (http.get_statuscode() or "").startswith("2"):
                    continue
                mime, charset = split_content_type(
                    (http or rec.rec_headers).get_header("Content-Type")
                    or rec.rec_headers.get_header("WARC-Identified-Payload-Type")
                )
                if mime not in PAGE_TYPES or not body:  # no body: warcio did not read this page's content
                    continue
                record_id = None if is_arc else rec.rec_headers.get_header("WARC-Record-ID")
                page = {
                    "offset": offset,
                    "url": url,
                    "id": record_id or derived_record_id(name, offset, url),
                    "text": html.unescape(decode_text(body, charset, html=mime != "text/plain")),
                }
                (crawler if crawler_record(url) else pages).append(page)
        except Exception:  # noqa: BLE001 - warcio gives up on this file here; what it read is the reference
            pass
    return pages, crawler


def ours(name, **kw):
    with open(os.path.join(REAL, name), "rb") as fh:
        return list(parse_warc_stream(fh.read(), name, **kw))


def _offset(row):
    return json.loads(row.record)["offset"]


WORD = re.compile(r"\w+")


@pytest.mark.parametrize("name", FILES)
def test_every_page_warcio_reads_is_a_document_or_an_agreed_reject(name):
    pages, crawler = warcio_pages(name)
    rows = ours(name)
    at = {_offset(r): r for r in rows if r.kind in (DOCUMENT, REJECT)}
    errors = [r for r in rows if r.kind == FILE_ERROR]
    for page in pages:
        agreed = AGREED_REJECTS.get((name, page["offset"]))
        row = at.get(page["offset"])
        if agreed:
            said = [row.reason] if row is not None else [e.reason for e in errors]
            assert any(agreed in r for r in said), (name, page["url"], said)
            continue
        assert row is not None and row.kind == DOCUMENT, (name, page["url"], row, errors)
        assert row.id == page["id"] and row.url == page["url"]
        words = WORD.findall(row.text)
        found = sum(w in page["text"] for w in words)
        assert words and found >= 0.9 * len(words), (name, page["url"], found, len(words))
    documents = [r for r in rows if r.kind == DOCUMENT]
    assert not any(crawler_record(r.url) for r in documents), "a crawler record or robots.txt is a document"
    assert sum(crawler_record(r.url) is not None for r in rows if r.kind == REJECT) == 0
    summary = rows[-1]
    assert summary.kind == FILE_SUMMARY
    n_crawler = sum(v for k, v in summary.skipped.items() if k.startswith("crawler record") or k == "robots.txt")
    assert n_crawler >= len(crawler)
    # every complete record is one outcome
    assert summary.records_read == len(at) + sum(summary.skipped.values())
    # an id is never both a document and a reject
    assert not {r.id for r in documents} & {r.id for r in rows if r.kind == REJECT}


def test_the_real_files_hold_pages():
    """The comparison above is not empty: the files hold pages of every kind the quirk tests name."""
    assert sum(len(warcio_pages(name)[0]) for name in FILES) >= 40
    assert {"clueweb-quirk.warc.gz", "parseMe.warc.gz", "example.arc", "link-extraction-test.warc"} <= set(FILES)


# ---------------------------------------------------------------------------------------- the quirks, one each


def test_a_gzip_content_encoding_over_a_plain_body_is_read_as_it_is():
    """ClueWeb09 (WARC/0.18): the headers say gzip, the crawler stored the body decoded; EUC-JP pages."""
    rows = ours("clueweb-quirk.warc.gz")
    documents = [r for r in rows if r.kind == DOCUMENT]
    assert len(documents) == 29 and not [r for r in rows if r.kind == REJECT]
    assert all(re.search("[\u3040-\u30ff\u4e00-\u9fff]{4}", d.text) for d in documents)  # Japanese, decoded
    assert rows[-1].quirks[QUIRK_NOT_GZIP.format(coding="gzip")] == 29
    # ... and its day-of-year WARC-Date ("2008-10-294T05:21:46-0700") leaves the date empty, not the page out
    assert rows[-1].quirks[QUIRK_BAD_DATE] == 29 and all(d.crawl_time is None for d in documents)


def test_a_body_with_the_gzip_magic_that_does_not_decode_is_still_a_reject():
    broken = b"\x1f\x8b\x08\x00" + b"not deflate data at all" * 4
    block = http_response(broken).replace(b"\r\n\r\n", b"\r\nContent-Encoding: gzip\r\n\r\n", 1)
    rows = list(parse_warc_stream(record_bytes("response", "uuid:g", "http://g.example/", block, http=True), "g"))
    assert rows[0].kind == REJECT and "cannot decode the HTTP payload" in rows[0].reason
    assert not rows[-1].quirks


def test_a_chunked_header_over_a_body_already_dechunked_is_read_as_it_is():
    """node-warc's sample: Transfer-Encoding: chunked, and the stored body is the plain page."""
    rows = ours("parseMe.warc.gz")
    page = next(r for r in rows if r.url == "http://stringjs.com/")
    assert page.kind == DOCUMENT and "string.js" in page.text and len(page.text) > 10_000
    assert rows[-1].quirks[QUIRK_NOT_CHUNKED] >= 1


def test_records_without_a_record_id_get_a_stable_id_from_file_offset_and_url():
    """webarchive-commons' sample: no WARC-Record-ID in any record."""
    first, again = ours("link-extraction-test.warc"), ours("link-extraction-test.warc")
    documents = [r for r in first if r.kind == DOCUMENT]
    assert len(documents) >= 3 and not [r for r in first if r.kind == FILE_ERROR]
    assert [r.id for r in documents] == [r.id for r in again if r.kind == DOCUMENT]
    assert all(r.id == derived_record_id("link-extraction-test.warc", _offset(r), r.url) for r in documents)
    assert len({r.id for r in documents}) == len(documents)
    assert first[-1].quirks[QUIRK_NO_RECORD_ID] == first[-1].records_read - first[-1].skipped.get("warcinfo", 0)
    # the same file under another folder gives the same ids (the name counts, not the path)
    assert derived_record_id("/a/b/link-extraction-test.warc", 258, "u") == derived_record_id(
        "s3a://x/link-extraction-test.warc", 258, "u"
    )
    by_url = [r for r in ours("link-extraction-test.warc", id_field="url") if r.kind == DOCUMENT]
    assert {r.id for r in by_url} == {r.url for r in documents if r.url}


@pytest.mark.parametrize(
    "status_line, status",
    [(b"HTTP/1.0  302 ", 302), (b"http/1.1 200", 200), (b"HTTP/1.1  200  OK", 200)],
)
def test_a_status_line_fastwarc_does_not_parse_is_still_a_status(status_line, status):
    block = status_line + b"\r\nContent-Type: text/html\r\n\r\n<html><body><p>A page about otters.</p></body></html>"
    rows = list(parse_warc_stream(record_bytes("response", "uuid:s", "http://s.example/", block, http=True), "s"))
    if status == 200:
        assert rows[0].kind == DOCUMENT and "otters" in rows[0].text
    else:
        assert rows[0].kind == REJECT and rows[0].reason == "HTTP status 302"
    assert rows[-1].quirks == {QUIRK_STATUS_LINE: 1}


@pytest.mark.parametrize("name", ["example.arc", "example.arc.gz"])
def test_arc_files_are_read_like_warc(name):
    rows = ours(name)
    (page,) = [r for r in rows if r.kind == DOCUMENT]
    warc_page = next(r for r in ours("example.warc.gz") if r.kind == DOCUMENT)
    assert page.url == warc_page.url == "http://example.com/" and page.text == warc_page.text
    assert page.crawl_time is not None and page.crawl_date == page.crawl_time.date()
    assert page.id == derived_record_id(name, _offset(page), page.url)
    assert rows[-1].skipped == {"warcinfo": 1} and rows[-1].quirks[QUIRK_ARC] == 2


def test_a_truncated_arc_file_is_one_reject_naming_where_it_stopped():
    rows = ours("IAH-20080430204825-00000-blackbook-truncated.arc")
    (error,) = [r for r in rows if r.kind == FILE_ERROR]
    assert "not a readable ARC file" in error.reason and "at record 2" in error.reason
    assert json.loads(error.record)["record"] == 2


def test_crawler_records_and_robots_txt_are_skipped_and_counted_unless_kept():
    """wget's WARC: its log, arguments and manifest as metadata:// resources, and robots.txt responses."""
    rows = ours("IAH-urls-wget.warc.gz")
    skipped = rows[-1].skipped
    assert skipped["crawler record (metadata:)"] == 3 and skipped["robots.txt"] == 2 and skipped["request"] == 16
    assert [r.url for r in rows if r.kind == DOCUMENT] == ["https://archive.org/", "https://archive.org/"]
    kept = ours("IAH-urls-wget.warc.gz", keep_crawler_records=True)
    urls = [r.url for r in kept if r.kind == DOCUMENT]
    assert "metadata://gnu.org/software/wget/warc/wget.log" in urls and "http://archive.org/robots.txt" in urls
    assert "robots.txt" not in kept[-1].skipped and kept[-1].records_read == rows[-1].records_read


def test_an_empty_main_text_falls_back_to_the_whole_visible_text():
    page = (
        b"<html><body><nav><ul><li>Products list one two three</li></ul></nav><footer>About us</footer></body></html>"
    )
    blank = b"<html><head><title>x</title></head><body></body></html>"
    data = b"".join(
        record_bytes("response", f"uuid:{i}", f"http://p.example/{i}", http_response(body), http=True)
        for i, body in enumerate([page, blank])
    )
    rows = list(parse_warc_stream(data, "p"))
    assert rows[0].kind == DOCUMENT and "Products list one two three" in rows[0].text and "About us" in rows[0].text
    assert rows[1].kind == REJECT and rows[1].reason == "no visible text (main text and whole page empty)"
    assert rows[-1].quirks == {QUIRK_WHOLE_TEXT: 1}


# ---------------------------------------------------------------------------------------- the command, in Spark


@pytest.fixture(scope="module")
def real_ingested(spark, tmp_path_factory):
    """ingest-warc --id url over the real files and one more: a URL fetched twice, 404 and then 200."""
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import require_complete

    d = tmp_path_factory.mktemp("real")
    for name in FILES:
        shutil.copy(os.path.join(REAL, name), d / name)
    twice = [
        record_bytes(
            "response", "uuid:t1", "http://t.example/", http_response(b"<p>gone</p>", status="404 Not Found"), http=True
        ),
        record_bytes(
            "response", "uuid:t2", "http://t.example/", http_response(b"<p>Back again, a page.</p>"), http=True
        ),
    ]
    write_warc(d / "twice.warc.gz", twice)
    out = str(tmp_path_factory.mktemp("real_out") / "docs")
    assert main(["ingest-warc", "--input", str(d), "--output", out, "--id", "url", "--log-level", "WARNING"]) == 0
    return out, require_complete(spark, out, "documents"), require_complete(spark, out + "_rejects", "rejects")


@pytest.mark.slow  # an ingest of all the files: 40-50 s
def test_ingest_warc_over_real_files_counts_every_record_and_every_quirk(spark, real_ingested):
    out, info, rejects_info = real_ingested
    assert rejects_info["quirks"] == info["quirks"]
    documents = spark.read.parquet(out)
    rejects = spark.read.parquet(out + "_rejects")
    assert documents.count() == info["documents"] and rejects.count() == info["rejected"]
    assert info["records_read"] == info["documents"] + info["rejected_records"] + info["duplicate_ids"] + sum(
        info["skipped_by_type"].values()
    )
    quirks = info["quirks"]
    assert quirks[QUIRK_NOT_GZIP.format(coding="gzip")] == 29 and quirks[QUIRK_NOT_CHUNKED] >= 1
    assert quirks[QUIRK_NO_RECORD_ID] >= 3 and quirks[QUIRK_ARC] >= 4
    assert info["skipped_by_type"]["robots.txt"] == 2
    # no id is both a document and a reject; the URL fetched as 404 then 200 is a reject twice
    doc_ids = {r["id"] for r in documents.select("id").collect()}
    reject_rows = rejects.collect()
    assert not doc_ids & {r["id"] for r in reject_rows}
    twice = [r for r in reject_rows if r["id"] == "http://t.example/"]
    assert sorted(r["reason"] for r in twice) == ["HTTP status 404", "duplicate id: 2 rows share this id"]
    # every reject row says where: its file, and its record number and byte offset (or the file's, for a file)
    for row in reject_rows:
        where = json.loads(row["record"])
        assert row["source_file"] and "record" in where and ("offset" in where), row
    counts = collections.Counter(os.path.basename(r["source_file"]) for r in documents.select("source_file").collect())
    assert counts["clueweb-quirk.warc.gz"] == 29 and counts["parseMe.warc.gz"] == 1
    assert counts["link-extraction-test.warc"] >= 3  # no record ids; --id url works for them
    # http://example.com/ is the page of six files, ARC and WARC: with --id url, each copy is a duplicate
    example = [r for r in reject_rows if r["id"] == "http://example.com/"]
    assert {os.path.basename(r["source_file"]) for r in example} >= {"example.arc", "example.arc.gz", "example.warc.gz"}
    assert all(r["reason"].startswith("duplicate id") for r in example)


def test_keep_crawler_records_through_the_command(spark, tmp_path, monkeypatch):
    """The flag reaches the ingest (what it keeps is the parser's, tested above on the same file)."""
    from pcem_spark.cli import main
    from pcem_spark.io import warc

    seen = {}
    monkeypatch.setattr(warc, "ingest_warc", lambda *a, **kw: seen.update(kw))
    wget = os.path.join(REAL, "IAH-urls-wget.warc.gz")
    for flag, kept in (["--keep-crawler-records"], True), ([], False):
        assert main(["ingest-warc", "--input", wget, "--output", str(tmp_path / "docs"), *flag]) == 0
        assert seen["keep_crawler_records"] is kept
