"""Per-row checks of a Parquet documents table that its column types do not guarantee, as Spark SQL expressions.

Each function returns a string Column: why the row's field is unusable, or null when it is fine -- in the same
words as the JSON Lines parser's rejects (:mod:`pcem_spark.io.json_lines`), so a reject reads the same whatever
the input's format. :func:`pcem_spark.io.documents.read_documents` puts the first reason of a row into its
``_reject_reason``; no Python runs per row.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

__all__ = ["labels_reason", "label_paths_reason", "similarities_reason"]


def _json_quoted(col: Column) -> Column:
    """A string column as a JSON literal (same form as :func:`_quoted` in the JSON parser)."""
    return F.regexp_extract(F.to_json(F.array(col)), r"^\[(.*)\]$", 1)


def _path_reason(path: Column, where: Column) -> Column:
    """Why one Parquet label path is unusable (null if it is fine); ``where`` (a string column) names it."""
    # (?U): Unicode whitespace, as Python's str.isspace in the JSON parser.
    bad = F.transform(path, lambda x: x.isNull() | (x == "") | x.rlike(r"(?U)^\s|\s$"))
    pos = F.array_position(bad, True)  # 1-based; 0 when every label is fine
    label = F.element_at(path, pos.cast("int"))
    prefix = F.concat(where, F.lit("["), (pos - 1).cast("string"), F.lit("]: "))
    return F.when(
        pos > 0,
        F.concat(
            prefix,
            F.when(label.isNull(), F.lit("expected a non-empty string, got null"))
            .when(label == "", F.lit("expected a non-empty string, got an empty string"))
            .otherwise(F.concat(_json_quoted(label), F.lit(" has leading or trailing whitespace"))),
        ),
    )


_EMPTY_LABELS = "field 'labels': expected a non-empty array of strings (null for unlabelled), got an empty array"


def labels_reason(labels: Column) -> Column:
    """Why a Parquet ``labels`` path (array<string>) is unusable (null if it is fine); same wording as for JSON."""
    return F.when(F.size(labels) == 0, F.lit(_EMPTY_LABELS)).otherwise(_path_reason(labels, F.lit("labels")))


def label_paths_reason(labels: Column) -> Column:
    """Why a Parquet ``labels`` list of paths (array<array<string>>) is unusable; same wording as for JSON."""
    where = F.transform(labels, lambda _, i: F.concat(F.lit("labels["), i.cast("string"), F.lit("]")))
    reasons = F.zip_with(
        labels,
        where,
        lambda p, w: (
            F.when(p.isNull(), F.concat(w, F.lit(": expected an array of strings (a path), got null")))
            .when(
                F.size(p) == 0,
                F.concat(w, F.lit(": expected a non-empty array of strings (a path), got an empty array")),
            )
            .otherwise(_path_reason(p, w))
        ),
    )
    first_bad = F.try_element_at(F.filter(reasons, lambda r: r.isNotNull()), F.lit(1))
    # A path listed twice: its first repeat, named with the copy it repeats.
    keys = F.transform(labels, lambda p: F.to_json(p))
    repeat = F.try_element_at(
        F.filter(
            F.transform(keys, lambda k, i: F.struct(i.alias("i"), F.array_position(keys, k).alias("first"))),
            lambda e: e["first"] - 1 != e["i"],
        ),
        F.lit(1),
    )
    return (
        F.when(F.size(labels) == 0, F.lit(_EMPTY_LABELS))
        .when(first_bad.isNotNull(), first_bad)
        .when(
            repeat.isNotNull(),
            F.concat(
                F.lit("labels["),
                repeat["i"].cast("string"),
                F.lit("]: repeats the path of labels["),
                (repeat["first"] - 1).cast("string"),
                F.lit("]"),
            ),
        )
    )


def similarities_reason(sims: Column) -> Column:
    """Why a Parquet ``similarities`` map is unusable: a null, NaN or infinite score."""
    bad = F.filter(
        F.map_entries(sims), lambda e: e["value"].isNull() | F.isnan(e["value"]) | (F.abs(e["value"]) == float("inf"))
    )
    first = F.element_at(bad, 1)
    return F.when(
        F.size(bad) > 0,
        F.concat(
            F.lit("similarities["),
            _json_quoted(first["key"]),
            F.lit("]: expected a finite number, got "),
            F.coalesce(first["value"].cast("string"), F.lit("null")),
        ),
    )
