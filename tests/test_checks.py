"""Label checks (pcem_spark.model.label_checks): coverage per leaf, singleton leaves, paths outside the taxonomy."""

import logging

import pytest

from pcem_spark.core.taxonomy import Taxonomy, TaxonomyError
from pcem_spark.model.label_checks import (
    _unknown_label_paths,
    label_coverage,
    require_known_label_paths,
    warn_label_coverage,
    warn_singleton_leaves,
)

SCHEMA = "id string, text string, labels array<string>"
# A shallow leaf ("misc", depth 1) next to depth-2 leaves, and one leaf ("wool") nobody labels.
TAX = Taxonomy({"ROOT": ["sci", "rec", "misc"], "sci": ["sci.space", "sci.med"], "rec": ["rec.autos", "rec.wool"]})


def _docs(spark, rows):
    return spark.createDataFrame(rows, SCHEMA)


def _labelled(spark):
    rows = [(f"space-{i}", "t", ["sci", "sci.space"]) for i in range(5)]
    rows += [(f"med-{i}", "t", ["sci", "sci.med"]) for i in range(2)]
    rows += [(f"autos-{i}", "t", ["rec", "rec.autos"]) for i in range(4)]
    rows += [("misc-0", "t", ["misc"]), ("u-0", "t", None), ("u-1", "t", None)]
    return _docs(spark, rows)


def test_label_coverage_counts_every_leaf_including_zero_and_shallow(spark):
    assert label_coverage(_labelled(spark), TAX) == {
        "sci.space": 5,
        "sci.med": 2,
        "rec.autos": 4,
        "rec.wool": 0,
        "misc": 1,
    }


def test_label_coverage_reads_per_depth_weak_paths(spark):
    # weak_path of the per-depth argmax: a shallow leaf may be followed by a node chosen at depth 2;
    # a leaf counts only at its own depth, so "misc" is counted once and "sci.med" once.
    weak = spark.createDataFrame(
        [("a", ["misc", "sci.med"]), ("b", ["sci", "sci.space"]), ("c", None)], "id string, weak_path array<string>"
    )
    assert label_coverage(weak, TAX, "weak_path") == {
        "sci.space": 1,
        "sci.med": 1,
        "rec.autos": 0,
        "rec.wool": 0,
        "misc": 1,
    }


def test_warn_label_coverage_names_empty_and_few_leaves(caplog):
    counts = {"sci.space": 5, "sci.med": 2, "rec.autos": 4, "misc": 1}  # rec.wool missing = 0
    with caplog.at_level(logging.WARNING, logger="pcem_spark.model.label_checks"):
        empty, few = warn_label_coverage(counts, TAX, where="docs.jsonl")
    assert empty == ["rec.wool"]
    assert few == ["misc", "sci.med"]  # by count, then name
    text = caplog.text
    assert "docs.jsonl: 1 of 5 leaves have no labelled document: ['rec.wool']" in text
    assert "'misc' (1), 'sci.med' (2)" in text and "fewer than 3 labelled documents" in text
    assert "Label some documents of each" in text


def test_warn_label_coverage_is_quiet_when_every_leaf_is_covered(caplog):
    counts = {leaf: 10 for leaf in TAX.leaves}
    with caplog.at_level(logging.WARNING, logger="pcem_spark.model.label_checks"):
        assert warn_label_coverage(counts, TAX) == ([], [])
    assert caplog.records == []


def test_warn_label_coverage_weak_wording_and_long_lists(caplog):
    many = Taxonomy({"R": [f"leaf{i:02d}" for i in range(25)]})
    with caplog.at_level(logging.WARNING, logger="pcem_spark.model.label_checks"):
        empty, _ = warn_label_coverage({}, many, kind="weak")
    assert len(empty) == 25
    assert "25 of 25 leaves have no document with a weak label" in caplog.text
    assert "(+5 more)" in caplog.text and "descriptions" in caplog.text


def test_singleton_leaf_of_an_inferred_taxonomy_gets_a_did_you_mean(spark, caplog):
    from pcem_spark.model.labels import infer_taxonomy

    rows = [(f"space-{i}", "t", ["sci", "sci.space"]) for i in range(4)]
    rows += [(f"med-{i}", "t", ["sci", "sci.med"]) for i in range(3)]
    rows += [("d17", "t", ["sci", "sci.spcae"]), ("rare", "t", ["misc", "misc.forsale"])]
    docs = _docs(spark, rows)
    tax = infer_taxonomy(docs)
    assert "sci.spcae" in tax.leaves  # the typo silently became a class: hence the warning
    with caplog.at_level(logging.WARNING, logger="pcem_spark.model.label_checks"):
        hints = warn_singleton_leaves(docs, tax, where="docs.jsonl")
    assert hints == {"sci.spcae": "sci.space", "misc.forsale": None}
    assert "2 of 4 leaves are used by exactly one document" in caplog.text
    assert "'sci.spcae' (document 'd17'; did you mean 'sci.space'?)" in caplog.text
    assert "'misc.forsale' (document 'rare')" in caplog.text


def test_singleton_leaves_from_counts_and_quiet_without_singletons(caplog):
    with caplog.at_level(logging.WARNING, logger="pcem_spark.model.label_checks"):
        assert warn_singleton_leaves({"a": 3, "b": 2}) == {}
        assert caplog.records == []
        assert warn_singleton_leaves({"comp.graphics": 40, "comp.graphcis": 1}) == {"comp.graphcis": "comp.graphics"}
    assert "'comp.graphcis' (did you mean 'comp.graphics'?)" in caplog.text


def test_singleton_check_needs_the_taxonomy_with_a_dataframe(spark):
    with pytest.raises(ValueError, match="pass the taxonomy"):
        warn_singleton_leaves(_labelled(spark))


def test_unknown_label_paths_on_spark(spark):
    from chispa import assert_df_equality

    docs = _docs(
        spark,
        [
            ("a", "t", ["sci", "sci.space"]),
            ("b", "t", ["sci", "sci.spcae"]),
            ("c", "t", ["sci", "sci.spcae"]),
            ("d", "t", ["rec", "sci.med"]),
            ("e", "t", None),
            ("f", "t", ["misc"]),
        ],
    )
    expected = spark.createDataFrame(
        [(["sci", "sci.spcae"], 2, "b"), (["rec", "sci.med"], 1, "d")],
        "labels array<string>, n long, example_id string",
    )
    assert_df_equality(_unknown_label_paths(docs, TAX, "labels"), expected, ignore_row_order=True, ignore_nullable=True)


def test_labels_outside_a_given_taxonomy_are_an_error_naming_paths_counts_and_nearest(spark):
    docs = _docs(
        spark,
        [("a", "t", ["sci", "sci.space"])]
        + [(f"typo-{i}", "t", ["sci", "sci.spcae"]) for i in range(3)]
        + [("bad-doc", "t", ["rec", "sci.med"]), ("stop", "t", ["sci"])],
    )
    with pytest.raises(TaxonomyError) as err:
        require_known_label_paths(docs, TAX, where="docs.jsonl")
    msg = str(err.value)
    assert msg.startswith(
        "docs.jsonl: labels that are not paths of the taxonomy: 3 distinct label path(s) on 5 document(s):"
    )
    lines = msg.splitlines()
    # Most frequent first, with the example document, the reason and the nearest known path.
    assert lines[1].strip() == (
        "['sci', 'sci.spcae'] on 3 document(s): document 'typo-0': label 'sci.spcae' "
        "(level 2) is not a node of the taxonomy; did you mean ['sci', 'sci.space']?"
    )
    assert "document 'bad-doc'" in msg and "parent of 'sci.med' is 'sci', not 'rec'" in msg
    assert "did you mean ['sci', 'sci.med']?" in msg
    assert "stop at 'sci', which is not a leaf" in msg
    assert "To go on: correct these labels" in msg


def test_label_path_error_lists_at_most_max_listed(spark):
    docs = _docs(spark, [(f"d{i}", "t", ["sci", f"bogus{i}"]) for i in range(12)])
    with pytest.raises(TaxonomyError) as err:
        require_known_label_paths(docs, TAX, max_listed=10)
    msg = str(err.value)
    assert "12 distinct label path(s) on 12 document(s) (the 10 most frequent below)" in msg
    assert sum(line.startswith("  [") for line in msg.splitlines()) == 10


def test_known_label_paths_pass(spark):
    require_known_label_paths(_labelled(spark), TAX)  # nulls are unlabelled, not errors
