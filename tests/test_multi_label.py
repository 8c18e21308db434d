"""Documents in several categories: ``labels`` as a list of paths, read strictly, trained at 1/k each."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from test_abstain import FS, TAX, WORDS

from pcem_spark.engine.arrow_io import node_score_rows
from pcem_spark.engine.features import featurize
from pcem_spark.errors import InputError
from pcem_spark.evaluation.metrics import evaluate_predictions, metric_nodes
from pcem_spark.io.documents import read_documents
from pcem_spark.io.json_lines import _parse_line, _StrictDecoder
from pcem_spark.io.rejects import split_rejects
from pcem_spark.ml import train
from pcem_spark.model.settings import ModelSettings

SPACE = ["sci", "space", "rockets"]
HOCKEY = ["rec", "sport", "hockey"]


def _reason(obj) -> str:
    line = json.dumps({"id": "x", "text": "t", **obj}).encode()
    return _parse_line(_StrictDecoder(), line, True)[6]


def _labels(obj):
    line = json.dumps({"id": "x", "text": "t", **obj}).encode()
    got = _parse_line(_StrictDecoder(), line, True)
    assert got[6] is None, got[6]
    return got[2], got[7]


def test_json_labels_one_path_or_a_list_of_paths():
    assert _labels({"labels": SPACE}) == ([SPACE], False)
    assert _labels({"labels": [SPACE, HOCKEY]}) == ([SPACE, HOCKEY], True)
    assert _labels({"labels": [SPACE]}) == ([SPACE], True)
    assert _labels({"labels": None}) == (None, None)
    assert _labels({}) == (None, None)


@pytest.mark.parametrize(
    "labels, reason",
    [
        ([], "field 'labels': expected a non-empty array of strings (null for unlabelled), got an empty array"),
        ([SPACE, []], "labels[1]: expected a non-empty array of strings (a path), got an empty array"),
        ([SPACE, "misc"], "labels[1]: expected an array of strings (a path) like labels[0], got string"),
        ([SPACE, None], "labels[1]: expected an array of strings (a path) like labels[0], got null"),
        (["sci", ["space"]], "labels[1]: an array in a path of strings (labels[0] is a string)"),
        ([SPACE, ["rec", 3]], "labels[1][1]: expected a non-empty string, got number"),
        ([SPACE, ["rec", ""]], "labels[1][1]: expected a non-empty string, got an empty string"),
        ([[" sci", "med"]], 'labels[0][0]: " sci" has leading or trailing whitespace'),
        ([SPACE, HOCKEY, SPACE], "labels[2]: repeats the path of labels[0]"),
        ([[SPACE]], "labels[0][0]: expected a non-empty string, got array"),
        ({"a": 1}, "field 'labels': expected an array of strings (a path), an array of such arrays"),
    ],
)
def test_json_malformed_lists_of_paths_are_rejected_with_the_element_named(labels, reason):
    assert reason in _reason({"labels": labels})


def test_json_lone_surrogate_in_a_list_of_paths_names_the_element():
    line = b'{"id": "x", "text": "t", "labels": [["sci", "space"], ["rec", "\\ud800"]]}'
    assert _parse_line(_StrictDecoder(), line, True)[6].startswith("labels[1][1]: lone surrogate \\ud800")


def _write_jsonl(path, rows):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")


def test_read_json_keeps_one_path_shape_unless_a_line_lists_paths(spark, tmp_path):
    single = str(tmp_path / "single.jsonl.gz")
    _write_jsonl(single, [{"id": "1", "text": "a", "labels": SPACE}, {"id": "2", "text": "b", "labels": None}])
    good, _ = split_rejects(read_documents(spark, single))
    assert good.schema["labels"].dataType.simpleString() == "array<string>"
    assert sorted((r.id, r.labels) for r in good.collect()) == [("1", SPACE), ("2", None)]

    mixed = str(tmp_path / "mixed.jsonl.gz")
    rows = [
        {"id": "1", "text": "a", "labels": SPACE},
        {"id": "2", "text": "b", "labels": [SPACE, HOCKEY]},
        {"id": "3", "text": "c"},
        {"id": "4", "text": "d", "labels": [SPACE, ["rec", ""]]},
        {"id": "5", "text": "e", "labels": [HOCKEY, HOCKEY]},
    ]
    _write_jsonl(mixed, rows)
    counts = {}
    good, rejects = split_rejects(read_documents(spark, mixed), counts=counts)
    assert good.schema["labels"].dataType.simpleString() == "array<array<string>>"
    assert sorted((r.id, r.labels) for r in good.collect()) == [("1", [SPACE]), ("2", [SPACE, HOCKEY]), ("3", None)]
    got = {r.id: (r.line, r.reason) for r in rejects.collect()}
    assert got == {
        "4": (4, "labels[1][1]: expected a non-empty string, got an empty string"),
        "5": (5, "labels[1]: repeats the path of labels[0]"),
    }
    assert counts == {"parsed": 5, "valid": 3, "labelled": 2}

    # A list of paths only on a rejected line: the valid rows keep the one-path shape.
    rejected_only = str(tmp_path / "rejected_only.jsonl.gz")
    _write_jsonl(rejected_only, [{"id": "1", "text": "a", "labels": SPACE}, rows[3]])
    good, rejects = split_rejects(read_documents(spark, rejected_only))
    assert good.schema["labels"].dataType.simpleString() == "array<string>" and rejects.count() == 1


def test_parquet_list_of_paths_checked_per_row(spark, tmp_path):
    path = str(tmp_path / "docs.parquet")
    rows = [
        ("1", "a", [SPACE, HOCKEY]),
        ("2", "b", [SPACE]),
        ("3", "c", None),
        ("4", "d", []),
        ("5", "e", [SPACE, None]),
        ("6", "f", [SPACE, []]),
        ("7", "g", [["sci", None]]),
        ("8", "h", [SPACE, ["rec ", "sport"]]),
        ("9", "i", [HOCKEY, SPACE, HOCKEY]),
    ]
    spark.createDataFrame(rows, "id string, text string, labels array<array<string>>").write.parquet(path)
    good, rejects = split_rejects(read_documents(spark, path))
    assert good.schema["labels"].dataType.simpleString() == "array<array<string>>"
    assert sorted((r.id, r.labels) for r in good.collect()) == [("1", [SPACE, HOCKEY]), ("2", [SPACE]), ("3", None)]
    got = {r.id: r.reason for r in rejects.collect()}
    assert got == {
        "4": "field 'labels': expected a non-empty array of strings (null for unlabelled), got an empty array",
        "5": "labels[1]: expected an array of strings (a path), got null",
        "6": "labels[1]: expected a non-empty array of strings (a path), got an empty array",
        "7": "labels[0][1]: expected a non-empty string, got null",
        "8": 'labels[1][0]: "rec " has leading or trailing whitespace',
        "9": "labels[2]: repeats the path of labels[0]",
    }
    bad_type = str(tmp_path / "bad.parquet")
    spark.createDataFrame([("1", "a", [[1]])], "id string, text string, labels array<array<int>>").write.parquet(
        bad_type
    )
    with pytest.raises(InputError, match="expected array<string> or array<array<string>>"):
        read_documents(spark, bad_type)


def test_node_scores_of_several_paths_are_the_mean_of_their_one_path_scores():
    keys = ["a\x1fa1", "a\x1fa2", "b\x1fb1"]
    path_nodes = np.array([[0, 1], [0, 2], [3, 4]])
    nested = pa.array([[["a", "a1"], ["a", "a2"]], None, [["b", "b1"]], [["a", "a1"], ["b", "b1"], ["a", "a2"]]])
    indptr, indices, data = node_score_rows(nested, keys, path_nodes)
    dense = np.zeros((4, 5))
    for i in range(4):
        dense[i, indices[indptr[i] : indptr[i + 1]]] = data[indptr[i] : indptr[i + 1]]
    one = np.eye(5)
    expected = np.array(
        [
            (one[[0, 1]].sum(0) + one[[0, 2]].sum(0)) / 2,
            np.zeros(5),
            one[[3, 4]].sum(0),
            (one[[0, 1]].sum(0) + one[[3, 4]].sum(0) + one[[0, 2]].sum(0)) / 3,
        ]
    )
    np.testing.assert_allclose(dense, expected)
    flat = node_score_rows(pa.array([["b", "b1"], None]), keys, path_nodes)
    assert flat[0].tolist() == [0, 2, 2] and flat[1].tolist() == [3, 4]


def _ref_pcnb(X, paths_per_doc, padded, s):
    """Eqs. 2-4 with a document of k paths as k documents of weight 1/k (dense, independent of the engine)."""
    m = len(padded)
    S = np.zeros((len(paths_per_doc), m))
    for i, labelled in enumerate(paths_per_doc):
        for q in labelled:
            nodes = set(padded[q])
            S[i] += np.array([sum(1.0 for node in padded[j] if node in nodes) for j in range(m)]) / len(labelled)
    totals = S.sum(axis=0)
    counts = S.T @ X
    log_prior = np.log((s + totals) / (m * s + totals.sum()))
    log_theta = np.log((s + counts) / (X.shape[1] * s + counts.sum(axis=1, keepdims=True)))
    return log_prior, log_theta


def test_training_counts_a_document_with_k_paths_as_k_documents_of_weight_1_over_k(spark):
    leaves = list(WORDS)
    rng = np.random.default_rng(3)
    rows = []
    for i in range(24):
        a = leaves[i % len(leaves)]
        b = leaves[(i * 5 + 1) % len(leaves)]
        words = list(rng.choice(WORDS[a].split(), 5)) + list(rng.choice(WORDS[b].split(), 3))
        paths = [TAX.real_path(TAX.leaves.index(a))]
        if i % 3 == 0 and b != a:
            paths.append(TAX.real_path(TAX.leaves.index(b)))
        rows.append((f"d{i}", " ".join(words), paths))
    docs = spark.createDataFrame(rows, "id string, text string, labels array<array<string>>")
    s = 0.5
    # fixed settings (the family, the names, the stop list): the counts of Eqs. 2-4 are the point
    settings = ModelSettings(
        method="pcnb", smoothing=s, path_weight=1.0, unlabeled_weight=0.0, calibration="none", family="generative"
    )
    model, _ = train(docs, TAX, replace(FS, stop_words="none"), replace(settings, names="off"))
    feats = {r.id: r.features.toArray() for r in featurize(docs, model.vocabulary, model.feature_settings).collect()}
    X = np.array([feats[r[0]] for r in rows])
    index = {tuple(TAX.real_path(j)): j for j in range(TAX.n_paths)}
    paths_per_doc = [[index[tuple(p)] for p in r[2]] for r in rows]
    log_prior, log_theta = _ref_pcnb(X, paths_per_doc, TAX.paths, s)
    np.testing.assert_allclose(model.params.log_prior, log_prior, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.params.log_theta(), log_theta, rtol=1e-9, atol=1e-12)


def test_evaluation_of_several_predicted_paths_against_several_true_paths_is_brute_force(spark):
    rng = np.random.default_rng(7)
    all_paths = [TAX.real_path(j) for j in range(TAX.n_paths)]
    real = set(metric_nodes(TAX))
    rows = []
    for i in range(40):
        pred = [all_paths[j] for j in rng.choice(len(all_paths), size=int(rng.integers(1, 3)), replace=False)]
        true = [all_paths[j] for j in rng.choice(len(all_paths), size=int(rng.integers(1, 4)), replace=False)]
        rows.append((str(i), pred[0], pred, true if i % 9 else None))
    df = spark.createDataFrame(
        rows, "id string, path array<string>, paths array<array<string>>, labels array<array<string>>"
    )
    tp, fp, fn = {}, {}, {}
    level_n, level_ok = {}, {}
    for _, path, paths, true in rows:
        if true is None:
            continue
        p_nodes = {n for q in paths for n in q} & real
        t_nodes = {n for q in true for n in q} & real
        for n in real:
            tp[n] = tp.get(n, 0) + (n in p_nodes and n in t_nodes)
            fp[n] = fp.get(n, 0) + (n in p_nodes and n not in t_nodes)
            fn[n] = fn.get(n, 0) + (n not in p_nodes and n in t_nodes)
        for k in range(1, TAX.depth + 1):
            if any(len(t) >= k for t in true):
                level_n[k] = level_n.get(k, 0) + 1
                level_ok[k] = level_ok.get(k, 0) + any(
                    len(t) >= k and len(path) >= k and t[k - 1] == path[k - 1] for t in true
                )
    T, P, N = sum(tp.values()), sum(fp.values()), sum(fn.values())
    micro = 2 * T / (2 * T + P + N)
    per_node = [2 * tp[n] / (2 * tp[n] + fp[n] + fn[n]) if tp[n] else 0.0 for n in real if tp[n] + fn[n] > 0]
    m = evaluate_predictions(df, TAX)
    assert m["n_documents"] == sum(1 for r in rows if r[3] is not None)
    assert m["micro_f1"] == pytest.approx(micro)
    assert m["macro_f1"] == pytest.approx(np.mean(per_node))
    for k in range(1, TAX.depth + 1):
        assert m["level_accuracy"][str(k)] == pytest.approx(level_ok[k] / level_n[k])

    from pcem_spark.evaluation import HierarchicalF1Evaluator

    assert HierarchicalF1Evaluator(predictionCol="paths").evaluate(df) == pytest.approx(micro)
    with_tax = HierarchicalF1Evaluator(predictionCol="paths", taxonomy=TAX.to_json())
    assert with_tax.evaluate(df) == pytest.approx(micro)


def test_a_path_the_taxonomy_does_not_know_among_several_is_named(spark):
    from pcem_spark.model.labels import check_label_paths

    df = spark.createDataFrame(
        [("1", "a", [SPACE, ["rec", "sport", "curling"]])], "id string, text string, labels array<array<string>>"
    )
    with pytest.raises(InputError, match="curling"):
        check_label_paths(df, TAX)


def test_the_experiment_protocol_refuses_lists_of_paths(spark, tmp_path):
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.experiment.protocol import run_experiment
    from pcem_spark.experiment.settings import ExperimentSettings

    df = spark.createDataFrame([("1", "a", [SPACE])], "id string, text string, labels array<array<string>>")
    with pytest.raises(InputError, match="one label path per document"):
        run_experiment(df, TAX, ExperimentSettings(seeds=[0]), FeatureSettings(), ModelSettings(), str(tmp_path))
    assert not any(tmp_path.iterdir())  # refused before any run or report


@pytest.mark.slow
def test_cli_train_predict_evaluate_with_lists_of_paths(spark, tmp_path):
    """JSON Lines with lists of paths (and a malformed one) -> pcem train -> predict --multi-path -> evaluate."""
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker

    leaves = list(WORDS)
    rng = np.random.default_rng(11)
    rows = []
    for i in range(60):
        a, b = leaves[i % len(leaves)], leaves[(i + 2) % len(leaves)]
        text = " ".join(rng.choice(WORDS[a].split(), 8)) + (
            " " + " ".join(rng.choice(WORDS[b].split(), 8)) if i % 4 == 0 else ""
        )
        paths = [TAX.real_path(TAX.leaves.index(a))] + ([TAX.real_path(TAX.leaves.index(b))] if i % 4 == 0 else [])
        labels = None if i % 3 == 2 else (paths if i % 4 == 0 else paths[0])  # both forms, and unlabelled rows
        rows.append({"id": f"d{i}", "text": text, "labels": labels})
    rows.append({"id": "bad", "text": "x", "labels": [SPACE, SPACE]})
    docs = str(tmp_path / "docs.jsonl.gz")
    _write_jsonl(docs, rows)
    model, pred, metrics = (str(tmp_path / n) for n in ("model", "pred", "metrics.json"))
    fast = ["--set", "features.min_df=1", "--set", "tune.folds=2", "--log-level", "WARNING"]
    assert main(["train", "--docs", docs, "--model", model, *fast]) == 0
    rejects = spark.read.parquet(model + "_rejects").collect()
    assert [(r.id, r.reason, r.line) for r in rejects] == [("bad", "labels[1]: repeats the path of labels[0]", 61)]
    assert main(["predict", "--model", model, "--docs", docs, "--output", pred, "--multi-path", "0.3", *fast]) == 0
    out = spark.read.parquet(pred)
    assert out.schema["labels"].dataType.simpleString() == "array<array<string>>"
    assert out.count() == 60 and read_marker(spark, pred)["multi_path"] == 0.3
    assert main(["evaluate", "--predictions", pred, "--model", model, "--output", metrics]) == 0
    got = json.loads(open(metrics).read())
    assert got["n_documents"] == 40 and got["scored_nodes"] == "union of paths"
    tp = fp = fn = 0
    for r in out.where("labels IS NOT NULL").collect():  # 60 rows: the union of nodes, by hand
        p_nodes, t_nodes = {n for q in r.paths for n in q}, {n for q in r.labels for n in q}
        tp, fp, fn = tp + len(p_nodes & t_nodes), fp + len(p_nodes - t_nodes), fn + len(t_nodes - p_nodes)
    assert got["micro_f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))


def test_inspect_counts_a_document_in_several_categories_once_against_its_closest_path(spark):
    from pcem_spark.ops.inspection import confusion_counts

    df = spark.createDataFrame(
        [("1", SPACE, [HOCKEY, SPACE]), ("2", ["sci", "med"], [SPACE, HOCKEY]), ("3", HOCKEY, [HOCKEY])],
        "id string, path array<string>, labels array<array<string>>",
    )
    cells, n_scored, n_without = confusion_counts(df)
    got = {(level, t, p): n for level, t, p, n in cells}
    assert n_scored == 3 and n_without == 0
    # doc 1: a hit on its second path; doc 2: sci right at level 1, space -> med wrong at level 2
    assert got[(1, "sci", "sci")] == 2 and got[(2, "space", "space")] == 1 and got[(2, "space", "med")] == 1
    assert got[(1, "rec", "rec")] == 1 and sum(n for (level, _, _), n in got.items() if level == 1) == 3


def test_a_null_path_inside_a_list_is_named_by_the_label_check(spark):
    from pcem_spark.model.labels import check_label_paths

    df = spark.createDataFrame([("1", "a", [SPACE, None])], "id string, text string, labels array<array<string>>")
    with pytest.raises(InputError, match="None"):
        check_label_paths(df, TAX)


def test_path_em_with_lists_of_paths_and_an_unlabelled_table(spark):
    from pcem_spark.ml import PathEM

    rows = [
        (f"d{i}", " ".join(WORDS[leaf].split()[:4]), [TAX.real_path(TAX.leaves.index(leaf))])
        for i, leaf in enumerate(WORDS)
    ]
    docs = spark.createDataFrame(rows, "id string, text string, labels array<array<string>>")
    spark.createDataFrame([("u1", "puck goalie rink")], "id string, text string").createOrReplaceTempView(
        "pcem_unlabelled"
    )
    # fixed settings (smoothing, path weight, family, names, stop list): the lists of paths and the table are the point
    fixed = dict(smoothing=1.0, pathWeight=1.0, family="generative", names="off", stopWords="none")
    est = PathEM(
        method="pcnb", minDF=1, unlabeledTable="pcem_unlabelled", calibration="none", taxonomy=TAX.to_json(), **fixed
    )
    model = est.fit(docs)
    assert model.transform(docs).count() == len(rows)
