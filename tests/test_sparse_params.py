"""Sparse parameters, truncated posteriors and the engine's sparse sums (issue 12).

Checked against the independent dense reference of ``test_reference`` (Eqs.
2-8 written out with numpy loops): exact when nothing is truncated, and
against a dense numpy computation of the truncated E-step when it is.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from test_reference import (
    ATOL,
    RTOL,
    make_corpus,
    ref_e_step,
    ref_em,
    ref_jll,
    ref_log_params,
    ref_loglik,
    ref_posterior,
    to_blocks,
)

from pcem_spark import core, engine
from pcem_spark.engine import limits, passes, sums
from pcem_spark.engine.limits import ResultSizeError
from pcem_spark.model.fitting import score_matrix


@pytest.fixture(scope="module")
def deep(spark):
    c = make_corpus("deep", n_docs=60, vocab=40, seed=7)
    c.blocks = to_blocks(spark, c, block_size=4, n_partitions=5)
    yield c
    c.blocks.unpersist()


def _sparse_counts(seed=0, M=6, V=50, density=0.2):
    rng = np.random.default_rng(seed)
    wc = sp.random(M, V, density=density, random_state=seed, format="csr")
    wc.data = np.round(wc.data * 7, 3)
    return wc, rng.random(M) * 4


# ------------------------------------------------------------------ pure math
@pytest.mark.parametrize("smoothing", [1.0, 0.05])
def test_sparse_parameters_equal_the_dense_equations(smoothing):
    wc, totals = _sparse_counts()
    X = wc.toarray()
    # the reference takes documents and path scores: one "document" per path with weight 1
    ref_lp, ref_lt = ref_log_params(X, np.eye(X.shape[0]) * 1.0, smoothing)
    params = core.sparse_log_parameters(wc, np.ones(X.shape[0]), smoothing)
    np.testing.assert_allclose(params.log_prior, ref_lp, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(params.log_theta(), ref_lt, rtol=RTOL, atol=ATOL)
    # stored by what the counts hold: one non-zero per non-zero count, never M x V
    assert params.log_ratio.nnz == wc.nnz < X.size
    assert np.all(params.log_ratio.data > 0)
    # and the dense M-step gives the same numbers (with any totals, groups, prior smoothing)
    groups = np.array([0, 0, 1, 1, 1, 2])
    lp, lt = core.log_parameters(X, totals, smoothing, groups, prior_smoothing=0.5)
    sparse = core.sparse_log_parameters(wc, totals, smoothing, groups, prior_smoothing=0.5)
    np.testing.assert_allclose(sparse.log_prior, lp, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(sparse.log_theta(), lt, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(
        core.sparse_log_prior_density(sparse, smoothing, 0.5), core.log_prior_density(lp, lt, smoothing, 0.5), rtol=RTOL
    )
    # the caller's counts are not touched
    np.testing.assert_array_equal(wc.toarray(), X)


def test_from_log_theta_is_exact_for_any_dense_parameters():
    rng = np.random.default_rng(3)
    lt = np.log(rng.dirichlet(np.ones(30), size=4))
    lp = np.log(rng.dirichlet(np.ones(4)))
    p = core.PathParameters.from_log_theta(lp, lt)
    np.testing.assert_allclose(p.log_theta(), lt, rtol=0, atol=1e-12)
    assert p.log_ratio.nnz <= lt.size - lt.shape[0]  # each row's minimum is the base


@pytest.mark.parametrize("dense_share", [0.0, 0.25, 2.0])
def test_scoring_tables_give_the_reference_joint_log_likelihood(dense_share):
    wc, totals = _sparse_counts(seed=1, M=8, V=60, density=0.15)
    params = core.sparse_log_parameters(wc, totals, 0.3)
    rng = np.random.default_rng(4)
    X = rng.poisson(0.4, size=(25, 60)).astype(float)
    ref = ref_jll(X, params.log_prior, params.log_theta())
    tables = core.scoring_tables(params, "float64", dense_share)
    if dense_share == 2.0:
        assert tables.dense_terms is not None and tables.sparse_t.nnz == params.log_ratio.nnz
    if dense_share == 0.0:
        assert tables.dense_terms is None  # every term is frequent: one dense table
    np.testing.assert_allclose(core.tables_joint_log_likelihood(sp.csr_matrix(X), tables), ref, rtol=RTOL, atol=ATOL)
    # an integer count matrix scores the same
    np.testing.assert_allclose(
        core.tables_joint_log_likelihood(sp.csr_matrix(X.astype(np.int64)), tables), ref, rtol=RTOL, atol=ATOL
    )


def test_float32_prediction_matches_float64():
    wc, totals = _sparse_counts(seed=2, M=10, V=80, density=0.3)
    params = core.sparse_log_parameters(wc, totals, 0.1)
    rng = np.random.default_rng(5)
    X = sp.csr_matrix(rng.poisson(0.3, size=(200, 80)).astype(float))
    best64, prob64 = core.predict_paths(X, None, None, tables=core.scoring_tables(params, "float64"))
    best32, prob32 = core.predict_paths(X, None, None, tables=core.scoring_tables(params, "float32"))
    np.testing.assert_allclose(prob32, prob64, rtol=0, atol=1e-5)
    agree = best32 == best64
    # a different argmax only where two paths tie to float32 precision
    assert agree.mean() > 0.99
    assert np.all(np.abs(prob64[~agree] - 0.5) < 1e-3) if (~agree).any() else True


def test_truncation_keeps_top_k_renormalised_and_is_exact_for_k_ge_m():
    rng = np.random.default_rng(6)
    post = rng.dirichlet(np.ones(7) * 0.3, size=40)
    np.testing.assert_allclose(core.truncate_posteriors(post, 7).toarray(), post, rtol=0, atol=1e-15)
    np.testing.assert_allclose(core.truncate_posteriors(post, 0).toarray(), post, rtol=0, atol=1e-15)
    t2 = core.truncate_posteriors(post, 2).toarray()
    for i in range(len(post)):
        top = np.argsort(-post[i])[:2]
        expect = np.zeros(7)
        expect[top] = post[i, top] / post[i, top].sum()
        np.testing.assert_allclose(t2[i], expect, rtol=1e-12, atol=1e-15)
    t1 = core.truncate_posteriors(post, 1).toarray()
    np.testing.assert_array_equal(t1, np.eye(7)[post.argmax(axis=1)])
    # a floor never empties a row
    floor = core.truncate_posteriors(np.full((3, 4), 0.25), 0, 0.9).toarray()
    np.testing.assert_allclose(floor.sum(axis=1), 1.0)


def test_truncated_e_step_equals_a_dense_truncated_reference():
    c = make_corpus("deep", n_docs=50, vocab=30, seed=9)
    S_fix, lab = c.S_pc, c.labeled
    lp, lt = ref_log_params(c.X[lab], S_fix[lab], 0.5)
    tables = core.scoring_tables(core.PathParameters.from_log_theta(lp, lt))
    for k in (1, 2, c.M):
        st = core.e_step(
            sp.csr_matrix(c.X), S_fix, lab, None, None, core.EStepOptions(top_k=k, sparse_density=1.0), tables=tables
        )
        post, lse = ref_posterior(ref_jll(c.X[~lab], lp, lt))
        kept = np.zeros_like(post)
        for i in range(len(post)):
            # the k largest; a tie with the k-th largest is kept too (no arbitrary tie-break)
            top = post[i] >= np.sort(post[i])[::-1][k - 1]
            kept[i, top] = post[i, top] / post[i, top].sum()
        R = np.where(lab[:, None], S_fix, 0.0)
        R[~lab] = kept
        wc = st.word_counts.toarray() if sp.issparse(st.word_counts) else st.word_counts
        np.testing.assert_allclose(wc, R.T @ c.X, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(st.path_totals, R.sum(axis=0), rtol=RTOL, atol=ATOL)
        # Eq. 8's data term is that of the exact posterior (truncation only changes the M-step)
        ref_ll = ref_loglik(c.X, S_fix, lab, lp, lt, 0.0)
        assert st.loglik == pytest.approx(ref_ll, rel=RTOL)


def test_e_step_of_an_integer_count_matrix_is_not_truncated_to_zero():
    c = make_corpus("padded", n_docs=30, vocab=20, seed=2)
    lp, lt = ref_log_params(c.X[c.labeled], c.S_pc[c.labeled], 1.0)
    Xi = sp.csr_matrix(c.X.astype(np.int64))
    st = core.e_step(Xi, c.S_pc, c.labeled, lp, lt)
    R = ref_e_step(c.X, c.S_pc, c.labeled, lp, lt)
    assert st.word_counts.dtype == np.float64
    np.testing.assert_allclose(st.word_counts, R.T @ c.X, rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------ the engine
def test_engine_with_k_ge_m_is_exact_em(deep):
    c = deep
    res = engine.fit(
        c.blocks,
        score_matrix(c.tax, "pcem"),
        c.V,
        engine.EMSettings(em=True, smoothing=0.7, max_iter=4, tol=0.0, top_k=c.M),
    )
    lp, lt, lls = ref_em(c.X, c.S_pc, c.labeled, 0.7, 4)
    np.testing.assert_allclose(res.log_prior, lp, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.log_theta, lt, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL, atol=ATOL)


def test_engine_sparse_sums_equal_dense_reference(deep, monkeypatch):
    """Force the sparse transport (as with thousands of paths): same numbers to 1e-9."""
    c = deep
    monkeypatch.setattr(sums, "SPARSE_SUMS_MIN_CELLS", 1)
    stats = []
    res = engine.fit(
        c.blocks,
        score_matrix(c.tax, "pcem"),
        c.V,
        engine.EMSettings(em=True, smoothing=0.7, max_iter=3, tol=0.0),
        stats=stats,
    )
    lp, lt, lls = ref_em(c.X, c.S_pc, c.labeled, 0.7, 3)
    np.testing.assert_allclose(res.log_theta, lt, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL, atol=ATOL)
    assert len(stats) == 4 and all(s["broadcast_bytes"] > 0 for s in stats)
    assert all(s["collected_bytes"] > 0 for s in stats[1:])


def test_engine_truncated_em_follows_the_truncated_reference(deep):
    c = deep
    k = 2
    res = engine.fit(
        c.blocks,
        score_matrix(c.tax, "pcem"),
        c.V,
        engine.EMSettings(em=True, smoothing=0.7, max_iter=3, tol=0.0, top_k=k),
    )
    # dense reference of truncated EM
    lp, lt = ref_log_params(c.X[c.labeled], c.S_pc[c.labeled], 0.7)
    for _ in range(3):
        post, _ = ref_posterior(ref_jll(c.X[~c.labeled], lp, lt))
        kept = np.zeros_like(post)
        for i in range(len(post)):
            # the k largest; a tie with the k-th largest is kept too (no arbitrary tie-break)
            top = post[i] >= np.sort(post[i])[::-1][k - 1]
            kept[i, top] = post[i, top] / post[i, top].sum()
        R = np.where(c.labeled[:, None], c.S_pc, 0.0)
        R[~c.labeled] = kept
        lp, lt = ref_log_params(c.X, R, 0.7)
    np.testing.assert_allclose(res.log_theta, lt, rtol=RTOL, atol=ATOL)
    # truncation made the parameters sparser than exact EM's
    exact = engine.fit(
        c.blocks, score_matrix(c.tax, "pcem"), c.V, engine.EMSettings(em=True, smoothing=0.7, max_iter=3, tol=0.0)
    )
    assert res.params.log_ratio.nnz < exact.params.log_ratio.nnz


def test_nb_parameters_of_the_fit_are_freed_during_em(deep):
    """The result keeps only the final parameters: nothing references the initial NB ones."""
    import gc
    import weakref

    c = deep
    refs = []
    real = passes.sparse_log_parameters  # the EM loop's M-step

    def tracked(*a, **kw):
        p = real(*a, **kw)
        refs.append(weakref.ref(p.log_ratio))
        return p

    passes.sparse_log_parameters = tracked
    try:
        res = engine.fit(
            c.blocks, score_matrix(c.tax, "pcem"), c.V, engine.EMSettings(em=True, smoothing=0.7, max_iter=3, tol=0.0)
        )
    finally:
        passes.sparse_log_parameters = real
    gc.collect()
    alive = [r() is not None for r in refs]
    assert alive == [False] * (len(refs) - 1) + [True]
    assert refs[-1]() is res.params.log_ratio


def test_sparse_collect_is_checked_against_max_result_size_with_a_clear_message(deep, monkeypatch):
    c = deep
    monkeypatch.setattr(sums, "SPARSE_SUMS_MIN_CELLS", 1)
    monkeypatch.setattr(limits, "max_result_size", lambda sc: 2048)  # a 2 KiB driver limit
    params = core.PathParameters.from_log_theta(*ref_log_params(c.X[c.labeled], c.S_pc[c.labeled], 1.0))
    with pytest.raises(ResultSizeError) as err:
        engine.sufficient_stats(
            c.blocks,
            params,
            score_matrix(c.tax, "pcem"),
            c.V,
            engine.PassOptions(use_unlabeled=True),
            n_terms=sums.TermCounts(10**6, 10**4, 10**6),
        )
    assert f"{c.M:,} paths x {c.V:,} terms" in str(err.value)
    assert "spark.driver.maxResultSize" in str(err.value)


# ------------------------------------------------------------------ taxonomy scale
def test_sparse_score_matrices_equal_the_dense_ones():
    from pcem_spark.core.methods import method_spec
    from pcem_spark.core.taxonomy import Taxonomy

    tax = Taxonomy({"R": ["x", "y", "z"], "x": ["x1", "x2"], "x1": ["x11", "x12"], "z": ["z1"]})
    for sparse in (False, True):
        pn, leaf = tax.path_node_matrix(sparse), tax.leaf_node_matrix(sparse)
        assert sp.issparse(pn) == sparse and sp.issparse(leaf) == sparse
    for g in (0.0, 0.4, 1.0):
        dense = core.weighted_score_matrix(tax.path_node_matrix(), tax.leaf_node_matrix(), g)
        sparse = core.weighted_score_matrix(tax.path_node_matrix(True), tax.leaf_node_matrix(True), g)
        np.testing.assert_array_equal(sparse.toarray(), dense)
        ns = sp.random(9, tax.n_nodes, density=0.4, random_state=1, format="csr")
        np.testing.assert_allclose(core.path_scores(ns, sparse), core.path_scores(ns, dense), rtol=1e-12)
    # a wide taxonomy gets sparse score matrices from method_spec
    wide = Taxonomy(
        {"R": [f"a{i}" for i in range(40)], **{f"a{i}": [f"a{i}.{j}" for j in range(60)] for i in range(40)}}
    )
    assert wide.n_paths * wide.n_nodes >= 1 << 22
    for method in ("pcem", "flat-em", "emmc", "tdem"):
        spec = method_spec(wide, method, 2)
        assert sp.issparse(spec.score_matrix), method


def test_beam_with_a_wide_enough_beam_is_the_exact_argmax_and_narrow_beams_approximate_it():
    from pcem_spark.core.taxonomy import Taxonomy

    children = {
        "R": ["a", "b", "c"],
        "a": ["a1", "a2"],
        "b": ["b1", "b2", "b3"],
        "c": ["c1"],
        "a1": ["a11", "a12"],
        "b2": ["b21", "b22"],
    }
    tax = Taxonomy(children)  # depth 3 with padded leaves
    M, V = tax.n_paths, 40
    rng = np.random.default_rng(12)
    word = rng.dirichlet(np.full(V, 0.2), size=M)
    y = rng.integers(M, size=300)
    X = np.vstack([rng.multinomial(30, word[j]) for j in y]).astype(float)
    S = np.eye(M)[y[:150]]
    params = core.sparse_log_parameters(sp.csr_matrix(S.T @ X[:150]), S.sum(axis=0), 0.5)
    Xt = sp.csr_matrix(X[150:])
    exact, prob = core.predict_paths(Xt, params.log_prior, params.log_theta())
    tables = core.beam_tables(params, tax.path_node_matrix(sparse=True), 0.5)
    wide, wide_prob = core.beam_predict_paths(Xt, tables, beam=M)
    np.testing.assert_array_equal(wide, exact)
    np.testing.assert_allclose(wide_prob, prob, rtol=1e-9)
    # the node tables aggregate the counts of the paths below each node
    nodes, _, node_params = tables.levels[0]
    a = tax.node_index["a"]
    slot = int(np.flatnonzero(nodes == a)[0])
    under_a = tax.paths_through("a")
    counts = (S.T @ X[:150])[under_a].sum(axis=0)
    np.testing.assert_allclose(
        node_params.log_theta()[slot], np.log((0.5 + counts) / (V * 0.5 + counts.sum())), rtol=1e-9
    )
    narrow, _ = core.beam_predict_paths(Xt, tables, beam=1)
    assert narrow.shape == exact.shape and (narrow == exact).mean() > 0.5


def test_models_of_format_1_still_load(spark, tmp_path):
    """Models saved with dense log theta rows (format 1) load into the sparse form unchanged."""
    import json
    from dataclasses import asdict

    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.io.outputs import atomic_output
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    tax = Taxonomy({"R": ["a", "b"], "a": ["a1", "a2"]})
    rng = np.random.default_rng(1)
    lt = np.log(rng.dirichlet(np.ones(5), size=tax.n_paths))
    lp = np.log(rng.dirichlet(np.ones(tax.n_paths)))
    ms = ModelSettings(smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, family="generative")
    path = str(tmp_path / "v1")
    meta = {
        "format_version": 1,
        "class": "pcem_spark.model.PathModel",
        "taxonomy": json.loads(tax.to_json()),
        "feature_settings": asdict(FeatureSettings()),
        "model_settings": asdict(ms),
        "n_paths": tax.n_paths,
        "vocab_size": 5,
        "features_col": None,
        "training_summary": {},
    }
    meta["model_settings"].pop("posterior_top_k")  # format-1 models predate it
    for key in ("names_fade", "names_kept_tokens"):  # ... and the names' fade: they were trained with a fixed weight
        meta["model_settings"].pop(key)
    with atomic_output(spark, path, "model") as staged:
        spark.createDataFrame([(json.dumps(meta),)], "value string").coalesce(1).write.text(f"{staged.tmp}/metadata")
        spark.createDataFrame(list(enumerate("vwxyz")), "index int, term string").write.parquet(
            f"{staged.tmp}/vocabulary"
        )
        spark.createDataFrame(
            [(j, float(lp[j]), lt[j].astype("<f8").tobytes()) for j in range(tax.n_paths)],
            "path_index int, log_prior double, log_theta binary",
        ).write.parquet(f"{staged.tmp}/parameters")
    model = PathModel.load(path)
    np.testing.assert_allclose(model.log_theta, lt, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.log_prior, lp, rtol=0, atol=0)
    assert (model.model_settings.names_fade, model.model_settings.names_kept_tokens) == (0.0, 0.0)
    assert ModelSettings().names_fade == 1.0  # not today's default
    # saved again it is format 2, sparse, and reads back the same
    model.save(str(tmp_path / "v2"))
    again = PathModel.load(str(tmp_path / "v2"))
    np.testing.assert_allclose(again.log_theta, lt, rtol=0, atol=1e-12)
    assert isinstance(again.params.log_ratio, sp.csr_matrix)


def test_dense_sums_of_all_tasks_go_to_the_driver_only_where_its_limit_holds_them_all(deep, monkeypatch):
    """A few tasks' dense sums are added on the driver; a maxResultSize that holds one copy of the sums
    but not every task's keeps the shuffle (one summed copy), and the fit is the same either way."""
    c = deep
    n_paths = score_matrix(c.tax, "pcem").shape[0]
    _, dense_bytes, _ = sums.sums_layout(n_paths, c.V, "float64")
    direct = []
    real_sum_by_key = sums._sum_by_key
    monkeypatch.setattr(sums, "_sum_by_key", lambda records: direct.append(1) or real_sum_by_key(records))
    settings = engine.EMSettings(em=True, smoothing=0.7, max_iter=2, tol=0.0)
    roomy = engine.fit(c.blocks, score_matrix(c.tax, "pcem"), c.V, settings)
    assert len(direct) == 3  # the NB pass and two EM passes, each summed on the driver
    # One copy fits (with check_result_size's headroom), two tasks' copies do not.
    monkeypatch.setattr(limits, "max_result_size", lambda sc: (1 << 20) + int(dense_bytes * 1.1 * 1.5))
    direct.clear()
    tight = engine.fit(c.blocks, score_matrix(c.tax, "pcem"), c.V, settings)
    assert direct == []
    lp, lt, lls = ref_em(c.X, c.S_pc, c.labeled, 0.7, 2)
    for res in (roomy, tight):
        np.testing.assert_allclose(res.log_theta, lt, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("top_k", [0, 2])
def test_sparse_sums_of_a_few_tasks_go_to_the_driver_where_their_bound_holds_and_the_fit_is_the_same(
    deep, monkeypatch, top_k
):
    """Sparse sums (wide models): a few tasks' records are added on the driver when a bound on all of them fits
    its limit; past DIRECT_COLLECT_MAX_TASKS tasks they are summed on the cluster. Both fits are the same, and
    the bound from the corpus's term counts holds every task's records of every pass."""
    c = deep
    monkeypatch.setattr(sums, "SPARSE_SUMS_MIN_CELLS", 1)
    direct = []
    real_sum_by_key = sums._sum_by_key
    # Only the driver's calls reach this list: the reducers of the shuffle run in Python workers.
    monkeypatch.setattr(sums, "_sum_by_key", lambda records: direct.append(1) or real_sum_by_key(records))
    bounds = []
    real_bound = sums._collect_bound

    def recorded_bound(*args):
        bounds.append(real_bound(*args))
        return bounds[-1]

    monkeypatch.setattr(sums, "_collect_bound", recorded_bound)
    settings = engine.EMSettings(em=True, smoothing=0.7, max_iter=2, tol=0.0, top_k=top_k)
    stats = []
    few = engine.fit(c.blocks, score_matrix(c.tax, "pcem"), c.V, settings, stats=stats)
    assert len(direct) == 3  # the NB pass and two EM passes, each added on the driver
    # The bound of all the tasks' records (the second call of each pass) holds what the driver received.
    for s, bound in zip(stats, bounds[1::2]):
        assert 0 < s["collected_bytes"] <= bound
    monkeypatch.setattr(sums, "DIRECT_COLLECT_MAX_TASKS", 0)
    direct.clear()
    many = engine.fit(c.blocks, score_matrix(c.tax, "pcem"), c.V, settings)
    assert direct == []
    np.testing.assert_allclose(many.log_theta, few.log_theta, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(many.loglik_history, few.loglik_history, rtol=1e-12)
    if top_k == 0:
        lp, lt, lls = ref_em(c.X, c.S_pc, c.labeled, 0.7, 2)
        np.testing.assert_allclose(few.log_theta, lt, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(few.loglik_history, lls, rtol=RTOL, atol=ATOL)


def test_a_sparse_pass_whose_bound_passes_the_driver_limit_is_summed_on_the_cluster(deep, monkeypatch):
    """A limit under the bound of every task's records (but over the summed sums) keeps the shuffle."""
    c = deep
    monkeypatch.setattr(sums, "SPARSE_SUMS_MIN_CELLS", 1)
    monkeypatch.setattr(limits, "max_result_size", lambda sc: 4 << 20)
    assert sums._direct(c.blocks.context, True, 2, 2 << 20)
    assert not sums._direct(c.blocks.context, True, 2, 4 << 20)
    assert not sums._direct(c.blocks.context, True, sums.DIRECT_COLLECT_MAX_TASKS + 1, 1 << 10)
    assert not sums._direct(c.blocks.context, False, 2, sums.DIRECT_COLLECT_BYTES)


def _java_error(spark, text: str):
    from py4j.protocol import Py4JJavaError

    return Py4JJavaError(
        "An error occurred while calling o9.collectToPython.\n",
        spark.sparkContext._jvm.org.apache.spark.SparkException(text),
    )


def test_a_direct_collect_that_spark_aborts_for_its_size_runs_again_summed_on_the_cluster(
    spark, deep, monkeypatch, caplog
):
    """The bound can miss exact posterior ties: Spark's maxResultSize abort of the direct collect sends the
    pass to the cluster's sum, with a warning, and the fit is the dense reference's; other errors propagate."""
    from pyspark import RDD

    c = deep
    monkeypatch.setattr(sums, "SPARSE_SUMS_MIN_CELLS", 1)
    real_collect = RDD.collect
    aborts = []

    def collect_aborted_once(self):
        if not aborts:
            aborts.append(1)
            raise _java_error(
                spark,
                "Job aborted due to stage failure: Total size of serialized results of 2 tasks (1100.0 MiB) is "
                "bigger than spark.driver.maxResultSize (1024.0 MiB)",
            )
        return real_collect(self)

    monkeypatch.setattr(RDD, "collect", collect_aborted_once)
    settings = engine.EMSettings(em=True, smoothing=0.7, max_iter=2, tol=0.0)
    with caplog.at_level("WARNING", logger="pcem_spark.engine.sums"):
        res = engine.fit(c.blocks, score_matrix(c.tax, "pcem"), c.V, settings)
    assert aborts == [1]
    assert "passed spark.driver.maxResultSize: summing them on the cluster" in caplog.text
    lp, lt, lls = ref_em(c.X, c.S_pc, c.labeled, 0.7, 2)
    np.testing.assert_allclose(res.log_theta, lt, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.loglik_history, lls, rtol=RTOL, atol=ATOL)

    def collect_failing(self):
        raise _java_error(spark, "Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times")

    monkeypatch.setattr(RDD, "collect", collect_failing)
    from py4j.protocol import Py4JJavaError

    with pytest.raises(Py4JJavaError, match="failed 1 times"):
        engine.fit(c.blocks, score_matrix(c.tax, "pcem"), c.V, settings)


@pytest.mark.parametrize("canonical", [True, False])
def test_splitting_off_the_path_totals_column_equals_scipys_column_slices(canonical):
    """The driver's split of the collected (M, V+1) sums into word sums and path totals (the last column)."""
    rng = np.random.default_rng(3)
    full = sp.random(40, 31, density=0.3, random_state=4, format="csr")
    full.data = rng.random(full.nnz) * 5
    full[::3, 30] = 0.0  # rows without a total, and explicit zeros
    full = full.tocsr()
    if not canonical:  # duplicates: each stored entry is added
        full = sp.csr_matrix((np.r_[full.data, 1.5], np.r_[full.indices, 30], np.r_[full.indptr[:-1], full.nnz + 1]))
        full = sp.csr_matrix((full.data, full.indices, full.indptr), shape=(40, 31))
    rest, last = sums._split_last_column(full)
    np.testing.assert_array_equal(rest.toarray(), full.toarray()[:, :30])
    np.testing.assert_array_equal(last, full.toarray()[:, 30])
    assert rest.shape == (40, 30) and last.dtype == np.float64
