"""Label paths against a taxonomy on DataFrames: every labelled path must be one of the tree's,
a taxonomy can be inferred from the paths, and feature vectors must have the model's size."""

from __future__ import annotations

import logging
from typing import Optional

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pcem_spark.core.taxonomy import Taxonomy, TaxonomyError
from pcem_spark.engine.label_columns import one_path_per_row
from pcem_spark.errors import InputError

__all__ = ["vector_size", "check_vector_size", "check_label_paths", "infer_taxonomy"]

log = logging.getLogger(__name__)


def vector_size(df: DataFrame, features_col: str) -> Optional[int]:
    """Length of the vectors in ``features_col`` from the column's ML metadata (None if absent)."""
    meta = df.schema[features_col].metadata.get("ml_attr", {})
    n = meta.get("num_attrs")
    if n is None and meta.get("attrs"):
        n = sum(len(v) for v in meta["attrs"].values())
    return None if n is None else int(n)


def check_vector_size(df: DataFrame, features_col: str, expected: int) -> None:
    """Refuse a features column whose ML metadata says another vector length than the model's vocabulary."""
    n = vector_size(df, features_col)
    if n is not None and n != expected:
        raise InputError(
            f"features column {features_col!r} holds vectors of length {n}, the model's vocabulary "
            f"has {expected} terms: featurise with the same CountVectorizer model"
        )


def check_label_paths(df: DataFrame, taxonomy: Taxonomy, labels_col: str = "labels", max_errors: int = 10) -> None:
    """Raise a :class:`TaxonomyError` naming label paths that are not paths of the tree (pcem_spark.model.label_checks).

    Only the distinct wrong label paths (with one example id and a count)
    reach the driver, never the documents.
    """
    from pcem_spark.model.label_checks import require_known_label_paths

    require_known_label_paths(df, taxonomy, labels_col, max_listed=max_errors)


def infer_taxonomy(df: DataFrame, labels_col: str = "labels", max_paths: int = 100000) -> Taxonomy:
    """The tree implied by the distinct label paths of ``df`` (only those reach the driver)."""
    df = one_path_per_row(df, labels_col)
    paths = [
        r[0]
        for r in df.where(F.col(labels_col).isNotNull()).select(labels_col).distinct().limit(max_paths + 1).collect()
    ]
    if len(paths) > max_paths:
        raise TaxonomyError(f"more than {max_paths:,} distinct label paths: pass the taxonomy as a file")
    from pcem_spark.evaluation.metrics import OUT_OF_TAXONOMY_LABEL

    if any(OUT_OF_TAXONOMY_LABEL in p for p in paths):
        raise TaxonomyError(
            f"labels [{OUT_OF_TAXONOMY_LABEL!r}] mark a test document out of the taxonomy (pcem evaluate); "
            "training learns categories only: give such documents null labels, or leave them out"
        )
    tax = Taxonomy.from_label_paths(paths)
    log.info("taxonomy inferred from %d distinct label paths: %r", len(paths), tax)
    return tax
