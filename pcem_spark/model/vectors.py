"""A model's document vectors: which column it was fitted with, and the documents' vectors checked against it.

A model of the combined or discriminative family fitted on documents with vectors (``features.embedding``)
scores every document with its vector beside its words (:func:`pcem_spark.core.logistic.pooled_scores`), so
prediction needs vectors of the same encoder: the same column, the same dimension -- and, when both the model
and the run name it (``features.embedding_model``), the same encoder name. A mismatch is an
:class:`~pcem_spark.errors.InputError` (exit 2) that says both sides; a single bad row is a reject
(:func:`pcem_spark.io.rejects.split_rejects`).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from pyspark.sql import Column, DataFrame

from pcem_spark.errors import InputError
from pcem_spark.io.embeddings import CHECKED_ROWS, EMBEDDING_COL, as_float_array, usual_dimension

__all__ = ["VectorColumn", "vector_column", "check_encoder", "check_not_kept", "prediction_vectors"]


class VectorColumn(NamedTuple):
    """What a model's vectors are: the input column (``features.embedding`` resolved), D, the encoder's name."""

    name: str
    dimension: int
    encoder: str = ""

    def describe(self) -> str:
        by = f", from encoder {self.encoder!r}" if self.encoder else ""
        return f"column {self.name!r} of {self.dimension} values{by}"


def vector_column(model) -> Optional[VectorColumn]:
    """The vectors ``model`` (a :class:`~pcem_spark.model.path_model.PathModel`) scores with, None when it uses
    none (a generative model, or one fitted without vectors: its predictions never read any)."""
    linear = getattr(model, "linear", None)
    if linear is None or not linear.embedding_dim:
        return None
    settings = model.feature_settings
    return VectorColumn(settings.embedding, int(linear.embedding_dim), settings.embedding_model or "")


def check_encoder(model_vectors: Optional[VectorColumn], given: str, where: str = "features.embedding_model") -> None:
    """InputError when the run names an encoder (``given``) other than the one the model's vectors came from."""
    if model_vectors is None or not given or not model_vectors.encoder or given == model_vectors.encoder:
        return
    raise InputError(
        f"{where} = {given!r}, but the model was fitted on vectors from encoder {model_vectors.encoder!r} "
        f"({model_vectors.describe()}): embed the documents with the model's encoder, or train a model on these"
    )


def prediction_vectors(df: DataFrame, vectors: VectorColumn) -> Column:
    """The documents' vectors for a model that uses them, as array<float> named ``embedding``.

    ``df`` has the column read by :func:`pcem_spark.io.documents.read_documents` (``embedding``) or the
    model's own column name; InputError when it has neither or when most vectors are of another length.
    """
    name = EMBEDDING_COL if EMBEDDING_COL in df.columns else vectors.name
    if name not in df.columns:
        raise InputError(
            f"the model scores documents with their vectors ({vectors.describe()}), and the documents have no "
            f"column {vectors.name!r} (their columns: {sorted(df.columns)})"
        )
    column = as_float_array(df, name)
    # Read from the first rows only (a limit: no pass over a crawl); a whole input from another encoder shows
    # there, and a single row of another length was a reject when the documents were read.
    found = usual_dimension(df.limit(CHECKED_ROWS).select(column.alias("v")), "v")
    if found is not None and found != vectors.dimension:
        raise InputError(
            f"the documents' vectors (column {name!r}) have {found} values; the model was fitted on "
            f"{vectors.describe()}: embed the documents with the model's encoder"
        )
    return column.alias(EMBEDDING_COL)


def check_not_kept(model_vectors: Optional[VectorColumn], keep, where: str) -> None:
    """InputError when the columns to copy into the predictions (``keep``) hold the vectors the model reads:
    the model reads them as ``embedding``, and a kept copy would be a second column of that name."""
    if model_vectors is None:
        return
    both = sorted({model_vectors.name, EMBEDDING_COL} & set(keep))
    if both:
        raise InputError(
            f"{where} {both}: the documents' vectors are read by the model, not copied into the predictions"
        )
