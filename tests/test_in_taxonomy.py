"""The in_taxonomy score: its arithmetic against a dense numpy computation of the likelihood ratio, the unknown
words (counted as the tokenizer keeps them; monotone), foreign and empty pages, the verdict's schema, the
training summary's threshold, save/load and warm starts, old models, and evaluate's out-of-scope recall."""

import copy
import json
import math

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp
from chispa import assert_df_equality

from pcem_spark.core.decoding import predict_path_details, predict_paths
from pcem_spark.core.estep import scoring_tables
from pcem_spark.core.in_taxonomy import CorpusCounts, FitWeights, background_of, held_out_scores, in_taxonomy_scores
from pcem_spark.core.parameters import PathParameters
from pcem_spark.core.structure import Structure
from pcem_spark.engine.features import FeatureSettings
from pcem_spark.engine.python_tokens import TextFeaturizer, reachable_vocabulary
from pcem_spark.errors import InputError
from pcem_spark.evaluation.metrics import OUT_OF_TAXONOMY_LABEL as OUT
from pcem_spark.ml.estimator import PathEM
from pcem_spark.model.in_taxonomy import held_out_frame
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.schema import OutputOptions

SCHEMA = "id string, text string, labels array<string>"
TOPICS = {
    ("sci", "space"): "rocket orbit launch moon nasa shuttle",
    ("sci", "med"): "doctor patient disease clinic surgery vaccine",
    ("rec", "hockey"): "puck goal skate ice team season",
    ("rec", "autos"): "engine car wheel brake dealer sedan",
}


def corpus(n_per_path=10, labelled_per_path=3, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for p, (path, words) in enumerate(TOPICS.items()):
        vocab = words.split() + ["report", "today", "people", "thing"]
        for i in range(n_per_path):
            text = " ".join(rng.choice(vocab, size=8)) + f" rare{p}x{i}"  # one word the vocabulary drops
            rows.append((f"{path[1]}-{i}", text, list(path) if i < labelled_per_path else None))
    return rows


def dense_reference(X, unknown, log_theta, best, counts: CorpusCounts, smoothing):
    """The score written out with dense arrays: the two token models' log-likelihoods, per token."""
    X = np.asarray(X, dtype=float)
    c = counts.term_counts
    beta = (c + smoothing) / (c.sum() + smoothing * len(c))
    rho_a = (counts.unknown + 1) / (counts.tokens + counts.unknown + 2)
    rho_l = min((counts.labelled_unknown + 1) / (counts.labelled_tokens + counts.labelled_unknown + 2), rho_a)
    out = []
    for i in range(X.shape[0]):
        n, u = X[i].sum(), unknown[i]
        taxonomy_ll = n * math.log(1 - rho_l) + u * math.log(rho_l) + X[i] @ log_theta[best[i]]
        background_ll = n * math.log(1 - rho_a) + u * math.log(rho_a) + X[i] @ np.log(beta)
        out.append((taxonomy_ll - background_ll) / (n + u) if n + u > 0 else math.log(rho_l / rho_a))
    return np.array(out)


def random_case(seed=1, n=7, V=6, R=3):
    rng = np.random.default_rng(seed)
    theta = rng.dirichlet(np.ones(V), size=R)
    X = rng.integers(0, 4, size=(n, V)).astype(float)
    X[0] = 0  # a row with no known word
    unknown = rng.integers(0, 5, size=n).astype(float)
    unknown[1] = 0
    best = rng.integers(0, R, size=n)
    counts = CorpusCounts(rng.integers(1, 50, size=V).astype(float), 0.0, 40.0, 300.0, 6.0, 50, 12)
    counts = counts._replace(tokens=float(counts.term_counts.sum()))
    return X, unknown, np.log(theta), best, counts


def test_the_score_is_the_dense_log_likelihood_ratio_per_token():
    X, unknown, log_theta, best, counts = random_case()
    params = PathParameters.from_log_theta(np.log(np.full(3, 1 / 3)), log_theta)
    got = in_taxonomy_scores(
        sp.csr_matrix(X), unknown, params.log_base, params.log_ratio, best, background_of(counts, 0.5)
    )
    np.testing.assert_allclose(got, dense_reference(X, unknown, log_theta, best, counts, 0.5), rtol=1e-10, atol=1e-12)


def test_unknown_words_pull_the_score_down_to_the_unknown_token_value():
    X, unknown, log_theta, best, counts = random_case(seed=4)
    params = PathParameters.from_log_theta(np.log(np.full(3, 1 / 3)), log_theta)
    background = background_of(counts, 1.0)
    assert background.log_unknown_ratio < 0  # the labelled documents had fewer unknown tokens than the corpus
    row = sp.csr_matrix(np.tile(X[2], (6, 1)))
    more = np.array([0.0, 1, 2, 5, 20, 1e6])
    scores = in_taxonomy_scores(row, more, params.log_base, params.log_ratio, np.full(6, best[2]), background)
    assert scores[0] > background.log_unknown_ratio
    assert np.all(np.diff(scores) < 0)  # every unknown word lowers it
    assert scores[-1] == pytest.approx(background.log_unknown_ratio, abs=1e-3)
    # a page with nothing to read scores as a page of unknown words: the floor
    empty = in_taxonomy_scores(
        sp.csr_matrix((1, X.shape[1])), np.zeros(1), params.log_base, params.log_ratio, [0], background
    )
    assert empty[0] == background.log_unknown_ratio


def test_a_held_out_score_is_the_score_under_the_path_refitted_without_the_document():
    from pcem_spark.core.parameters import sparse_log_parameters

    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.integers(0, 4, size=(6, 8)).astype(float))
    paths, smoothing = np.array([0, 0, 1, 1, 2, 2]), 0.5

    def fit(rows):
        S = sp.csr_matrix((np.ones(len(rows)), (paths[rows], np.arange(len(rows)))), shape=(3, len(rows)))
        return sparse_log_parameters(S @ X[rows], np.bincount(paths[rows], minlength=3).astype(float), smoothing)

    params = fit(np.arange(6))
    counts = CorpusCounts(np.asarray(X.sum(axis=0)).ravel(), float(X.sum()), 3.0, float(X.sum()), 1.0, 6, 6)
    background = background_of(counts, smoothing)
    unknown = np.array([0.0, 1, 0, 2, 0, 1])
    got = held_out_scores(X, unknown, paths, params.log_base, params.log_ratio, background, FitWeights(smoothing))
    for i in range(6):
        refit = fit(np.flatnonzero(np.arange(6) != i))
        one = slice(i, i + 1)
        # the best path of the refitted model (its own, or one that never held the document)
        want = max(
            in_taxonomy_scores(X[one], unknown[one], refit.log_base, refit.log_ratio, [j], background)[0]
            for j in range(3)
        )
        assert got[i] == pytest.approx(want, rel=1e-10)
    in_sample = in_taxonomy_scores(X, unknown, params.log_base, params.log_ratio, paths, background)
    assert np.all(got <= in_sample + 1e-12) and np.any(got < in_sample)


def test_held_out_scores_take_out_the_copies_a_path_weighted_length_scaled_fit_gave():
    from pcem_spark.core.parameters import sparse_log_parameters

    rng = np.random.default_rng(5)
    X = sp.csr_matrix(rng.integers(0, 5, size=(6, 9)).astype(float))
    paths = np.array([0, 0, 1, 1, 2, 2])
    A = np.array([[1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [0, 0, 0, 1, 1]], dtype=float)  # paths 0 and 1 share a node
    fit = FitWeights(0.3, path_weight=0.5, doc_length=12.0, path_nodes=sp.csr_matrix(A))
    lengths = np.asarray(X.sum(axis=1)).ravel()
    scale = np.minimum(1.0, fit.doc_length / lengths)

    def refit(rows):  # Eq. 2's copies, written out: path j gets (1 - g)[j = p] + g |p and j| of each document
        W = (1 - fit.path_weight) * np.eye(3) + fit.path_weight * A @ A.T
        counts = sum(W[:, [paths[i]]] * (scale[i] * X[i].toarray()) for i in rows)
        return sparse_log_parameters(sp.csr_matrix(counts), np.ones(3), fit.smoothing)

    params = refit(range(6))
    counts = CorpusCounts(np.asarray(X.sum(axis=0)).ravel(), float(X.sum()), 0.0, float(X.sum()), 0.0, 6, 6)
    background = background_of(counts, fit.smoothing)
    got = held_out_scores(X, None, paths, params.log_base, params.log_ratio, background, fit)
    for i in range(6):
        without = refit([r for r in range(6) if r != i])
        never_held = [j for j in range(3) if j != paths[i] and (A[j] @ A[paths[i]]) == 0]
        own = in_taxonomy_scores(X[i], None, without.log_base, without.log_ratio, [paths[i]], background)[0]
        others = [
            in_taxonomy_scores(X[i], None, params.log_base, params.log_ratio, [j], background)[0] for j in never_held
        ]
        assert got[i] == pytest.approx(max([own] + others), rel=1e-9)


def test_the_featurizer_counts_unknown_tokens_as_the_words_the_vocabulary_could_hold():
    settings = FeatureSettings(stop_words="english", min_df=1.0, max_df=1.0)
    featurizer = TextFeaturizer(["rocket", "orbit", "über"], settings, ["the", "a", "of"])
    texts = pa.array(["The rocket of a 2024 x zzz orbit rocket", "Über Straße und Haus", None, ""], pa.string())
    X, unknown = featurizer.matrix_and_unknown(texts)
    # "the", "of", "a": stop words; "2024": no letter; "x": too short; "zzz": unknown
    assert unknown.tolist() == [1.0, 3.0, 0.0, 0.0]
    assert X.toarray().tolist() == [[2, 1, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]]
    assert (featurizer.matrix(texts) != X).nnz == 0


def test_arrow_word_tests_agree_with_the_tokenizer_rule_on_every_kind_of_token():
    settings = FeatureSettings(stop_words="english", min_df=1.0, max_df=1.0, min_token_length=3)
    featurizer = TextFeaturizer(["rocket"], settings, ["the", "Of", "über"])
    tokens = ["rocket", "THE", "of", "ab", "abc", "a1b", "123", "___", "_x_", "x" * 40, "", "über", "Über", "日本",
              "naïve", "ab_", "1ab", "zz9"]  # fmt: skip
    want = [t is not None for t in reachable_vocabulary(tokens, settings, ["the", "Of", "über"])]
    assert featurizer._word_mask(pa.array(tokens, pa.string())).tolist() == want
    assert sum(want) > 4 and not all(want)


def test_prediction_reads_the_path_log_likelihood_off_its_scores():
    rng = np.random.default_rng(3)
    R, V = 5, 30
    log_theta = np.log(rng.dirichlet(np.ones(V) * 0.3, size=R))
    params = PathParameters.from_log_theta(np.log(rng.dirichlet(np.ones(R))), log_theta)
    counts = rng.poisson(0.8, size=(9, V)).astype(float)
    counts[3] = 0  # a document with no known word
    counts[5] *= 20  # and a long one, which doc_length scales down
    X = sp.csr_matrix(counts)
    paths = np.array([[0, 1], [0, 2], [3, 4], [3, 5], [3, 6]])
    for dtype, doc_length, temperature in (("float64", 0.0, 1.0), ("float64", 10.0, 2.0), ("float32", 10.0, 1.0)):
        tables = scoring_tables(params, dtype)._replace(temperature=temperature)
        out = predict_paths(X, None, None, None, doc_length, tables=tables, path_log_likelihood=True)
        best, prob = predict_paths(X, None, None, None, doc_length, tables=tables)
        np.testing.assert_array_equal(out.best, best)
        np.testing.assert_array_equal(out.probability, prob)
        want = (X.toarray() @ log_theta.T)[np.arange(9), best]  # the raw counts, whatever the scaling
        tol = 1e-9 if dtype == "float64" else 1e-4
        np.testing.assert_allclose(out.path_log_likelihood, want, rtol=tol, atol=tol)
        details = predict_path_details(X, None, doc_length, tables, paths, 0.5, 2)
        np.testing.assert_allclose(details.path_log_likelihood, want, rtol=tol, atol=tol)
    with pytest.raises(ValueError, match="Eq. 5"):  # a baseline's components are not paths
        structure = Structure(np.zeros(R, dtype=np.int64), np.arange(R), "posterior")
        predict_paths(X, None, None, structure, 0.0, tables=tables, path_log_likelihood=True)


@pytest.fixture(scope="module")
def fitted(spark):
    docs = spark.createDataFrame(corpus(), SCHEMA)
    model = PathEM(method="pcem", minDF=1.0, maxDF=1.0, smoothing=0.5, unlabeledWeight=1.0, pathWeight=1.0).fit(docs)
    return docs, model.path_model


def test_a_trained_model_scores_every_prediction_as_the_dense_reference(spark, fitted):
    docs, model = fitted
    rows = corpus()
    counts = model.corpus
    # the corpus counts: every training document's known and unknown tokens, by a dense count here
    vocab = {t: j for j, t in enumerate(model.vocabulary)}
    dense = np.zeros(len(vocab))
    unknown_all = labelled_unknown = labelled_tokens = 0
    for _, text, labels in rows:
        for token in text.split():
            if token in vocab:
                dense[vocab[token]] += 1
                labelled_tokens += labels is not None
            else:
                unknown_all += 1
                labelled_unknown += labels is not None
    np.testing.assert_array_equal(counts.term_counts, dense)
    assert (counts.unknown, counts.labelled_unknown, counts.labelled_tokens) == (
        unknown_all,
        labelled_unknown,
        labelled_tokens,
    )
    assert (counts.documents, counts.labelled_documents) == (40, 12)
    test = spark.createDataFrame(
        [("a", "rocket orbit moon launch rocket", None), ("b", "engine car brake novelword anotherword", None)], SCHEMA
    )
    pred = model.transform(test).orderBy("id").collect()
    X = np.array([[r["text"].split().count(t) for t in model.vocabulary] for r in test.orderBy("id").collect()])
    best = [model.taxonomy.paths.index(tuple(r["path"])) for r in pred]
    smoothing = model.training_summary["smoothing"]
    want = dense_reference(X, [0, 2], model.log_theta, best, counts, smoothing)
    np.testing.assert_allclose([r["in_taxonomy"] for r in pred], want, rtol=1e-9)
    # every decoder gives the dense reference: the exact one reads the score off its generative path scores
    # (with a linear head, as this model has, and without; plain, and with abstaining and top-k), the beam
    # looks each word up in its path's distribution
    abstaining = model.transform(test, min_probability=0.5, top_k=2).orderBy("id").collect()
    np.testing.assert_allclose([r["in_taxonomy"] for r in abstaining], want, rtol=1e-9)
    assert model.linear is not None
    generative = copy.copy(model)
    generative.linear = None
    for beam in (0, 1):
        again = generative.transform(test, beam=beam).orderBy("id").collect()
        best = [model.taxonomy.paths.index(tuple(r["path"])) for r in again]
        want = dense_reference(X, [0, 2], model.log_theta, best, counts, smoothing)
        np.testing.assert_allclose([r["in_taxonomy"] for r in again], want, rtol=1e-9)
    # the suggested threshold: the 5th percentile of the labelled documents' held-out scores (each under its
    # path without its own counts), which sit below their in-sample scores
    summary = model.training_summary["in_taxonomy"]
    labelled_docs = docs.where("labels is not null")
    held_out = held_out_frame(model, labelled_docs).toPandas()["in_taxonomy"].to_numpy()
    in_sample = model.transform(labelled_docs).orderBy("id").toPandas()["in_taxonomy"].to_numpy()
    assert len(held_out) == 12 and np.mean(held_out) < np.mean(in_sample)
    assert summary["suggested_threshold"] == pytest.approx(np.quantile(held_out, 0.05, method="lower"), abs=1e-9)
    assert np.mean(held_out >= summary["suggested_threshold"]) >= 0.95


def test_foreign_and_empty_pages_score_below_every_labelled_document(spark, fitted):
    docs, model = fitted
    pages = spark.createDataFrame(
        [
            ("de", "Der Hauptgang war in Ordnung, aber alles andere als umwerfend.", None),
            ("ja", "東京都の天気は晴れです", None),
            ("empty", "", None),
            ("null", None, None),
            ("digits", "2024 1999 42", None),
        ],
        SCHEMA,
    )
    scores = {r["id"]: r["in_taxonomy"] for r in model.transform(pages).collect()}
    unknown_value = model.training_summary["in_taxonomy"]["unknown_token_score"]
    assert unknown_value <= 0
    assert all(s == pytest.approx(unknown_value) for s in scores.values()), scores
    labelled = model.transform(docs.where("labels is not null")).toPandas()["in_taxonomy"]
    floor = float(labelled.min())
    assert max(scores.values()) < floor
    # a threshold between them cuts every such page and no labelled document
    between = OutputOptions(min_in_taxonomy=(max(scores.values()) + floor) / 2)
    assert all(r["path"] == [] and r["leaf"] is None for r in model.transform_outputs(pages, between).collect())
    assert all(r["path"] for r in model.transform_outputs(docs.where("labels is not null"), between).collect())


def test_the_verdict_empties_the_path_and_keeps_every_other_column(spark, fitted):
    docs, model = fitted
    plain = model.transform(docs)
    threshold = float(np.median(plain.select("in_taxonomy").toPandas()["in_taxonomy"]))
    cut = model.transform_outputs(docs, OutputOptions(min_in_taxonomy=threshold))
    assert cut.columns == plain.columns == ["id", "path", "leaf", "probability", "labels", "in_taxonomy"]
    assert cut.schema["leaf"].nullable and cut.schema["in_taxonomy"].nullable
    assert_df_equality(
        cut.drop("path", "leaf"), plain.drop("path", "leaf"), ignore_row_order=True, ignore_nullable=True
    )
    joined = {r["id"]: r for r in plain.collect()}
    n_out = 0
    for r in cut.collect():
        if r["in_taxonomy"] < threshold:
            n_out += 1
            assert r["path"] == [] and r["leaf"] is None
        else:
            assert r["path"] == joined[r["id"]]["path"] and r["leaf"] == joined[r["id"]]["leaf"]
    assert 0 < n_out < 40
    # "suggested" is the training summary's threshold; "none" no verdict; anything else is refused
    from pcem_spark.model.in_taxonomy import resolve_min_in_taxonomy

    suggested = model.training_summary["in_taxonomy"]["suggested_threshold"]
    assert resolve_min_in_taxonomy("suggested", model) == suggested
    assert resolve_min_in_taxonomy("none", model) == float("-inf")
    with pytest.raises(InputError, match="min_in_taxonomy"):
        resolve_min_in_taxonomy("lots", model)
    # with abstention and top-k too: the verdict applies to the kept prefix, the extra columns stay
    both = model.transform_outputs(docs, OutputOptions(0.5, 2, min_in_taxonomy=threshold)).collect()
    assert all(r["path"] == [] for r in both if r["in_taxonomy"] < threshold)
    assert all(len(r["top_paths"]) == 2 for r in both)


def test_saved_loaded_and_warm_started_models_give_the_same_scores(spark, fitted, tmp_path):
    docs, model = fitted
    path = str(tmp_path / "model")
    model.save(path)
    again = PathModel.load(path)
    np.testing.assert_array_equal(again.corpus.term_counts, model.corpus.term_counts)
    assert again.corpus.totals() == model.corpus.totals()
    before = model.transform(docs).orderBy("id").select("id", "in_taxonomy")
    assert_df_equality(again.transform(docs).orderBy("id").select("id", "in_taxonomy"), before)
    # a warm start on the same documents counts the same corpus; its scores are its own parameters'
    warm = (
        PathEM(method="pcem", minDF=1.0, maxDF=1.0, smoothing=0.5, unlabeledWeight=1.0, pathWeight=1.0, initModel=path)
        .fit(docs)
        .path_model
    )
    assert warm.corpus.totals() == model.corpus.totals()
    np.testing.assert_array_equal(warm.corpus.term_counts, model.corpus.term_counts)
    if np.allclose(warm.log_theta, model.log_theta, atol=1e-12):
        assert_df_equality(warm.transform(docs).orderBy("id").select("id", "in_taxonomy"), before)
    assert warm.training_summary["in_taxonomy"]["suggested_threshold"] is not None


def test_damaged_corpus_counts_are_refused_and_old_models_have_no_score(spark, fitted, tmp_path):
    docs, model = fitted
    path = str(tmp_path / "model")
    model.save(path)
    # an old model: no corpus counts -> in_taxonomy is null, a verdict is refused
    model.corpus, saved = None, model.corpus
    try:
        old = str(tmp_path / "old")
        model.save(old)
    finally:
        model.corpus = saved
    legacy = PathModel.load(old)
    assert legacy.corpus is None
    assert all(r["in_taxonomy"] is None for r in legacy.transform(docs).collect())
    with pytest.raises(InputError, match="no in_taxonomy score"):
        legacy.transform_outputs(docs, OutputOptions(min_in_taxonomy=0.1))
    # corpus counts that do not add up to the metadata's, or are not counts, are a damaged model
    from pcem_spark.model.model_files import _corpus_of

    totals = model.corpus.totals()
    terms = model.corpus.term_counts

    def table(values):
        return pa.table({"index": list(range(len(values))), "term": model.vocabulary, "corpus_count": values})

    assert _corpus_of({"corpus": totals}, table(terms.tolist())).totals() == totals
    assert _corpus_of({}, table(terms.tolist())) is None  # saved before the score
    for bad_terms, bad_totals, why in (
        ((terms + np.eye(len(terms))[0]).tolist(), totals, "sum to"),
        (terms.tolist(), {**totals, "unknown": -1.0}, "non-negative"),
        (terms.tolist(), {k: v for k, v in totals.items() if k != "unknown"}, "incomplete"),
        ([None] + terms.tolist()[1:], totals, "incomplete"),
    ):
        with pytest.raises(ValueError, match=why):
            _corpus_of({"corpus": bad_totals}, table(bad_terms))
    with pytest.raises(ValueError, match="no corpus_count"):
        _corpus_of({"corpus": totals}, pa.table({"index": [0], "term": ["x"]}))


def test_evaluate_reports_the_recall_of_out_of_scope_documents(spark, fitted, tmp_path, capsys):
    from pcem_spark.cli.app import main

    _, model = fitted
    model_path = str(tmp_path / "model")
    model.save(model_path)
    docs = tmp_path / "test.jsonl"
    with open(docs, "w") as fh:
        for i, (path, words) in enumerate(TOPICS.items()):
            fh.write(json.dumps({"id": f"in{i}", "text": words, "labels": list(path)}) + "\n")
        fh.write(json.dumps({"id": "out0", "text": "Der Hauptgang war in Ordnung", "labels": [OUT]}) + "\n")
        fh.write(json.dumps({"id": "out1", "text": "", "labels": [OUT]}) + "\n")
    out = str(tmp_path / "pred")
    assert (
        main(["predict", "--model", model_path, "--docs", str(docs), "--output", out, "--min-in-taxonomy", "0.01"]) == 0
    )
    metrics_path = str(tmp_path / "metrics.json")
    assert main(["evaluate", "--model", model_path, "--predictions", out, "--output", metrics_path]) == 0
    metrics = json.load(open(metrics_path))
    oos = metrics["out_of_scope"]
    assert oos["documents"] == 2 and oos["caught"] == 2 and oos["recall"] == 1.0
    assert oos["min_in_taxonomy"] == pytest.approx(0.01) and oos["in_scope_without_path"] == 0.0
    assert oos["in_scope_documents"] == 4 and metrics["n_documents"] == 4
    assert f"out of scope ({OUT}): 2, given no path: 2" in capsys.readouterr().out
    assert (
        main(
            ["predict", "--model", model_path, "--docs", str(docs), "--output", out + "2", "--min-in-taxonomy", "lots"]
        )
        == 2
    )
