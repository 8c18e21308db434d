"""Valid rows and rejects of a documents table: every row read is one or the other, with its reason.

:func:`split_rejects` takes what :func:`pcem_spark.io.documents.read_documents`
read (parser and element checks included) and decides each row once: the
parser's reason, a missing id or text, or an id that several rows share
(every copy is rejected). The rejects get their line in the file;
:func:`log_counts` logs how many were rejected and why.
"""

from __future__ import annotations

import logging
from typing import Dict, Optional, Sequence, Tuple

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pcem_spark.engine.label_columns import has_label_paths
from pcem_spark.errors import InputError
from pcem_spark.io.documents import (
    CORRUPT_COL,
    KEPT_PREFIX,
    NESTED_LABELS_COL,
    REASON_COL,
    REJECT_SCHEMA,
    SPLIT_LINE_COL,
    SPLIT_START_COL,
)
from pcem_spark.io.embeddings import CHECKED_ROWS, EMBEDDING_COL, embedding_reason, usual_dimension
from pcem_spark.io.json_lines import RECORD_CHARS
from pcem_spark.io.partition_folders import escaped_bytes

__all__ = ["split_rejects", "log_counts", "redacted_column", "BROADCAST_REPEATED_IDS", "BROADCAST_REPEATED_BYTES"]

log = logging.getLogger(__name__)

_LOGGED_REASONS = 20  # distinct reject reasons log_counts lists


_VECTOR_REASON = "_vector_reason"  # a row's vector check, stored once (predict)


def _check_usual_dimension(rows: DataFrame, vectors: Tuple[str, Optional[int]]) -> None:
    """InputError when ``rows``' vectors mostly have another length than the required ``vectors[1]``."""
    usual = usual_dimension(rows, EMBEDDING_COL)
    if usual != vectors[1]:
        found = "no vectors" if usual is None else f"vectors of {usual} values"
        raise InputError(
            f"column {vectors[0]!r} holds {found}; {vectors[1]} values are expected (the model's vectors): "
            "embed the documents with the encoder the model was fitted with"
        )


def split_rejects(
    df: DataFrame,
    require_text: bool = True,
    counts: Optional[Dict[str, int]] = None,
    distinct: Optional[str] = None,
    with_source: bool = False,
    vectors: Tuple[str, Optional[int]] = (EMBEDDING_COL, None),
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
    table that reads nothing. With ``distinct`` (a column), the same job
    counts its distinct values among the valid rows (``distinct_values``,
    null counting as one) and the bytes of the longest once escaped into a
    partition folder name (``longest_folder_value``): what ``--partition-by``
    would make of it.

    ``labels`` of the valid rows: a list of paths (array<array<string>>)
    when any valid row wrote one (``_nested_labels``), else one path
    (array<string>) -- the shape of :data:`DOCUMENT_SCHEMA`'s documentation.
    ``with_source``: the valid rows also keep ``source_file`` (the file each came from).

    Document vectors (an ``embedding`` column, :func:`pcem_spark.io.documents.read_documents`): ``vectors``
    is (the column's name in the input, the dimension every vector must have -- None: the one most rows
    have, :func:`pcem_spark.io.embeddings.usual_dimension`). A row whose vector is null, of another length
    or not finite is a reject naming the column and position; ``counts`` gets ``vector_dimension``. When
    every vector is null and no dimension is required, the input has none: the column is dropped.
    """
    if REASON_COL not in df.columns:  # a frame built by hand, not by read_documents
        df = df.withColumn(
            REASON_COL,
            F.when(
                F.col(CORRUPT_COL).isNotNull(),
                F.lit(
                    "malformed record: expected a JSON object with id: string, text: string, "
                    "labels: array<string> or null"
                ),
            ),
        )
    for name in (SPLIT_START_COL, SPLIT_LINE_COL):
        if name not in df.columns:
            df = df.withColumn(name, F.lit(None).cast(T.LongType()))
    given = vectors[1]
    if EMBEDDING_COL in df.columns and given:
        # A required dimension (a model's: predict) is compared with the first rows' (a limit, not a pass over a
        # crawl), and each row's check is stored in the persisted copy below, not recomputed by every reader.
        _check_usual_dimension(df.where(F.col(REASON_COL).isNull()).limit(CHECKED_ROWS), vectors)
        df = df.withColumn(_VECTOR_REASON, embedding_reason(F.col(EMBEDDING_COL), given, vectors[0]))
    # One persisted, fully parsed copy: the duplicate-id count below, the rejects, the valid rows and the
    # callers' counts all read it.
    parsed = df.persist(StorageLevel.MEMORY_AND_DISK)
    copies, broadcast = _repeated_ids(parsed)
    text_blank = F.col("text").isNull() if require_text else F.lit(False)
    reason = (
        F.when(F.col(REASON_COL).isNotNull(), F.col(REASON_COL))
        .when(F.col("id").isNull() | (F.trim(F.col("id")) == ""), F.lit("field 'id' is missing or empty"))
        .when(text_blank, F.lit("field 'text' is missing (null)"))
    )
    dimension = given
    if EMBEDDING_COL in df.columns and not given:
        # The dimension most rows have (train): one aggregation over the persisted copy.
        dimension = usual_dimension(parsed.where(F.col(REASON_COL).isNull()), EMBEDDING_COL)
    if dimension is not None and EMBEDDING_COL in df.columns:
        vector_reason = (
            F.col(_VECTOR_REASON) if given else embedding_reason(F.col(EMBEDDING_COL), dimension, vectors[0])
        )
        reason = reason.when(vector_reason.isNotNull(), vector_reason)
    else:
        dimension = None
    vector_cols = [EMBEDDING_COL] if dimension is not None else []
    if copies is not None:
        parsed = parsed.join(copies, on="id", how="left")
        reason = reason.when(
            F.col(_COPIES).isNotNull(),
            F.concat(F.lit("duplicate id: "), F.col(_COPIES).cast("string"), F.lit(" rows share this id")),
        )
    flagged = parsed.withColumn("_reason", reason.otherwise(F.lit(None)))
    if copies is not None and not broadcast:
        flagged = flagged.persist(StorageLevel.MEMORY_AND_DISK)  # a shuffle join: done once, not per reader
    kept = [F.col(c).alias(c[len(KEPT_PREFIX) :]) for c in df.columns if c.startswith(KEPT_PREFIX)]
    valid = F.col("_reason").isNull()
    # Whether a valid row wrote its labels as a list of paths: then the valid rows keep that shape.
    shaped = NESTED_LABELS_COL in df.columns and has_label_paths(df)
    any_nested = F.max(F.when(valid & F.col(NESTED_LABELS_COL), 1).otherwise(0)) if shaped else F.lit(0)
    if counts is not None:
        folders = []
        if distinct is not None:
            value = F.col(distinct).cast("string")
            folders = [
                F.count_distinct(F.when(valid, value)) + F.max(F.when(valid & value.isNull(), 1).otherwise(0)),
                F.max(F.when(valid, escaped_bytes(value))),
            ]
        # The valid rows with labels too, in the same pass (suggest-labels ranks the others).
        labelled = F.count(F.when(valid & F.col("labels").isNotNull(), 1))
        row = flagged.agg(F.count(F.lit(1)), F.count(F.when(valid, 1)), labelled, *folders, any_nested).first()
        counts.update(parsed=int(row[0]), valid=int(row[1]), labelled=int(row[2]))
        if dimension is not None:
            counts["vector_dimension"] = dimension
        if distinct is not None:
            counts.update(distinct_values=int(row[3] or 0), longest_folder_value=int(row[4] or 0))
    else:
        row = flagged.agg(any_nested).first() if shaped else (0, 0, 0)
    labels = F.col("labels") if not shaped or row[-1] else F.try_element_at("labels", F.lit(1)).alias("labels")
    good = flagged.where(valid).select(
        "id", "text", labels, "split", "similarities", *kept, *vector_cols, *(["source_file"] if with_source else [])
    )
    if counts is not None and counts["parsed"] == counts["valid"]:
        return good, flagged.sparkSession.createDataFrame([], REJECT_SCHEMA)
    as_json = F.to_json(F.struct("id", "text", "labels", "split", "similarities"))
    if shaped:  # the record as the input wrote it: one path unwrapped
        one_path = F.to_json(
            F.struct("id", "text", F.try_element_at("labels", F.lit(1)).alias("labels"), "split", "similarities")
        )
        as_json = F.when(F.col(NESTED_LABELS_COL), as_json).otherwise(one_path)
    rejects = (
        flagged.where(F.col("_reason").isNotNull())
        .join(F.broadcast(_lines_before_split(flagged)), on=["source_file", SPLIT_START_COL], how="left")
        .select(
            F.col("id"),
            F.col("source_file"),
            F.col("_reason").alias("reason"),
            F.coalesce(F.col(CORRUPT_COL), F.substring(as_json, 1, RECORD_CHARS)).alias("record"),
            (F.col("_lines_before") + F.col(SPLIT_LINE_COL)).alias("line"),
        )
    )
    return good, rejects


def redacted_column(name: str, paths: Sequence[str] = ()):
    """Column ``name`` (a file's path, a reason) with the credentials of its URLs redacted, and the known secrets
    written in ``paths`` (the input's): Spark SQL's ``regexp_replace``
    (:func:`pcem_spark.util.redaction.sql_redactions`), no Python per row."""
    from pcem_spark.util.redaction import sql_redactions

    col = F.col(name)
    for pattern, replacement in sql_redactions(paths):
        col = F.regexp_replace(col, pattern, replacement)
    return col.alias(name)


# Rows sharing an id: at most this many distinct repeated ids (and bytes of them) go to every task as a
# broadcast table; more are joined by a shuffle (a crawl with millions of repeated ids), whose result is
# then persisted.
BROADCAST_REPEATED_IDS = 1_000_000
BROADCAST_REPEATED_BYTES = 64 << 20
_COPIES = "_id_copies"


def _repeated_ids(parsed: DataFrame) -> Tuple[Optional[DataFrame], bool]:
    """((id, _id_copies) of the ids more than one row has, or None when every id is unique; broadcast?).

    Only the id column is shuffled, never the rows: the usual input has no
    repeated id, and then nothing is joined at all. One Spark job; the
    repeated ids are cached (every reader of the verdicts joins them).
    """
    copies = (
        parsed.where(F.col("id").isNotNull())
        .groupBy("id")
        .agg(F.count(F.lit(1)).alias(_COPIES))
        .where(F.col(_COPIES) > 1)
        .cache()
    )
    size = copies.agg(F.count(F.lit(1)), F.sum(F.length("id"))).first()
    n_repeated, id_chars = int(size[0]), int(size[1] or 0)
    if n_repeated == 0:
        copies.unpersist()
        return None, False
    # Broadcast (to every task) only while the table is small: by count and by bytes (URL ids are long).
    if n_repeated <= BROADCAST_REPEATED_IDS and id_chars + 16 * n_repeated <= BROADCAST_REPEATED_BYTES:
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
    before = Window.partitionBy("source_file").orderBy(SPLIT_START_COL).rowsBetween(Window.unboundedPreceding, -1)
    per_split = (
        rows.where(F.col(SPLIT_START_COL).isNotNull())
        .groupBy("source_file", SPLIT_START_COL)
        .agg(F.count(F.lit(1)).alias("_lines"))
    )
    return per_split.select(
        "source_file", SPLIT_START_COL, F.coalesce(F.sum("_lines").over(before), F.lit(0)).alias("_lines_before")
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
