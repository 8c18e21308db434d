"""pcem ingest-warc: WARC / WET files -> documents table + rejects (pcem_spark/warc.py).

The files are written here with FastWARC's own record writer: a small crawl
(gzipped per record, as Common Crawl does, and plain), its WET, a garbage file
and a truncated one. The pure parser is checked without Spark; the command end
to end through ``pcem_spark.cli.app``.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os

import pytest
from warc_fixtures import http_response, topic_pages, write_warc  # tests/warc_fixtures.py

# FastWARC and Resiliparse are in the test extra: a missing one fails here rather than skipping.
from pcem_spark.io import warc, warc_records
from pcem_spark.io.warc_records import DOCUMENT, FILE_ERROR, FILE_SUMMARY, REJECT, parse_warc_stream, record_bytes

UTC = dt.timezone.utc
NAV_WORDS = ("Navword", "Footerword", "Sidebarword")

ARTICLE_HTML = (
    "<!doctype html><html><head><title>Zebra news</title><script>var tracker = {id: 1};</script>"
    "<style>body {font-family: serif}</style></head><body>"
    "<nav><ul><li><a href='/'>Navword home</a></li><li><a href='/news'>Navword news</a></li>"
    "<li><a href='/about'>Navword about</a></li></ul></nav>"
    "<aside class='sidebar'><h3>Sidebarword links</h3><a href='/x'>Sidebarword elsewhere</a></aside>"
    "<main><article><h1>Zebras migrate across the savannah</h1>"
    "<p>Every year the zebras of the Serengeti migrate across the savannah in large herds, following "
    "the rains and the fresh grass, and crossing rivers full of crocodiles.</p>"
    "<p>Researchers tracked the herds with collars to learn how the zebras choose their routes.</p>"
    "</article></main><footer><p>Footerword copyright 2024</p><a href='/privacy'>Footerword privacy</a>"
    "</footer></body></html>"
)

# windows-1252 page, charset in the HTTP header: "café crème brûlée" must survive.
CAFE_HTML = (
    "<html><body><nav><a href='/'>Navword home</a></nav><article><h1>Le café du coin</h1>"
    "<p>Au café on sert une crème brûlée remarquable et un café noir très serré, "
    "préparé chaque matin par le patron depuis trente ans.</p></article></body></html>"
)
# windows-1252 page, charset only in the <meta> tag.
FACADE_HTML = (
    "<html><head><meta charset='windows-1252'></head><body><article><h1>A naïve façade</h1>"
    "<p>The naïve façade of the old library was restored with great care by local masons "
    "over the whole summer.</p></article></body></html>"
)


def crawl_a():
    """A crawl in Common Crawl's shape: warcinfo, request/response/metadata triples, a revisit.

    Returns (records, expected documents {id: (url, date)}, expected rejects {id: reason}, skipped by type).
    """
    recs = [
        record_bytes("warcinfo", "uuid:a0", content=b"software: test\r\n", content_type="application/warc-fields"),
        record_bytes("request", "uuid:a1", "http://zoo.example/zebras", b"GET /zebras HTTP/1.1\r\n\r\n", http=True),
        record_bytes(
            "response",
            "uuid:a2",
            "http://zoo.example/zebras",
            http_response(ARTICLE_HTML.encode()),
            http=True,
            date="2024-03-01T10:00:01Z",
        ),
        record_bytes(
            "metadata",
            "uuid:a3",
            "http://zoo.example/zebras",
            b"fetchTimeMs: 12\r\n",
            content_type="application/warc-fields",
        ),
        record_bytes(
            "response",
            "uuid:a4",
            "http://cafe.example/",
            http=True,
            date="2024-03-01T10:00:02Z",
            content=http_response(CAFE_HTML.encode("cp1252"), "text/html; charset=windows-1252"),
        ),
        record_bytes(
            "response",
            "uuid:a5",
            "http://zoo.example/zebra.jpg",
            http=True,
            content=http_response(b"\xff\xd8\xff\xe0JFIF", "image/jpeg"),
        ),
        record_bytes(
            "response",
            "uuid:a6",
            "http://zoo.example/gone",
            http=True,
            content=http_response(b"<html><body><p>Not found</p></body></html>", status="404 Not Found"),
        ),
        record_bytes(
            "response",
            "uuid:a7",
            "http://zoo.example/blank",
            http=True,
            content=http_response(b"<html><head><title>x</title></head><body></body></html>"),
        ),
        record_bytes(
            "response",
            "uuid:a8",
            "http://zoo.example/report.pdf",
            http=True,
            content=http_response(b"%PDF-1.4 ...", "application/pdf"),
        ),
        record_bytes(
            "resource",
            "uuid:a9",
            "file:///notes.txt",
            "Plain notes about giraffes.".encode(),
            content_type="text/plain; charset=utf-8",
            date="2024-03-01T10:00:03Z",
        ),
        record_bytes("revisit", "uuid:a10", "http://zoo.example/zebras", b"", content_type="application/http"),
    ]
    documents = {
        "<urn:uuid:a2>": ("http://zoo.example/zebras", dt.datetime(2024, 3, 1, 10, 0, 1, tzinfo=UTC)),
        "<urn:uuid:a4>": ("http://cafe.example/", dt.datetime(2024, 3, 1, 10, 0, 2, tzinfo=UTC)),
        "<urn:uuid:a9>": ("file:///notes.txt", dt.datetime(2024, 3, 1, 10, 0, 3, tzinfo=UTC)),
    }
    rejects = {
        "<urn:uuid:a5>": "content type image/jpeg is not text or HTML",
        "<urn:uuid:a6>": "HTTP status 404",
        "<urn:uuid:a7>": "no visible text (main text and whole page empty)",
        "<urn:uuid:a8>": "content type application/pdf is not text or HTML",
    }
    skipped = {"warcinfo": 1, "request": 1, "metadata": 1, "revisit": 1}
    return recs, documents, rejects, skipped


def crawl_b():
    """Plain (uncompressed) WARC: a meta-charset page and a gzip Content-Encoding page."""
    gz_body = gzip.compress(
        b"<html><body><article><p>Compressed page about penguins and their icy "
        b"colonies on the southern coast.</p></article></body></html>"
    )
    recs = [
        record_bytes(
            "response",
            "uuid:b1",
            "http://library.example/",
            http=True,
            date="2024-03-02T08:30:00Z",
            content=http_response(FACADE_HTML.encode("cp1252"), "text/html"),
        ),
        record_bytes(
            "response",
            "uuid:b2",
            "http://ice.example/penguins",
            http=True,
            date="2024-03-02T08:30:01Z",
            content=http_response(gz_body, extra="Content-Encoding: gzip\r\n"),
        ),
        record_bytes("request", "uuid:b3", "http://ice.example/penguins", b"GET / HTTP/1.1\r\n\r\n", http=True),
    ]
    documents = {
        "<urn:uuid:b1>": ("http://library.example/", dt.datetime(2024, 3, 2, 8, 30, tzinfo=UTC)),
        "<urn:uuid:b2>": ("http://ice.example/penguins", dt.datetime(2024, 3, 2, 8, 30, 1, tzinfo=UTC)),
    }
    return recs, documents, {}, {"request": 1}


def wet():
    """A WET file: warcinfo + conversion records (UTF-8 text as Common Crawl writes it)."""
    recs = [
        record_bytes("warcinfo", "uuid:w0", content=b"software: test\r\n", content_type="application/warc-fields"),
        record_bytes(
            "conversion",
            "uuid:w1",
            "http://zoo.example/zebras",
            date="2024-03-01T10:00:01Z",
            content="Zebras migrate across the savannah\nEvery year the zebras ...".encode(),
            content_type="text/plain",
        ),
        record_bytes(
            "conversion",
            "uuid:w2",
            "http://cafe.example/menu",
            date="2024-03-01T11:00:00Z",
            content="Menu du café: crème brûlée, thé, chocolat chaud.".encode(),
            content_type="text/plain",
        ),
        record_bytes("conversion", "uuid:w3", "http://empty.example/", content=b"  \n ", content_type="text/plain"),
        record_bytes(
            "conversion", "uuid:w4", "http://latin1.example/", content=b"caf\xe9 au lait", content_type="text/plain"
        ),
    ]
    documents = {
        "<urn:uuid:w1>": ("http://zoo.example/zebras", dt.datetime(2024, 3, 1, 10, 0, 1, tzinfo=UTC)),
        "<urn:uuid:w2>": ("http://cafe.example/menu", dt.datetime(2024, 3, 1, 11, 0, tzinfo=UTC)),
    }
    rejects = {
        "<urn:uuid:w3>": "empty text",
        "<urn:uuid:w4>": "not valid UTF-8 at byte 3 (WET conversion records are UTF-8)",
    }
    return recs, documents, rejects, {"warcinfo": 1}


def crawl_c_truncated():
    """A gzipped WARC cut inside its 4th (last) record: the 3 complete ones are read, then one file reject."""
    recs = [
        record_bytes("warcinfo", "uuid:c0", content=b"software: test\r\n", content_type="application/warc-fields"),
        record_bytes(
            "response",
            "uuid:c1",
            "http://owl.example/",
            date="2024-03-03T00:00:01Z",
            http=True,
            content=http_response(b"<html><body><p>Owls hunt at night over the quiet meadows.</p></body></html>"),
        ),
        record_bytes(
            "response",
            "uuid:c2",
            "http://owl.example/gone",
            http=True,
            content=http_response(b"gone", status="410 Gone"),
        ),
        record_bytes(
            "response",
            "uuid:c3",
            "http://owl.example/3",
            http=True,
            content=http_response(b"<html><body><p>Never read.</p></body></html>"),
        ),
    ]
    data = b"".join(gzip.compress(r) for r in recs)
    data = data[: len(data) - len(gzip.compress(recs[-1])) // 2]
    documents = {"<urn:uuid:c1>": ("http://owl.example/", dt.datetime(2024, 3, 3, 0, 0, 1, tzinfo=UTC))}
    return data, documents, {"<urn:uuid:c2>": "HTTP status 410"}, {"warcinfo": 1}


def rows_of(data, source="test.warc", **kw):
    return list(parse_warc_stream(data, source, **kw))


def by_kind(rows, kind):
    return [r for r in rows if r.kind == kind]


# ---------------------------------------------------------------------------
# Pure parser
# ---------------------------------------------------------------------------


def test_content_type_helpers():
    assert warc_records.split_content_type('Text/HTML; Charset="ISO-8859-1"') == ("text/html", "iso-8859-1")
    assert warc_records.split_content_type("application/xhtml+xml") == ("application/xhtml+xml", None)
    assert warc_records.split_content_type("  ") == (None, None)
    assert [
        warc_records.payload_kind(t) for t in ("text/html", "application/xhtml+xml", "text/plain", "image/jpeg", None)
    ] == ["html", "html", "text", None, None]
    assert warc.split_inputs(["a.warc.gz,b/{x,y}.warc", " c "]) == ["a.warc.gz", "b/{x,y}.warc", "c"]


@pytest.mark.parametrize("gzipped", [True, False])
def test_parser_rows_reasons_and_counts(tmp_path, gzipped):
    recs, documents, rejects, skipped = crawl_a()
    path = write_warc(tmp_path / ("a.warc.gz" if gzipped else "a.warc"), recs, gzipped)
    with open(path, "rb") as fh:
        rows = rows_of(fh, path)
    docs = {r.id: r for r in by_kind(rows, DOCUMENT)}
    assert {i: (r.url, r.crawl_time) for i, r in docs.items()} == documents
    assert all(r.crawl_date == r.crawl_time.astimezone(UTC).date() for r in docs.values())
    assert {r.id: r.reason for r in by_kind(rows, REJECT)} == rejects
    assert not by_kind(rows, FILE_ERROR)
    (summary,) = by_kind(rows, FILE_SUMMARY)
    assert rows[-1] is summary and summary.skipped == skipped
    # every record is one outcome: documents + rejects + skipped by type
    assert summary.records_read == len(recs) == len(docs) + len(rejects) + sum(skipped.values())
    article = docs["<urn:uuid:a2>"].text
    assert "zebras of the Serengeti migrate" in article and "Researchers tracked the herds" in article
    assert not any(w in article for w in NAV_WORDS), article  # main text only: no nav, sidebar or footer
    assert "var tracker" not in article
    assert "crème brûlée remarquable" in docs["<urn:uuid:a4>"].text  # windows-1252 per the HTTP header
    assert "Navword" not in docs["<urn:uuid:a4>"].text
    assert docs["<urn:uuid:a9>"].text == "Plain notes about giraffes."
    # a reject names the record: its URL and content type
    jpeg = next(r for r in rows if r.id == "<urn:uuid:a5>")
    assert json.loads(jpeg.record)["url"] == "http://zoo.example/zebra.jpg"
    assert json.loads(jpeg.record)["content_type"] == "image/jpeg"
    assert all(r.source_file == path for r in rows)


def test_parser_meta_charset_content_encoding_and_wet(tmp_path):
    recs, documents, _, skipped = crawl_b()
    rows = rows_of(b"".join(recs), "b.warc")
    docs = {r.id: r for r in by_kind(rows, DOCUMENT)}
    assert {i: (r.url, r.crawl_time) for i, r in docs.items()} == documents
    assert all(r.crawl_date == r.crawl_time.astimezone(UTC).date() for r in docs.values())
    assert "The naïve façade of the old library" in docs["<urn:uuid:b1>"].text  # charset from <meta>
    assert "penguins and their icy colonies" in docs["<urn:uuid:b2>"].text  # gzip Content-Encoding undone
    assert rows[-1].skipped == skipped

    recs, documents, rejects, skipped = wet()
    rows = rows_of(b"".join(gzip.compress(r) for r in recs), "x.warc.wet.gz")
    docs = {r.id: r for r in by_kind(rows, DOCUMENT)}
    assert {i: (r.url, r.crawl_time) for i, r in docs.items()} == documents
    assert all(r.crawl_date == r.crawl_time.astimezone(UTC).date() for r in docs.values())
    assert docs["<urn:uuid:w2>"].text == "Menu du café: crème brûlée, thé, chocolat chaud."  # as is
    assert docs["<urn:uuid:w1>"].text.startswith("Zebras migrate across the savannah\nEvery year")
    assert {r.id: r.reason for r in by_kind(rows, REJECT)} == rejects
    assert rows[-1].records_read == len(recs) and rows[-1].skipped == skipped


def test_parser_min_text_chars_and_id_url():
    recs = [
        record_bytes("conversion", "uuid:s1", "http://short.example/", b"tiny", content_type="text/plain"),
        record_bytes(
            "conversion", "uuid:s2", "http://long.example/", b"a long enough text " * 5, content_type="text/plain"
        ),
        record_bytes("resource", "uuid:s3", None, b"a text without a target URI", content_type="text/plain"),
    ]
    rows = rows_of(b"".join(recs), min_text_chars=20)
    assert {r.id: r.reason for r in by_kind(rows, REJECT)} == {
        "<urn:uuid:s1>": "text shorter than --min-text-chars 20 (4 characters)"
    }
    assert {r.id for r in by_kind(rows, DOCUMENT)} == {"<urn:uuid:s2>", "<urn:uuid:s3>"}
    rows = rows_of(b"".join(recs), id_field="url")
    assert {r.id for r in by_kind(rows, DOCUMENT)} == {"http://short.example/", "http://long.example/"}
    (missing,) = by_kind(rows, REJECT)
    assert missing.id is None and missing.reason == "no WARC-Target-URI (needed by --id url)"
    with pytest.raises(ValueError, match="--id must be one of record, url"):
        rows_of(b"", id_field="uri")


def test_parser_garbage_truncated_and_empty_files():
    rows = rows_of(os.urandom(4096), "garbage.warc.gz")
    assert [r.kind for r in rows] == [FILE_ERROR, FILE_SUMMARY]
    assert rows[0].reason.startswith("not a readable WARC file: ") and "record 1" in rows[0].reason
    assert rows[0].id is None and rows[-1].records_read == 0

    recs, documents, rejects, _ = crawl_a()
    data = b"".join(gzip.compress(r) for r in recs)
    cut = len(data) - len(gzip.compress(recs[-1])) - 40  # inside the gzip member of record 10 (of 11)
    rows = rows_of(data[:cut], "cut.warc.gz")
    (error,) = by_kind(rows, FILE_ERROR)
    assert "record 10 " in error.reason and "byte offset" in error.reason, error.reason
    # the 9 records before the cut are kept: a2 and a4 documents, four rejects, three skipped
    assert {r.id for r in by_kind(rows, DOCUMENT)} == {"<urn:uuid:a2>", "<urn:uuid:a4>"}
    assert len(by_kind(rows, REJECT)) == 4 and rows[-1].records_read == 9

    plain = b"".join(recs[:10])
    rows = rows_of(plain[:-10], "cut.warc")  # the content of record 10 (a9, a text resource) is cut
    (error,) = by_kind(rows, FILE_ERROR)
    assert (
        error.reason.startswith("record 10 at byte offset") and "is truncated: Content-Length 27 but" in error.reason
    ), error.reason
    assert rows[-1].records_read == 9 and "<urn:uuid:a9>" not in {r.id for r in rows}

    rows = rows_of(b"", "empty.warc")
    assert [r.kind for r in rows] == [FILE_ERROR, FILE_SUMMARY]
    assert rows[0].reason == "holds no WARC record (an empty file?)"


def test_missing_library_is_a_settings_error(monkeypatch, tmp_path):
    import sys

    from pcem_spark.cli import main
    from pcem_spark.cli.failures import classify_failure

    monkeypatch.setitem(sys.modules, "resiliparse.extract.html2text", None)  # import fails
    with pytest.raises(warc_records.WarcDependencyError, match=r"pip install .fastwarc>=2.0.1. .resiliparse") as info:
        warc_records.require_libraries()
    assert classify_failure(info.value)[0] == 2
    assert main(["ingest-warc", "--input", str(tmp_path), "--output", str(tmp_path / "o")]) == 2


# ---------------------------------------------------------------------------
# Spark: the command end to end
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crawl_dir(tmp_path_factory):
    """A folder of inputs -- 3 clean files, a garbage one, a truncated one -- and what they should give."""
    d = tmp_path_factory.mktemp("crawl")
    a, b, w = crawl_a(), crawl_b(), wet()
    write_warc(d / "crawl-a.warc.gz", a[0])
    write_warc(d / "crawl-b.warc", b[0], gzipped=False)
    write_warc(d / "crawl.warc.wet.gz", w[0])
    (d / "broken.warc.gz").write_bytes(b"\x1f\x8b\x08\x00garbage, not a gzip member" + os.urandom(512))
    c_data, c_docs, c_rejects, _ = crawl_c_truncated()
    (d / "truncated.warc.gz").write_bytes(c_data)
    expected = {
        "documents": {**a[1], **b[1], **w[1], **c_docs},
        "rejects": {**a[2], **w[2], **c_rejects},
        "records": len(a[0]) + len(b[0]) + len(w[0]) + 3,  # + the 3 complete records of the truncated file
        "skipped": {"warcinfo": 3, "request": 2, "metadata": 1, "revisit": 1},
        "file_of": {
            i: f
            for f, docs in (
                ("crawl-a.warc.gz", a[1]),
                ("crawl-b.warc", b[1]),
                ("crawl.warc.wet.gz", w[1]),
                ("truncated.warc.gz", c_docs),
            )
            for i in docs
        },
    }
    return d, expected


def _basename(col):
    from pyspark.sql import functions as F

    return F.element_at(F.split(col, "/"), -1)


@pytest.fixture(scope="module")
def ingested(spark, crawl_dir, tmp_path_factory):
    """``pcem ingest-warc`` over every input of ``crawl_dir``: (exit code, output path)."""
    from pcem_spark.cli import main

    d, _ = crawl_dir
    out = str(tmp_path_factory.mktemp("ingested") / "docs")
    # globs, comma-separated and repeated --input; plain and gzip, WARC and WET; two unreadable files
    code = main(
        [
            "ingest-warc",
            "--input",
            f"{d}/crawl-*.warc*,{d}/crawl.warc.wet.gz",
            "--input",
            f"{d}/broken.warc.gz",
            "--input",
            f"{d}/truncated.warc.gz",
            "--output",
            out,
        ]
    )
    return code, out


def test_ingest_warc_end_to_end(spark, crawl_dir, ingested):
    from chispa import assert_df_equality
    from pyspark.sql import functions as F

    from pcem_spark.io.outputs import require_complete

    _, expected = crawl_dir
    code, out = ingested
    assert code == 0

    docs = spark.read.parquet(out)
    columns = ["id", "text", "labels", "split", "similarities", "url", "crawl_date", "crawl_time", "source_file"]
    assert docs.columns == columns
    want = spark.createDataFrame(
        [
            (i, url, time.astimezone(UTC).date(), time, expected["file_of"][i])
            for i, (url, time) in expected["documents"].items()
        ],
        "id string, url string, crawl_date date, crawl_time timestamp, source_file string",
    )
    got = docs.select("id", "url", "crawl_date", "crawl_time", _basename(F.col("source_file")).alias("source_file"))
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    assert (
        docs.where(F.col("labels").isNotNull() | F.col("split").isNotNull() | F.col("similarities").isNotNull()).count()
        == 0
    )
    article = docs.where(F.col("id") == "<urn:uuid:a2>").first()["text"]
    assert "zebras of the Serengeti migrate" in article and not any(w in article for w in NAV_WORDS)
    assert "crème brûlée" in docs.where(F.col("id") == "<urn:uuid:a4>").first()["text"]

    rejects = spark.read.parquet(out + "_rejects")
    assert {r["id"]: r["reason"] for r in rejects.where(F.col("id").isNotNull()).collect()} == expected["rejects"]
    file_rows = rejects.where(F.col("id").isNull()).select(_basename(F.col("source_file")).alias("f"), "reason")
    errors = {r["f"]: r["reason"] for r in file_rows.collect()}
    assert set(errors) == {"broken.warc.gz", "truncated.warc.gz"}, errors
    assert errors["broken.warc.gz"].startswith("not a readable WARC file") and "record 1" in errors["broken.warc.gz"]
    assert "record 4 " in errors["truncated.warc.gz"] and "byte offset" in errors["truncated.warc.gz"]
    assert rejects.where(F.col("line").isNotNull()).count() == 0

    marker = require_complete(spark, out, "documents")
    assert require_complete(spark, out + "_rejects", "rejects")["documents"] == marker["documents"]
    assert marker["files"] == 5 and marker["unreadable_files"] == 2 and marker["duplicate_ids"] == 0
    assert marker["documents"] == docs.count() == len(expected["documents"])
    assert marker["rejected"] == rejects.count() == len(expected["rejects"]) + 2
    assert marker["skipped_by_type"] == expected["skipped"]
    # every record written (and complete) is accounted for: documents + rejected records + skipped by type
    assert (
        marker["records_read"]
        == expected["records"]
        == (marker["documents"] + marker["rejected_records"] + sum(marker["skipped_by_type"].values()))
    )
    assert marker["rejected_by_reason"]["HTTP status 404"] == 1


def test_ingest_warc_id_url_rejects_every_copy_of_a_repeated_url(spark, crawl_dir, tmp_path):
    from pyspark.sql import functions as F

    from pcem_spark.cli import main

    d, _ = crawl_dir
    out = str(tmp_path / "by_url")
    # The WARC and its WET both hold http://zoo.example/zebras: with --id url that id is repeated.
    rejects = str(tmp_path / "elsewhere" / "rejected")
    assert (
        main(
            [
                "ingest-warc",
                "--input",
                f"{d}/crawl-a.warc.gz,{d}/crawl.warc.wet.gz",
                "--id",
                "url",
                "--output",
                out,
                "--rejects",
                rejects,
            ]
        )
        == 0
    )
    docs = spark.read.parquet(out)
    ids = [r["id"] for r in docs.select("id").collect()]
    assert len(ids) == len(set(ids)) and "http://zoo.example/zebras" not in ids
    assert {"http://cafe.example/", "file:///notes.txt", "http://cafe.example/menu"} <= set(ids)
    assert not os.path.exists(out + "_rejects")
    dup = spark.read.parquet(rejects).where(F.col("id") == "http://zoo.example/zebras").collect()
    assert len(dup) == 2 and {r["reason"] for r in dup} == {"duplicate id: 2 rows share this id"}
    assert {os.path.basename(r["source_file"]) for r in dup} == {"crawl-a.warc.gz", "crawl.warc.wet.gz"}


@pytest.mark.slow
def test_ingest_warc_exit_codes(spark, crawl_dir, ingested, tmp_path):
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker

    d, _ = crawl_dir
    out = str(tmp_path / "docs")
    assert main(["ingest-warc", "--input", str(tmp_path / "nothing-*.warc.gz"), "--output", out]) == 2
    assert main(["ingest-warc", "--input", str(tmp_path / "missing.warc"), "--output", out]) == 2
    assert main(["ingest-warc", "--input", f"{d}/crawl-b.warc", "--output", out, "--min-text-chars", "-1"]) == 2
    assert not os.path.exists(out)
    _, existing = ingested
    run_id = read_marker(spark, existing)["run_id"]
    assert main(["ingest-warc", "--input", f"{d}/crawl-b.warc", "--output", existing]) == 2  # no --overwrite
    assert read_marker(spark, existing)["run_id"] == run_id  # untouched
    assert main(["ingest-warc", "--input", f"{d}/crawl-b.warc", "--output", out]) == 0
    assert (
        main(["ingest-warc", "--input", f"{d}/crawl-b.warc", "--output", out, "--overwrite", "--min-text-chars", "100"])
        == 0
    )
    assert read_marker(spark, out)["documents"] == 1  # replaced: the penguin page (76 characters) is too short now
    (short,) = spark.read.parquet(out + "_rejects").collect()
    assert short["id"] == "<urn:uuid:b2>"
    assert short["reason"] == "text shorter than --min-text-chars 100 (76 characters)"
    # only unreadable files: the rejects are written, the command fails with exit 2 and no documents table
    empty_out = str(tmp_path / "none")
    assert main(["ingest-warc", "--input", f"{d}/broken.warc.gz", "--output", empty_out]) == 2
    assert not os.path.exists(empty_out) and os.path.exists(empty_out + "_rejects")


@pytest.mark.slow
def test_train_and_predict_read_the_ingested_table(spark, tmp_path):
    """The table with its extra columns (url, crawl_date, crawl_time, source_file) is a documents table for
    train/predict."""
    import numpy as np

    from pcem_spark.cli import main
    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.outputs import read_marker
    from pcem_spark.io.rejects import split_rejects

    rng = np.random.default_rng(3)
    recs = topic_pages(6, lambda words: " ".join(rng.choice(words, 12)))
    crawl = write_warc(tmp_path / "topics.warc.gz", recs)
    docs = str(tmp_path / "docs")
    assert main(["ingest-warc", "--input", crawl, "--output", docs]) == 0

    raw = read_documents(spark, docs)
    good, rejects = split_rejects(raw)
    assert good.count() == len(recs) and rejects.count() == 0

    tax = tmp_path / "tax.tsv"
    tax.write_text("ROOT\tsport\nROOT\ttech\nsport\tfootball\nsport\ttennis\ntech\tphones\ntech\tchips\n")
    desc = tmp_path / "desc.json"
    desc.write_text(
        json.dumps(
            {
                "sport": "sport goal racket",
                "tech": "technology android silicon",
                "football": "football goal striker",
                "tennis": "tennis racket serve",
                "phones": "phones android screen",
                "chips": "chips silicon wafer",
            }
        )
    )
    model, pred = str(tmp_path / "m"), str(tmp_path / "p")
    # fixed settings (nothing cross-validated) and few iterations: the point is the input, not the fit
    common = [
        "--set",
        "features.min_df=1.0",
        "--set",
        "features.max_df=1.0",
        "--set",
        "model.max_iter=3",
        "--set",
        "model.smoothing=0.5",
        "--set",
        "model.unlabeled_weight=1.0",
        "--set",
        "model.path_weight=1.0",
        "--set",
        "model.family=generative",
    ]
    assert (
        main(
            [
                "train",
                "--docs",
                docs,
                "--model",
                model,
                "--taxonomy",
                str(tax),
                "--supervision",
                "descriptions",
                "--descriptions",
                str(desc),
            ]
            + common
        )
        == 0
    )
    assert main(["predict", "--model", model, "--docs", docs, "--output", pred]) == 0
    rows = spark.read.parquet(pred).collect()
    assert len(rows) == len(recs)
    correct = sum(r["leaf"] == r["id"].split(":")[-1].split("-")[0].rstrip(">") for r in rows)
    assert correct >= 18, correct  # of 24: the words are the topics'
    # The crawl's context kept through prediction (no join), partitioned by day: rows in = predictions + rejects.
    kept = str(tmp_path / "kept")
    argv = ["predict", "--model", model, "--docs", docs, "--output", kept]
    assert main(argv + ["--keep-columns", "url,crawl_date", "--partition-by", "crawl_date"]) == 0
    folders = [n for n in os.listdir(kept) if n.startswith("crawl_date=")]
    days = {str(r[0]) for r in spark.read.parquet(docs).select("crawl_date").distinct().collect()}
    assert sorted(folders) == sorted(f"crawl_date={day}" for day in days), os.listdir(kept)  # one folder per day
    out = spark.read.parquet(kept)
    assert {"url", "crawl_date"} <= set(out.columns)
    n_rejects = spark.read.parquet(kept + "_rejects").count()
    assert out.count() + n_rejects == len(recs) == read_marker(spark, kept)["input"]["rows_read"]
    urls = {r["id"]: r["url"] for r in spark.read.parquet(docs).select("id", "url").collect()}
    assert all(urls[r["id"]] == r["url"] for r in out.select("id", "url").collect())
