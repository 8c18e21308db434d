"""pcem inspect: per-node masses, priors and top terms (pure, against dense numpy references) and the
command end to end on a tiny trained model with predictions (confusion vs a brute-force count)."""

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
from cli_args import set_args

from pcem_spark import core
from pcem_spark.core import node_stats
from pcem_spark.core.methods import method_spec
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.ops import inspection, rendering

# A variable-depth tree: "misc" is a leaf at depth 1 (padded with a dummy node at depth 2).
TAX = Taxonomy(
    {"ROOT": ["sport", "tech", "misc"], "sport": ["football", "tennis", "hockey"], "tech": ["phones", "chips"]}
)


def _random_params(rng, R, V, smoothing, density=0.3):
    counts = sp.random(R, V, density=density, random_state=rng, format="csr") * 20
    totals = rng.uniform(1, 10, R)
    return counts, totals, core.sparse_log_parameters(counts, totals, smoothing)


# ------------------------------------------------------------------------- pure math
@pytest.mark.parametrize("method", ["pcem", "emmc", "tdem"])
def test_node_counts_and_word_mass_equal_dense_sums(method):
    rng = np.random.default_rng(1)
    spec = method_spec(TAX, method, components=3)
    R, V, s = spec.n_components, 40, 0.3
    counts, _, params = _random_params(rng, R, V, s)
    path_nodes, owner = node_stats.component_paths(TAX, spec)
    node, word_mass = node_stats.node_counts(params, s, path_nodes, owner)
    # Dense reference: component -> node membership by hand.
    member = np.zeros((R, TAX.n_nodes))
    for r in range(R):
        if method == "tdem":
            member[r, r] = 1.0  # components are the nodes
        else:
            j = r // 3 if method == "emmc" else r  # emmc: 3 components per path, in path order
            for n in TAX.paths[j]:
                member[r, TAX.node_index[n]] = 1.0
    expected = member.T @ counts.toarray()
    assert node.shape == (TAX.n_nodes, V)
    np.testing.assert_allclose(node.toarray(), expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(word_mass, expected.sum(axis=1), rtol=1e-9)


def test_node_mass_sums_paths_and_priors_sum_to_one_per_depth():
    rng = np.random.default_rng(2)
    M = TAX.n_paths
    A = TAX.path_node_matrix()
    labeled = rng.integers(0, 5, M).astype(float)
    total = labeled + rng.uniform(0, 30, M)
    log_prior = np.log(rng.dirichlet(np.ones(M)))
    mass = node_stats.node_mass(sp.csr_matrix(A), total, log_prior, labeled)
    np.testing.assert_allclose(mass.total, A.T @ total)
    np.testing.assert_allclose(mass.labeled, A.T @ labeled)
    np.testing.assert_allclose(mass.expected, A.T @ (total - labeled))
    np.testing.assert_allclose(mass.prior, A.T @ np.exp(log_prior))
    depth = np.array([TAX.node_depth(n) for n in TAX.nodes])
    for d in (1, 2):
        assert mass.prior[depth == d].sum() == pytest.approx(1.0)
    # The word-mass fallback: no labelled / expected split.
    fallback = node_stats.node_mass(sp.csr_matrix(A), total, log_prior)
    assert fallback.labeled is None and fallback.expected is None


def test_top_down_prior_is_the_product_of_conditional_priors():
    rng = np.random.default_rng(3)
    spec = method_spec(TAX, "tdnb")
    groups = spec.structure.groups
    raw = rng.uniform(0.1, 1.0, TAX.n_nodes)
    conditional = raw / np.bincount(groups, weights=raw)[groups]  # normalised among siblings
    prior = node_stats.node_prior(
        np.log(conditional), sp.identity(TAX.n_nodes, format="csr"), parents=spec.structure.parents
    )
    k = TAX.node_index
    assert prior[k["hockey"]] == pytest.approx(conditional[k["sport"]] * conditional[k["hockey"]])
    assert prior[k["misc#dummy2"]] == pytest.approx(conditional[k["misc"]])  # an only child: 1 x its parent
    depth = np.array([TAX.node_depth(n) for n in TAX.nodes])
    for d in (1, 2):
        assert prior[depth == d].sum() == pytest.approx(1.0)


@pytest.mark.parametrize("g", [1.0, 0.4, 0.0])
def test_labeled_documents_inverts_the_eq2_masses(g):
    rng = np.random.default_rng(4)
    A = TAX.path_node_matrix()
    n = rng.integers(0, 7, TAX.n_paths).astype(float)
    # What the engine sums: each labelled document's path scores (1 - g) leaf + g path (Eq. 2).
    scores = core.weighted_score_matrix(A, TAX.leaf_node_matrix(), g)  # (M, K)
    mass = scores @ (A.T @ n)  # (M,)
    docs = node_stats.labeled_documents(sp.csr_matrix(A), mass, g)
    np.testing.assert_allclose(docs, A.T @ n, atol=1e-9)
    assert docs[TAX.node_index["sport"]] == n[[TAX.path_index[p] for p in TAX.paths if p[0] == "sport"]].sum()
    # Soft (weak) labels are not whole documents: nothing reported.
    assert node_stats.labeled_documents(sp.csr_matrix(A), mass + 0.37, g) is None


def _dense_llr(a, b, na, nb):
    """Dunning's G^2 of [[a, b], [na - a, nb - b]] written out cell by cell, signed by the rates."""
    obs = np.array([[a, b], [na - a, nb - b]], dtype=float)
    exp = obs.sum(axis=1, keepdims=True) * obs.sum(axis=0, keepdims=True) / obs.sum()
    g = 2 * sum(o * np.log(o / e) for o, e in zip(obs.ravel(), exp.ravel()) if o > 0)
    return g if a / na >= b / nb else -g


def _dense_sibling_reference(C, parent_of, s, top_n, rank):
    C = np.asarray(C, dtype=float)
    K, V = C.shape
    out = []
    for k in range(K):
        sibs = [j for j in range(K) if parent_of[j] == parent_of[k] and j != k]
        if not sibs:
            out.append([])
            continue
        cs = C[sibs].sum(axis=0)
        lo = np.log((C[k] + s) / (C[k].sum() + V * s)) - np.log((cs + s) / (cs.sum() + V * s))
        llr = np.array([_dense_llr(C[k, w], cs[w], C[k].sum(), cs.sum()) for w in range(V)])
        key = llr if rank == "llr" else lo
        cand = [w for w in range(V) if C[k, w] > 0]
        cand.sort(key=lambda w: (-key[w], -C[k, w], w))
        out.append([(w, lo[w], llr[w], C[k, w], cs[w]) for w in cand[:top_n]])
    return out


@pytest.mark.parametrize("rank", ["llr", "log-odds"])
def test_sibling_log_odds_equals_a_dense_reference(rank):
    rng = np.random.default_rng(5)
    K, V = 9, 60
    C = sp.random(K, V, density=0.25, random_state=rng, format="csr")
    C.data = np.round(C.data * 10, 1) + 0.1
    parent_of = np.array([-1, -1, -1, 0, 0, 1, 1, 1, 2])  # node 8 is an only child
    got = node_stats.sibling_log_odds(C, parent_of, 0.5, top_n=4, rank=rank)
    ref = _dense_sibling_reference(C.toarray(), parent_of, 0.5, 4, rank)
    assert got[8] == []
    for k in range(K):
        assert [t.term for t in got[k]] == [r[0] for r in ref[k]], k
        np.testing.assert_allclose(
            [(t.log_odds, t.llr, t.count, t.sibling_count) for t in got[k]], [r[1:] for r in ref[k]], rtol=1e-9
        )


def test_sibling_log_odds_finds_the_word_that_defines_a_node():
    vocab = ["the", "game", "hockey", "puck", "tennis", "racket", "goal"]
    w = {t: i for i, t in enumerate(vocab)}
    # Three sibling leaves; every "hockey" document contains "hockey" (twice) and "puck" once (one stray
    # "puck" elsewhere); "the" and "game" are everywhere in equal amounts, so they favour no one.
    C = np.zeros((3, len(vocab)))
    C[0, [w["the"], w["game"], w["hockey"], w["puck"]]] = [50, 20, 40, 20]
    C[1, [w["the"], w["game"], w["tennis"], w["racket"]]] = [50, 20, 40, 20]
    C[2, [w["the"], w["game"], w["goal"], w["puck"]]] = [50, 20, 60, 1]
    for rank in ("llr", "log-odds"):
        top = node_stats.sibling_log_odds(sp.csr_matrix(C), np.array([-1, -1, -1]), 0.1, top_n=3, rank=rank)
        assert [vocab[t.term] for t in top[0][:2]] == ["hockey", "puck"]
        assert vocab[top[1][0].term] == "tennis" and vocab[top[2][0].term] == "goal"
        assert all(vocab[t.term] not in ("the", "game") for t in top[0][:2])
    # A hidden (dummy) node is neither scored nor anyone's sibling.
    top = node_stats.sibling_log_odds(
        sp.csr_matrix(C), np.array([-1, -1, -1]), 0.1, top_n=3, show=np.array([True, True, False])
    )
    assert top[2] == [] and top[0][0].sibling_count == 0.0


def test_rare_exclusive_terms_do_not_top_the_llr_ranking():
    # "zq7" occurs twice in the node and never in the siblings; "hockey" 300 times vs 30.
    C = np.array([[300.0, 2.0, 100.0], [30.0, 0.0, 100.0], [0.0, 0.0, 100.0]])
    by_llr = node_stats.sibling_log_odds(sp.csr_matrix(C), np.array([-1, -1, -1]), 0.05, top_n=1, rank="llr")
    by_lo = node_stats.sibling_log_odds(sp.csr_matrix(C), np.array([-1, -1, -1]), 0.05, top_n=1, rank="log-odds")
    assert by_llr[0][0].term == 0 and by_lo[0][0].term == 1
    # Exact zeros need no smoothing: a term only the siblings have scores negative, one nobody has 0.
    np.testing.assert_allclose(node_stats.signed_llr(np.array([0.0, 0.0]), np.array([5.0, 0.0]), 100.0, 100.0)[1], 0.0)
    assert node_stats.signed_llr(np.array([0.0]), np.array([5.0]), 100.0, 100.0)[0] < 0


@pytest.mark.parametrize("method", ["pcem", "flat-em", "emmc", "tdem", "wdem"])
def test_inspect_model_reads_every_method_structure(method):
    """A hand-made model whose stored masses come from known labelled documents per path, for each
    component structure: the report recovers them per node, hides the dummy and its priors sum to 1."""
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    rng = np.random.default_rng(6)
    g, lam, s = 0.5, 0.5, 0.2
    spec = method_spec(TAX, method, components=2, path_weight=g)
    A = TAX.path_node_matrix()
    n = rng.integers(1, 6, TAX.n_paths).astype(float)  # labelled documents per path
    unl = rng.uniform(0, 20, TAX.n_paths)  # expected unlabelled documents per path
    if method == "pcem":
        lab = core.weighted_score_matrix(A, TAX.leaf_node_matrix(), g) @ (A.T @ n)  # Eq. 2 weights
        tot = lab + lam * unl
    elif method == "flat-em":
        lab, tot = n, n + lam * unl
    elif method == "emmc":  # two components per path, split unevenly
        share = np.tile([0.3, 0.7], TAX.n_paths)
        lab, tot = np.repeat(n, 2) * share, np.repeat(n + lam * unl, 2) * share
    else:  # components are the nodes
        lab, tot = A.T @ n, A.T @ (n + lam * unl)
    R, V = spec.n_components, 30
    counts = sp.random(R, V, density=0.5, random_state=rng, format="csr") * 10
    params = core.sparse_log_parameters(counts, tot, s, None if spec.structure is None else spec.structure.groups)
    ms = ModelSettings(method=method, smoothing=s, unlabeled_weight=lam, path_weight=g, components=2)
    model = PathModel(
        TAX,
        [f"t{i}" for i in range(V)],
        None,
        params,
        FeatureSettings(),
        ms,
        {"path_mass_labeled": list(lab), "path_mass": list(tot), "n_labeled": int(n.sum())},
    )
    report = inspection.inspect_model(model, top_n=3)
    by_name = {x["node"]: x for x in report["nodes"]}
    assert set(by_name) == set(TAX.real_nodes)
    assert report["mass"]["labeled_documents_known"] and report["mass"]["expected_documents_known"]
    for name, node in by_name.items():
        k = TAX.node_index[name]
        assert node["labeled_documents"] == (A.T @ n)[k], (method, name)
        assert node["expected_documents"] == pytest.approx((A.T @ unl)[k], abs=0.02), (method, name)
    for d in ("1", "2"):
        assert report["mass"]["prior_sum_per_depth"][d] == pytest.approx(1.0, abs=1e-5)
    assert sum(by_name[x]["labeled_documents"] for x in ("sport", "tech", "misc")) == n.sum()
    md = rendering.render_model_markdown(report)
    assert "#dummy" not in md and "| 1 | misc |" in md
    # a calibrated model: its line says how uncertain the calibrated probabilities are, and from how many documents
    model.temperature = 2.0
    model.training_summary["calibration"] = {
        "temperature": 2.0,
        "ece_uncalibrated": 0.2,
        "ece_calibrated": 0.01,
        "probability_spread": 0.041,
        "documents": 58,
    }
    md = rendering.render_model_markdown(inspection.inspect_model(model, top_n=3))
    assert "uncertain by about +-0.041 (bootstrap of 58 labelled documents)" in md


def test_confusion_tables_count_levels_none_and_unknown_names():
    tax = Taxonomy({"ROOT": ["a", "b"], "a": ["a1", "a2"], "b": ["b1"]})
    cells = [
        (1, "a", "a", 5),
        (1, "a", "b", 2),
        (1, "b", None, 1),
        (1, "zz", "a", 1),
        (2, "a1", "a1", 3),
        (2, "a1", "a2", 2),
        (2, "a2", None, 2),
        (2, "b1", "b1", 1),
    ]
    conf = inspection.confusion_tables(cells, tax, n_scored=9, n_without_labels=4)
    l1, l2 = conf["levels"]["1"], conf["levels"]["2"]
    assert l1["nodes"] == ["a", "b", "zz"] and l1["unknown_nodes"] == ["zz"]
    assert l1["counts"] == [[5, 2, 0, 0], [0, 0, 0, 1], [1, 0, 0, 0]]
    assert l1["accuracy"] == pytest.approx(5 / 9)
    assert l2["accuracy"] == pytest.approx(4 / 8) and l2["documents"] == 8
    # Ties on the count: by true node, then predicted node.
    assert l2["largest_errors"] == [
        {"true": "a1", "predicted": "a2", "count": 2, "share_of_true": 0.4},
        {"true": "a2", "predicted": rendering.NONE_LABEL, "count": 2, "share_of_true": 1.0},
    ]
    assert l1["recall"]["a"] == pytest.approx(5 / 7) and l1["recall"]["b"] == 0.0
    md = rendering.render_confusion_markdown(conf)
    assert "accuracy 55.56% (5 of 9)" in md and "4 without labels" in md


def test_write_inspection_is_atomic_and_refuses_what_it_should(tmp_path):
    out = tmp_path / "insp"
    inspection.write_inspection(str(out), {"a.txt": b"one"})
    assert (out / "a.txt").read_bytes() == b"one" and (out / "_PCEM_COMPLETE").exists()
    first_run = json.loads((out / "_PCEM_COMPLETE").read_text())["run_id"]
    with pytest.raises(FileExistsError, match="--overwrite"):
        inspection.write_inspection(str(out), {"a.txt": b"two"})
    inspection.write_inspection(str(out), {"b.txt": b"two"}, overwrite=True)
    assert sorted(os.listdir(out)) == ["_PCEM_COMPLETE", "b.txt"]  # replaced whole, not merged
    # no temporary sibling left (the replaced version is retained for readers, the lease file stays)
    assert [n for n in os.listdir(tmp_path) if ".pcem-tmp-" in n or ".pcem-old-" in n] == []
    assert [n for n in os.listdir(tmp_path) if ".pcem-v-" in n] == [f".insp.pcem-v-{first_run}"]
    with pytest.raises(ValueError, match="local directory"):
        inspection.check_local_output("hdfs://nn/x")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        inspection.check_local_output(str(tmp_path / "file"))


# ------------------------------------------------------------------ end to end (Spark)
LEAF_WORDS = {
    ("sport", "football"): "goal striker penalty league referee offside",
    ("sport", "tennis"): "serve racket wimbledon volley deuce baseline",
    ("sport", "hockey"): "hockey puck rink stick skate icing",
    ("tech", "phones"): "android iphone screen battery camera handset",
    ("tech", "chips"): "silicon transistor wafer nanometer fab lithography",
    ("misc",): "recipe garden holiday painting knitting poetry",
}
TAX_TSV = (
    "ROOT\tsport\nROOT\ttech\nROOT\tmisc\nsport\tfootball\nsport\ttennis\nsport\thockey\ntech\tphones\ntech\tchips\n"
)


COMMON = set_args(
    "features.min_df=1",
    "features.max_df=1.0",
    "model.smoothing=0.5",
    "model.unlabeled_weight=1.0",
    "model.path_weight=1.0",
    "model.family=generative",
    "model.max_iter=5",
)


@pytest.fixture(scope="module")
def trained_model(tmp_path_factory, spark):
    """The tiny model, trained once (the tests read it); its predictions are the fixture ``trained``."""
    from pcem_spark.cli import main

    rng = np.random.default_rng(0)
    d = tmp_path_factory.mktemp("inspect")
    docs, tax_file = d / "docs.jsonl", d / "tax.tsv"
    tax_file.write_text(TAX_TSV)
    lines = []
    for path, words in LEAF_WORDS.items():
        for i in range(14):
            split = "test" if i >= 10 else "train"
            text = " ".join(rng.choice(words.split(), size=8)) + " the common words"
            lines.append(json.dumps({"id": f"{path[-1]}-{i}", "text": text, "labels": list(path), "split": split}))
    docs.write_text("\n".join(lines) + "\n")
    model = str(d / "model")
    assert (
        main(
            [
                "train",
                "--docs",
                str(docs),
                "--model",
                model,
                "--taxonomy",
                str(tax_file),
                "--split",
                "train",
                "--label-rate",
                "0.2",
                "--method",
                "pcem",
            ]
            + COMMON
        )
        == 0
    )
    return {"dir": d, "model": model, "docs": str(docs)}


@pytest.fixture(scope="module")
def trained(trained_model):
    """The model and its predictions of the test split."""
    from pcem_spark.cli import main

    model, docs, pred = trained_model["model"], trained_model["docs"], str(trained_model["dir"] / "pred")
    assert main(["predict", "--model", model, "--docs", docs, "--split", "test", "--output", pred] + COMMON) == 0
    return {**trained_model, "pred": pred}


def _write_predictions(spark, path, rows):
    from pcem_spark.io.outputs import atomic_output

    df = spark.createDataFrame(
        rows, "id string, path array<string>, leaf string, probability double, labels array<string>"
    )
    with atomic_output(spark, path, "predictions") as staged:
        df.write.parquet(staged.tmp)


@pytest.mark.slow
def test_inspect_end_to_end_masses_and_confusion(spark, trained, tmp_path):
    from chispa import assert_df_equality
    from pyspark.sql import functions as F

    from pcem_spark.cli import main
    from pcem_spark.evaluation.metrics import evaluate_predictions
    from pcem_spark.model.path_model import PathModel

    out = tmp_path / "insp"
    assert (
        main(
            [
                "inspect",
                "--model",
                trained["model"],
                "--predictions",
                trained["pred"],
                "--output",
                str(out),
                "--top-terms",
                "3",
            ]
        )
        == 0
    )
    files = set(os.listdir(out))
    assert {"model.md", "model.json", "taxonomy.html", "taxonomy.png", "confusion.md", "confusion.json"} <= files
    assert (out / "taxonomy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "taxonomy.html").read_text()
    assert "<script" not in html and "http" not in html.replace("http-equiv", "")  # self-contained
    report = json.loads((out / "model.json").read_text())
    model = PathModel.load(trained["model"])
    ts = model.training_summary
    tax = model.taxonomy
    by_name = {n["node"]: n for n in report["nodes"]}
    # Dummy padding hidden; every real node listed once.
    assert set(by_name) == set(tax.real_nodes) and report["taxonomy"]["padded_nodes_hidden"] == 1
    # Masses: node sums of the training summary's per-path masses.
    A = tax.path_node_matrix()
    lab, tot = np.array(ts["path_mass_labeled"]), np.array(ts["path_mass"])
    assert report["mass"]["source"] == "training_summary"
    for name, n in by_name.items():
        k = tax.node_index[name]
        assert n["total_mass"] == pytest.approx((A.T @ tot)[k], abs=1e-3)
        assert n["labeled_mass"] == pytest.approx((A.T @ lab)[k], abs=1e-3)
        assert n["expected_mass"] == pytest.approx((A.T @ (tot - lab))[k], abs=1e-3)
        assert n["prior"] == pytest.approx((A.T @ np.exp(model.log_prior))[k], abs=1e-6)
    # Labelled documents: --label-rate 0.2 keeps max(1, round(0.2 x 10)) = 2 per leaf (experiment.assign_roles),
    # recovered from the Eq. 2 masses: each of sport's 6 labelled documents weighs 2 (= D) on its own path and
    # 1 on each of the two sibling paths, so sport's labelled mass is 24.
    assert by_name["sport"]["labeled_mass"] == pytest.approx(24.0)
    assert sum(by_name[x]["labeled_documents"] for x in ("sport", "tech", "misc")) == ts["n_labeled"] == 12
    assert by_name["sport"]["labeled_documents"] == 6 and by_name["hockey"]["labeled_documents"] == 2
    # Expected mass: lambda (1) x each unlabelled document's posterior, which sums to 1 over the top level.
    assert ts["n_unlabeled"] == 48
    assert sum(by_name[x]["expected_mass"] for x in ("sport", "tech", "misc")) == pytest.approx(48, abs=1e-3)
    assert all(n["expected_documents"] == pytest.approx(n["expected_mass"], abs=1e-2) for n in report["nodes"])
    top_level = [n for n in report["nodes"] if n["depth"] == 1]
    assert sum(n["prior"] for n in top_level) == pytest.approx(1.0, abs=1e-5)
    # Top terms: each leaf's own words.
    for path, words in LEAF_WORDS.items():
        node = by_name[path[-1]]
        if node["n_siblings"]:
            assert node["top_terms"][0]["term"] in words.split(), node
            assert len(node["top_terms"]) == 3
    assert by_name["misc"]["top_terms"][0]["term"] in LEAF_WORDS[("misc",)].split()
    # Confusion: equal to a brute-force count over the predictions table.
    pred = spark.read.parquet(trained["pred"])
    conf = json.loads((out / "confusion.json").read_text())
    got_rows = []
    for level, lv in conf["levels"].items():
        for i, t in enumerate(lv["nodes"]):
            for j, p in enumerate(lv["columns"]):
                if lv["counts"][i][j]:
                    got_rows.append((int(level), t, None if p == rendering.NONE_LABEL else p, lv["counts"][i][j]))
    got = spark.createDataFrame(got_rows, "level int, true string, predicted string, n long")
    brute = (
        pred.where(F.col("labels").isNotNull())
        .select(F.explode(F.sequence(F.lit(1), F.size("labels"))).alias("level"), "labels", "path")
        .select(
            "level",
            F.expr("labels[level - 1]").alias("true"),
            F.expr("IF(size(path) >= level, path[level - 1], NULL)").alias("predicted"),
        )
        .groupBy("level", "true", "predicted")
        .agg(F.count(F.lit(1)).alias("n"))
    )
    assert_df_equality(got, brute, ignore_row_order=True, ignore_nullable=True)
    metrics = evaluate_predictions(pred, tax)
    for level, acc in metrics["level_accuracy"].items():
        assert conf["levels"][level]["accuracy"] == pytest.approx(acc)


def test_inspect_confusion_counts_short_null_and_unlabelled_predictions(spark, trained_model, tmp_path):
    from pcem_spark.cli import main

    pred = str(tmp_path / "pred")
    _write_predictions(
        spark,
        pred,
        [
            ("1", ["sport", "hockey"], "hockey", 0.9, ["sport", "hockey"]),
            ("2", ["sport"], "sport", 0.6, ["sport", "tennis"]),  # stops above level 2
            ("3", None, None, 0.0, ["tech", "chips"]),  # no prediction at all
            ("4", ["misc"], "misc", 0.8, ["misc"]),  # a depth-1 leaf: not at level 2
            ("5", ["tech", "phones"], "phones", 0.7, None),  # no labels: not scored
            ("6", ["tech", "phones"], "phones", 0.7, ["sport", "tennis"]),
        ],
    )
    out = tmp_path / "insp"
    assert main(["inspect", "--model", trained_model["model"], "--predictions", pred, "--output", str(out)]) == 0
    conf = json.loads((out / "confusion.json").read_text())
    assert conf["n_scored"] == 5 and conf["n_without_labels"] == 1
    l1, l2 = conf["levels"]["1"], conf["levels"]["2"]

    def cell(lv, t, p):
        return lv["counts"][lv["nodes"].index(t)][lv["columns"].index(p)]

    assert cell(l1, "sport", "sport") == 2 and cell(l1, "sport", "tech") == 1
    assert cell(l1, "tech", rendering.NONE_LABEL) == 1 and cell(l1, "misc", "misc") == 1
    assert l1["documents"] == 5 and l1["accuracy"] == pytest.approx(3 / 5)
    assert cell(l2, "tennis", rendering.NONE_LABEL) == 1 and cell(l2, "tennis", "phones") == 1
    assert cell(l2, "chips", rendering.NONE_LABEL) == 1 and cell(l2, "hockey", "hockey") == 1
    assert l2["documents"] == 4 and l2["accuracy"] == pytest.approx(1 / 4)
    assert "(none)" in (out / "confusion.md").read_text()


def test_inspect_an_older_model_without_path_mass(spark, trained_model, tmp_path):
    from pcem_spark.cli import main
    from pcem_spark.model.path_model import PathModel

    model = PathModel.load(trained_model["model"])
    for key in ("path_mass", "path_mass_labeled"):
        model.training_summary.pop(key)
    old = str(tmp_path / "old_model")
    model.save(old)
    out = tmp_path / "insp"
    assert main(["inspect", "--model", old, "--output", str(out)]) == 0
    report = json.loads((out / "model.json").read_text())
    assert report["mass"]["source"] == "word_counts" and "without path_mass" in report["mass"]["note"]
    assert not report["mass"]["labeled_documents_known"]
    _, n_words = core.recovered_counts(model.params, float(model.model_settings.smoothing))
    A = model.taxonomy.path_node_matrix()
    for n in report["nodes"]:
        assert n["labeled_mass"] is None and n["expected_mass"] is None
        assert n["total_mass"] == pytest.approx((A.T @ n_words)[model.taxonomy.node_index[n["node"]]], abs=1e-3)
    assert "without path_mass" in (out / "model.md").read_text()
    assert not (out / "confusion.md").exists()


def test_inspect_bad_inputs_exit_2(spark, trained_model, tmp_path, capsys):
    from pcem_spark.cli import main

    missing = str(tmp_path / "no_model")
    assert main(["inspect", "--model", missing, "--output", str(tmp_path / "o1")]) == 2
    assert "no_model" in capsys.readouterr().err
    partial = tmp_path / "partial_pred"
    spark.createDataFrame([("1", ["a"])], "id string, path array<string>").write.parquet(str(partial))
    assert (
        main(
            [
                "inspect",
                "--model",
                trained_model["model"],
                "--predictions",
                str(partial),
                "--output",
                str(tmp_path / "o2"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "partial_pred" in err and "completion marker" in err
    assert not (tmp_path / "o2").exists()
    existing = tmp_path / "o3"
    existing.mkdir()
    assert main(["inspect", "--model", trained_model["model"], "--output", str(existing)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (
        main(["inspect", "--model", trained_model["model"], "--output", str(tmp_path / "o4"), "--top-terms", "0"]) == 2
    )
    assert "--top-terms" in capsys.readouterr().err


@pytest.mark.slow
def test_node_probabilities_and_the_reliability_diagram(spark, trained_model, tmp_path):
    """pcem predict --node-probabilities, then inspect --predictions: reliability bins and ECE from the table."""
    from pcem_spark.cli import main
    from pcem_spark.core.calibration import expected_calibration_error, reliability_bins

    pred = str(tmp_path / "pred")
    argv = ["predict", "--model", trained_model["model"], "--docs", trained_model["docs"], "--output", pred]
    assert main(argv + ["--node-probabilities", "--min-probability", "0.3"]) == 0
    rows = spark.read.parquet(pred).collect()
    probs, correct = [], []
    for r in rows:
        assert len(r["node_probabilities"]) == len(r["path"])  # one per node of the (abstained) path
        assert all(a >= b - 1e-12 for a, b in zip(r["node_probabilities"], r["node_probabilities"][1:]))
        assert all(p >= 0.3 for p in r["node_probabilities"])
        if r["path"]:
            assert r["node_probabilities"][-1] == pytest.approx(r["path_probability"])
        for d in range(len(r["path"])):
            probs.append(r["node_probabilities"][d])
            correct.append(list(r["labels"])[: d + 1] == list(r["path"])[: d + 1])
    out = tmp_path / "insp"
    assert main(["inspect", "--model", trained_model["model"], "--predictions", pred, "--output", str(out)]) == 0
    report = json.loads((out / "reliability.json").read_text())
    want = reliability_bins(np.array(probs), np.array(correct))
    assert [b["count"] for b in report["bins"]] == want["count"]
    assert report["ece"] == pytest.approx(expected_calibration_error(np.array(probs), np.array(correct)), abs=1e-6)
    assert (out / "reliability.md").exists() and (out / "reliability.png").read_bytes()[:4] == b"\x89PNG"
    assert "calibrat" in (out / "model.md").read_text()


def test_sibling_weight_contrasts_equal_a_dense_reference():
    rng = np.random.default_rng(8)
    tax = Taxonomy.from_label_paths([("a", "x"), ("a", "y"), ("a", "z"), ("b", "u"), ("b", "v"), ("c", "w")])
    M, V = tax.n_paths, 30
    Wt = rng.normal(size=(V, M))
    parent_of = node_stats.padded_parents(tax)
    A = tax.path_node_matrix()
    got = node_stats.sibling_weight_contrasts(Wt, A, parent_of, top_n=5)
    for k, name in enumerate(tax.nodes):
        through = [j for j, p in enumerate(tax.paths) if name in p]  # the paths through the node, by name
        sibs = [s for s in tax.children(tax.parent(name)) if s != name]
        if not sibs:
            assert got[k] == [], name
            continue
        mine = Wt[:, through].mean(axis=1)
        theirs = np.mean([Wt[:, [j for j, p in enumerate(tax.paths) if s in p]].mean(axis=1) for s in sibs], axis=0)
        contrast = mine - theirs
        want = [t for t in sorted(range(V), key=lambda t: (-contrast[t], t)) if contrast[t] > 0][:5]
        assert [t.term for t in got[k]] == want, name
        np.testing.assert_allclose([t.contrast for t in got[k]], contrast[want], rtol=1e-12)
        np.testing.assert_allclose([t.weight for t in got[k]], mine[want], rtol=1e-12)
    assert got[tax.node_index["w"]] == []  # an only child
    with pytest.raises(Exception, match="top_n"):
        node_stats.sibling_weight_contrasts(Wt, A, parent_of, top_n=0)


def test_sibling_weight_contrasts_of_a_sparse_regression_equal_the_dense_ones():
    rng = np.random.default_rng(10)
    tax = Taxonomy.from_label_paths([("a", "x"), ("a", "y"), ("a", "z"), ("b", "u"), ("b", "v"), ("c", "w")])
    V = 40
    Wt = sp.random(V, tax.n_paths, density=0.3, random_state=rng, format="csr")
    Wt.data = rng.normal(size=Wt.nnz)
    parent_of = node_stats.padded_parents(tax)
    A = tax.path_node_matrix(sparse=True)
    sparse = node_stats.sibling_weight_contrasts(Wt, A, parent_of, top_n=6)
    dense = node_stats.sibling_weight_contrasts(Wt.toarray(), A, parent_of, top_n=6)
    assert sum(len(x) for x in dense) > 20
    for got, want in zip(sparse, dense):
        assert [t.term for t in got] == [t.term for t in want]
        np.testing.assert_allclose([(t.contrast, t.weight) for t in got], [(t.contrast, t.weight) for t in want])
