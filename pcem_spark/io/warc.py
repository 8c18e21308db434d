"""Crawl input: WARC, WET and ARC files -> the documents table.

``pcem ingest-warc --input 'crawl/*.warc.gz' --output docs`` reads many WARC,
WET or ARC files in parallel and writes the documents table (Parquet) and its
rejects table.

ARC (the Internet Archive's format before WARC, plain or gzip) is recognised by
its first record (``filedesc://``) and read by warcio (FastWARC reads no ARC;
warcio is the reference reader of both formats, pure Python, and ARC archives are
old and small next to a WARC crawl, so its speed does not matter). Its records go
through the same code as WARC records: the same rejects, ids and columns, an id
derived from the file's name, the record's offset and URL (ARC has no record id).

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
are optional dependencies (the ``warc`` extra: ``pip install fastwarc resiliparse``), imported
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
  ``revisit``, ...) is not a document: counted by type, never a reject; so are
  the crawler's own records (``metadata://``, ``dns:``, ``filedesc://``
  URIs: wget's log and arguments, DNS lookups) and ``robots.txt``, counted
  under their own keys, unless ``keep_crawler_records``;
* crawl quirks are forgiven where the bytes are clear and counted
  (:data:`~pcem_spark.io.warc_records.QUIRKS`): a declared gzip / brotli /
  deflate / chunked coding the body does not have, a status line FastWARC does
  not parse, a record without ``WARC-Record-ID``, a WARC-Date that is not a date,
  a page whose main-text extraction is empty (its whole visible text is kept);
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

import logging
import time
from typing import Dict, Iterable, List, Sequence, Tuple

from pcem_spark.io.json_lines import RECORD_CHARS
from pcem_spark.io.warc_records import (
    DOCUMENT,
    FILE_ERROR,
    FILE_SUMMARY,
    ID_FIELDS,
    REJECT,
    WarcInputError,
    _parse_file,
    require_libraries,
)

__all__ = [
    "BROADCAST_REPEATED_IDS",
    "split_inputs",
    "expand_inputs",
    "output_schema",
    "parsed_schema",
    "read_warc_files",
    "ingest_warc",
]

log = logging.getLogger(__name__)


# Up to this many repeated ids (~100 bytes each) are broadcast to flag their copies; more are joined by a shuffle.
BROADCAST_REPEATED_IDS = 1_000_000


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
    from pcem_spark.io.documents import _is_ignored, input_fs

    found: Dict[str, int] = {}
    for pattern in patterns:
        fs = input_fs(spark, pattern)
        statuses = fs.glob()
        if not statuses and fs.exists():
            statuses = [fs.status()]  # a name holding glob characters, e.g. "page[1].warc"
        if not statuses:
            raise WarcInputError(f"--input {pattern!r} matches no file")
        before = len(found)
        for status in statuses:
            if status.isDirectory():
                root = status.getPath().toUri().getPath().rstrip("/")
                for file in fs.files_under(status.getPath()):
                    if not _is_ignored(file.getPath().toUri().getPath()[len(root) :]):
                        found[file.getPath().toString()] = int(file.getLen())
            else:
                name = status.getPath().getName()
                if _is_ignored("/" + name):
                    raise WarcInputError(
                        f"--input {pattern!r}: {status.getPath().toString()!r} is a hidden file "
                        "(name starting with '_' or '.', or .crc), which Hadoop skips; rename it"
                    )
                found[status.getPath().toString()] = int(status.getLen())
        if len(found) == before:
            raise WarcInputError(f"--input {pattern!r} holds no files (hidden files, _SUCCESS and .crc are skipped)")
    for path in found:
        if "," in path:
            raise WarcInputError(
                f"--input file {path!r}: Hadoop's input formats cannot read a file name holding a comma; rename it"
            )
    return sorted(found.items())


# Columns of the documents table ingest-warc writes: the documents table's, then the crawl's.
def output_schema():
    from pyspark.sql import types as T

    from pcem_spark.io.documents import DOCUMENT_SCHEMA

    return T.StructType(
        DOCUMENT_SCHEMA.fields
        + [
            T.StructField("url", T.StringType(), True),  # WARC-Target-URI
            T.StructField("crawl_date", T.DateType(), True),  # the UTC day of WARC-Date (partition by it)
            T.StructField("crawl_time", T.TimestampType(), True),  # WARC-Date
            T.StructField("source_file", T.StringType(), True),  # the WARC/WET file
        ]
    )


def parsed_schema():
    """Spark schema of :class:`ParsedRow` (same field order)."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("kind", T.StringType(), False),
            T.StructField("id", T.StringType(), True),
            T.StructField("text", T.StringType(), True),
            T.StructField("url", T.StringType(), True),
            T.StructField("crawl_time", T.TimestampType(), True),
            T.StructField("crawl_date", T.DateType(), True),
            T.StructField("source_file", T.StringType(), True),
            T.StructField("reason", T.StringType(), True),
            T.StructField("record", T.StringType(), True),
            T.StructField("records_read", T.LongType(), True),
            T.StructField("skipped", T.MapType(T.StringType(), T.LongType(), True), True),
            T.StructField("quirks", T.MapType(T.StringType(), T.LongType(), True), True),
        ]
    )


def read_warc_files(
    spark, files: Sequence[str], id_field: str = "record", min_text_chars: int = 1, keep_crawler_records: bool = False
):
    """WARC/WET files (full URIs, no globs needed) -> DataFrame of :func:`parsed_schema` rows, lazily.

    ``binaryFiles`` gives each task whole files (never split; small files are
    packed together up to ``spark.files.maxPartitionBytes``), so files are
    parsed in parallel, one file per task at a time.
    """
    import functools

    sc = spark.sparkContext
    rdd = sc.binaryFiles(",".join(_escape_glob(f) for f in files), minPartitions=max(len(files), 1))
    rows = rdd.flatMap(
        functools.partial(
            _parse_file, id_field=id_field, min_text_chars=min_text_chars, keep_crawler_records=keep_crawler_records
        )
    )
    return spark.createDataFrame(rows, parsed_schema())


def _top_reasons(df, limit: int = 20) -> Dict[str, int]:
    from pyspark.sql import functions as F

    rows = df.groupBy("reason").count().orderBy(F.desc("count"), "reason").limit(limit).collect()
    return {r["reason"]: int(r["count"]) for r in rows}


def ingest_warc(
    spark,
    inputs: Sequence[str],
    output: str,
    rejects_path: str,
    id_field: str = "record",
    min_text_chars: int = 1,
    overwrite: bool = False,
    keep_crawler_records: bool = False,
) -> Dict[str, object]:
    """Read WARC/WET files into the documents table (Parquet) and its rejects table; return the counts.

    Both outputs are written with :func:`pcem_spark.io.outputs.atomic_output`;
    their markers hold the counts (by reason, by record type, by crawl quirk
    forgiven). Every id must be unique: when records share one (``--id url``
    and a URL crawled twice, a file given twice under two names, a crawler
    that reuses a record id), every document candidate among them is a reject,
    so that no id is both a document and a reject -- the rule
    :func:`pcem_spark.io.rejects.split_rejects` applies when the table is read.
    ``keep_crawler_records``: keep the crawler's own records (``metadata://``,
    ``dns:`` ...) and robots.txt as documents instead of skipping them.

    Raises
    ------
    WarcInputError / WarcDependencyError (ValueError: exit 2)
        Bad settings, inputs that match nothing, missing libraries, no document at all.
    RuntimeError
        The counts do not add up (a bug): nothing is written.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from pcem_spark.io.outputs import atomic_output, check_writable
    from pcem_spark.io.rejects import redacted_column
    from pcem_spark.util.redaction import redact

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
    log.info(
        "ingest-warc: %d files, %.1f MB (largest %.1f MB: a task holds a whole file in memory)",
        len(files),
        total_bytes / 1e6,
        max(size for _, size in files) / 1e6,
    )

    paths = [f for f, _ in files]  # a file's path with credentials or a known secret is stored redacted
    parsed = read_warc_files(spark, paths, id_field, min_text_chars, keep_crawler_records).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    copies = None
    try:
        candidates = parsed.where(F.col("kind") == DOCUMENT)
        # Every document candidate whose id another record also holds is a reject (rejects.split_rejects'
        # rule, same wording), whether the other record is a document candidate or already a reject: an id is
        # never both a document and a reject. Only the ids are shuffled to find them; the repeats (usually
        # none) are broadcast, so the texts never move.
        copies = (
            parsed.where(F.col("kind").isin(DOCUMENT, REJECT) & F.col("id").isNotNull())
            .groupBy("id")
            .agg(
                F.count(F.lit(1)).alias("_copies"),
                F.sum((F.col("kind") == DOCUMENT).cast("long")).alias("_documents"),
            )
            .where(F.col("_copies") > 1)
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        n_repeated_ids = copies.count()
        repeated = copies.drop("_documents")
        flagged = candidates.join(
            F.broadcast(repeated) if n_repeated_ids <= BROADCAST_REPEATED_IDS else repeated, "id", "left"
        )
        documents = flagged.where(F.col("_copies").isNull()).select(
            "id",
            "text",
            F.lit(None).cast("array<string>").alias("labels"),
            F.lit(None).cast("string").alias("split"),
            F.lit(None).cast("map<string,double>").alias("similarities"),
            "url",
            "crawl_date",
            "crawl_time",
            # a path with credentials (s3a://KEY:SECRET@bucket/...) is stored redacted; the usual path as it is
            redacted_column("source_file", paths) if any(redact(p) != p for p in paths) else "source_file",
        )
        duplicate_reason = F.concat(
            F.lit("duplicate id: "), F.col("_copies").cast("string"), F.lit(" rows share this id")
        )
        duplicates = flagged.where(F.col("_copies").isNotNull()).select(
            "id",
            "source_file",
            duplicate_reason.alias("reason"),
            # the record's number and byte offset, with its URL (and its record id: the id or in the record)
            F.substring(
                F.to_json(
                    F.struct(
                        F.get_json_object("record", "$.record").cast("long").alias("record"),
                        F.get_json_object("record", "$.offset").cast("long").alias("offset"),
                        "url",
                    )
                ),
                1,
                RECORD_CHARS,
            ).alias("record"),
        )
        rejects = (
            parsed.where(F.col("kind").isin(REJECT, FILE_ERROR))
            .select("id", "source_file", "reason", "record")
            .unionByName(duplicates)
            # an unreadable file's record names the file too
            .select("id", *(redacted_column(c, paths) for c in ("source_file", "reason", "record")))
            .withColumn("line", F.lit(None).cast("long"))
        )

        # Counts from the persisted parse, before anything is written, so a failed check writes nothing.
        by_kind: Dict[str, Tuple[int, int]] = {
            r["kind"]: (int(r["rows"]), int(r["records"] or 0))
            for r in parsed.groupBy("kind")
            .agg(F.count(F.lit(1)).alias("rows"), F.sum("records_read").alias("records"))
            .collect()
        }
        n_files_read, n_records = by_kind.get(FILE_SUMMARY, (0, 0))
        if n_files_read != len(files):
            raise RuntimeError(f"ingest-warc: {len(files)} input files but Spark read {n_files_read}")
        # The files' skipped-by-type and quirk counts, summed in one pass over the summaries (one row per file).
        tagged = F.map_concat(
            F.transform_keys(
                F.coalesce("skipped", F.create_map().cast("map<string,bigint>")), lambda k, _: F.concat(F.lit("s"), k)
            ),
            F.transform_keys(
                F.coalesce("quirks", F.create_map().cast("map<string,bigint>")), lambda k, _: F.concat(F.lit("q"), k)
            ),
        )
        counts = {
            r["key"]: int(r["n"])
            for r in parsed.where(F.col("kind") == FILE_SUMMARY)
            .select(F.explode(tagged))
            .groupBy("key")
            .agg(F.sum("value").alias("n"))
            .collect()
        }
        skipped_by_type = {k[1:]: n for k, n in counts.items() if k[0] == "s"}
        quirks = {k[1:]: n for k, n in counts.items() if k[0] == "q"}
        n_skipped = sum(skipped_by_type.values())
        n_candidates, n_record_rejects, n_file_errors = (
            by_kind.get(k, (0, 0))[0] for k in (DOCUMENT, REJECT, FILE_ERROR)
        )
        if n_file_errors:
            for row in parsed.where(F.col("kind") == FILE_ERROR).select("source_file", "reason").limit(20).collect():
                log.warning("ingest-warc: %s: %s", row["source_file"], row["reason"])
        # The contract: every complete record read is a document candidate, a reject or a skipped type.
        if n_records != n_candidates + n_record_rejects + n_skipped:
            raise RuntimeError(
                f"ingest-warc: {n_records} records read but {n_candidates} documents + "
                f"{n_record_rejects} rejected + {n_skipped} skipped by type"
            )
        n_duplicates = int(copies.agg(F.sum("_documents")).first()[0] or 0) if n_repeated_ids else 0
        n_documents = n_candidates - n_duplicates
        n_rejects = n_record_rejects + n_duplicates + n_file_errors
        summary = {
            "files": len(files),
            "bytes": total_bytes,
            "records_read": n_records,
            "documents": n_documents,
            "rejected": n_rejects,
            "rejected_records": n_record_rejects,
            "duplicate_ids": n_duplicates,
            "unreadable_files": n_file_errors,
            "skipped_by_type": skipped_by_type,
            "quirks": quirks,
            "keep_crawler_records": keep_crawler_records,
            "id": id_field,
            "min_text_chars": min_text_chars,
            "inputs": list(inputs),
        }
        # The rejects first: when nothing is a document they are what the user needs to see.
        with atomic_output(spark, rejects_path, "rejects", overwrite=True, parts=[""]) as staged_rejects:
            rejects.write.parquet(staged_rejects.tmp)
            written = spark.read.parquet(staged_rejects.tmp)
            if written.count() != n_rejects:
                raise RuntimeError(f"ingest-warc: {n_rejects} rejects but {written.count()} written")
            summary["rejected_by_reason"] = _top_reasons(written) if n_rejects else {}
            # "source": a retry of the same ingest may replace these rejects without --overwrite
            # (pcem_spark.io.output_paths, rule 3).
            staged_rejects.info.update(redact({**summary, "documents_output": output, "source": ",".join(inputs)}))
        if n_documents == 0:
            raise WarcInputError(
                f"ingest-warc: no documents in {len(files)} files ({n_records} records, "
                f"{n_skipped} of them skipped by type {skipped_by_type}); the {n_rejects} "
                f"rejects, with their reasons, are in {rejects_path}"
            )
        with atomic_output(spark, output, "documents", overwrite=overwrite, parts=[""]) as staged:
            documents.write.parquet(staged.tmp)
            n_written = spark.read.parquet(staged.tmp).count()
            if n_written != n_documents:
                raise RuntimeError(f"ingest-warc: {n_documents} documents but {n_written} written")
            staged.info.update(redact({**summary, "rejects": rejects_path}))
    finally:
        parsed.unpersist()
        if copies is not None:
            copies.unpersist()
    seconds = time.perf_counter() - t0
    summary["seconds"] = round(seconds, 1)
    log.info(
        "ingest-warc: %d files, %d records read -> %d documents, %d rejected (%d records, %d repeated ids, "
        "%d unreadable files), %d skipped by type (%s) -> %s in %.1fs (%.0f records/s)",
        len(files),
        n_records,
        n_documents,
        n_rejects,
        n_record_rejects,
        n_duplicates,
        n_file_errors,
        n_skipped,
        ", ".join(f"{k}: {v}" for k, v in sorted(skipped_by_type.items())) or "none",
        output,
        seconds,
        n_records / seconds if seconds > 0 else 0.0,
    )
    if quirks:
        log.info("ingest-warc: crawl quirks forgiven:%s", "".join(f"\n  {c} x {q}" for q, c in sorted(quirks.items())))
    if summary["rejected_by_reason"]:
        log.info(
            "ingest-warc: rejects by reason (%s):%s",
            rejects_path,
            "".join(f"\n  {c} x {r}" for r, c in summary["rejected_by_reason"].items()),
        )
    return summary
