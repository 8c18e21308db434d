"""Labels merged by id (``pcem train --labels``): added, replaced or confirmed, or rejected with a reason.

:func:`pcem_spark.model.label_merge.merge_labels` is checked on small frames (chispa); the command end to
end: a labels file with unknown ids, unknown paths, conflicting rows, a malformed line and a row without
labels trains (exit 0), writes every rejected row with its reason, counts what came from where in the
training summary, and gives the same model as a training on a corpus with those labels written in.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from test_abstain import TAX, WORDS

from pcem_spark.model.label_merge import MERGE_RULE, merge_labels

SPACE, HOCKEY, MED = (TAX.real_path(TAX.leaves.index(leaf)) for leaf in ("rockets", "hockey", "med"))
DOCS_SCHEMA = "id string, text string, labels array<string>, url string"


def _docs(spark):
    rows = [
        ("a", "launch", SPACE, "u/a"),  # replaced by the table
        ("b", "puck", None, "u/b"),  # added
        ("c", "doctor", MED, "u/c"),  # confirmed
        ("d", "orbit", None, "u/d"),  # untouched, unlabelled
        ("e", "rink", HOCKEY, "u/e"),  # untouched, labelled
    ]
    return spark.createDataFrame(rows, DOCS_SCHEMA).repartition(2)


def _table(spark, rows):
    return spark.createDataFrame(rows, "id string, labels array<string>")


def test_the_table_adds_replaces_and_confirms_labels_and_rejects_what_it_cannot_merge(spark):
    docs = _docs(spark)
    table = _table(
        spark,
        [
            ("a", HOCKEY),
            ("b", HOCKEY),
            ("c", MED),
            ("zz", SPACE),  # no such document
            ("d", ["sci", "space", "rockts"]),  # a typo: not a path
            ("e", None),  # no labels
        ],
    )
    merged, rejects, counts = merge_labels(docs, table, TAX, "labels.jsonl")
    expected = spark.createDataFrame(
        [
            ("a", "launch", HOCKEY, "u/a"),
            ("b", "puck", HOCKEY, "u/b"),
            ("c", "doctor", MED, "u/c"),
            ("d", "orbit", None, "u/d"),
            ("e", "rink", HOCKEY, "u/e"),
        ],
        DOCS_SCHEMA,
    )
    assert_df_equality(merged, expected, ignore_row_order=True, ignore_nullable=True)
    assert merged.columns == docs.columns
    got = {r.id: (r.reason, r.source_file, r.line) for r in rejects.collect()}
    assert got == {
        "zz": ("id is not the id of a valid document of --docs: the row would label nothing", "labels.jsonl", None),
        "d": (
            'label path ["sci","space","rockts"] is not a path of the taxonomy; '
            'did you mean ["sci","space","rockets"]?',
            "labels.jsonl",
            None,
        ),
        "e": (
            "field 'labels' is missing or empty: a row of the labels table gives its id's label path(s)",
            "labels.jsonl",
            None,
        ),
    }
    assert json.loads([r.record for r in rejects.collect() if r.id == "zz"][0]) == {"id": "zz", "labels": SPACE}
    assert {k: counts[k] for k in ("merged", "added", "replaced", "confirmed", "rejected")} == {
        "merged": 3,
        "added": 1,
        "replaced": 1,
        "confirmed": 1,
        "rejected": 3,
    }
    assert counts["rule"] == MERGE_RULE and sum(counts["rejected_by_reason"].values()) == 3


def test_the_documents_keep_their_partitions_and_order(spark):
    docs = _docs(spark)
    merged, _, _ = merge_labels(docs, _table(spark, [("e", SPACE), ("b", MED)]), TAX, "t")
    assert (
        merged.rdd.glom().map(lambda rows: [r.id for r in rows]).collect()
        == docs.rdd.glom().map(lambda rows: [r.id for r in rows]).collect()
    )


def test_several_paths_on_either_side_give_every_document_a_list_of_paths(spark):
    docs = _docs(spark)
    table = spark.createDataFrame([("b", [HOCKEY, SPACE])], "id string, labels array<array<string>>")
    merged, _, counts = merge_labels(docs, table, TAX, "t")
    assert merged.schema["labels"].dataType.simpleString() == "array<array<string>>"
    got = {r.id: r.labels for r in merged.collect()}
    assert got["b"] == [HOCKEY, SPACE] and got["a"] == [SPACE] and got["d"] is None
    assert counts["added"] == 1
    # Two paths given in another order are the same labels: confirmed, not replaced.
    docs2 = spark.createDataFrame([("x", "t", [SPACE, MED])], "id string, text string, labels array<array<string>>")
    table2 = spark.createDataFrame([("x", [MED, SPACE])], "id string, labels array<array<string>>")
    assert merge_labels(docs2, table2, TAX, "t")[2]["confirmed"] == 1


# ----------------------------------------------------------------------------------------- the command


def _corpus_rows(n=48, seed=3):
    """Documents of the test taxonomy's leaves; a third labelled in the corpus itself (6 of every 18: each leaf)."""
    rng = np.random.default_rng(seed)
    leaves = list(WORDS)
    rows = []
    for i in range(n):
        leaf = leaves[i % len(leaves)]
        other = leaves[(i + 1) % len(leaves)]
        words = list(rng.choice(WORDS[leaf].split(), 7)) + list(rng.choice(WORDS[other].split(), 2))
        path = TAX.real_path(TAX.leaves.index(leaf))
        rows.append({"id": f"d{i:02d}", "text": " ".join(words), "labels": path if (i // 6) % 3 == 0 else None})
    return rows


def _write(path, rows):
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write((row if isinstance(row, str) else json.dumps(row)) + "\n")


FIXED = [
    "--set",
    "features.min_df=1",
    "--set",
    "features.stop_words=none",
    "--set",
    "model.names=off",
    "--set",
    "model.family=generative",
    "--set",
    "model.smoothing=0.1",
    "--set",
    "model.unlabeled_weight=0.3",
    "--set",
    "model.path_weight=1",
    "--set",
    "model.calibration=none",
    "--log-level",
    "WARNING",
]
# A few EM iterations: the same labels give the same model at any number of them (the merge is the point here).
FEW_ITERATIONS = ["--set", "model.max_iter=5"]


@pytest.mark.slow
def test_train_with_labels_equals_a_train_on_the_corpus_with_them_written_in(spark, tmp_path):
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker
    from pcem_spark.model.path_model import PathModel

    rows = _corpus_rows()
    truth = {r["id"]: TAX.real_path(TAX.leaves.index(list(WORDS)[i % len(WORDS)])) for i, r in enumerate(rows)}
    unlabelled = [r["id"] for r in rows if r["labels"] is None and r["id"] not in ("d07", "d08", "d09")]
    labels = [{"id": i, "labels": truth[i], "rank": k} for k, i in enumerate(unlabelled[:12])]  # 12 added
    wrong = TAX.real_path(TAX.leaves.index("misc"))
    labels += [
        {"id": "d00", "labels": truth["d00"]},  # confirmed
        {"id": "d01", "labels": wrong},  # replaced: the table wins
        {"id": "nope", "labels": truth["d00"]},  # unknown id
        {"id": "d07", "labels": ["sci", "space", "rokets"]},  # unknown path
        {"id": "d08", "labels": truth["d08"]},  # conflicting rows: both rejected
        {"id": "d08", "labels": wrong},
        {"id": "d09"},  # no labels
        "{not json",
    ]
    docs, table, written = (str(tmp_path / n) for n in ("docs.jsonl", "labels.jsonl", "written.jsonl"))
    _write(docs, rows)
    _write(table, labels)
    given = {row["id"]: row["labels"] for row in labels[:14]}
    _write(written, [{**r, "labels": given.get(r["id"], r["labels"])} for r in rows])
    merged_model, plain_model = str(tmp_path / "merged"), str(tmp_path / "plain")
    assert main(["train", "--docs", docs, "--labels", table, "--model", merged_model, *FIXED, *FEW_ITERATIONS]) == 0
    assert main(["train", "--docs", written, "--model", plain_model, *FIXED, *FEW_ITERATIONS]) == 0

    rejects = spark.read.parquet(merged_model + "_labels_rejects")
    by_id = {r.id: r.reason for r in rejects.collect()}
    assert set(by_id) == {"nope", "d07", "d08", "d09", None}
    assert by_id["nope"].startswith("id is not the id of a valid document")
    assert by_id["d07"].startswith('label path ["sci","space","rokets"] is not a path of the taxonomy')
    assert by_id["d08"] == "duplicate id: 2 rows share this id"
    assert by_id["d09"].startswith("field 'labels' is missing")
    assert len({r.source_file for r in rejects.collect()}) == 1  # every reject names the same file
    assert rejects.where(F.col("id").isNull()).first().line == 20  # the malformed line, by its line
    marker = read_marker(spark, merged_model + "_labels_rejects")
    assert (marker["rows_read"], marker["valid"], marker["rejected"]) == (20, 14, 6)

    merged, plain = PathModel.load(merged_model), PathModel.load(plain_model)
    summary = merged.training_summary["input"]["labels_table"]
    assert {k: summary[k] for k in ("rows_read", "merged", "added", "replaced", "confirmed", "rejected")} == {
        "rows_read": 20,
        "merged": 14,
        "added": 12,
        "replaced": 1,
        "confirmed": 1,
        "rejected": 6,
    }
    assert summary["labelled_documents"] == {"from_labels_table": 14, "from_docs": 18 - 2}
    test = spark.createDataFrame(
        [(r["id"], r["text"], None) for r in rows], "id string, text string, labels array<string>"
    )
    a = {r.id: r for r in merged.transform(test).collect()}
    b = {r.id: r for r in plain.transform(test).collect()}
    assert {i: r.path for i, r in a.items()} == {i: r.path for i, r in b.items()}
    assert max(abs(a[i].probability - b[i].probability) for i in a) < 1e-9


@pytest.mark.slow
def test_labels_refused_with_weak_supervision_and_a_parquet_table_needs_no_text(spark, tmp_path):
    from pcem_spark.cli import main

    rows = _corpus_rows(24)
    docs, table = str(tmp_path / "docs.jsonl"), str(tmp_path / "labels")
    _write(docs, rows)
    spark.createDataFrame(
        [(r["id"], TAX.real_path(TAX.leaves.index(list(WORDS)[i % len(WORDS)]))) for i, r in enumerate(rows)],
        "id string, labels array<string>",
    ).write.parquet(table)
    weak = ["train", "--docs", docs, "--labels", table, "--model", str(tmp_path / "w"), "--supervision", "similarities"]
    assert main(weak) == 2
    # Nothing in --docs labelled: the taxonomy comes from the table.
    _write(docs, [{**r, "labels": None} for r in rows])
    model = str(tmp_path / "m")
    assert main(["train", "--docs", docs, "--labels", table, "--model", model, *FIXED, *FEW_ITERATIONS]) == 0
    from pcem_spark.model.path_model import PathModel

    got = PathModel.load(model).training_summary["input"]["labels_table"]
    assert (got["merged"], got["added"], got["rejected"]) == (24, 24, 0)
