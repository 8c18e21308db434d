"""Abstaining (``min_probability``) and top-k predictions (issue 13, part 3).

The pure functions of :mod:`pcem_spark.core` are checked against dense
references written here with plain loops over the padded tree (a depth-3
taxonomy with shallow, padded leaves, and every baseline structure); the
Spark predictions against brute force over every document of small models;
the CLI flags end to end through ``pcem_spark.cli.app``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
from chispa import assert_df_equality

from pcem_spark import core
from pcem_spark.core.methods import method_spec
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.arrow_io import prefix_path_arrays, top_paths_array
from pcem_spark.engine.features import FeatureSettings
from pcem_spark.evaluation.metrics import evaluate_predictions
from pcem_spark.ml import train
from pcem_spark.model.schema import PREDICTION_SCHEMA, OutputOptions, abstention_counts, prediction_schema
from pcem_spark.model.settings import ModelSettings

# Depth 3; "med" is a depth-2 leaf (one dummy) and "misc" a depth-1 leaf (two dummies).
TREE = {
    "ROOT": ["sci", "rec", "misc"],
    "sci": ["space", "med"],
    "space": ["rockets", "planets"],
    "rec": ["sport"],
    "sport": ["hockey", "baseball"],
}
TAX = Taxonomy(TREE)
WORDS = {
    "rockets": "launch booster thrust nozzle propellant countdown",
    "planets": "orbit jupiter saturn moons crater telescope",
    "med": "doctor patient disease clinic symptom therapy",
    "hockey": "puck goalie rink skate stick faceoff",
    "baseball": "pitcher inning batter homerun dugout umpire",
    "misc": "sale offer price shipping condition buyer",
}
DOC_SCHEMA = "id string, text string, labels array<string>"
FS = FeatureSettings(min_df=1, max_df=1.0, vocab_size=0)
SETTINGS = dict(smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, max_iter=5, family="generative")


# =====================================================================
# Dense references
# =====================================================================


def ref_parents(tax):
    """Parent of every padded node (None at depth 1), read off the padded paths."""
    parent = {}
    for p in tax.paths:
        for d, node in enumerate(p):
            parent[node] = p[d - 1] if d else None
    return parent


def ref_softmax(scores):
    m = max(scores.values())
    z = sum(np.exp(v - m) for v in scores.values())
    return {k: np.exp(v - m) / z for k, v in scores.items()}


def ref_path_posteriors(jll_row, tax, method, components=2):
    """One row's distribution over the padded paths, by the definition of each method."""
    M = tax.n_paths
    if method in ("pcnb", "pcem", "flat-nb"):
        post = ref_softmax(dict(enumerate(jll_row)))
        return np.array([post[j] for j in range(M)])
    if method in ("nbmc", "emmc"):
        post = ref_softmax(dict(enumerate(jll_row)))  # component r belongs to path r // components
        return np.array([sum(post[j * components + c] for c in range(components)) for j in range(M)])
    score = dict(zip(tax.nodes, jll_row))
    parent = ref_parents(tax)
    if method in ("tdnb", "tdem"):
        # P(path) = prod over its nodes of P(node | parent, x), a softmax among siblings
        local = {}
        for par in set(parent.values()):
            local.update(ref_softmax({c: score[c] for c in score if parent[c] == par}))
        prod = np.array([np.prod([local[c] for c in p]) for p in tax.paths])
        return prod
    # win-driven: one softmax per depth; the product over depths, renormalised over paths
    depth = {c: d for p in tax.paths for d, c in enumerate(p)}
    local = {}
    for d in set(depth.values()):
        local.update(ref_softmax({c: score[c] for c in score if depth[c] == d}))
    prod = np.array([np.prod([local[c] for c in p]) for p in tax.paths])
    return prod / prod.sum()


def ref_marginals(post_row, tax):
    return {c: sum(post_row[j] for j in tax.paths_through(c)) for c in tax.nodes}


def ref_kept(best, marg, tax, p):
    """Brute force: the longest prefix of the real path whose nodes all have marginal >= p."""
    kept = 0
    for node in tax.real_path(best):
        if marg[node] >= p:
            kept += 1
        else:
            break
    return kept


# =====================================================================
# Pure functions
# =====================================================================


@pytest.mark.parametrize("method", ["pcem", "emmc", "tdnb", "wdnb"])
def test_path_posteriors_match_the_reference(method):
    spec = method_spec(TAX, method, components=2)
    rng = np.random.default_rng(1)
    jll = rng.normal(scale=3.0, size=(9, spec.n_components))
    jll[0] = 0.0  # a row with no evidence at all
    got = core.path_posteriors(jll, spec.structure)
    assert got.shape == (9, TAX.n_paths)
    ref = np.vstack([ref_path_posteriors(row, TAX, method) for row in jll])
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-12)
    if method == "tdnb":
        # the top-down product is already a distribution: no renormalisation hides anything
        np.testing.assert_allclose(ref.sum(axis=1), 1.0, rtol=1e-12)
    if method in ("pcem", "emmc"):
        # its argmax is the decoded path
        np.testing.assert_array_equal(got.argmax(axis=1), core.decode(jll, spec.structure)[0])


def test_top_down_marginals_are_the_products_of_local_probabilities_to_the_node():
    spec = method_spec(TAX, "tdnb")
    jll = np.random.default_rng(2).normal(size=(5, TAX.n_nodes))
    marg = core.node_marginals(core.path_posteriors(jll, spec.structure), TAX.path_node_matrix())
    log_local, _ = core.group_log_softmax(jll, spec.structure.groups)
    expected = np.exp(core.top_down_log_marginals(log_local, spec.structure.parents))
    np.testing.assert_allclose(marg, expected, rtol=1e-10, atol=1e-12)


def test_node_marginals_sum_the_paths_through_each_node_dense_and_sparse():
    post = np.random.default_rng(3).dirichlet(np.ones(TAX.n_paths), size=7)
    dense = core.node_marginals(post, TAX.path_node_matrix())
    sparse = core.node_marginals(post, TAX.path_node_matrix(sparse=True))
    np.testing.assert_allclose(dense, sparse, rtol=1e-14)
    for i in range(len(post)):
        ref = ref_marginals(post[i], TAX)
        np.testing.assert_allclose(dense[i], [ref[c] for c in TAX.nodes], rtol=1e-12)
    # along every padded path the marginals never increase
    for p in TAX.paths:
        cols = [TAX.node_index[c] for c in p]
        assert np.all(np.diff(dense[:, cols], axis=1) <= 1e-15)


def test_path_node_table_marks_dummies_and_names_the_real_path():
    table = core.path_node_table(TAX.path_node_matrix(sparse=True), TAX.is_dummy)
    assert table.shape == (TAX.n_paths, TAX.depth)
    for j in range(TAX.n_paths):
        real = [TAX.nodes[k] for k in table[j] if k >= 0]
        assert real == TAX.real_path(j)
        assert list(table[j, len(real) :]) == [-1] * (TAX.depth - len(real))  # dummies only at the end
    assert any(-1 in row for row in table)  # the fixture has padded leaves


@pytest.mark.parametrize("p", [0.0, 0.2, 0.4, 0.5, 0.75, 0.9, 0.99, 1.0])
def test_abstain_depth_is_the_deepest_node_at_or_above_p(p):
    rng = np.random.default_rng(4)
    post = rng.dirichlet(np.full(TAX.n_paths, 0.3), size=200)
    post[0] = np.eye(TAX.n_paths)[5]  # certain documents
    post[1] = np.eye(TAX.n_paths)[TAX.leaves.index("misc")]
    best = post.argmax(axis=1)
    marg = core.node_marginals(post, TAX.path_node_matrix())
    table = core.path_node_table(TAX.path_node_matrix(), TAX.is_dummy)
    kept = core.abstain_depth(best, marg, table, p)
    for i in range(len(post)):
        ref = ref_marginals(post[i], TAX)
        assert kept[i] == ref_kept(best[i], ref, TAX, p), (i, p)
    if p == 0.0:
        np.testing.assert_array_equal(kept, [len(TAX.real_path(j)) for j in best])
    if p == 1.0:
        assert kept[0] == len(TAX.real_path(best[0])) and kept[1] == 1
        assert (kept[2:] == 0).all()  # no other row is certain of anything


def test_top_k_paths_sorted_ties_to_the_lower_index():
    rng = np.random.default_rng(5)
    post = rng.dirichlet(np.ones(8), size=50)
    post[0] = [0.1, 0.2, 0.2, 0.1, 0.2, 0.05, 0.05, 0.1]  # ties inside and at the k-th value
    post[1] = np.full(8, 1 / 8)
    for k in (0, 1, 3, 8, 12):
        idx, prob = core.top_k_paths(post, k)
        assert idx.shape == prob.shape == (50, min(k, 8))
        for i in range(len(post)):
            ref = sorted(range(8), key=lambda j: (-post[i, j], j))[: min(k, 8)]
            assert list(idx[i]) == ref, (i, k)
        np.testing.assert_array_equal(prob, np.take_along_axis(post, idx, axis=1))
        if k:
            np.testing.assert_array_equal(idx[:, 0], post.argmax(axis=1))
            assert np.all(np.diff(prob, axis=1) <= 0) and np.all(prob.sum(axis=1) <= 1 + 1e-12)


def test_predict_path_details_agrees_with_predict_paths():
    rng = np.random.default_rng(6)
    V = 12
    params = core.PathParameters.from_log_theta(
        np.log(rng.dirichlet(np.ones(TAX.n_paths))), np.log(rng.dirichlet(np.ones(V), size=TAX.n_paths))
    )
    tables = core.scoring_tables(params)
    X = sp.csr_matrix(rng.poisson(0.6, size=(30, V)).astype(float))
    best, prob = core.predict_paths(X, None, None, None, 0.0, tables=tables)
    pn = TAX.path_node_matrix(sparse=True)
    table = core.path_node_table(pn, TAX.is_dummy)
    plain = core.predict_path_details(X, None, 0.0, tables, table)
    assert plain.kept is None and plain.top_index is None
    out = core.predict_path_details(X, None, 0.0, tables, table, min_probability=0.6, top_k=2)
    np.testing.assert_array_equal(out.best, best)
    np.testing.assert_array_equal(out.probability, prob)
    post = core.path_posteriors(core.tables_joint_log_likelihood(X, tables))
    marg = core.node_marginals(post, pn)
    for i in range(X.shape[0]):
        k = out.kept[i]
        assert k == ref_kept(best[i], ref_marginals(post[i], TAX), TAX, 0.6)
        expected = 1.0 if k == 0 else marg[i, TAX.node_index[TAX.real_path(best[i])[k - 1]]]
        assert out.kept_probability[i] == pytest.approx(expected, rel=1e-12)
    assert (out.kept == 0).any() and (out.kept > 0).any()
    np.testing.assert_array_equal(out.top_index[:, 0], best)


def test_arrow_prefix_paths_and_top_paths():
    import pyarrow as pa

    table = core.path_node_table(TAX.path_node_matrix(), TAX.is_dummy)
    names = pa.array(TAX.nodes, pa.string())
    best = np.array([0, 2, 5, 3, 5, 4])
    real_depth = np.array([len(TAX.real_path(j)) for j in best])
    kept = np.minimum([3, 1, 0, 2, 1, 3], real_depth)
    assert (kept < real_depth).any() and (kept == real_depth).any() and (kept == 0).any()
    paths, leaf = prefix_path_arrays(names, table, best, kept)
    want = [TAX.real_path(j)[:k] for j, k in zip(best, kept)]
    assert paths.to_pylist() == want
    assert leaf.to_pylist() == [w[-1] if w else None for w in want]
    real = pa.array([TAX.real_path(j) for j in range(TAX.n_paths)], pa.list_(pa.string()))
    top = top_paths_array(real, np.array([[1, 0], [4, 2]]), np.array([[0.6, 0.3], [0.5, 0.5]]))
    assert top.to_pylist() == [
        [{"path": TAX.real_path(1), "probability": 0.6}, {"path": TAX.real_path(0), "probability": 0.3}],
        [{"path": TAX.real_path(4), "probability": 0.5}, {"path": TAX.real_path(2), "probability": 0.5}],
    ]


# =====================================================================
# Spark: the predictions table
# =====================================================================


def _corpus(spark, n_per_leaf=10, n_labeled=2, seed=0, all_labeled=False):
    """Documents mostly of their leaf's words, some mixed with a sibling's or another branch's."""
    rng = np.random.default_rng(seed)
    leaves = list(WORDS)
    rows = []
    for leaf in leaves:
        labels = TAX.real_path(TAX.leaves.index(leaf))
        for i in range(n_per_leaf):
            other = leaves[(leaves.index(leaf) + 1 + i % 3) % len(leaves)]
            share = [0.0, 0.3, 0.45, 0.6][i % 4] if i >= n_labeled else 0.0
            n_other = int(round(8 * share))
            words = list(rng.choice(WORDS[leaf].split(), size=8 - n_other)) + list(
                rng.choice(WORDS[other].split(), size=n_other)
            )
            rows.append((f"{leaf}-{i}", " ".join(words), labels if (all_labeled or i < n_labeled) else None))
    return spark.createDataFrame(rows, DOC_SCHEMA)


@pytest.fixture(scope="module")
def models(spark):
    docs = _corpus(spark)
    return {m: train(docs, TAX, FS, ModelSettings(method=m, **SETTINGS))[0] for m in ("pcem", "emmc", "tdnb", "wdnb")}


@pytest.fixture(scope="module")
def truth(spark):
    return _corpus(spark, seed=1, all_labeled=True).cache()


@pytest.mark.slow
def test_default_predictions_are_unchanged(spark, models, truth):
    """p = 0 and k = 0 (the defaults): today's columns, schema and rows exactly."""
    model = models["pcem"]
    default = model.transform(truth)
    src_schema = truth.schema
    today = (
        [src_schema["id"]]
        + [PREDICTION_SCHEMA[c] for c in ("path", "leaf", "probability")]
        + [src_schema["labels"], PREDICTION_SCHEMA["in_taxonomy"]]
    )
    assert default.schema.fields == today
    assert prediction_schema() == PREDICTION_SCHEMA
    explicit = model.transform(truth, min_probability=0.0, top_k=0)
    assert_df_equality(explicit, default)
    # the options add columns and change nothing else at p = 0
    with_top = model.transform(truth, top_k=3)
    assert with_top.columns == default.columns + ["top_paths"]
    assert_df_equality(with_top.select(*default.columns), default)
    # and the rows are those of core.predict_paths on the same counts
    from pcem_spark.engine.features import featurize

    feats = featurize(truth, model.vocabulary, model.feature_settings).select("id", "features").collect()
    X = sp.vstack(
        [
            sp.csr_matrix(
                (f.features.values, f.features.indices, [0, len(f.features.indices)]), shape=(1, len(model.vocabulary))
            )
            for f in feats
        ]
    ).tocsr()
    best, prob = core.predict_paths(X, model.log_prior, model.log_theta, None, model.model_settings.doc_length)
    got = {r["id"]: r for r in default.collect()}
    for f, j, q in zip(feats, best, prob):
        assert got[f.id]["path"] == TAX.real_path(j) and got[f.id]["leaf"] == TAX.real_path(j)[-1]
        assert got[f.id]["probability"] == pytest.approx(q, rel=1e-9)


def _marginals_from_top_paths(top_paths):
    marg = {}
    for t in top_paths:
        for d in range(len(t["path"])):
            marg[tuple(t["path"][: d + 1])] = marg.get(tuple(t["path"][: d + 1]), 0.0) + t["probability"]
    return marg


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pcem", "emmc", "tdnb", "wdnb"])
def test_kept_prefix_is_the_deepest_node_with_marginal_at_least_p(spark, models, truth, method):
    """Brute force over every document: node marginals from the full top-k list (k = M)."""
    model = models[method]
    full = {r["id"]: r for r in model.transform(truth, top_k=TAX.n_paths).collect()}
    n_cut = 0
    for p in (0.3, 0.5, 0.7, 0.9):
        out = model.transform(truth, min_probability=p).collect()
        assert len(out) == len(full)
        for r in out:
            ref = full[r["id"]]
            marg = _marginals_from_top_paths(ref["top_paths"])
            kept = 0
            for d in range(len(ref["path"])):
                if marg.get(tuple(ref["path"][: d + 1]), 0.0) >= p - 1e-12:
                    kept += 1
                else:
                    break
            assert r["path"] == ref["path"][:kept], (method, p, r["id"])
            assert r["leaf"] == (r["path"][-1] if r["path"] else None)
            assert r["probability"] == ref["probability"] and r["labels"] == ref["labels"]
            want = marg[tuple(r["path"])] if r["path"] else 1.0
            assert r["path_probability"] == pytest.approx(want, rel=1e-9, abs=1e-12)
            assert r["path_probability"] >= p - 1e-12
            assert not any("#dummy" in n for n in r["path"])
            n_cut += len(r["path"]) < len(ref["path"])
    assert n_cut > 0  # the corpus has uncertain documents


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pcem", "emmc", "tdnb", "wdnb"])
def test_top_paths_sorted_and_led_by_the_argmax(spark, models, truth, method):
    model = models[method]
    for k in (1, 3, TAX.n_paths + 4):
        rows = model.transform(truth, top_k=k).collect()
        for r in rows:
            tp = r["top_paths"]
            assert len(tp) == min(k, TAX.n_paths)
            probs = [t["probability"] for t in tp]
            assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-9
            assert all(t["path"] in [TAX.real_path(j) for j in range(TAX.n_paths)] for t in tp)
            assert len({tuple(t["path"]) for t in tp}) == len(tp)
            if method in ("pcem", "emmc"):
                # the decoded path is the most probable one
                assert tp[0]["path"] == r["path"] and tp[0]["probability"] == pytest.approx(r["probability"])
        if k >= TAX.n_paths:
            assert all(sum(t["probability"] for t in r["top_paths"]) == pytest.approx(1.0) for r in rows)


@pytest.mark.slow
def test_min_probability_one_keeps_only_certain_nodes(spark, truth):
    docs = _corpus(spark)
    model, _ = train(docs, TAX, FS, ModelSettings(method="pcnb", doc_length=0.0, **SETTINGS))
    long_doc = " ".join([WORDS["hockey"]] * 60)  # overwhelming evidence: posterior 1.0 in float64
    extra = spark.createDataFrame([("certain", long_doc, ["rec", "sport", "hockey"])], DOC_SCHEMA)
    out = model.transform(truth.unionByName(extra), min_probability=1.0).collect()
    default = {r["id"]: r for r in model.transform(truth.unionByName(extra)).collect()}
    by_id = {r["id"]: r for r in out}
    assert by_id["certain"]["path"] == ["rec", "sport", "hockey"]
    for r in out:
        if r["path"]:
            assert r["path_probability"] == 1.0 and r["path"] == default[r["id"]]["path"][: len(r["path"])]
        else:
            assert r["leaf"] is None and r["path_probability"] == 1.0
    assert sum(not r["path"] for r in out) > 0
    counts = abstention_counts(model.transform(truth.unionByName(extra), min_probability=1.0), TAX)
    assert counts["full_path"] == sum(1 for r in out if r["path"] and r["path"] == default[r["id"]]["path"])
    assert sum(counts.values()) == len(out)


@pytest.mark.slow
def test_evaluate_scores_abstained_predictions_by_node(spark, models, truth):
    model = models["pcem"]
    base = evaluate_predictions(model.transform(truth), TAX)
    cut = model.transform(truth, min_probability=0.9).cache()
    assert cut.where("size(path) = 0").count() > 0 or cut.where("size(path) < size(labels)").count() > 0
    m = evaluate_predictions(cut, TAX)
    assert m["n_documents"] == base["n_documents"]
    assert m["micro_precision"] > base["micro_precision"]
    assert m["micro_recall"] < base["micro_recall"]
    n_pred = lambda mm: sum(v["tp"] + v["fp"] for v in mm["per_node"].values())  # noqa: E731
    n_true = lambda mm: sum(v["tp"] + v["fn"] for v in mm["per_node"].values())  # noqa: E731
    assert n_pred(m) < n_pred(base) and n_true(m) == n_true(base)
    cut.unpersist()


def test_evaluate_counts_an_empty_path_as_missed_true_nodes(spark):
    pred = spark.createDataFrame(
        [("1", [], ["sci", "med"]), ("2", ["sci"], ["sci", "space", "rockets"])],
        "id string, path array<string>, labels array<string>",
    )
    m = evaluate_predictions(pred, TAX)
    pn = m["per_node"]
    assert pn["sci"] == {"tp": 1, "fp": 0, "fn": 1}
    assert pn["med"] == {"tp": 0, "fp": 0, "fn": 1}
    assert pn["rockets"] == {"tp": 0, "fp": 0, "fn": 1}
    assert m["micro_precision"] == 1.0 and m["micro_recall"] == pytest.approx(1 / 5)
    assert m["level_accuracy"]["1"] == pytest.approx(1 / 2) and m["level_accuracy"]["2"] == 0.0


@pytest.mark.slow
def test_pyspark_ml_model_params(spark, models):
    from pcem_spark.ml.estimator import PathEM, PathEMModel

    docs = _corpus(spark)
    est = PathEM(
        taxonomy=TAX.to_json(),
        minDF=1.0,
        maxDF=1.0,
        vocabSize=0,
        smoothing=1.0,
        unlabeledWeight=1.0,
        pathWeight=1.0,
        maxIter=3,
    )
    fitted = est.fit(docs)
    assert isinstance(fitted, PathEMModel)
    assert fitted.transform(docs).columns == docs.columns + ["path", "leaf", "probability", "in_taxonomy"]
    out = fitted.setMinProbability(0.8).setTopK(2).transform(docs)
    assert out.columns == docs.columns + ["path", "leaf", "probability", "in_taxonomy", "path_probability", "top_paths"]
    direct = fitted.path_model.predict_columns(docs, passthrough=docs.columns, outputs=OutputOptions(0.8, 2))
    assert_df_equality(out, direct)
    with pytest.raises(ValueError, match="min_probability must be a number in \\[0, 1\\]"):
        fitted.setMinProbability(1.5).transform(docs)


# =====================================================================
# CLI
# =====================================================================


def _write_docs(path, df):
    with open(path, "w") as fh:
        for r in df.collect():
            fh.write(json.dumps({"id": r["id"], "text": r["text"], "labels": r["labels"]}) + "\n")
    return str(path)


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--min-probability", "1.5"], "--min-probability must be a number in [0, 1]"),
        (["--min-probability", "-0.1"], "--min-probability must be a number in [0, 1]"),
        (["--top-k", "-1"], "--top-k must be an integer >= 0"),
        (["--set", "predict.min_probability=2"], "predict.min_probability must be a number in [0, 1]"),
        (["--set", "predict.top_k=1.5"], "top_k: expected int"),
        (["--set", "predict.tokenizer=fast"], "predict.tokenizer must be one of"),
    ],
)
def test_cli_predict_refuses_bad_options(tmp_path, capsys, flags, needle):
    from pcem_spark.cli import main

    rc = main(
        [
            "predict",
            "--model",
            str(tmp_path / "m"),
            "--docs",
            str(tmp_path / "d.jsonl"),
            "--output",
            str(tmp_path / "p"),
        ]
        + flags
    )
    assert rc == 2
    assert needle in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "p")


@pytest.mark.parametrize("flags", [["--top-k", "1.5"], ["--min-probability", "high"]])
def test_cli_predict_refuses_non_numbers(tmp_path, capsys, flags):
    from pcem_spark.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["predict", "--model", "m", "--docs", "d", "--output", str(tmp_path / "p")] + flags)
    assert exc.value.code == 2
    assert flags[0] in capsys.readouterr().err


@pytest.mark.slow
def test_cli_predict_and_evaluate_with_abstaining(spark, models, truth, tmp_path):
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker

    model_dir = str(tmp_path / "model")
    models["pcem"].save(model_dir)
    docs = _write_docs(tmp_path / "docs.jsonl", truth)
    plain, cut = str(tmp_path / "plain"), str(tmp_path / "cut")
    assert main(["predict", "--model", model_dir, "--docs", docs, "--output", plain]) == 0
    assert (
        main(
            [
                "predict",
                "--model",
                model_dir,
                "--docs",
                docs,
                "--output",
                cut,
                "--set",
                "predict.min_probability=0.5",
                "--min-probability",
                "0.9",
                "--top-k",
                "2",
            ]
        )
        == 0
    )
    p0, p1 = spark.read.parquet(plain), spark.read.parquet(cut)
    assert p0.columns == PREDICTION_SCHEMA.names
    assert p1.columns == PREDICTION_SCHEMA.names + ["path_probability", "top_paths"]
    assert p1.where("path_probability < 0.9").count() == 0  # the flag won over [predict]
    marker = read_marker(spark, cut)
    assert marker["min_probability"] == 0.9 and marker["top_k"] == 2
    assert sum(marker["abstention"].values()) == marker["rows"] == truth.count()
    assert read_marker(spark, plain)["min_probability"] == 0.0
    for name in ("plain", "cut"):
        assert (
            main(
                [
                    "evaluate",
                    "--predictions",
                    str(tmp_path / name),
                    "--model",
                    model_dir,
                    "--output",
                    str(tmp_path / f"{name}.json"),
                ]
            )
            == 0
        )
    m0, m1 = (json.load(open(tmp_path / f"{n}.json")) for n in ("plain", "cut"))
    assert m1["micro_precision"] > m0["micro_precision"]
