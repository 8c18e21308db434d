"""Training, the predictions table, persistence and evaluation on real SparkSessions."""

import numpy as np
import pytest
from chispa import assert_df_equality
from pyspark.sql import types as T

from pcem_spark.core.taxonomy import Taxonomy, TaxonomyError
from pcem_spark.engine.features import FeatureSettings
from pcem_spark.evaluation.metrics import evaluate_predictions, f1_scores
from pcem_spark.ml import train
from pcem_spark.model.labels import check_label_paths
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.schema import PREDICTION_SCHEMA
from pcem_spark.model.settings import ModelSettings

TAX = Taxonomy({"ROOT": ["sport", "tech"], "sport": ["football", "tennis"], "tech": ["phones", "chips"]})
WORDS = {
    "football": "goal striker penalty league referee offside",
    "tennis": "serve racket wimbledon volley deuce baseline",
    "phones": "android iphone screen battery camera handset",
    "chips": "silicon transistor wafer nanometer fab lithography",
}
DOC_SCHEMA = "id string, text string, labels array<string>"


def _corpus(spark, n_per_leaf=12, n_labeled=2, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for leaf, words in WORDS.items():
        parent = "sport" if leaf in ("football", "tennis") else "tech"
        vocab = words.split()
        for i in range(n_per_leaf):
            text = " ".join(rng.choice(vocab, size=8)) + " the and of"
            rows.append((f"{leaf}-{i}", text, [parent, leaf] if i < n_labeled else None))
    return spark.createDataFrame(rows, DOC_SCHEMA)


FS = FeatureSettings(min_df=1, max_df=1.0, vocab_size=0)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pcnb", "pcem", "flat-nb", "flat-em"])
def test_train_and_predict_recovers_the_topics(spark, method):
    docs = _corpus(spark)
    model, result = train(docs, TAX, FS, ModelSettings(method=method, max_iter=20))
    assert result.n_labeled == 8 and result.n_unlabeled == 40
    assert (result.n_iter > 0) == method.endswith("em")
    truth = _corpus(spark, n_labeled=12)
    pred = model.transform(truth)
    m = evaluate_predictions(pred, TAX)
    assert m["micro_f1"] > 0.95
    if method.endswith("em"):
        hist = result.loglik_history
        assert all(b >= a - 1e-6 * abs(a) for a, b in zip(hist, hist[1:])), hist


@pytest.mark.slow
def test_predictions_table_schema_and_one_row_per_document(spark):
    docs = _corpus(spark)
    # The generative family: a document with no known word gets its prior-only prediction (checked below).
    model, _ = train(docs, TAX, FS, ModelSettings(method="pcnb", family="generative"))
    new = spark.createDataFrame(
        [
            ("n1", "goal striker penalty", ["sport", "football"]),
            ("n2", "zzz unknown words only", None),
            ("n3", "", None),
        ],
        DOC_SCHEMA,
    )
    pred = model.transform(new)
    assert [(f.name, f.dataType.simpleString()) for f in pred.schema.fields] == [
        (f.name, f.dataType.simpleString()) for f in PREDICTION_SCHEMA.fields
    ]
    assert not any(f.nullable for f in pred.schema.fields if f.name in ("path", "leaf", "probability"))
    rows = {r["id"]: r for r in pred.collect()}
    assert sorted(rows) == ["n1", "n2", "n3"]
    assert rows["n1"]["path"] == ["sport", "football"] and rows["n1"]["leaf"] == "football"
    assert rows["n1"]["labels"] == ["sport", "football"]
    # No known word: the prior-only prediction, identical for both documents.
    best = int(np.argmax(model.log_prior))
    prior_prob = float(np.exp(model.log_prior[best]))
    for doc in ("n2", "n3"):
        assert rows[doc]["path"] == TAX.real_path(best)
        assert rows[doc]["probability"] == pytest.approx(prior_prob, rel=1e-9)
        assert rows[doc]["labels"] is None
    expected = spark.createDataFrame(
        [("n1", ["sport", "football"], "football", ["sport", "football"])],
        "id string, path array<string>, leaf string, labels array<string>",
    )
    assert_df_equality(pred.where("id = 'n1'").drop("probability", "in_taxonomy"), expected, ignore_nullable=True)


@pytest.mark.slow
def test_predictions_hide_dummy_nodes(spark):
    tax = Taxonomy({"ROOT": ["a", "b"], "a": ["a1", "a2"]})
    docs = spark.createDataFrame(
        [
            ("1", "apple apple pear", ["a", "a1"]),
            ("2", "kiwi kiwi mango", ["a", "a2"]),
            ("3", "bolt nut screw", ["b"]),
            ("4", "nut bolt screw screw", None),
        ],
        DOC_SCHEMA,
    )
    model, _ = train(docs, tax, FS, ModelSettings(method="pcem", max_iter=5))
    rows = {r["id"]: r for r in model.transform(docs).collect()}
    assert rows["4"]["path"] == ["b"] and rows["4"]["leaf"] == "b"
    assert all("#dummy" not in n for r in rows.values() for n in r["path"])


@pytest.mark.slow
def test_model_save_load_roundtrip(spark, tmp_path):
    docs = _corpus(spark)
    model, _ = train(docs, TAX, FS, ModelSettings(method="pcem", max_iter=3))
    path = str(tmp_path / "model")
    model.save(path)
    with pytest.raises(Exception):
        model.save(path)  # no silent overwrite
    loaded = PathModel.load(path)
    assert loaded.taxonomy == TAX
    assert loaded.vocabulary == model.vocabulary
    np.testing.assert_array_equal(loaded.log_theta, model.log_theta)
    np.testing.assert_array_equal(loaded.log_prior, model.log_prior)
    assert loaded.model_settings == model.model_settings
    assert loaded.feature_settings == model.feature_settings
    assert_df_equality(loaded.transform(docs), model.transform(docs), ignore_row_order=True)


def test_invalid_label_path_names_the_document(spark):
    docs = spark.createDataFrame(
        [("good", "goal", ["sport", "football"]), ("bad-doc", "chip", ["sport", "chips"])], DOC_SCHEMA
    )
    with pytest.raises(TaxonomyError, match=r"document 'bad-doc'.*parent of 'chips' is 'tech', not 'sport'"):
        check_label_paths(docs, TAX)


def test_f1_scores_against_hand_computation():
    # Two nodes: A (tp 3, fp 1, fn 0) and B (tp 1, fp 0, fn 2); C never seen.
    m = f1_scores(np.array([3, 1, 0]), np.array([1, 0, 0]), np.array([0, 2, 0]))
    p, r = 4 / 5, 4 / 6
    assert m["micro_f1"] == pytest.approx(2 * p * r / (p + r))
    f_a, f_b = 2 * 3 / (6 + 1), 2 * 1 / (2 + 2)
    assert m["macro_f1"] == pytest.approx((f_a + f_b) / 2)


def test_evaluate_on_a_predictions_table(spark):
    schema = T.StructType(
        [
            T.StructField("id", T.StringType()),
            T.StructField("path", T.ArrayType(T.StringType())),
            T.StructField("labels", T.ArrayType(T.StringType())),
        ]
    )
    pred = spark.createDataFrame(
        [
            ("1", ["sport", "football"], ["sport", "football"]),
            ("2", ["sport", "tennis"], ["sport", "football"]),
            ("3", ["tech", "chips"], ["sport", "tennis"]),
            ("4", ["tech", "phones"], None),
        ],
        schema,
    )
    m = evaluate_predictions(pred, TAX)
    assert m["n_documents"] == 3 and m["n_without_labels"] == 1
    assert m["level_accuracy"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(1 / 3)}
    pn = m["per_node"]
    assert pn["sport"] == {"tp": 2, "fp": 0, "fn": 1}
    assert pn["football"] == {"tp": 1, "fp": 0, "fn": 1}
    assert pn["tennis"] == {"tp": 0, "fp": 1, "fn": 1}
    assert pn["phones"] == {"tp": 0, "fp": 0, "fn": 0}
    # micro: tp = 3 (sport x2, football), predicted nodes 6, true nodes 6
    assert m["micro_f1"] == pytest.approx(3 / 6)
    # macro over nodes with any tp/fp/fn: sport, tech, football, tennis, chips
    f = [2 * 2 / (4 + 1), 0.0, 2 * 1 / (2 + 1), 0.0, 0.0]
    assert m["macro_f1"] == pytest.approx(np.mean(f))


@pytest.mark.slow
def test_pyspark_ml_estimator_in_a_pipeline_and_persistence(spark, tmp_path):
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.sql import functions as F

    from pcem_spark.ml.estimator import PathEM, PathEMModel

    docs = _corpus(spark).withColumn("extra", F.lit(7))
    est = PathEM(method="pcem", maxIter=5, minDF=1.0, maxDF=1.0, vocabSize=0, taxonomy=TAX.to_json())
    pipe_model = Pipeline(stages=[est]).fit(docs)
    out = pipe_model.transform(docs)
    assert out.columns == docs.columns + ["path", "leaf", "probability", "in_taxonomy"]
    assert out.count() == docs.count()
    path = str(tmp_path / "pipe")
    pipe_model.write().overwrite().save(path)
    reloaded = PipelineModel.load(path)
    assert isinstance(reloaded.stages[0], PathEMModel)
    assert reloaded.stages[0].getOrDefault("method") == "pcem"
    assert_df_equality(reloaded.transform(docs), out, ignore_row_order=True)


@pytest.mark.slow
def test_float32_parameters_give_the_same_model_within_float32_precision(spark):
    docs = _corpus(spark)
    m64, r64 = train(
        docs,
        TAX,
        FS,
        ModelSettings(method="pcem", max_iter=4, tol=0.0, unlabeled_weight=1.0, path_weight=1.0, family="generative"),
    )
    m32, r32 = train(
        docs,
        TAX,
        FS,
        ModelSettings(
            method="pcem",
            max_iter=4,
            tol=0.0,
            unlabeled_weight=1.0,
            path_weight=1.0,
            family="generative",
            parameter_dtype="float32",
        ),
    )
    np.testing.assert_allclose(m32.log_theta, m64.log_theta, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r32.loglik_history, r64.loglik_history, rtol=1e-5)


@pytest.mark.slow
def test_pyspark_ml_estimator_with_weak_supervision(spark):
    import json

    from pyspark.sql import functions as F

    from pcem_spark.core.taxonomy import TaxonomyError
    from pcem_spark.ml.estimator import PathEM

    docs = _corpus(spark).drop("labels")
    desc = {
        "sport": "sport games",
        "tech": "technology devices",
        "football": "goal striker league",
        "tennis": "racket wimbledon serve",
        "phones": "android iphone handset",
        "chips": "silicon wafer fab",
    }
    est = PathEM(
        method="pcem",
        maxIter=5,
        minDF=1.0,
        maxDF=1.0,
        vocabSize=0,
        taxonomy=TAX.to_json(),
        supervision="descriptions",
        descriptions=json.dumps(desc),
    )
    out = est.fit(docs).transform(docs)
    assert out.count() == docs.count()
    right = out.where(F.col("leaf") == F.split("id", "-")[0]).count()
    assert right >= 0.9 * docs.count()
    # precomputed similarities: a map column, no descriptions needed
    sims = docs.withColumn(
        "similarities",
        F.create_map(
            F.lit("sport"),
            F.when(F.col("id").rlike("^(football|tennis)"), 0.9).otherwise(0.1),
            F.lit("tech"),
            F.when(F.col("id").rlike("^(phones|chips)"), 0.9).otherwise(0.1),
            *[x for leaf in WORDS for x in (F.lit(leaf), F.when(F.col("id").startswith(leaf), 0.8).otherwise(0.05))],
        ),
    )
    out2 = (
        PathEM(maxIter=3, minDF=1.0, maxDF=1.0, vocabSize=0, taxonomy=TAX.to_json(), supervision="similarities")
        .fit(sims)
        .transform(sims)
    )
    assert out2.where(F.col("leaf") == F.split("id", "-")[0]).count() >= 0.9 * docs.count()
    with pytest.raises(TaxonomyError, match=r"no description for leaf node\(s\) \['chips'\]"):
        PathEM(
            taxonomy=TAX.to_json(),
            supervision="descriptions",
            descriptions=json.dumps({k: v for k, v in desc.items() if k != "chips"}),
        ).fit(docs)
    with pytest.raises(ValueError, match="needs the taxonomy Param"):
        PathEM(supervision="descriptions", descriptions=json.dumps(desc)).fit(docs)
    with pytest.raises(ValueError, match="column 'similarities'"):
        PathEM(taxonomy=TAX.to_json(), supervision="similarities").fit(docs)


# ------------------------------------------------ evaluate against another taxonomy (issue A)
AB_TSV = "ROOT\ta\nROOT\tb\na\ta1\nb\tb1\n"
PRED_COLS = "id string, path array<string>, leaf string, probability double, labels array<string>"


def _write_predictions(spark, path, rows):
    """A complete predictions table (with its _PCEM_COMPLETE marker) of (id, path, labels) rows."""
    from pcem_spark.io.outputs import atomic_output

    df = spark.createDataFrame([(i, p, p[-1] if p else None, 1.0, t) for i, p, t in rows], PRED_COLS)
    with atomic_output(spark, path, "predictions") as staged:
        df.write.parquet(staged.tmp)
    return path


def test_evaluate_refuses_predictions_of_another_taxonomy(spark, tmp_path, capsys):
    from pcem_spark.cli import main

    tax = tmp_path / "ab.tsv"
    tax.write_text(AB_TSV)
    pred = _write_predictions(spark, str(tmp_path / "pred"), [(f"d{i}", ["x", "x1"], ["x", "x1"]) for i in range(4)])
    out = tmp_path / "metrics.json"
    rc = main(["evaluate", "--predictions", pred, "--taxonomy", str(tax), "--output", str(out)])
    captured = capsys.readouterr()
    assert rc == 2, captured.err
    assert "4 of the 4" in captured.err and "'x'" in captured.err and "'x1'" in captured.err
    assert "predictions were made with another taxonomy / model?" in captured.err
    assert "micro-F1" not in captured.out and not out.exists()


def test_evaluate_warns_about_a_minority_of_unknown_rows_and_scores_the_rest_consistently(
    spark, tmp_path, capsys, caplog
):
    import json
    import logging

    from pcem_spark.cli import main

    tax = tmp_path / "ab.tsv"
    tax.write_text(AB_TSV)
    pred = _write_predictions(
        spark,
        str(tmp_path / "pred"),
        [
            ("1", ["a", "a1"], ["a", "a1"]),
            ("2", ["b", "b1"], ["b", "b1"]),
            ("3", ["a", "a1"], ["b", "b1"]),
            ("4", ["x", "x1"], ["x", "x1"]),  # true labels unknown: not scored at all
            ("5", ["x", "x1"], ["a", "a1"]),  # predicted path unknown: scored, wrong at every level
        ],
    )
    out = tmp_path / "metrics.json"
    with caplog.at_level(logging.WARNING):
        rc = main(["evaluate", "--predictions", pred, "--taxonomy", str(tax), "--output", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("2 of the 5" in w and "x1" in w for w in warnings), warnings
    m = json.loads(out.read_text())
    assert m["n_documents"] == 4 and m["n_unknown_labels"] == 1 and m["n_unknown_predictions"] == 1
    assert m["unknown_true_labels"] == ["x", "x1"] and m["unknown_nodes"] == ["x", "x1"]
    # Rows 1-3 and 5 only, for the accuracies and for the F1s alike.
    assert m["level_accuracy"] == {"1": pytest.approx(2 / 4), "2": pytest.approx(2 / 4)}
    # a, a1: tp 1 fp 1 fn 1; b, b1: tp 1 fp 0 fn 1
    assert m["micro_f1"] == pytest.approx(8 / (8 + 2 + 4))
    assert m["macro_f1"] == pytest.approx((0.5 + 0.5 + 2 / 3 + 2 / 3) / 4)
    assert "unknown to the taxonomy: 2 of 5" in captured.out


def test_level_accuracy_and_f1_count_the_same_rows(spark):
    tax = Taxonomy({"ROOT": ["a", "b"], "a": ["a1"], "b": ["b1"]})
    # A truth the taxonomy does not know can be neither right (level accuracy) nor a node (F1).
    pred = spark.createDataFrame(
        [("1", ["x", "x1"], ["x", "x1"]), ("2", ["a", "a1"], ["a", "a1"]), ("3", ["b", "b1"], ["b", "b1"])],
        "id string, path array<string>, labels array<string>",
    )
    m = evaluate_predictions(pred, tax)
    assert m["n_documents"] == 2 and m["n_unknown_labels"] == 1
    assert m["level_accuracy"] == {"1": 1.0, "2": 1.0} and m["micro_f1"] == m["macro_f1"] == 1.0
    # A path that names known nodes but is not a parent -> child chain is unknown too.
    pred = spark.createDataFrame(
        [("1", ["b", "a1"], ["a", "a1"]), ("2", ["a", "a1"], ["a", "a1"]), ("3", ["b", "b1"], ["b", "b1"])],
        "id string, path array<string>, labels array<string>",
    )
    m = evaluate_predictions(pred, tax)
    assert m["n_unknown_predictions"] == 1 and m["n_documents"] == 3 and "unknown_nodes" not in m
    assert m["unknown_paths"] == [["b", "a1"]]
