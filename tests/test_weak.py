"""Weak-supervision building blocks (issue 4) against dense numpy computations."""

import json
import logging

import numpy as np
import pytest
import scipy.sparse as sp

from pcem_spark.core.similarity import (
    argmax_node_scores,
    cosine_similarities,
    idf_weights,
    soft_node_scores,
    to_taxonomy_columns,
)
from pcem_spark.core.structure import path_scores
from pcem_spark.core.taxonomy import Taxonomy, TaxonomyError
from pcem_spark.io.descriptions import load_descriptions

FIG1 = Taxonomy({"ROOT": ["c1", "c2"], "c1": ["c11", "c12", "c13"], "c2": ["c21", "c22", "c23"]})


def test_figure1_path_scores_from_node_scores():
    # x_i labelled {c^1_1, c^2_2}: path scores 1, 2, 1, 0, 0, 0 over the six paths.
    ns = np.zeros((1, FIG1.n_nodes))
    ns[0, FIG1.node_index["c1"]] = 1
    ns[0, FIG1.node_index["c12"]] = 1
    np.testing.assert_array_equal(path_scores(ns, FIG1.path_node_matrix()), [[1, 2, 1, 0, 0, 0]])


def test_cosine_similarities_match_dense_numpy():
    rng = np.random.default_rng(0)
    X = rng.poisson(0.7, size=(9, 12)).astype(float)
    X[4] = 0  # a document with no known word
    D = rng.poisson(0.8, size=(4, 12)).astype(float)
    df = (X > 0).sum(axis=0)
    idf = idf_weights(df, 9)
    np.testing.assert_allclose(idf, np.log(10 / (1 + df)) + 1)

    def unit(a):
        a = a * idf
        n = np.linalg.norm(a, axis=1, keepdims=True)
        return np.divide(a, n, out=np.zeros_like(a), where=n > 0)

    np.testing.assert_allclose(
        cosine_similarities(sp.csr_matrix(X), idf, sp.csr_matrix(D)), unit(X) @ unit(D).T, rtol=1e-12, atol=1e-12
    )


def test_argmax_per_depth_and_no_weak_label_without_known_words():
    nodes = ["c1", "c2", "c11", "c12", "c21"]
    depths = [1, 1, 2, 2, 2]
    sims = np.array(
        [
            [0.2, 0.5, 0.1, 0.7, 0.3],
            [0.0, 0.0, 0.0, 0.0, 0.0],  # no known word
            [0.9, 0.1, 0.0, 0.0, 0.0],
        ]
    )  # nothing similar at depth 2
    hard = argmax_node_scores(sims, depths)
    np.testing.assert_array_equal(hard[0], [0, 1, 0, 1, 0])
    assert hard[1].sum() == 0 and hard[2].sum() == 0
    soft = soft_node_scores(sims, depths)
    np.testing.assert_allclose(soft[0], [0.2 / 0.7, 0.5 / 0.7, 0.1 / 1.1, 0.7 / 1.1, 0.3 / 1.1])
    assert soft[1].sum() == 0
    thresholded = argmax_node_scores(sims, depths, min_similarity=0.6)
    assert thresholded[0].sum() == 0  # best depth-1 similarity 0.5 is below the threshold
    cols = to_taxonomy_columns(hard, nodes, Taxonomy({"R": ["c1", "c2"], "c1": ["c11", "c12"], "c2": ["c21"]}))
    assert cols.shape == (3, 5) and cols[0].sum() == 2


def test_descriptions_file_checks(tmp_path, caplog):
    ok = {n: f"about {n}" for n in FIG1.real_nodes}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(ok))
    assert load_descriptions(str(path), FIG1)["c12"] == "about c12"
    # A node the taxonomy lacks (e.g. a class absent from the data the taxonomy was inferred from):
    # warned about by name, with a hint, and ignored.
    path.write_text(json.dumps({**ok, "c99": "nope", "c2x3": "typo of c23"}))
    with caplog.at_level(logging.WARNING, logger="pcem_spark.model.weak_labels"):
        got = load_descriptions(str(path), FIG1)
    assert set(got) == set(FIG1.real_nodes)
    assert f"{path}: 2 description(s) for node(s) that are not in the taxonomy are ignored" in caplog.text
    assert "'c2x3' (did you mean 'c23'?)" in caplog.text and "'c99'" in caplog.text
    # An inner node without a description: described by its descendants, with a warning.
    caplog.clear()
    path.write_text(json.dumps({n: d for n, d in ok.items() if n != "c1"}))
    with caplog.at_level(logging.WARNING, logger="pcem_spark.model.weak_labels"):
        assert "c1" not in load_descriptions(str(path), FIG1)
    assert "no description for inner node(s) ['c1']" in caplog.text
    # A leaf without one could never get a weak label: an error naming it, the file and the fix.
    del ok["c23"]
    ok["c22"] = "   "
    path.write_text(json.dumps(ok))
    with pytest.raises(
        TaxonomyError,
        match=r"d.json: no description for leaf node\(s\) \['c22', 'c23'\] "
        r"\(2 of 6 leaves\).*Add a line \"c22\"",
    ) as err:
        load_descriptions(str(path), FIG1)
    assert "or remove those leaves from the taxonomy" in str(err.value)


def test_shipped_20ng_descriptions_cover_the_taxonomy_in_at_most_12_words():
    import os

    here = os.path.dirname(__file__)
    with open(os.path.join(here, "..", "conf", "descriptions", "20ng.json")) as fh:
        desc = json.load(fh)
    groups = [n for n in desc if "." in n]
    tax = Taxonomy.from_label_paths([[g.split(".")[0], g] for g in groups])
    assert len(groups) == 20 and set(desc) == set(tax.real_nodes)
    assert all(len(v.replace(",", " ").split()) <= 12 for v in desc.values())


def test_weak_label_table_on_spark_matches_numpy(spark, staged_shipping):
    from chispa import assert_df_equality

    from pcem_spark.engine.blocks import blocks_from_node_scores
    from pcem_spark.engine.features import FeatureSettings, featurize
    from pcem_spark.model.weak_labels import weak_label

    tax = Taxonomy({"ROOT": ["sport", "tech"], "sport": ["football", "tennis"], "tech": ["phones", "chips"]})
    desc = {
        "sport": "sport games players",
        "tech": "technology devices engineering",
        "football": "football goal striker",
        "tennis": "tennis racket serve",
        "phones": "phones android screen",
        "chips": "chips silicon wafer",
    }
    fs = FeatureSettings(min_df=1.0, max_df=1.0, vocab_size=0, stop_words="english")
    vocab = [
        "goal",
        "striker",
        "racket",
        "serve",
        "android",
        "screen",
        "silicon",
        "wafer",
        "players",
        "football",
        "tennis",
        "phones",
        "chips",
        "sport",
        "technology",
        "devices",
        "engineering",
        "games",
        "wafer2",
    ]
    docs = spark.createDataFrame(
        [("d1", "goal striker players"), ("d2", "silicon wafer devices"), ("d3", "zzz nothing known")],
        "id string, text string",
    )
    feats = featurize(docs, vocab, fs)
    weak = weak_label(feats, vocab, fs, tax, desc).cache()
    got = weak.select("id", "weak_path")
    expected = spark.createDataFrame(
        [("d1", ["sport", "football"]), ("d2", ["tech", "chips"]), ("d3", None)], "id string, weak_path array<string>"
    )
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    scores = {r["id"]: r["node_scores"] for r in weak.collect()}
    assert scores["d3"] is None  # no known word: stays unlabelled
    row = np.array(scores["d1"])
    assert row.shape == (tax.n_nodes,) and row[tax.node_index["sport"]] == 1 and row.sum() == 2
    blocks = blocks_from_node_scores(weak, tax.n_nodes, len(vocab), 2).collect()
    assert sum(int(b.labeled.sum()) for b in blocks) == 2
    assert sum(b.X.shape[0] for b in blocks) == 3


@pytest.mark.slow
def test_dataless_experiment_reports_weak_label_quality(spark, tmp_path):
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.experiment.protocol import run_experiment
    from pcem_spark.experiment.settings import ExperimentSettings
    from pcem_spark.model.settings import ModelSettings

    tax = Taxonomy({"ROOT": ["sport", "tech"], "sport": ["football", "tennis"], "tech": ["phones", "chips"]})
    words = {
        "football": "goal striker penalty league",
        "tennis": "racket serve volley deuce",
        "phones": "android screen battery handset",
        "chips": "silicon wafer transistor fab",
    }
    desc = {
        "sport": "sport goal racket",
        "tech": "technology android silicon",
        "football": "football goal striker",
        "tennis": "tennis racket serve",
        "phones": "phones android screen",
        "chips": "chips silicon wafer",
    }
    rng = np.random.default_rng(0)
    rows = [
        (
            f"{leaf}-{i}",
            " ".join(rng.choice(w.split(), 6)),
            ["sport" if leaf in ("football", "tennis") else "tech", leaf],
        )
        for leaf, w in words.items()
        for i in range(20)
    ]
    docs = spark.createDataFrame(rows, "id string, text string, labels array<string>")
    out = run_experiment(
        docs,
        tax,
        ExperimentSettings(methods=["pcnb", "pcem"], rates=[0.5], seeds=[0], test_fraction=0.25, settings="dataless"),
        FeatureSettings(min_df=1.0, max_df=1.0, vocab_size=0, stop_words="english"),
        ModelSettings(max_iter=5),
        str(tmp_path),
        descriptions=desc,
    )
    assert [r["method"] for r in out] == ["pcnb", "pcem"]
    for r in out:
        assert r["setting"] == "dataless" and 0 < r["weak_coverage"] <= 1
        assert r["weak_level1_acc"] > 0.6 and r["weak_level2_acc"] > 0.5
        assert r["micro_f1"] > 0.6
    assert "weak-label accuracy" in (tmp_path / "results.md").read_text()


@pytest.mark.slow
def test_train_with_descriptions_through_the_cli(spark, tmp_path):
    from pcem_spark.cli import main

    words = {
        "football": "goal striker penalty league",
        "tennis": "racket serve volley deuce",
        "phones": "android screen battery handset",
        "chips": "silicon wafer transistor fab",
    }
    rng = np.random.default_rng(1)
    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "".join(
            json.dumps({"id": f"{leaf}-{i}", "text": " ".join(rng.choice(w.split(), 6))}) + "\n"
            for leaf, w in words.items()
            for i in range(10)
        )
    )
    tax = tmp_path / "tax.tsv"
    tax.write_text("ROOT\tsport\nROOT\ttech\nsport\tfootball\nsport\ttennis\ntech\tphones\ntech\tchips\n")
    desc = tmp_path / "desc.json"
    desc.write_text(
        json.dumps(
            {
                "sport": "sport goal racket",
                "tech": "technology android silicon",
                "football": "football goal striker",
                "tennis": "tennis racket serve",
                "phones": "phones android screen",
                "chips": "chips silicon wafer",
            }
        )
    )
    model, pred = str(tmp_path / "m"), str(tmp_path / "p")
    common = ["--set", "features.min_df=1.0", "--set", "features.max_df=1.0", "--set", "model.max_iter=5"]
    assert (
        main(
            [
                "train",
                "--docs",
                str(docs),
                "--model",
                model,
                "--taxonomy",
                str(tax),
                "--supervision",
                "descriptions",
                "--descriptions",
                str(desc),
            ]
            + common
        )
        == 0
    )
    assert main(["predict", "--model", model, "--docs", str(docs), "--output", pred]) == 0
    rows = spark.read.parquet(pred).collect()
    assert len(rows) == 40
    correct = sum(r["leaf"] == r["id"].split("-")[0] for r in rows)
    assert correct >= 30, correct
    assert (
        main(
            [
                "train",
                "--docs",
                str(docs),
                "--model",
                model + "2",
                "--taxonomy",
                str(tax),
                "--supervision",
                "descriptions",
            ]
            + common
        )
        == 2
    )  # no --descriptions: clear error


def test_precomputed_similarities_column(spark, tmp_path):
    from chispa import assert_df_equality

    from pcem_spark.model.weak_labels import weak_label_from_similarities

    tax = Taxonomy({"ROOT": ["sport", "tech"], "sport": ["football", "tennis"], "tech": ["phones", "chips"]})
    df = spark.createDataFrame(
        [
            ("a", {"sport": 0.9, "tech": 0.1, "football": 0.2, "tennis": 0.7}),
            ("b", {"tech": 0.4, "chips": 0.3}),
            ("c", {}),
            ("d", None),
        ],
        "id string, similarities map<string,double>",
    )
    weak = weak_label_from_similarities(df, tax)
    expected = spark.createDataFrame(
        [("a", ["sport", "tennis"]), ("b", ["tech", "chips"]), ("c", None), ("d", None)],
        "id string, weak_path array<string>",
    )
    assert_df_equality(weak.select("id", "weak_path"), expected, ignore_row_order=True, ignore_nullable=True)
    bad = spark.createDataFrame([("x", {"sport": 1.0, "golf": 0.5})], "id string, similarities map<string,double>")
    with pytest.raises(TaxonomyError, match=r"not in the taxonomy: \['golf'\]"):
        weak_label_from_similarities(bad, tax)


def test_path_mode_always_picks_one_consistent_path():
    from pcem_spark.core.similarity import best_path_node_scores

    tax = Taxonomy({"R": ["a", "b"], "a": ["a1", "a2"], "b": ["b1"]})
    nodes = ["a", "b", "a1", "a2", "b1"]
    # Per-depth argmax would pick b (level 1) and a1 (level 2): not a path.
    sims = np.array([[0.30, 0.35, 0.5, 0.1, 0.0]])
    assert argmax_node_scores(sims, [1, 1, 2, 2, 2])[0].tolist() == [0, 1, 1, 0, 0]
    scores, best = best_path_node_scores(sims, nodes, tax)
    assert tax.real_path(int(best[0])) == ["a", "a1"]  # 0.8 beats b/b1 = 0.35
    assert scores[0, tax.node_index["a"]] == 1 and scores[0, tax.node_index["a1"]] == 1 and scores.sum() == 2


WOOL_TAX = Taxonomy({"ROOT": ["sport", "textiles"], "sport": ["football", "tennis"], "textiles": ["cotton", "wool"]})
WOOL_DESC = {
    "sport": "sport games",
    "textiles": "textiles fabric",
    "football": "football goal striker",
    "tennis": "tennis racket serve",
    "cotton": "cotton fabric yarn",
    "wool": "wool sheep",
}
# "wool" and "sheep" are not in the vocabulary (as when min_df drops a rare class's words).
WOOL_VOCAB = [
    "goal",
    "striker",
    "racket",
    "serve",
    "cotton",
    "fabric",
    "yarn",
    "football",
    "tennis",
    "sport",
    "games",
    "textiles",
]


def test_description_without_a_vocabulary_word_warns_and_gets_no_weak_label(spark, caplog):
    from pcem_spark.engine.features import FeatureSettings, featurize
    from pcem_spark.model.weak_labels import WeakLabelSettings, weak_label

    fs = FeatureSettings(min_df=3.0, max_df=1.0, vocab_size=0, stop_words="english")
    docs = spark.createDataFrame(
        [
            ("f", "goal striker football"),
            ("t", "racket serve tennis"),
            ("c", "cotton yarn fabric"),
            ("w", "sheep wool fabric"),
        ],
        "id string, text string",
    )
    feats = featurize(docs, WOOL_VOCAB, fs)
    for mode in ("argmax", "path", "soft"):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pcem_spark.model.weak_labels"):
            weak = weak_label(feats, WOOL_VOCAB, fs, WOOL_TAX, WOOL_DESC, WeakLabelSettings(mode=mode))
            rows = {r["id"]: r for r in weak.collect()}
        assert "1 node(s) have no word of the vocabulary" in caplog.text
        assert "'wool' ('wool sheep')" in caplog.text and "features.min_df=3" in caplog.text
        assert rows["f"]["weak_path"] == ["sport", "football"]
        # The wool document matches "fabric" (textiles, cotton), never the undescribable "wool".
        assert "wool" not in (rows["w"]["weak_path"] or [])
        wool = WOOL_TAX.node_index["wool"]
        assert all(r["node_scores"] is None or r["node_scores"][wool] == 0 for r in rows.values())


def test_path_mode_never_picks_a_path_through_an_excluded_leaf():
    from pcem_spark.core.similarity import best_path_node_scores

    nodes = ["sport", "textiles", "cotton", "football", "tennis", "wool"]
    nodes = sorted(WOOL_TAX.real_nodes, key=lambda n: (WOOL_TAX.node_depth(n), n))
    sims = np.zeros((1, len(nodes)))
    sims[0, nodes.index("textiles")] = 0.9  # parent similar, no leaf similar: ties among its leaves
    sims[0, nodes.index("football")] = 0.2
    _, best = best_path_node_scores(sims, nodes, WOOL_TAX)
    assert WOOL_TAX.real_path(int(best[0]))[0] == "textiles"
    _, best = best_path_node_scores(sims, nodes, WOOL_TAX, excluded={"cotton"})
    assert WOOL_TAX.real_path(int(best[0])) == ["textiles", "wool"]
    _, best = best_path_node_scores(sims, nodes, WOOL_TAX, excluded={"wool"})
    assert WOOL_TAX.real_path(int(best[0])) == ["textiles", "cotton"]


def test_description_matrix_uses_descendants_for_an_undescribed_inner_node(spark):
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.model.weak_labels import description_matrix

    fs = FeatureSettings(min_df=1.0, max_df=1.0, vocab_size=0, stop_words="english")
    desc = {n: d for n, d in WOOL_DESC.items() if n != "sport"}
    nodes = sorted(WOOL_TAX.real_nodes, key=lambda n: (WOOL_TAX.node_depth(n), n))
    D = description_matrix(spark, desc, WOOL_VOCAB, fs, nodes, WOOL_TAX).toarray()
    sport = D[nodes.index("sport")]
    np.testing.assert_array_equal(sport, D[nodes.index("football")] + D[nodes.index("tennis")])
    assert sport.sum() > 0


def test_a_depth_without_any_usable_description_is_an_error(spark):
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.model.weak_labels import description_matrix

    fs = FeatureSettings(min_df=1.0, max_df=1.0, vocab_size=0, stop_words="english")
    tax = Taxonomy({"R": ["a", "b"], "a": ["a1"], "b": ["b1"]})
    desc = {"a": "goal", "b": "racket", "a1": "zzz", "b1": "qqq"}
    nodes = ["a", "b", "a1", "b1"]
    with pytest.raises(
        TaxonomyError,
        match=r"no node of depth 2 \(\['a1', 'b1'\]\) has a word of the "
        r"vocabulary.*no document can get a weak label",
    ):
        description_matrix(spark, desc, WOOL_VOCAB, fs, nodes, tax)
