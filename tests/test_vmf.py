"""The von Mises-Fisher family (model.family = "vmf"): the mixture's EM against a dense numpy computation of its
equations (Banerjee et al. 2005), its fit and scores in a full Spark fit, save/load, and the refusals."""

import numpy as np
import pytest
from dense_reference import dense_counts
from test_embedding_model import FEATURES, SCHEMA, settings

from pcem_spark.core.parameters import PathParameters
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.core.vmf import unit_rows, vmf_concentration, vmf_parameters, vmf_responsibilities
from pcem_spark.engine.blocks import Block
from pcem_spark.errors import InputError
from pcem_spark.ml import train
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.vmf_family import VMF_MAX_ITER, fit_vmf_local

D = 4


def dense_em(jll, E, labelled_paths, unlabeled_weight, n_iter):
    """The mixture's EM written out: labelled rows one-hot, unlabelled rows by softmax(log P(p|words) + k mu.x),
    under the words alone at the start."""
    n, M = jll.shape
    X = np.array([v / np.linalg.norm(v) for v in E])
    words = jll - jll.max(axis=1, keepdims=True)
    words = words - np.log(np.exp(words).sum(axis=1, keepdims=True))
    mu, kappa = None, None
    for _ in range(n_iter + 1):
        R = np.zeros((n, M))
        for i in range(n):
            if labelled_paths[i] is not None:
                R[i, labelled_paths[i]] = 1.0
            else:  # the first E-step under the words alone
                s = words[i] + (0.0 if mu is None else kappa * (mu @ X[i]))
                p = np.exp(s - s.max())
                R[i] = unlabeled_weight * p / p.sum()
        sums = R.T @ X
        norms = np.sqrt((sums**2).sum(axis=1))
        mu = sums / np.where(norms > 0, norms, 1.0)[:, None]
        mu[norms == 0] = sums.sum(axis=0) / np.linalg.norm(sums.sum(axis=0))  # no mass: the background's
        r = norms.sum() / R.sum()
        kappa = r * (X.shape[1] - r**2) / (1 - r**2)
    return mu, kappa


def test_the_m_step_is_the_normalised_weighted_sum_and_banerjees_kappa():
    rng = np.random.default_rng(3)
    E = unit_rows(rng.normal(size=(6, D)))
    R = rng.random((6, 3))
    sums, totals = R.T @ E, R.sum(axis=0)
    params = vmf_parameters(sums, totals)
    for p in range(3):
        np.testing.assert_allclose(params.mu[p], sums[p] / np.linalg.norm(sums[p]))
    r = np.linalg.norm(sums, axis=1).sum() / R.sum()
    assert params.kappa == pytest.approx(r * (D - r**2) / (1 - r**2))
    shrunk = vmf_parameters(sums, totals, prior_mass=1.0)  # one document of no direction per path
    r1 = np.linalg.norm(sums, axis=1).sum() / (R.sum() + 3)
    assert shrunk.kappa == pytest.approx(r1 * (D - r1**2) / (1 - r1**2)) and shrunk.kappa < params.kappa
    # tighter vectors, larger kappa; a path without mass takes the mean direction of all
    assert vmf_concentration(0.9, D) > vmf_concentration(0.5, D) > vmf_concentration(0.1, D) > 0
    lone = vmf_parameters(np.vstack([sums[:2], np.zeros((1, D))]), totals).mu[2]
    np.testing.assert_allclose(lone, sums[:2].sum(axis=0) / np.linalg.norm(sums[:2].sum(axis=0)))
    # one vector per path: r = 1, clipped, so kappa is finite; one document of no direction per path halves r
    assert np.isfinite(vmf_parameters(np.eye(3, D), np.ones(3)).kappa)
    assert vmf_parameters(np.eye(3, D), np.ones(3), 1.0).kappa == pytest.approx(0.5 * (D - 0.25) / 0.75)
    post = vmf_responsibilities(np.log(np.full((6, 3), 1 / 3)), E, params)
    expected = np.exp(params.kappa * E @ params.mu.T)
    np.testing.assert_allclose(post, expected / expected.sum(axis=1, keepdims=True))


def test_fit_on_blocks_is_the_dense_em(monkeypatch):
    monkeypatch.setattr("pcem_spark.model.vmf_family.VMF_TOL", 0.0)  # both run VMF_MAX_ITER iterations
    rng = np.random.default_rng(8)
    V, M, n = 5, 3, 12
    taxonomy = Taxonomy.from_label_paths([("a",), ("b",), ("c",)])
    log_theta = np.log(rng.dirichlet(np.ones(V), size=M))
    log_prior = np.log(np.full(M, 1 / M))
    params = PathParameters.from_log_theta(log_prior, log_theta)
    X = rng.integers(0, 3, size=(n, V)).astype(np.float64)
    centres = rng.normal(size=(M, D))
    truth = rng.integers(0, M, size=n)
    E = (centres[truth] + 0.3 * rng.normal(size=(n, D))).astype(np.float32)
    labelled = [int(truth[i]) if i % 3 == 0 else None for i in range(n)]
    leaf = taxonomy.leaf_node_matrix()
    import scipy.sparse as sp

    from pcem_spark.core.estep import scoring_tables

    node_scores = sp.csr_matrix(np.array([leaf[p] if p is not None else np.zeros(leaf.shape[1]) for p in labelled]))
    blocks = [
        Block(sp.csr_matrix(X[r]), node_scores[r], np.array([labelled[i] is not None for i in r]), E[r])
        for r in (np.arange(0, 7), np.arange(7, n))
    ]
    s = settings(family="vmf", unlabeled_weight=0.5)
    tables = fit_vmf_local(blocks, taxonomy, V, s, scoring_tables(params))
    jll = log_prior + X @ log_theta.T
    mu, kappa = dense_em(jll, E.astype(np.float64), labelled, 0.5, VMF_MAX_ITER)
    assert tables.unit_vectors and tables.generative_weight == 1.0 and tables.embedding_dim == D
    assert tables.embedding_weight == pytest.approx(kappa, rel=1e-3)
    np.testing.assert_allclose(tables.weights_t[V:].toarray().T, mu, atol=1e-4)
    assert not tables.weights_t[:V].nnz and not tables.bias.any()
    # no vector in any block: refused with the reason
    bare = [Block(b.X, b.node_scores, b.labeled, None) for b in blocks]
    with pytest.raises(InputError, match="vmf models the documents' vectors"):
        fit_vmf_local(bare, taxonomy, V, s, scoring_tables(params))


def test_a_vmf_model_scores_words_and_unit_vectors_and_survives_save_and_load(spark, corpus, tmp_path):
    rows, docs, taxonomy = corpus
    model, _ = train(docs, taxonomy, FEATURES, settings(family="vmf"))
    info = model.training_summary["vmf"]
    assert info["embedding_dim"] == model.linear.embedding_dim > 0 and info["kappa"] > 0
    assert model.feature_settings.embedding == "embedding"
    # the full fit's mixture is the dense EM on the fitted words' model and every document
    X = dense_counts(rows, model.vocabulary)
    jll = model.params.log_prior + X @ model.params.log_theta().T
    E = np.array([r[3] for r in rows], dtype=np.float32).astype(np.float64)
    labelled = [taxonomy.paths.index(tuple(r[2])) if r[2] is not None else None for r in rows]
    mu, kappa = dense_em(jll, E, labelled, 0.5, info["n_iter"])
    V = len(model.vocabulary)
    np.testing.assert_allclose(model.linear.weights_t[V:].toarray().T, mu, atol=1e-4)
    assert model.linear.embedding_weight == pytest.approx(kappa, rel=1e-3)
    # predictions: argmax of log P(path | words) + kappa mu . x / |x|
    words = jll - jll.max(axis=1, keepdims=True)
    words -= np.log(np.exp(words).sum(axis=1, keepdims=True))
    scores = words + kappa * (E / np.linalg.norm(E, axis=1, keepdims=True)) @ mu.T
    expected = {r[0]: list(taxonomy.paths[j]) for r, j in zip(rows, scores.argmax(axis=1))}
    got = {r["id"]: list(r["path"]) for r in model.transform(docs).collect()}
    assert got == expected
    path = str(tmp_path / "vmf-model")
    model.save(path)
    loaded = PathModel.load(path)
    assert loaded.model_settings.family == "vmf" and loaded.linear.unit_vectors
    before = sorted((r["id"], r["path"], r["probability"]) for r in model.transform(docs).collect())
    assert sorted((r["id"], r["path"], r["probability"]) for r in loaded.transform(docs).collect()) == before
    # pcem inspect shows its words (the mixture has no weight per term to list)
    from pcem_spark.ops.inspection import inspect_model

    report = inspect_model(loaded)
    assert "regression" not in report and all("top_weighted_terms" not in n for n in report["nodes"])
    with pytest.raises(InputError, match="vmf models the documents' vectors"):
        train(docs.drop("embedding"), taxonomy, FEATURES, settings(family="vmf"))


@pytest.fixture(scope="module")
def corpus(spark):
    """Two leaves whose words overlap and whose vectors point two ways: the vectors decide."""
    rng = np.random.default_rng(21)
    directions = {("x", "left"): rng.normal(size=D), ("x", "right"): rng.normal(size=D)}
    rows = []
    for path, direction in directions.items():
        for i in range(8):
            text = " ".join(rng.choice(["alpha", "beta", "gamma", "delta"], size=4))
            vector = (direction + rng.normal(scale=0.7, size=D)).astype(np.float32).tolist()
            rows.append((f"{path[1]}-{i}", text, list(path) if i < 2 else None, vector))
    return rows, spark.createDataFrame(rows, SCHEMA), Taxonomy.from_label_paths(list(directions))
