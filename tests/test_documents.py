import gzip
import json

import pytest
from chispa import assert_df_equality
from pyspark.sql import types as T

from pcem_spark.io.documents import DocumentsError, read_documents
from pcem_spark.io.rejects import split_rejects


def _write_jsonl(path, lines, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wt", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line if isinstance(line, str) else json.dumps(line))
            fh.write("\n")


def test_jsonl_gz_is_read_into_the_documents_table(spark, tmp_path):
    path = str(tmp_path / "docs.jsonl.gz")
    _write_jsonl(
        path,
        [
            {"id": "a", "text": "hello world", "labels": ["x", "x1"], "split": "train"},
            {"id": "b", "text": "no labels here", "labels": None},
        ],
        gz=True,
    )
    good, rejects = split_rejects(read_documents(spark, path))
    good = good.drop("similarities")
    expected = spark.createDataFrame(
        [("a", "hello world", ["x", "x1"], "train"), ("b", "no labels here", None, None)],
        T.StructType(
            [
                T.StructField("id", T.StringType()),
                T.StructField("text", T.StringType()),
                T.StructField("labels", T.ArrayType(T.StringType())),
                T.StructField("split", T.StringType()),
            ]
        ),
    )
    assert_df_equality(good, expected, ignore_row_order=True, ignore_nullable=True)
    assert rejects.count() == 0


def test_bad_rows_go_to_rejects_with_a_reason_and_nothing_is_dropped(spark, tmp_path):
    path = str(tmp_path / "docs.jsonl")
    _write_jsonl(
        path,
        [
            {"id": "ok", "text": "fine", "labels": ["x", "x1"]},
            {"id": "dup", "text": "first"},
            {"id": "dup", "text": "second"},
            {"text": "who am i"},
            {"id": "notext", "labels": ["x", "x1"]},
            '{"id": "broken", "text": ',
            {"id": "badlabels", "text": "t", "labels": "x/x1"},
        ],
    )
    raw = read_documents(spark, path)
    good, rejects = split_rejects(raw)
    assert [r["id"] for r in good.collect()] == ["ok"]
    reasons = {(r["id"], r["reason"].split(":")[0]) for r in rejects.collect()}
    assert ("dup", "duplicate id") in reasons
    assert (None, "field 'id' is missing or empty") in reasons
    assert ("notext", "field 'text' is missing (null)") in reasons
    assert ("badlabels", "field 'labels'") in reasons  # labels of the wrong type: never coerced
    (broken,) = [r for r in rejects.collect() if r["reason"].startswith("invalid JSON")]
    assert broken["record"] == '{"id": "broken", "text": ' and broken["line"] == 6
    assert all(r["source_file"].endswith("docs.jsonl") for r in rejects.collect())
    # Every input row is either valid or rejected.
    assert good.count() + rejects.count() == raw.count() == 7


def test_parquet_with_wrong_column_type_is_a_clear_error(spark, tmp_path):
    path = str(tmp_path / "bad.parquet")
    spark.createDataFrame([("a", "t", "x")], "id string, text string, labels string").write.parquet(path)
    with pytest.raises(DocumentsError, match=r"bad.parquet: column 'labels' has type string, expected array<string>"):
        read_documents(spark, path)


def test_parquet_without_text_column_is_a_clear_error(spark, tmp_path):
    path = str(tmp_path / "notext.parquet")
    spark.createDataFrame([("a",)], "id string").write.parquet(path)
    with pytest.raises(DocumentsError, match=r"column 'text' is missing"):
        read_documents(spark, path)


def test_missing_input_is_a_clear_error(spark, tmp_path):
    with pytest.raises(DocumentsError, match="does not exist"):
        read_documents(spark, str(tmp_path / "nothing.jsonl"))


def test_parquet_without_optional_columns_gets_nulls(spark, tmp_path):
    path = str(tmp_path / "min.parquet")
    spark.createDataFrame([("a", "some text")], "id string, text string").write.parquet(path)
    good, rejects = split_rejects(read_documents(spark, path))
    row = good.first()
    assert row["id"] == "a" and row["labels"] is None and row["split"] is None
    assert rejects.count() == 0
