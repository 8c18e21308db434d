"""Beam decoding in prediction: the vectorised decoder against its per-document reference and the exact argmax,
block scoring, and ``predict.beam`` through ``PathModel.transform``, ``PathEMModel`` and ``pcem predict``."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
from chispa import assert_df_equality

from pcem_spark import core
from pcem_spark.core import beam as beam_mod
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.errors import InputError

# Depth 3 with padded leaves: "med" one dummy, "misc" two.
TREE = {
    "ROOT": ["sci", "rec", "misc"],
    "sci": ["space", "med"],
    "space": ["rockets", "planets"],
    "rec": ["sport", "autos"],
    "sport": ["hockey", "baseball"],
    "autos": ["cars", "bikes"],
}
TAX = Taxonomy(TREE)


def random_taxonomy(rng, depth: int, max_branch: int) -> Taxonomy:
    """A random tree of at most ``depth`` levels; about 30% of the nodes below depth 1 are leaves (padded)."""
    children, frontier, k = {}, ["ROOT"], 0
    for d in range(depth):
        nxt = []
        for node in frontier:
            if d > 0 and rng.random() < 0.3:
                continue
            kids = [f"n{k + i}" for i in range(int(rng.integers(1, max_branch + 1)))]
            k += len(kids)
            children[node] = kids
            nxt += kids
        frontier = nxt
    return Taxonomy(children)


def mixed_parameters(rng, M: int, V: int = 120, n_common: int = 8) -> core.PathParameters:
    """Path counts with a few terms common to every path (the dense table) and sparse topic terms."""
    counts = np.zeros((M, V))
    counts[:, :n_common] = rng.integers(1, 5, size=(M, n_common))
    for j in range(M):
        counts[j, rng.choice(np.arange(n_common, V), size=6, replace=False)] = rng.integers(1, 9, size=6)
    return core.sparse_log_parameters(sp.csr_matrix(counts), rng.integers(1, 5, size=M).astype(float), 0.5)


def documents(seed: int, n: int = 80, V: int = 120) -> sp.csr_matrix:
    """Term counts; odd seeds fill the common terms past an eighth (their products then go by BLAS)."""
    X = sp.random(n, V, density=0.3 if seed % 2 else 0.08, random_state=seed, format="csr")
    X.data = np.ceil(X.data * 3)
    return X


# full_nodes 0: every depth scored at the kept parents only (but those whose terms are all dense);
# 10**9: every depth in full; dense_share 1.0: no dense table.
LAYOUTS = [(0, 0.25), (0, 1.0), (10**9, 0.25)]


# =====================================================================
# The vectorised decoder
# =====================================================================


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_beam_equals_the_per_document_reference(seed):
    rng = np.random.default_rng(seed)
    tax = random_taxonomy(rng, int(rng.integers(1, 5)), int(rng.integers(1, 6)))
    params = mixed_parameters(rng, tax.n_paths)
    X = documents(seed)
    tables = core.beam_tables(params, tax.path_node_matrix(sparse=True), 0.5)
    for full_nodes, share in LAYOUTS:
        scorer = core.beam_scorer(tables, full_nodes=full_nodes, dense_share=share)
        for beam in (1, 2, 3):
            want, want_prob = core.beam_predict_paths_reference(X, tables, beam)
            got, got_prob = core.beam_predict_paths(X, scorer, beam)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_allclose(got_prob, want_prob, rtol=1e-9, atol=0)


def test_the_parent_groups_are_exercised_with_and_without_a_dense_table():
    rng = np.random.default_rng(3)
    params = mixed_parameters(rng, TAX.n_paths)
    tables = core.beam_tables(params, TAX.path_node_matrix(sparse=True))
    grouped = core.beam_scorer(tables, full_nodes=0)
    assert not grouped.steps[-1].full and len(grouped.steps[-1].tables.dense_terms) > 0
    assert grouped.steps[-1].pair_table.nnz > 0 and grouped.steps[-1].tables.sparse_t is None
    assert all(s.full for s in core.beam_scorer(tables).steps)  # few nodes: scored in full
    X = documents(3)
    for beam in (1, 2):
        np.testing.assert_array_equal(
            core.beam_predict_paths(X, grouped, beam)[0], core.beam_predict_paths_reference(X, tables, beam)[0]
        )


@pytest.mark.parametrize("seed", range(8))
def test_a_beam_as_wide_as_the_tree_is_the_exact_argmax(seed):
    rng = np.random.default_rng(100 + seed)
    tax = random_taxonomy(rng, int(rng.integers(2, 5)), int(rng.integers(2, 5)))
    params = mixed_parameters(rng, tax.n_paths)
    X = documents(seed, n=60)
    exact, prob = core.predict_paths(X, None, None, tables=core.scoring_tables(params))
    tables = core.beam_tables(params, tax.path_node_matrix(sparse=True))
    widest = max(len(nodes) for nodes, _, _ in tables.levels) if tables.levels else 1
    for full_nodes, share in LAYOUTS:
        best, best_prob = core.beam_predict_paths(X, core.beam_scorer(tables, "float64", full_nodes, share), widest)
        np.testing.assert_array_equal(best, exact)
        np.testing.assert_allclose(best_prob, prob, rtol=1e-9, atol=0)


def test_wide_beam_details_equal_the_exact_details_and_narrow_ones_renormalise_over_the_scored_paths():
    rng = np.random.default_rng(7)
    params = mixed_parameters(rng, TAX.n_paths)
    X = documents(7, n=50)
    pn = TAX.path_node_matrix(sparse=True)
    table = core.path_node_table(pn, TAX.is_dummy)
    exact = core.predict_path_details(X, None, 0.0, core.scoring_tables(params), table, 0.6, 3)
    scorer = core.beam_scorer(core.beam_tables(params, pn), full_nodes=0)
    wide = core.beam_path_details(X, scorer, TAX.n_paths, 0.0, table, 0.6, 3)
    np.testing.assert_array_equal(wide.best, exact.best)
    np.testing.assert_array_equal(wide.kept, exact.kept)
    np.testing.assert_array_equal(wide.top_index, exact.top_index)
    for field in ("probability", "kept_probability", "top_probability"):
        np.testing.assert_allclose(getattr(wide, field), getattr(exact, field), rtol=1e-9, atol=1e-15)
    # beam 1: the paths under one depth-2 node; the details are those of the softmax over them
    narrow = core.beam_path_details(X, scorer, 1, 0.0, table, 0.6, 5)
    paths, scores = core.beam_candidates(X, scorer, 1)
    for i in range(X.shape[0]):
        cand = paths[i][paths[i] >= 0]
        s = scores[i][paths[i] >= 0]
        post = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        assert narrow.best[i] == cand[np.argmax(post)]
        assert narrow.probability[i] == pytest.approx(post.max(), rel=1e-12)
        top = [j for j in narrow.top_index[i] if j >= 0]
        assert top == sorted(cand, key=lambda j: (-post[list(cand).index(j)], j))[:5]
        real = [n for n in table[narrow.best[i]] if n >= 0]
        marg = [sum(post[c] for c, j in enumerate(cand) if n in table[j]) for n in real]
        kept = next((d for d, m in enumerate(marg) if m < 0.6), len(real))
        assert narrow.kept[i] == kept
        assert narrow.kept_probability[i] == pytest.approx(marg[kept - 1] if kept else 1.0, rel=1e-12)


def test_block_scores_in_row_chunks_equal_the_joint_log_likelihood():
    rng = np.random.default_rng(2)
    params = mixed_parameters(rng, 40, V=200, n_common=30)
    X = sp.random(70, 200, density=0.2, random_state=2, format="csr")
    X.data = np.ceil(X.data * 4)  # the common terms fill > 1/8 of their columns: the dense (BLAS) product
    tables = core.scoring_tables(params)
    assert tables.dense_terms is not None and len(tables.dense_terms)
    want = core.tables_joint_log_likelihood(X, tables)
    for chunk in (None, 1, 16, 1000):
        parts = list(core.block_scores(X, tables, row_chunk=chunk))
        assert [s for s, _ in parts] == list(range(0, 70, chunk or 70))[: len(parts)]
        np.testing.assert_allclose(np.vstack([j for _, j in parts]), want, rtol=1e-12)
    best, prob = core.predict_paths(X, None, None, tables=tables)
    post = core.path_posteriors(want)
    np.testing.assert_array_equal(best, want.argmax(axis=1))
    np.testing.assert_allclose(prob, post.max(axis=1), rtol=1e-12)
    empty = core.predict_paths(X[:0], None, None, tables=tables)
    assert empty[0].shape == (0,) and empty[1].shape == (0,)


def test_top_paths_array_drops_the_paths_a_beam_did_not_score():
    import pyarrow as pa

    from pcem_spark.engine.arrow_io import top_paths_array

    real = pa.array([TAX.real_path(j) for j in range(TAX.n_paths)], pa.list_(pa.string()))
    out = top_paths_array(real, np.array([[2, 0, -1], [1, -1, -1]]), np.array([[0.7, 0.3, 0.0], [1.0, 0.0, 0.0]]))
    assert out.to_pylist() == [
        [{"path": TAX.real_path(2), "probability": 0.7}, {"path": TAX.real_path(0), "probability": 0.3}],
        [{"path": TAX.real_path(1), "probability": 1.0}],
    ]


def test_beam_settings_auto_rule_and_invalid_values():
    assert core.beam_width(0, 10**6) == 0 and core.beam_width(3, 20) == 3
    assert core.beam_width("auto", core.BEAM_AUTO_PATHS) == 0
    assert core.beam_width("auto", core.BEAM_AUTO_PATHS + 1) == core.BEAM_AUTO_WIDTH
    for bad in (-1, 2.5, "wide", True, None):
        with pytest.raises(InputError, match=r'predict\.beam must be an integer >= 0 .* or "auto"'):
            core.check_beam(bad, "predict.beam")

    from pcem_spark.cli.config import ConfigError, load_settings

    assert load_settings(None, []).predict.beam == "auto"
    assert load_settings(None, ["predict.beam=3"]).predict.beam == 3
    assert load_settings(None, ["predict.beam=0"]).predict.beam == 0
    for bad in ("-1", "2.5", "wide"):
        with pytest.raises(ConfigError, match="predict.beam must be an integer >= 0"):
            load_settings(None, [f"predict.beam={bad}"])


# =====================================================================
# Spark: PathModel.transform, PathEMModel, pcem predict
# =====================================================================

WORDS = ["orbit", "rocket", "moon", "doctor", "clinic", "puck", "goalie", "pitcher", "engine", "wheel", "pedal", "sale"]


def _model(method: str = "pcnb"):
    from pcem_spark.core.methods import method_spec
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    settings = ModelSettings(
        method=method, smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, family="generative", doc_length=0.0
    )
    R = method_spec(TAX, method, settings.components, 1.0).n_components
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 4, size=(R, len(WORDS))).astype(float)
    params = core.sparse_log_parameters(sp.csr_matrix(counts), rng.integers(1, 4, size=R).astype(float), 1.0)
    features = FeatureSettings(min_df=1, max_df=1.0, vocab_size=0, stop_words="none")
    return PathModel(TAX, WORDS, None, params, features, settings)


def _docs(spark):
    rng = np.random.default_rng(9)
    rows = [(f"d{i}", " ".join(rng.choice(WORDS, size=6)), None) for i in range(24)]
    return spark.createDataFrame(rows, "id string, text string, labels array<string>")


def _in_process(model, docs, beam: int, **details):
    """The rows of transform(docs, beam=...) as core computes them (doc ids -> (best path, probability))."""
    from pcem_spark.engine.features import featurize

    feats = featurize(docs, model.vocabulary, model.feature_settings).select("id", "features").collect()
    X = sp.vstack(
        [sp.csr_matrix((f.features.values, f.features.indices, [0, len(f.features.indices)]), (1, 12)) for f in feats]
    ).tocsr()
    scorer = core.beam_scorer(core.beam_tables(model.params, TAX.path_node_matrix(sparse=True)))
    out = core.beam_path_details(X, scorer, beam, 0.0, **details)
    return {f.id: (TAX.real_path(int(j)), p) for f, j, p in zip(feats, out.best, out.probability)}


def _counts(texts) -> sp.csr_matrix:
    """Term counts over WORDS of space-separated texts (what featurize gives for these documents)."""
    rows = [np.bincount([WORDS.index(w) for w in t.split()], minlength=len(WORDS)) for t in texts]
    return sp.csr_matrix(np.array(rows, dtype=float))


def test_path_model_transform_decodes_with_the_beam_it_is_given(spark, staged_shipping):
    model = _model()
    docs = _docs(spark)
    rows = model.transform(docs, beam=1, top_k=3).collect()
    X = _counts([r.text for r in docs.collect()])
    scorer = core.beam_scorer(core.beam_tables(model.params, TAX.path_node_matrix(sparse=True)))
    want = core.beam_path_details(X, scorer, 1, 0.0, None, 0.0, 3)
    ids = [r.id for r in docs.collect()]
    assert [r.id for r in rows] == ids
    assert [r.path for r in rows] == [TAX.real_path(int(j)) for j in want.best]
    np.testing.assert_allclose([r.probability for r in rows], want.probability, rtol=1e-12)
    for r, index in zip(rows, want.top_index):
        assert [t.path for t in r.top_paths] == [TAX.real_path(int(j)) for j in index if j >= 0]
    with pytest.raises(InputError, match='beam must be an integer >= 0 .* or "auto", got -2'):
        model.transform(docs, beam=-2)
    with pytest.raises(InputError, match="tdnb decodes by its own rule"):
        _model("tdnb").transform(docs, beam=2)
    assert _model("tdnb").beam_width("auto") == 0 and model.beam_width("auto") == 0 and model.beam_width(4) == 4


@pytest.mark.slow
def test_path_model_transform_with_a_beam(spark):
    model = _model()
    docs = _docs(spark).cache()
    exact = {r.id: r for r in model.transform(docs, beam=0).collect()}
    assert {r.id: r for r in model.transform(docs).collect()} == exact  # "auto": exact with 10 paths
    wide = {r.id: r for r in model.transform(docs, beam=TAX.n_paths).collect()}
    assert {i: r.path for i, r in wide.items()} == {i: r.path for i, r in exact.items()}
    assert all(wide[i].probability == pytest.approx(exact[i].probability, rel=1e-9) for i in exact)
    narrow = model.transform(docs, beam=1, top_k=3).collect()
    want = _in_process(model, docs, 1)
    assert {r.id: r.path for r in narrow} == {i: p for i, (p, _) in want.items()}
    assert all(r.probability == pytest.approx(want[r.id][1], rel=1e-12) for r in narrow)
    assert all(1 <= len(r.top_paths) <= 3 and r.top_paths[0].path == r.path for r in narrow)
    cut = model.transform(docs, beam=1, min_probability=0.7).collect()
    assert all(r.path == {x.id: x.path for x in narrow}[r.id][: len(r.path)] for r in cut)
    assert all(r.path_probability >= 0.7 - 1e-12 for r in cut)
    docs.unpersist()


def test_pyspark_ml_model_beam_param(spark):
    from pcem_spark.ml.estimator import PathEMModel

    model = _model()
    docs = _docs(spark)
    ml = PathEMModel(model)
    assert ml.getOrDefault("beam") == "auto"
    got = {r.id: r.path for r in ml.setBeam(1).transform(docs).collect()}
    assert got == {r.id: r.path for r in model.predict_columns(docs, passthrough=docs.columns, beam=1).collect()}
    with pytest.raises(InputError, match="beam must be an integer >= 0"):
        ml.setBeam(-1).transform(docs)


@pytest.fixture(scope="module")
def saved(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("beam_cli")
    model_dir = str(base / "model")
    _model().save(model_dir)
    docs = base / "docs.jsonl"
    with open(docs, "w") as fh:
        for r in _docs(spark).collect():
            fh.write(json.dumps({"id": r.id, "text": r.text, "labels": ["sci", "space", "rockets"]}) + "\n")
    return base, model_dir, str(docs)


@pytest.mark.slow
def test_cli_predict_with_a_beam_end_to_end(spark, saved):
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker

    base, model_dir, docs = saved
    exact, beam2 = str(base / "exact"), str(base / "beam2")
    assert main(["predict", "--model", model_dir, "--docs", docs, "--output", exact]) == 0
    argv = ["predict", "--model", model_dir, "--docs", docs, "--output", beam2, "--top-k", "2"]
    assert main(argv + ["--set", "predict.beam=2"]) == 0
    assert read_marker(spark, exact)["beam"] == 0 and read_marker(spark, beam2)["beam"] == 2
    rows = spark.read.parquet(beam2).collect()
    want = _in_process(_model(), spark.read.json(docs), 2)
    assert {r.id: r.path for r in rows} == {i: p for i, (p, _) in want.items()}
    assert all(r.top_paths[0].path == r.path and len(r.top_paths) <= 2 for r in rows)
    # --beam wins over [predict]
    assert main(argv + ["--set", "predict.beam=2", "--beam", "0", "--overwrite"]) == 0
    assert read_marker(spark, beam2)["beam"] == 0


@pytest.mark.slow
def test_cli_predict_tokenizers_write_the_same_predictions(spark, saved):
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker

    base, model_dir, docs = saved
    outs = {}
    for tokenizer in ("python", "spark"):
        outs[tokenizer] = str(base / f"tok_{tokenizer}")
        argv = ["predict", "--model", model_dir, "--docs", docs, "--output", outs[tokenizer], "--top-k", "3"]
        assert main(argv + ["--set", f"predict.tokenizer={tokenizer}"]) == 0
        assert read_marker(spark, outs[tokenizer])["tokenizer"] == tokenizer
    assert_df_equality(spark.read.parquet(outs["python"]), spark.read.parquet(outs["spark"]), ignore_row_order=True)


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--set", "predict.beam=-1"], 'predict.beam must be an integer >= 0 (0 = exact, N = beam width) or "auto"'),
        (["--set", "predict.beam=2.5"], "predict.beam must be an integer >= 0"),
        (["--set", "predict.beam=wide"], "predict.beam must be an integer >= 0"),
        (["--beam", "-3"], '--beam must be an integer >= 0 (0 = exact, N = beam width) or "auto", got -3'),
    ],
)
def test_cli_predict_refuses_a_bad_beam(tmp_path, capsys, flags, needle):
    from pcem_spark.cli import main

    out = tmp_path / "p"  # the model and documents do not exist: the beam is refused before they are read
    rc = main(
        ["predict", "--model", str(tmp_path / "m"), "--docs", str(tmp_path / "d.jsonl"), "--output", str(out)] + flags
    )
    assert rc == 2
    assert needle in capsys.readouterr().err
    assert not os.path.exists(out)


def test_cli_beam_flag_must_be_a_number_or_auto(tmp_path, capsys):
    from pcem_spark.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["predict", "--model", "m", "--docs", "d", "--output", str(tmp_path / "p"), "--beam", "wide"])
    assert exc.value.code == 2 and "--beam" in capsys.readouterr().err


@pytest.mark.slow
def test_a_beam_for_a_method_without_one_component_per_path_exits_2(spark, tmp_path, capsys):
    from pcem_spark.cli import main

    docs = str(tmp_path / "docs.jsonl")
    with open(docs, "w") as fh:
        fh.write(json.dumps({"id": "d0", "text": "orbit rocket"}) + "\n")
    model_dir = str(tmp_path / "tdnb")
    _model("tdnb").save(model_dir)
    out = str(tmp_path / "p")
    assert main(["predict", "--model", model_dir, "--docs", docs, "--output", out, "--beam", "2"]) == 2
    assert "--beam = 2: a beam search decodes models with one component per path" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_reference_keeps_its_per_document_definition():
    """The reference is the old decoder: importable under its own name, and the module lists it."""
    assert "beam_predict_paths_reference" in beam_mod.__all__
    assert beam_mod.beam_predict_paths_reference.__module__ == "pcem_spark.core.beam"
