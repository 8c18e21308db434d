"""The embedding column of a documents table: which column, which types, and every bad row's reason."""

import math

import pytest
from pyspark.ml.linalg import Vectors, VectorUDT
from pyspark.sql import types as T

from pcem_spark.io.embeddings import (
    EmbeddingColumnError,
    as_float_array,
    check_embedding_type,
    embedding_reason,
    resolve_embedding_column,
    usual_dimension,
)


def test_auto_takes_a_column_named_embedding_and_a_named_column_must_exist():
    assert resolve_embedding_column(["id", "text", "embedding"], "auto") == "embedding"
    assert resolve_embedding_column(["id", "text"], "auto") is None
    assert resolve_embedding_column(["id", "text", "embedding"], "none") is None
    assert resolve_embedding_column(["id", "text", "e5"], "e5") == "e5"
    with pytest.raises(EmbeddingColumnError, match=r"features.embedding = 'e5'.*\['id', 'text'\]"):
        resolve_embedding_column(["id", "text"], "e5")


@pytest.mark.parametrize(
    "dtype, ok",
    [
        (T.ArrayType(T.FloatType()), True),
        (T.ArrayType(T.DoubleType()), True),
        (VectorUDT(), True),
        (T.ArrayType(T.StringType()), False),
        (T.StringType(), False),
        (T.ArrayType(T.IntegerType()), False),
    ],
)
def test_only_vector_types_are_embeddings(dtype, ok):
    if ok:
        check_embedding_type("embedding", dtype)
    else:
        with pytest.raises(EmbeddingColumnError, match=r"column 'embedding' has type .* expected array<float>"):
            check_embedding_type("embedding", dtype)


def test_every_bad_vector_is_named_with_its_position_and_what_was_expected(spark):
    rows = [
        ("ok", [0.5, -1.0, 2.0]),
        ("missing", None),
        ("short", [1.0, 2.0]),
        ("nan", [1.0, math.nan, 2.0]),
        ("inf", [1.0, 2.0, -math.inf]),
        ("null value", [None, 2.0, 3.0]),
    ]
    df = spark.createDataFrame(rows, "id string, embedding array<double>")
    got = {r["id"]: r["why"] for r in df.select("id", embedding_reason(df["embedding"], 3).alias("why")).collect()}
    assert got == {
        "ok": None,
        "missing": "embedding: expected a vector of 3 numbers, got null",
        "short": "embedding: expected 3 values (the dimension of the other vectors), got 2",
        "nan": "embedding[1]: expected a finite number, got NaN",
        "inf": "embedding[2]: expected a finite number, got -Infinity",
        "null value": "embedding[0]: expected a finite number, got null",
    }
    assert usual_dimension(df, "embedding") == 3  # 4 rows of 3 values against 1 of 2


def test_a_vector_column_reads_as_the_same_floats(spark):
    df = spark.createDataFrame(
        [("a", Vectors.dense([0.25, -1.5])), ("b", Vectors.sparse(2, {1: 3.0}))],
        T.StructType([T.StructField("id", T.StringType()), T.StructField("v", VectorUDT())]),
    )
    got = {r["id"]: r["x"] for r in df.select("id", as_float_array(df, "v").alias("x")).collect()}
    assert got == {"a": [0.25, -1.5], "b": [0.0, 3.0]}
    assert usual_dimension(df.select(as_float_array(df, "v").alias("v")), "v") == 2
