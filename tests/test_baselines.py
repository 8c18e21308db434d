"""The Table-2 baselines against independent dense references, on small corpora.

Top-down and win-driven NB/EM are written out here with plain loops over the
padded tree (the reference pads shallow leaves itself, as in
test_reference.py); multi-component NB is checked against flat NB (one
component) and against its definition; the discriminative baselines are
checked on a separable corpus with real MLlib fits.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from chispa import assert_df_equality
from test_reference import make_corpus, to_blocks

from pcem_spark import core, engine
from pcem_spark.baselines.discriminative import hiercost_costs, tree_distance_matrix
from pcem_spark.core.methods import GENERATIVE, method_spec
from pcem_spark.core.taxonomy import Taxonomy

RTOL = 1e-9
ATOL = 1e-9


# =====================================================================
# Dense references: top-down and win-driven naive Bayes
# =====================================================================


def ref_nodes(padded):
    """Nodes of the padded tree with parent and depth, read off the padded paths."""
    parent, depth = {}, {}
    for p in padded:
        for d, node in enumerate(p):
            parent[node] = p[d - 1] if d > 0 else None
            depth[node] = d + 1
    return parent, depth


def ref_node_params(X, weights, nodes, group_of, s):
    """Per-node NB parameters: ``weights[i][node]`` is document i's weight for node;
    the prior is normalised within ``group_of[node]`` (siblings or depth)."""
    V = X.shape[1]
    counts = {c: np.zeros(V) for c in nodes}
    n = {c: 0.0 for c in nodes}
    for i in range(X.shape[0]):
        for c, w in weights[i].items():
            counts[c] += w * X[i]
            n[c] += w
    log_theta = {c: np.log((s + counts[c]) / (V * s + counts[c].sum())) for c in nodes}
    group_total = {}
    for c in nodes:
        group_total[group_of[c]] = group_total.get(group_of[c], 0.0) + s + n[c]
    log_prior = {c: np.log((s + n[c]) / group_total[group_of[c]]) for c in nodes}
    return log_prior, log_theta


def ref_local_posteriors(x, nodes, group_of, log_prior, log_theta):
    """``P(c | group, x)``: softmax of log prior + x . log theta within each group."""
    score = {c: log_prior[c] + float(x @ log_theta[c]) for c in nodes}
    out = {}
    for c in nodes:
        sib = [k for k in nodes if group_of[k] == group_of[c]]
        m = max(score[k] for k in sib)
        out[c] = np.exp(score[c] - m) / sum(np.exp(score[k] - m) for k in sib)
    return out


def ref_labeled_weights(c, i):
    return {node: 1.0 for node in c.padded[c.true[i]]}


def lib_node_order(c):
    """Reference node of each library component (taxonomy.nodes order)."""
    mapping = {}
    for j, p in enumerate(c.tax.paths):
        for lib_node, ref_node in zip(p, c.padded[j]):
            mapping[lib_node] = ref_node
    return [mapping[n] for n in c.tax.nodes]


@pytest.fixture(scope="module")
def deep(spark):
    c = make_corpus("deep", n_docs=40, seed=7)
    c.blocks = to_blocks(spark, c)
    yield c
    c.blocks.unpersist()


def fit(c, method, s=0.7, max_iter=0, components=1, seed=0):
    spec = method_spec(c.tax, method, components)
    return engine.fit(
        c.blocks,
        spec.score_matrix,
        c.V,
        engine.EMSettings(em=spec.em if max_iter > 0 else False, smoothing=s, max_iter=max_iter, tol=0.0, seed=seed),
        structure=spec.structure,
    ), spec


@pytest.mark.parametrize("kind", ["td", "wd"])
def test_td_wd_nb_parameters_match_reference(deep, kind):
    c, s = deep, 0.7
    res, spec = fit(c, f"{kind}nb", s)
    parent, depth = ref_nodes(c.padded)
    nodes = list(parent)
    group_of = parent if kind == "td" else depth
    lab = np.flatnonzero(c.labeled)
    lp, lt = ref_node_params(c.X[lab], [ref_labeled_weights(c, i) for i in lab], nodes, group_of, s)
    order = lib_node_order(c)
    np.testing.assert_allclose(res.log_prior, [lp[n] for n in order], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(res.log_theta, np.vstack([lt[n] for n in order]), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind", ["td", "wd"])
def test_td_wd_one_em_iteration_matches_reference(deep, kind):
    """TDEM: unlabelled documents count in every node with their top-down marginal
    (product of local posteriors from the root); WDEM: with each depth's posterior."""
    c, s = deep, 0.7
    res, spec = fit(c, f"{kind}em", s, max_iter=1)
    parent, depth = ref_nodes(c.padded)
    nodes = list(parent)
    group_of = parent if kind == "td" else depth
    lab = c.labeled
    lp0, lt0 = ref_node_params(c.X[lab], [ref_labeled_weights(c, i) for i in np.flatnonzero(lab)], nodes, group_of, s)
    weights = []
    for i in range(c.X.shape[0]):
        if lab[i]:
            weights.append(ref_labeled_weights(c, i))
            continue
        local = ref_local_posteriors(c.X[i], nodes, group_of, lp0, lt0)
        if kind == "wd":
            weights.append(local)
        else:
            marg = {}
            for node in nodes:
                p, a = 1.0, node
                while a is not None:
                    p *= local[a]
                    a = parent[a]
                marg[node] = p
            weights.append(marg)
    lp1, lt1 = ref_node_params(c.X, weights, nodes, group_of, s)
    order = lib_node_order(c)
    np.testing.assert_allclose(res.log_prior, [lp1[n] for n in order], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(res.log_theta, np.vstack([lt1[n] for n in order]), rtol=1e-8, atol=1e-8)


def fitted_and_predicted(c, method):
    """Fit ``method`` on corpus ``c``; its parameters keyed by reference node, and the library's predictions."""
    res, spec = fit(c, method)
    parent, depth = ref_nodes(c.padded)
    order = lib_node_order(c)
    best, prob = core.predict_paths(sp.csr_matrix(c.X), res.log_prior, res.log_theta, spec.structure)
    return (parent, depth, list(parent), dict(zip(order, res.log_prior)), dict(zip(order, res.log_theta)), best, prob)


def test_top_down_routing_follows_the_tree(deep):
    """Greedy routing: the most probable child at each depth, from the root --
    even when another path has the larger product of probabilities."""
    c = deep
    parent, depth, nodes, lp, lt, best, prob = fitted_and_predicted(c, "tdnb")
    for i in range(c.X.shape[0]):
        local = ref_local_posteriors(c.X[i], nodes, parent, lp, lt)
        route, cur = [], None
        for _ in range(max(depth.values())):
            kids = [n for n in nodes if parent[n] == cur]
            cur = max(kids, key=lambda n: local[n])
            route.append(cur)
        assert tuple(route) == c.padded[best[i]], i
        np.testing.assert_allclose(prob[i], np.prod([local[n] for n in route]), rtol=1e-9)


def test_greedy_routing_can_differ_from_the_best_path():
    """A hand-made case: the root prefers branch a (0.6), but b's best leaf has the
    larger product; top-down must still answer a's best child."""
    tax = Taxonomy({"R": ["a", "b"], "a": ["a1", "a2"], "b": ["b1", "b2"]})
    spec = method_spec(tax, "tdnb")
    local = {"a": 0.6, "b": 0.4, "a1": 0.5, "a2": 0.5, "b1": 0.99, "b2": 0.01}
    jll = np.log([[local[n] for n in tax.nodes]])  # already normalised within sibling groups
    best, prob = core.decode(jll, spec.structure)
    assert tax.real_path(best[0])[0] == "a"
    assert prob[0] == pytest.approx(0.3)
    # the win-driven rule on the same scores, with depth 2 normalised over all four
    # leaves, picks b1 (0.4 + 0.495 > 0.6 + 0.25)
    wd = method_spec(tax, "wdnb")
    jll_wd = np.log([[local[n] / (1.0 if n in ("a", "b") else 2.0) for n in tax.nodes]])
    best_wd, _ = core.decode(jll_wd, wd.structure)
    assert tax.real_path(best_wd[0]) == ["b", "b1"]


def test_win_driven_picks_the_path_of_largest_summed_win(deep):
    c = deep
    parent, depth, nodes, lp, lt, best, prob = fitted_and_predicted(c, "wdnb")
    for i in range(c.X.shape[0]):
        local = ref_local_posteriors(c.X[i], nodes, depth, lp, lt)
        wins = [sum(local[n] for n in p) for p in c.padded]
        assert best[i] == int(np.argmax(wins)), i
        np.testing.assert_allclose(prob[i], max(wins) / len(c.padded[0]), rtol=1e-9)


# =====================================================================
# Multiple mixture components per class (Nigam et al.)
# =====================================================================


@pytest.mark.slow
@pytest.mark.parametrize("nb,flat", [("nbmc", "flat-nb"), ("emmc", "flat-em")])
def test_one_component_per_class_equals_flat(deep, nb, flat):
    c = deep
    mc, _ = fit(c, nb, max_iter=4, components=1)
    fl, _ = fit(c, flat, max_iter=4)
    np.testing.assert_allclose(mc.log_prior, fl.log_prior, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(mc.log_theta, fl.log_theta, rtol=RTOL, atol=ATOL)
    assert mc.n_iter == fl.n_iter


def test_multi_component_nb_matches_its_definition():
    """Labelled rows: their leaf's weight spread over the leaf's components by the
    within-leaf posterior; log-likelihood = logsumexp within the leaf."""
    tax = Taxonomy({"R": ["a", "b"]})
    spec = method_spec(tax, "nbmc", components=3)
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.poisson(1.0, (5, 6)).astype(float))
    lp = np.log(rng.dirichlet(np.ones(6)))
    lt = np.log(rng.dirichlet(np.ones(6), size=6))
    node_scores = np.array([[1, 0], [0, 1], [1, 0], [0, 0], [0, 1]], dtype=float)
    fixed = core.path_scores(node_scores, spec.score_matrix)
    labeled = node_scores.sum(axis=1) > 0
    st = core.e_step(X, fixed, labeled, lp, lt, core.EStepOptions(use_unlabeled=False), structure=spec.structure)
    jll = X.toarray() @ lt.T + lp
    resp = np.zeros((5, 6))
    ll = 0.0
    for i in np.flatnonzero(labeled):
        leaf = int(np.argmax(node_scores[i]))
        cols = [r for r in range(6) if r // 3 == leaf]
        e = np.exp(jll[i, cols] - jll[i, cols].max())
        resp[i, cols] = e / e.sum()
        ll += jll[i, cols].max() + np.log(e.sum())
    np.testing.assert_allclose(st.path_totals, resp.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(st.word_counts, resp.T @ X.toarray(), rtol=1e-12)
    assert st.loglik == pytest.approx(ll, rel=1e-12)
    # prediction sums a leaf's components
    best, prob = core.predict_paths(X, lp, lt, spec.structure)
    post = np.exp(jll - jll.max(axis=1, keepdims=True))
    post /= post.sum(axis=1, keepdims=True)
    by_leaf = np.stack([post[:, :3].sum(axis=1), post[:, 3:].sum(axis=1)], axis=1)
    np.testing.assert_array_equal(best, by_leaf.argmax(axis=1))
    np.testing.assert_allclose(prob, by_leaf.max(axis=1), rtol=1e-12)


def test_multi_component_initial_split_puts_each_document_in_one_component():
    tax = Taxonomy({"R": ["a", "b", "c"]})
    spec = method_spec(tax, "emmc", components=4)
    node_scores = np.eye(3)[[0, 1, 2, 0, 0, 1]]
    fixed = core.path_scores(node_scores, spec.score_matrix)
    split = core.random_component_split(fixed, spec.structure.owner, np.random.default_rng(1))
    assert (np.count_nonzero(split, axis=1) == 1).all()
    owner = spec.structure.owner
    assert (owner[split.argmax(axis=1)] == node_scores.argmax(axis=1)).all()
    # different seeds give different splits of the same documents
    other = core.random_component_split(fixed, owner, np.random.default_rng(2))
    assert not np.array_equal(split, other)


@pytest.mark.parametrize("use_unlabeled", [False, True])
def test_multi_component_pass_on_spark_matches_reference(deep, use_unlabeled):
    """One distributed pass of NBMC (labelled only) / EMMC from given parameters, 3 components."""
    c, C = deep, 3
    spec = method_spec(c.tax, "emmc" if use_unlabeled else "nbmc", C)
    rng = np.random.default_rng(11)
    R = spec.n_components
    lp = np.log(rng.dirichlet(np.ones(R)))
    lt = np.log(rng.dirichlet(np.ones(c.V), size=R))
    wc, totals, ll, n_lab, n_unlab = engine.sufficient_stats(
        c.blocks,
        core.PathParameters.from_log_theta(lp, lt),
        spec.score_matrix,
        c.V,
        engine.PassOptions(use_unlabeled=use_unlabeled),
        structure=spec.structure,
    )
    resp = np.zeros((c.X.shape[0], R))
    ref_ll = 0.0
    for i in range(c.X.shape[0]):
        jll = lp + c.X[i] @ lt.T
        if c.labeled[i]:
            cols = list(range(c.true[i] * C, c.true[i] * C + C))  # components of its leaf
        elif use_unlabeled:
            cols = list(range(R))
        else:
            continue
        m = jll[cols].max()
        e = np.exp(jll[cols] - m)
        resp[i, cols] = e / e.sum()
        ref_ll += m + np.log(e.sum())
    np.testing.assert_allclose(totals, resp.sum(axis=0), rtol=1e-9)
    np.testing.assert_allclose(wc, resp.T @ c.X, rtol=1e-9, atol=1e-9)
    assert ll == pytest.approx(ref_ll, rel=1e-9)
    assert n_lab == int(c.labeled.sum())


def test_multi_component_initial_pass_on_spark_splits_each_document_once(deep):
    c, C = deep, 2
    spec = method_spec(c.tax, "nbmc", C)
    counts = []
    for seed in (1, 2):
        wc, totals, _, _, _ = engine.sufficient_stats(
            c.blocks,
            None,
            spec.score_matrix,
            c.V,
            engine.PassOptions(use_unlabeled=False, init_seed=seed),
            structure=spec.structure,
        )
        # every labelled document went, whole, to one component of its own leaf
        per_leaf = totals.reshape(-1, C).sum(axis=1)
        np.testing.assert_array_equal(per_leaf, np.bincount(c.true[c.labeled], minlength=c.M))
        np.testing.assert_allclose(
            wc.reshape(c.M, C, c.V).sum(axis=1),
            np.vstack([c.X[c.labeled & (c.true == j)].sum(axis=0) for j in range(c.M)]),
        )
        assert set(np.unique(totals)) <= set(range(c.X.shape[0] + 1))
        counts.append(totals)
    assert not np.array_equal(counts[0], counts[1])  # the seed decides the split


def test_posterior_floor_is_refused_for_per_depth_structures():
    from pcem_spark.model.settings import ModelSettings

    with pytest.raises(ValueError, match="posterior_floor must be 0 for tdem"):
        ModelSettings(method="tdem", posterior_floor=1e-6).validate()
    # the default top-k truncation does not apply to per-node posteriors: they run exact
    ModelSettings(method="wdem", posterior_top_k=3).validate()
    assert ModelSettings(method="wdem", posterior_top_k=3).effective_top_k == 0
    assert ModelSettings(method="pcem", posterior_top_k=3).effective_top_k == 3
    tax = Taxonomy({"R": ["a", "b"], "a": ["a1", "a2"]})
    spec = method_spec(tax, "wdem")
    X = sp.csr_matrix(np.ones((2, 3)))
    lp = np.zeros(spec.n_components)
    lt = np.log(np.full((spec.n_components, 3), 1 / 3))
    with pytest.raises(ValueError, match="posterior_floor / posterior_top_k apply"):
        core.e_step(
            X,
            np.zeros((2, spec.n_components)),
            np.zeros(2, bool),
            lp,
            lt,
            core.EStepOptions(posterior_floor=0.01),
            structure=spec.structure,
        )
    with pytest.raises(ValueError, match="posterior_floor / posterior_top_k apply"):
        core.e_step(
            X,
            np.zeros((2, spec.n_components)),
            np.zeros(2, bool),
            lp,
            lt,
            core.EStepOptions(top_k=1),
            structure=spec.structure,
        )


def test_top_down_marginals_are_products_down_the_tree():
    parents = np.array([-1, -1, 0, 0, 1, 2])
    log_local = np.log(np.array([[0.7, 0.3, 0.4, 0.6, 1.0, 1.0]]))
    got = np.exp(core.top_down_log_marginals(log_local, parents))
    np.testing.assert_allclose(got, [[0.7, 0.3, 0.28, 0.42, 0.3, 0.28]])
    with pytest.raises(ValueError, match="parent must come before"):
        core.top_down_log_marginals(log_local, np.array([1, -1, 0, 0, 1, 2]))


def test_multi_component_em_is_seeded_and_reproducible(deep):
    a, _ = fit(deep, "emmc", max_iter=3, components=2, seed=5)
    b, _ = fit(deep, "emmc", max_iter=3, components=2, seed=5)
    other, _ = fit(deep, "emmc", max_iter=3, components=2, seed=6)
    np.testing.assert_array_equal(a.log_theta, b.log_theta)
    assert np.abs(a.log_theta - other.log_theta).max() > 1e-6
    assert a.log_theta.shape == (2 * deep.tax.n_paths, deep.V)


def test_grouped_priors_sum_to_one_per_group():
    groups = np.array([0, 0, 1, 1, 1, 2])
    lp, _ = core.log_parameters(np.ones((6, 3)), np.array([1.0, 3.0, 0.0, 2.0, 5.0, 4.0]), 1.0, groups)
    for g in range(3):
        assert np.exp(lp[groups == g]).sum() == pytest.approx(1.0)
    np.testing.assert_allclose(np.exp(lp[:2]), [2 / 6, 4 / 6])


def test_every_generative_method_has_a_spec():
    tax = Taxonomy({"R": ["a", "b"], "a": ["a1", "a2"]})
    for m in GENERATIVE:
        spec = method_spec(tax, m)
        assert spec.score_matrix.shape[1] == tax.n_nodes
    with pytest.raises(ValueError, match="unknown generative method"):
        method_spec(tax, "svm")


# =====================================================================
# Discriminative baselines
# =====================================================================


def test_tree_distance_and_hiercost_costs():
    tax = Taxonomy({"R": ["a", "b"], "a": ["a1", "a2"], "b": ["b1"]})
    names = [tuple(tax.real_path(j)) for j in range(tax.n_paths)]
    d = tree_distance_matrix(tax)
    j = {p[-1]: k for k, p in enumerate(names)}
    assert d[j["a1"], j["a2"]] == 2 and d[j["a1"], j["b1"]] == 4 and d[j["a1"], j["a1"]] == 0
    cost = hiercost_costs(d, j["a1"])
    assert cost[j["a1"]] == 1.0  # positives
    assert cost[j["a2"]] == pytest.approx(0.5)  # a sibling is a cheaper negative
    assert cost[j["b1"]] == pytest.approx(1.0)  # than a far branch


def test_discriminative_features_are_l2_tfidf_rows():
    from pcem_spark.core.similarity import tfidf_rows

    X = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 0, 0]]))
    idf = np.array([2.0, 1.0, 0.5])
    Y = tfidf_rows(X, idf).toarray()
    np.testing.assert_allclose(Y[0], np.array([2.0, 0, 1.0]) / np.sqrt(5))
    np.testing.assert_array_equal(Y[1], 0.0)


def _separable_corpus(spark):
    words = {"a1": "alpha apple", "a2": "alpha apricot", "b1": "beta banana", "b2": "beta blueberry"}
    rows = []
    for leaf, text in words.items():
        for i in range(6):
            rows.append((f"{leaf}-{i}", f"{text} {text} common{i % 3} filler", [leaf[0], leaf]))
    return spark.createDataFrame(rows, "id string, text string, labels array<string>")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["lr", "svm", "hiercost"])
def test_discriminative_baselines_learn_a_separable_corpus(spark, method):
    from pyspark.sql import functions as F

    from pcem_spark.baselines.discriminative import LinearSettings, fit_linear
    from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary
    from pcem_spark.experiment.protocol import _label_path_index

    df = _separable_corpus(spark)
    tax = Taxonomy({"R": ["a", "b"], "a": ["a1", "a2"], "b": ["b1", "b2"]})
    fs = FeatureSettings(min_df=1.0, max_df=1.0, stop_words="none")
    vocab = fit_vocabulary(df, fs)
    feats = featurize(df, vocab, fs).select("features", _label_path_index(tax).alias("path_index"))
    # 25 optimiser iterations separate this corpus; MLlib's default 100 cost a Spark job each (svm: ~60 s)
    model, n = fit_linear(feats, method, tax, vocab, fs, LinearSettings(C=10.0, max_iter=25))
    assert n == 24 and model.coefficients.shape == (4, len(vocab))
    test = spark.createDataFrame(
        [("t1", "apricot alpha", None), ("t2", "banana beta", ["b", "b1"]), ("t3", "nothing known here", None)],
        "id string, text string, labels array<string>",
    )
    pred = model.transform(test)
    got = pred.select("id", "path").where(F.col("id") != "t3")
    want = spark.createDataFrame([("t1", ["a", "a2"]), ("t2", ["b", "b1"])], "id string, path array<string>")
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    assert pred.count() == 3  # a document with no known word still gets a row


@pytest.mark.slow
@pytest.mark.parametrize("method", ["tdem", "wdnb", "emmc"])
def test_baseline_models_save_load_and_predict_every_document(spark, tmp_path, method):
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.ml import train
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    df = _separable_corpus(spark)
    docs = df.selectExpr("id", "text", "case when id like '%-0' or id like '%-1' then labels end as labels")
    tax = Taxonomy({"R": ["a", "b"], "a": ["a1", "a2"], "b": ["b1", "b2"]})
    fs = FeatureSettings(min_df=1.0, max_df=1.0, stop_words="none")
    model, result = train(docs, tax, fs, ModelSettings(method=method, max_iter=5, components=2))
    assert model.log_theta.shape[0] == model.spec.n_components
    model.save(str(tmp_path / "m"))
    loaded = PathModel.load(str(tmp_path / "m"))
    assert loaded.model_settings.method == method
    np.testing.assert_array_equal(loaded.log_theta, model.log_theta)
    pred = model.transform(df)
    assert_df_equality(pred, loaded.transform(df), ignore_row_order=True)
    assert pred.count() == df.count()
    correct = pred.where("path = labels").count()
    assert correct >= 0.75 * df.count(), (method, correct)
