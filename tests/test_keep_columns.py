"""Predictions that keep their context: input columns copied through, partitioned output."""

from __future__ import annotations

import os

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from test_abstain import FS, SETTINGS, TAX, _corpus  # noqa: E402

from pcem_spark.errors import InputError
from pcem_spark.ml import train
from pcem_spark.model.schema import LEVEL1, PREDICTION_SCHEMA, check_output_columns
from pcem_spark.model.settings import ModelSettings


@pytest.fixture(scope="module")
def model(spark):
    return train(_corpus(spark), TAX, FS, ModelSettings(method="pcnb", **SETTINGS))[0]


def _with_context(spark):
    docs = _corpus(spark, seed=1, all_labeled=True)
    return docs.withColumn("url", F.concat(F.lit("http://x/"), F.col("id"))).withColumn(
        "crawl_date", F.when(F.col("id").endswith("1"), F.lit("2026-11-01")).otherwise(F.lit("2026-11-02"))
    )


def test_check_output_columns_names_the_clash():
    check_output_columns(["url", "crawl_date"], "crawl_date", 0.0, 0)
    check_output_columns([], LEVEL1, 0.0, 0)
    for keep, part, needle in [
        (["path"], "", "'path' clashes"),
        (["url", "top_paths"], "", "'top_paths' clashes"),
        (["text"], "", "'text' clashes"),
        (["split"], "", "'split' clashes"),
        (["url", "url"], "", "named twice"),
        (["url"], "crawl_date", "expected a kept column"),
        ([" url"], "", "not a column name"),
    ]:
        with pytest.raises(InputError, match=needle):
            check_output_columns(keep, part, 0.5, 2 if "top_paths" in keep else 0)


def test_transform_copies_kept_columns_without_changing_predictions(spark, model):
    docs = _with_context(spark)
    kept = model.transform(docs, keep_columns=["url", "crawl_date"])
    plain = model.transform(docs)
    assert kept.columns == PREDICTION_SCHEMA.names + ["url", "crawl_date"]
    assert_df_equality(kept.select(*PREDICTION_SCHEMA.names), plain, ignore_row_order=True)
    expected = docs.select("id", "url", "crawl_date")
    assert_df_equality(kept.select("id", "url", "crawl_date"), expected, ignore_row_order=True)
    with pytest.raises(InputError, match="'nope' not found"):
        model.transform(docs, keep_columns=["nope"])


@pytest.mark.slow
def test_cli_keep_columns_and_partition_by(spark, model, tmp_path):
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker

    model_dir, docs_dir = str(tmp_path / "model"), str(tmp_path / "docs")
    model.save(model_dir)
    docs = _with_context(spark)
    bad = spark.createDataFrame([("", "launch orbit", None)], "id string, text string, labels array<string>")
    bad = bad.withColumn("url", F.lit("http://x/bad")).withColumn("crawl_date", F.lit("2026-11-02"))
    docs.unionByName(bad).write.parquet(docs_dir)
    n_docs = docs.count() + 1
    out = str(tmp_path / "pred")
    argv = ["predict", "--model", model_dir, "--docs", docs_dir, "--output", out]
    assert main(argv + ["--keep-columns", "url,crawl_date", "--partition-by", "crawl_date"]) == 0
    assert sorted(n for n in os.listdir(out) if n.startswith("crawl_date=")) == [
        "crawl_date=2026-11-01",
        "crawl_date=2026-11-02",
    ]
    pred = spark.read.parquet(out)
    marker = read_marker(spark, out)
    rejects = spark.read.parquet(out + "_rejects")
    assert pred.count() + rejects.count() == n_docs == marker["input"]["rows_read"]
    assert marker["keep_columns"] == ["url", "crawl_date"] and marker["partition_by"] == "crawl_date"
    # Read back from the folder names, Spark infers the partition column's type: a date-like string is a date.
    assert dict(pred.dtypes)["crawl_date"] == "date"
    assert_df_equality(
        pred.select("id", "url", F.col("crawl_date").cast("string").alias("crawl_date")),
        docs.select("id", "url", "crawl_date"),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    by_level = str(tmp_path / "by_level")
    assert main(argv[:-1] + [by_level, "--set", "predict.partition_by=level1"]) == 0
    folders = {n for n in os.listdir(by_level) if n.startswith("level1=")}
    assert folders and folders <= {f"level1={n}" for n in ("sci", "rec", "misc")}
    assert spark.read.parquet(by_level).where(F.col("level1") != F.element_at("path", 1)).count() == 0


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--keep-columns", "path"], "--keep-columns: column 'path' clashes"),
        (["--keep-columns", "url", "--partition-by", "day"], "--partition-by = 'day'"),
        (["--set", "predict.partition_by=day"], "predict.partition_by = 'day'"),
    ],
)
def test_cli_refuses_bad_output_columns_before_spark(tmp_path, capsys, flags, needle):
    from pcem_spark.cli import main

    assert main(["predict", "--model", "m", "--docs", "d", "--output", str(tmp_path / "p")] + flags) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.slow
def test_cli_unknown_kept_column_and_json_input_are_bad_input(spark, model, tmp_path, capsys):
    from pcem_spark.cli import main

    model_dir, docs_dir = str(tmp_path / "model"), str(tmp_path / "docs")
    model.save(model_dir)
    _with_context(spark).write.parquet(docs_dir)
    argv = ["predict", "--model", model_dir, "--docs", docs_dir, "--output", str(tmp_path / "p")]
    assert main(argv + ["--keep-columns", "host"]) == 2
    err = capsys.readouterr().err
    assert "column 'host' (to keep in the output) is not in the documents" in err and "'url'" in err
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"id": "a", "text": "launch orbit"}\n')
    argv[4] = str(jsonl)
    assert main(argv + ["--keep-columns", "url"]) == 2
    assert "needs a Parquet documents table" in capsys.readouterr().err
