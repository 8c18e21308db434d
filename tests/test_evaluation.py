"""HierarchicalF1Evaluator: the pyspark.ml Evaluator of the hierarchical micro/macro F1."""

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.evaluation.evaluator import HierarchicalF1Evaluator
from pcem_spark.evaluation.metrics import evaluate_predictions, node_confusion

PRED_SCHEMA = "id string, path array<string>, labels array<string>"

TAX2 = Taxonomy({"ROOT": ["sport", "tech"], "sport": ["football", "tennis"], "tech": ["phones", "chips"]})
ROWS2 = [
    ("1", ["sport", "football"], ["sport", "football"]),
    ("2", ["sport", "tennis"], ["sport", "football"]),
    ("3", ["tech", "chips"], ["sport", "tennis"]),
    ("4", ["tech", "phones"], ["tech", "phones"]),
    ("5", ["tech", "phones"], None),  # not scored (would add a phones FP)
]
# Hand count over rows 1-4:   TP  FP  FN   F1 = 2TP / (2TP + FP + FN)
#   sport    (pred 1,2   true 1,2,3)   2   0   1   4/5
#   tech     (pred 3,4   true 4)       1   1   0   2/3
#   football (pred 1     true 1,2)     1   0   1   2/3
#   tennis   (pred 2     true 3)       0   1   1   0
#   phones   (pred 4     true 4)       1   0   0   1
#   chips    (pred 3     true -)       0   1   0   0
#   total                              5   3   3
PER_NODE2 = {
    "sport": (2, 0, 1),
    "tech": (1, 1, 0),
    "football": (1, 0, 1),
    "tennis": (0, 1, 1),
    "phones": (1, 0, 0),
    "chips": (0, 1, 0),
}
MICRO2 = 2 * 5 / (2 * 5 + 3 + 3)  # = 5/8
MACRO2 = (4 / 5 + 2 / 3 + 2 / 3 + 0 + 1 + 0) / 6  # = 47/90

# Depth 3, with the shallow leaves a2 (depth 2) and b (depth 1) padded by dummies.
TAX3 = Taxonomy({"ROOT": ["a", "b"], "a": ["a1", "a2"], "a1": ["a1x", "a1y"]})
ROWS3 = [
    ("1", ["a", "a1", "a1x"], ["a", "a1", "a1x"]),
    ("2", ["a", "a1", "a1y"], ["a", "a1", "a1x"]),
    ("3", ["a", "a2"], ["a", "a1", "a1y"]),
    ("4", ["b"], ["a", "a2"]),
    ("5", ["a", "a1", "a1x"], ["b"]),
    ("6", ["b"], None),  # not scored
]
# Hand count over rows 1-5:   TP  FP  FN   F1
#   a    (pred 1,2,3,5  true 1,2,3,4)  3   1   1   6/8
#   a1   (pred 1,2,5    true 1,2,3)    2   1   1   4/6
#   a1x  (pred 1,5      true 1,2)      1   1   1   2/4
#   a1y  (pred 2        true 3)        0   1   1   0
#   a2   (pred 3        true 4)        0   1   1   0
#   b    (pred 4        true 5)        0   1   1   0
#   total                              6   6   6
PER_NODE3 = {"a": (3, 1, 1), "a1": (2, 1, 1), "a1x": (1, 1, 1), "a1y": (0, 1, 1), "a2": (0, 1, 1), "b": (0, 1, 1)}
MICRO3 = 2 * 6 / (2 * 6 + 6 + 6)  # = 1/2
MACRO3 = (6 / 8 + 4 / 6 + 2 / 4 + 0 + 0 + 0) / 6  # = 23/72

CASES = [
    pytest.param(TAX2, ROWS2, PER_NODE2, MICRO2, MACRO2, id="2-level"),
    pytest.param(TAX3, ROWS3, PER_NODE3, MICRO3, MACRO3, id="3-level"),
]


def _f1(spark_df, metric, **kw):
    return HierarchicalF1Evaluator(metricName=metric, **kw).evaluate(spark_df)


@pytest.mark.slow
@pytest.mark.parametrize("tax, rows, per_node, micro, macro", CASES)
def test_matches_hand_counts_and_evaluate_predictions(spark, tax, rows, per_node, micro, macro):
    pred = spark.createDataFrame(rows, PRED_SCHEMA)
    m = evaluate_predictions(pred, tax)
    assert {c: (d["tp"], d["fp"], d["fn"]) for c, d in m["per_node"].items()} == per_node
    assert m["micro_f1"] == pytest.approx(micro) and m["macro_f1"] == pytest.approx(macro)
    for kw in ({"taxonomy": tax.to_json()}, {}):
        got_micro, got_macro = _f1(pred, "microF1", **kw), _f1(pred, "macroF1", **kw)
        assert got_micro == pytest.approx(micro) and got_macro == pytest.approx(macro)
        assert 0.0 <= got_micro <= 1.0 and 0.0 <= got_macro <= 1.0
        if kw:  # with the taxonomy: the very same numbers as pcem evaluate
            assert got_micro == m["micro_f1"] and got_macro == m["macro_f1"]
    # The default metric is micro-F1; a param map overrides it for one call.
    ev = HierarchicalF1Evaluator(taxonomy=tax)  # a Taxonomy is stored as its JSON
    assert ev.getTaxonomy() == tax.to_json()
    assert ev.getMetricName() == "microF1" and ev.isLargerBetter()
    assert ev.evaluate(pred) == m["micro_f1"]
    assert ev.evaluate(pred, {ev.metricName: "macroF1"}) == m["macro_f1"]
    assert ev.evaluate(pred, {ev.metricName: "meanF1"}) == pytest.approx((micro + macro) / 2)
    assert ev.getMetricName() == "microF1"


def test_evaluate_predictions_with_paths_shallower_than_the_truth(spark):
    # Rows 3 and 4 of ROWS3 predict a path shorter than the true one: wrong at the missing levels.
    m = evaluate_predictions(spark.createDataFrame(ROWS3, PRED_SCHEMA), TAX3)
    assert m["n_documents"] == 5 and m["n_without_labels"] == 1
    # level 1: rows 1,2,3 right of 1-5; level 2: rows 1,2 of 1-4; level 3: row 1 of 1-3
    assert m["level_accuracy"] == {"1": pytest.approx(3 / 5), "2": pytest.approx(2 / 4), "3": pytest.approx(1 / 3)}


def test_node_confusion_counts(spark):
    pred = spark.createDataFrame(ROWS2, PRED_SCHEMA)
    n_pred, n_true, n_tp = node_confusion(pred, "path", "labels")
    nodes = sorted(set(n_pred) | set(n_true))
    actual = spark.createDataFrame(
        [(c, n_pred.get(c, 0), n_true.get(c, 0), n_tp.get(c, 0)) for c in nodes],
        "node string, n_pred long, n_true long, n_tp long",
    )
    # n_pred = TP + FP, n_true = TP + FN; nodes that never occur are absent.
    expected = spark.createDataFrame(
        [(c, tp + fp, tp + fn, tp) for c, (tp, fp, fn) in PER_NODE2.items()],
        "node string, n_pred long, n_true long, n_tp long",
    )
    assert_df_equality(actual, expected, ignore_row_order=True)


def test_rows_with_null_labels_are_ignored(spark):
    pred = spark.createDataFrame(ROWS2 + [("6", ["sport", "tennis"], None), ("7", None, None)], PRED_SCHEMA)
    labelled = pred.where(F.col("labels").isNotNull())
    assert labelled.count() == 4
    for metric, expected in (("microF1", MICRO2), ("macroF1", MACRO2)):
        got = _f1(pred, metric, taxonomy=TAX2.to_json())
        assert got == _f1(labelled, metric, taxonomy=TAX2.to_json()) == pytest.approx(expected)
    assert _f1(pred, "macroF1") == _f1(labelled, "macroF1") == pytest.approx(MACRO2)


def test_custom_column_names(spark):
    pred = (
        spark.createDataFrame(ROWS2, PRED_SCHEMA)
        .withColumnRenamed("path", "guess")
        .withColumnRenamed("labels", "truth")
    )
    ev = HierarchicalF1Evaluator(predictionCol="guess", labelCol="truth", metricName="macroF1")
    assert ev.evaluate(pred) == pytest.approx(MACRO2)
    with pytest.raises(ValueError, match="no column 'path'"):
        HierarchicalF1Evaluator(labelCol="truth").evaluate(pred)
    with pytest.raises(ValueError, match="'id' must be array<string>"):
        HierarchicalF1Evaluator(predictionCol="guess", labelCol="id").evaluate(pred)


@pytest.mark.slow
def test_taxonomy_param_only_counts_its_nodes(spark):
    pred = spark.createDataFrame(ROWS2, PRED_SCHEMA)
    # Every node seen is in the taxonomy: with and without it, the same result.
    for metric in ("microF1", "macroF1"):
        assert _f1(pred, metric) == pytest.approx(_f1(pred, metric, taxonomy=TAX2.to_json()))
    # A true label 'golf' outside the taxonomy (row 6: pred sport/football, true sport/golf).
    # With the taxonomy, row 6 is not scored at all (its truth is not a path of the taxonomy): the numbers
    # of rows 1-4, as pcem evaluate (which also reports the row as unknown).
    # Without it: sport 3/0/1, football 1/1/1, golf 0/0/1 -> TP 6, FP 4, FN 4.
    pred = spark.createDataFrame(ROWS2 + [("6", ["sport", "football"], ["sport", "golf"])], PRED_SCHEMA)
    m = evaluate_predictions(pred, TAX2)
    assert m["unknown_true_labels"] == ["golf"] and m["n_unknown_labels"] == 1 and m["n_documents"] == 4
    with_tax = _f1(pred, "microF1", taxonomy=TAX2.to_json())
    assert with_tax == m["micro_f1"] == pytest.approx(MICRO2)
    assert _f1(pred, "microF1") == pytest.approx(12 / (12 + 4 + 4))
    f_sport, f_football = 6 / 7, 2 / 4  # other nodes as in PER_NODE2
    assert _f1(pred, "macroF1", taxonomy=TAX2.to_json()) == m["macro_f1"] == pytest.approx(MACRO2)
    macro_all = (f_sport + 2 / 3 + f_football + 0 + 1 + 0 + 0) / 7
    assert _f1(pred, "macroF1") == pytest.approx(macro_all)


def test_taxonomy_param_refuses_labels_of_another_taxonomy(spark):
    from pcem_spark.errors import InputError

    pred = spark.createDataFrame([(str(i), ["x", "x1"], ["x", "x1"]) for i in range(3)] + ROWS2[:1], PRED_SCHEMA)
    with pytest.raises(InputError, match=r"3 of the 4 .*'x'.*another taxonomy / model\?"):
        _f1(pred, "microF1", taxonomy=TAX2.to_json())
    # without a taxonomy every node seen counts: nothing is unknown
    assert _f1(pred, "microF1") == 1.0


def test_invalid_params_raise(spark):
    with pytest.raises(ValueError, match=r"metricName must be one of \['macroF1', 'meanF1', 'microF1'\], got 'f1'"):
        HierarchicalF1Evaluator(metricName="f1")
    ev = HierarchicalF1Evaluator()
    with pytest.raises(ValueError, match="metricName"):
        ev.setMetricName("accuracy")
    with pytest.raises(ValueError, match="metricName"):
        ev.setParams(metricName="micro")
    pred = spark.createDataFrame(ROWS2, PRED_SCHEMA)
    with pytest.raises(ValueError, match="metricName"):
        ev.evaluate(pred, {ev.metricName: "weightedF1"})
    with pytest.raises(ValueError, match="taxonomy Param"):
        HierarchicalF1Evaluator(taxonomy="{not json")
    with pytest.raises(ValueError, match="taxonomy Param"):
        ev.setTaxonomy('{"children": {"ROOT": []}}')


def test_all_null_labels_raise(spark):
    ev = HierarchicalF1Evaluator(taxonomy=TAX2.to_json())
    pred = spark.createDataFrame([("1", ["sport", "tennis"], None), ("2", ["tech", "chips"], None)], PRED_SCHEMA)
    with pytest.raises(ValueError, match="nothing to score.*column 'labels'"):
        ev.evaluate(pred)
    with pytest.raises(ValueError, match="nothing to score.*column 'labels'"):
        HierarchicalF1Evaluator().evaluate(spark.createDataFrame([], PRED_SCHEMA))


def test_save_load_roundtrip(spark, tmp_path):
    ev = HierarchicalF1Evaluator(predictionCol="guess", metricName="macroF1", taxonomy=TAX3.to_json())
    path = str(tmp_path / "evaluator")
    ev.save(path)
    loaded = HierarchicalF1Evaluator.load(path)
    assert isinstance(loaded, HierarchicalF1Evaluator) and loaded.uid == ev.uid
    assert {p.name: v for p, v in loaded.extractParamMap().items()} == {
        "predictionCol": "guess",
        "labelCol": "labels",
        "metricName": "macroF1",
        "taxonomy": TAX3.to_json(),
    }
    assert not loaded.isSet(loaded.labelCol)  # a default stays a default
    ev.setMetricName("microF1").write().overwrite().save(path)
    assert HierarchicalF1Evaluator.load(path).getMetricName() == "microF1"
    pred = spark.createDataFrame(ROWS3, PRED_SCHEMA).withColumnRenamed("path", "guess")
    assert HierarchicalF1Evaluator.load(path).evaluate(pred) == pytest.approx(MICRO3)
