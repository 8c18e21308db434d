"""Labels merged by id: a labels table's paths given to the documents with the same id.

``pcem train --labels L`` adds labels to a corpus without rewriting it: each
valid row ``{"id": ..., "labels": [...]}`` of ``L`` gives its label path(s) to
the document of ``--docs`` with that id. The rules are strict, and every row of
``L`` is either merged or rejected with its reason:

* **the labels table wins** (the one rule for a conflict): a document that
  already has labels takes the table's instead. The table is the later,
  deliberate answer of a labeller, often a correction; keeping the corpus's
  labels would make a correction impossible without rewriting the corpus.
  Such rows are counted as ``replaced`` (``confirmed`` when both agree);
* a row whose ``labels`` is null or empty is rejected (a row of the table
  exists to give labels);
* a row whose id no valid document has is rejected (it would label nothing);
* a row with a path that is not a root-to-leaf path of the taxonomy is
  rejected, with the nearest path when one is close (a typo would otherwise
  become a new category);
* parse errors and an id given by several rows (every copy: no copy is more
  authoritative) are decided before, by :func:`pcem_spark.io.rejects.split_rejects`.

Only the labels table's rows (a labeller's work: thousands, not billions) are
broadcast; the documents are never shuffled, and keep their partitioning and
order, so a merged training equals one on a corpus with the labels written in.
"""

from __future__ import annotations

import logging
from typing import Dict, Tuple

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.label_columns import has_label_paths, label_paths_col
from pcem_spark.io.json_lines import RECORD_CHARS

__all__ = ["merge_labels", "MERGE_RULE"]

log = logging.getLogger(__name__)

MERGE_RULE = "the labels table wins: its paths replace a document's own labels"

_FILE_PATHS = "_file_paths"
_DOC_PATHS = "_doc_paths"
_HINTED_PATHS = 1000  # distinct unknown paths for which the reject names the nearest known path


def merge_labels(
    docs: DataFrame, labels: DataFrame, taxonomy: Taxonomy, source: str
) -> Tuple[DataFrame, DataFrame, Dict[str, object]]:
    """Give the documents the label paths of a labels table, by id.

    Parameters
    ----------
    docs : the valid documents (``id`` unique, ``labels`` one path
        (array<string>) or several (array<array<string>>), null = unlabelled,
        any other columns).
    labels : the valid rows of the labels table (``id`` unique, ``labels`` in
        either shape, optionally ``source_file``), as
        :func:`pcem_spark.io.rejects.split_rejects` returns them.
    taxonomy : the paths a label may name.
    source : the labels table's path: the rejects' ``source_file`` when ``labels`` has none.

    Returns
    -------
    (merged, rejects, counts): ``merged`` has the columns of ``docs`` in their
    order, rows in the same partitions and order, ``labels`` from the table
    where it has a row for the id (several paths per document when either
    side has a document with several); ``rejects`` has :data:`REJECT_SCHEMA`;
    ``counts`` has ``merged``, ``added`` (documents without labels before),
    ``replaced``, ``confirmed``, ``rejected`` and ``rejected_by_reason``.
    Only the labels table's rows are joined to the documents (broadcast), and
    only counts reach the driver.
    """
    spark = docs.sparkSession
    file_name = F.col("source_file") if "source_file" in labels.columns else F.lit(source)
    table = labels.select("id", label_paths_col(labels).alias(_FILE_PATHS), file_name.alias("_source_file")).cache()
    known = spark.createDataFrame([(taxonomy.real_path(j),) for j in range(taxonomy.n_paths)], "_known array<string>")
    # The first unknown path of each row (the smallest, so the reason is the same on every run).
    each_path = table.select("id", F.explode_outer(_FILE_PATHS).alias("_path")).where(F.col("_path").isNotNull())
    unknown = (
        each_path.join(F.broadcast(known), F.col("_path") == F.col("_known"), "left_anti")
        .groupBy("id")
        .agg(F.min("_path").alias("_unknown_path"))
        .cache()
    )
    hints = _nearest_paths(spark, unknown, taxonomy)
    # The documents the table names: the only rows of docs that reach a join's output here.
    doc_paths = label_paths_col(docs).alias(_DOC_PATHS)
    named = (
        docs.select("id", doc_paths, F.lit(True).alias("_in_docs"))
        .join(F.broadcast(table.select("id")), "id", "inner")
        .cache()
    )
    checked = (
        table.join(named, "id", "left")
        .join(unknown, "id", "left")
        .join(F.broadcast(hints), F.col("_unknown_path") == F.col("_hinted_path"), "left")
        .withColumn("_in_docs", F.coalesce(F.col("_in_docs"), F.lit(False)))
    )
    reason = (
        F.when(
            F.col(_FILE_PATHS).isNull() | (F.size(_FILE_PATHS) == 0) | F.exists(_FILE_PATHS, lambda p: F.size(p) == 0),
            F.lit("field 'labels' is missing or empty: a row of the labels table gives its id's label path(s)"),
        )
        .when(
            ~F.col("_in_docs"),
            F.lit("id is not the id of a valid document of --docs: the row would label nothing"),
        )
        .when(
            F.col("_unknown_path").isNotNull(),
            F.concat(
                F.lit("label path "),
                F.to_json("_unknown_path"),
                F.lit(" is not a path of the taxonomy"),
                F.coalesce(F.concat(F.lit("; did you mean "), F.to_json("_hint"), F.lit("?")), F.lit("")),
            ),
        )
    )
    verdicts = checked.withColumn("_reason", reason).cache()
    accepted = verdicts.where(F.col("_reason").isNull())
    # The record as the table wrote it: one path unwrapped (several paths, and a nested one-path row, stay lists).
    as_written = F.col(_FILE_PATHS) if has_label_paths(labels) else F.try_element_at(_FILE_PATHS, F.lit(1))
    rejects = verdicts.where(F.col("_reason").isNotNull()).select(
        "id",
        F.col("_source_file").alias("source_file"),
        F.col("_reason").alias("reason"),
        F.substring(F.to_json(F.struct("id", as_written.alias("labels"))), 1, RECORD_CHARS).alias("record"),
        F.lit(None).cast("long").alias("line"),
    )
    same = F.sort_array(F.col(_FILE_PATHS)) == F.sort_array(F.col(_DOC_PATHS))
    row = accepted.agg(
        F.count(F.lit(1)),
        F.count(F.when(F.col(_DOC_PATHS).isNull(), 1)),
        F.count(F.when(F.col(_DOC_PATHS).isNotNull() & ~same, 1)),
        F.count(F.when(F.col(_DOC_PATHS).isNotNull() & same, 1)),
        F.max(F.size(_FILE_PATHS)),
    ).first()
    # Counts by reason: a handful of rows reach the driver, never a document.
    by_reason = {
        r["reason"]: int(r["n"]) for r in rejects.groupBy("reason").agg(F.count(F.lit(1)).alias("n")).collect()
    }
    # The verdicts are cached and counted now: what they were computed from is no longer needed.
    for frame in (table, unknown, named):
        frame.unpersist()
    counts = {
        "rule": MERGE_RULE,
        "merged": int(row[0]),
        "added": int(row[1]),
        "replaced": int(row[2]),
        "confirmed": int(row[3]),
        "rejected": sum(by_reason.values()),
        "rejected_by_reason": by_reason,
    }
    several = has_label_paths(docs) or (row[4] or 0) > 1
    given = accepted.select("id", F.col(_FILE_PATHS))
    joined = docs.join(F.broadcast(given), "id", "left")
    if several:
        merged_labels = F.coalesce(F.col(_FILE_PATHS), label_paths_col(docs))
    else:
        merged_labels = F.coalesce(F.try_element_at(_FILE_PATHS, F.lit(1)), F.col("labels"))
    merged = joined.select(*[merged_labels.alias("labels") if c == "labels" else F.col(c) for c in docs.columns])
    if counts["replaced"]:
        log.warning("%s: %d document(s) had other labels in --docs; %s", source, counts["replaced"], MERGE_RULE)
    return merged, rejects, counts


def _nearest_paths(spark, unknown: DataFrame, taxonomy: Taxonomy) -> DataFrame:
    """(``_hinted_path``, ``_hint``): for the distinct unknown paths (at most :data:`_HINTED_PATHS`), the nearest
    path of the taxonomy when one is close (:meth:`Taxonomy.suggest_path`); only these paths reach the driver."""
    rows = []
    # Distinct wrong paths only (at most _HINTED_PATHS), never the labels table's rows.
    for r in unknown.select("_unknown_path").distinct().limit(_HINTED_PATHS).collect():
        guess = taxonomy.suggest_path(list(r[0]))
        if guess:
            rows.append((list(r[0]), list(guess)))
    return spark.createDataFrame(rows, "_hinted_path array<string>, _hint array<string>")
