"""Document vectors beside the words: the regression's features, its fit and scores against dense numpy, the
vectors in the packed blocks, their rows checked when read, and models that need them at predict.

Settings are fixed (no cross-validation) so the Spark tests stay fast.
"""

import gzip
import json
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from dense_reference import dense_counts, dense_tfidf

from pcem_spark.core.logistic import (
    LinearTables,
    fit_softmax,
    log_softmax_rows,
    one_hot_targets,
    pooled_scores,
    regression_features,
    softmax_terms,
    tfidf_features,
    with_vectors,
)
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.blocks import Block, block_from_row, packed_label_frame
from pcem_spark.engine.features import FeatureSettings
from pcem_spark.errors import InputError
from pcem_spark.io.json_lines import _parse_line, _StrictDecoder
from pcem_spark.ml import train
from pcem_spark.model.linear_family import linear_l2
from pcem_spark.model.path_model import PathModel
from pcem_spark.model.settings import ModelSettings

WORDS = {
    ("sport", "football"): "football goal keeper league striker pitch referee match",
    ("sport", "tennis"): "tennis serve racket court match volley set umpire",
    ("tech", "phones"): "phones battery screen call android camera app charger",
    ("tech", "laptops"): "laptops keyboard screen battery cpu trackpad ram hinge",
}
DIM = 5
FEATURES = FeatureSettings(min_df=1.0, max_df=1.0, stop_words="none")
SCHEMA = "id string, text string, labels array<string>, embedding array<float>"


def settings(**kw):
    base = dict(
        method="pcem",
        smoothing=0.5,
        unlabeled_weight=0.5,
        path_weight=1.0,
        doc_length=0.0,
        max_iter=5,
        calibration="none",
        names="off",
        family="discriminative",
        linear_c=10.0,
        generative_weight=0.3,
        embedding_weight=1.0,
    )
    base.update(kw)
    return ModelSettings(**base)


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


@pytest.fixture(scope="module")
def corpus(spark):
    """Four leaves; each document's vector leans to its leaf's direction, so the vectors carry evidence."""
    rng = np.random.default_rng(11)
    directions = {path: rng.normal(size=DIM) for path in WORDS}
    rows = []
    for path, words in WORDS.items():
        vocab = words.split()
        for i in range(10):
            text = " ".join(rng.choice(vocab, size=int(rng.integers(3, 8))))
            vector = unit(directions[path] + rng.normal(scale=0.8, size=DIM)).astype(np.float32).tolist()
            rows.append((f"{path[1]}-{i}", text, list(path) if i < 3 else None, vector))
    docs = spark.createDataFrame(rows, SCHEMA)
    return rows, docs, Taxonomy.from_label_paths(list(WORDS))


@pytest.fixture(scope="module")
def with_vectors_model(corpus):
    _, docs, taxonomy = corpus
    model, _ = train(docs, taxonomy, FEATURES, settings())
    return model


# --------------------------------------------------------------------------- the math, no Spark


def test_regression_features_are_the_tfidf_rows_then_the_scaled_vectors():
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.integers(0, 3, size=(4, 6)).astype(float))
    idf = rng.uniform(1, 2, size=6)
    E = rng.normal(size=(4, 3)).astype(np.float32)
    F = regression_features(X, idf, E, 2.0)
    assert F.shape == (4, 9)
    np.testing.assert_allclose(F.toarray()[:, :6], dense_tfidf(X.toarray(), idf), rtol=1e-12)
    np.testing.assert_allclose(F.toarray()[:, 6:], 2.0 * E.astype(np.float64), rtol=1e-7)
    # without vectors: the tf-idf rows alone, as before vectors existed
    np.testing.assert_array_equal(regression_features(X, idf).toarray(), tfidf_features(X, idf).toarray())
    with pytest.raises(ValueError, match="vectors of shape"):
        regression_features(X, idf, E[:3], 1.0)


def test_pooled_scores_with_vectors_are_the_dense_product_of_experts():
    rng = np.random.default_rng(1)
    n, V, D, M = 5, 7, 3, 4
    X = sp.csr_matrix(rng.integers(0, 3, size=(n, V)).astype(float))
    idf = rng.uniform(1, 2, size=V)
    E = rng.normal(size=(n, D))
    W = rng.normal(size=(M, V + D))
    b = rng.normal(size=M)
    jll = rng.normal(size=(n, M)) * 5
    linear = LinearTables(np.ascontiguousarray(W.T), b, idf, 0.4, 1.5)
    assert linear.embedding_dim == D
    expected = 0.4 * log_softmax_rows(jll) + np.hstack([dense_tfidf(X.toarray(), idf), 1.5 * E]) @ W.T + b
    np.testing.assert_allclose(pooled_scores(jll, X, linear, E), expected, rtol=1e-10)
    # bound per block, as a prediction task does
    np.testing.assert_allclose(pooled_scores(jll, X, with_vectors(linear, E)), expected, rtol=1e-10)
    with pytest.raises(ValueError, match=r"needs \(5, 3\) document vectors, got none"):
        pooled_scores(jll, X, linear)
    # a model fitted without vectors ignores any it is given
    words = LinearTables(np.ascontiguousarray(W[:, :V].T), b, idf, 0.4)
    assert with_vectors(words, E) is words
    np.testing.assert_array_equal(pooled_scores(jll, X, words, E), pooled_scores(jll, X, words))


def test_blocks_carry_their_vectors_through_a_pickle_and_a_row_slice():
    rng = np.random.default_rng(2)
    X = sp.csr_matrix(rng.integers(0, 4, size=(3, 5)).astype(float))
    ns = sp.csr_matrix(np.eye(3))
    E = rng.normal(size=(3, 4)).astype(np.float32)
    back = pickle.loads(pickle.dumps(Block(X, ns, np.ones(3, bool), E)))
    np.testing.assert_array_equal(back.E, E)
    assert back.E.dtype == np.float32
    np.testing.assert_array_equal(back.rows(np.array([2, 0])).E, E[[2, 0]])
    assert pickle.loads(pickle.dumps(Block(X, ns, np.ones(3, bool)))).E is None


def test_a_json_line_vector_is_an_array_of_finite_numbers():
    def parse(obj):
        return _parse_line(_StrictDecoder(), json.dumps(obj).encode(), True, "embedding")

    ok = parse({"id": "a", "text": "t", "embedding": [1, 0.5, -2e-3]})
    assert ok[6] is None and ok[8] == [1.0, 0.5, -0.002]
    assert parse({"id": "a", "text": "t"})[8] is None  # absent: null, decided by the dimension check later
    assert parse({"id": "a", "text": "t", "embedding": "0.1 0.2"})[6] == (
        "field 'embedding': expected an array of numbers, got string"
    )
    bad = parse({"id": "a", "text": "t", "embedding": [0.1, True]})
    assert bad[0] == "a" and bad[6] == "embedding[1]: expected a number, got boolean"
    huge = _parse_line(_StrictDecoder(), b'{"id": "a", "text": "t", "embedding": [1e39]}', True, "embedding")
    assert huge[6] == "embedding[0]: expected a finite number (float32), got one out of range"
    too_big = _parse_line(
        _StrictDecoder(), b'{"id": "a", "text": "t", "embedding": [1' + b"0" * 400 + b"]}", True, "embedding"
    )
    assert too_big[6] == "embedding[0]: expected a finite number (float32), got one out of range"
    # without a vector key the line reads as it always did: eight fields
    assert len(_parse_line(_StrictDecoder(), b'{"id": "a", "text": "t", "embedding": [1]}', True)) == 8


# --------------------------------------------------------------------------- Spark


def test_packed_blocks_hold_each_rows_vector_as_float32(spark, corpus):
    rows, docs, taxonomy = corpus
    from pcem_spark.engine.features import featurize, fit_vocabulary

    vocabulary = fit_vocabulary(docs, FEATURES)
    feats = featurize(docs, vocabulary, FEATURES)
    frame = packed_label_frame(feats, taxonomy.path_lookup(), taxonomy.path_node_matrix(sparse=True), 7)
    blocks = [block_from_row(r, len(vocabulary), taxonomy.n_nodes) for r in frame.collect()]
    got = np.vstack([b.E for b in blocks])
    np.testing.assert_array_equal(got, np.array([r[3] for r in rows], dtype=np.float32))
    names_only = spark.createDataFrame([("n1", "goal", None, None)], SCHEMA)
    packed = packed_label_frame(
        featurize(names_only, vocabulary, FEATURES), taxonomy.path_lookup(), taxonomy.path_node_matrix(sparse=True)
    ).collect()
    assert block_from_row(packed[0], len(vocabulary), taxonomy.n_nodes).E is None  # no row has a vector


def test_the_regression_with_vectors_is_the_optimum_of_its_dense_objective(corpus, with_vectors_model):
    rows, _, taxonomy = corpus
    model = with_vectors_model
    info = model.training_summary["linear"]
    assert info["embedding_dim"] == DIM and info["embedding_weight"] == 1.0 and info["converged"]
    assert model.linear.embedding_dim == DIM and model.feature_settings.embedding == "embedding"
    X = dense_counts(rows, model.vocabulary)
    n = len(rows)
    idf = np.log((1 + n) / (1 + (X > 0).sum(axis=0))) + 1
    labelled = [i for i, r in enumerate(rows) if r[2] is not None]
    E = np.array([rows[i][3] for i in labelled], dtype=np.float32).astype(np.float64)
    F = np.hstack([dense_tfidf(X[labelled], idf), E])
    paths = np.array([taxonomy.paths.index(tuple(rows[i][2])) for i in labelled])
    local = fit_softmax(
        lambda W, b: softmax_terms(F, one_hot_targets(paths, taxonomy.n_paths), np.ones(len(paths)), W, b),
        taxonomy.n_paths,
        F.shape[1],
        linear_l2(10.0, len(paths)),
        max_iter=500,
        tol=1e-9,
    )
    np.testing.assert_allclose(model.linear.weights_t.T, local.W, atol=2e-3)
    assert np.abs(local.W[:, -DIM:]).max() > 0.1  # the vectors carry weight


def test_inspect_lists_only_terms_as_a_vector_models_weighted_terms(with_vectors_model):
    from pcem_spark.ops.inspection import inspect_model

    report = inspect_model(with_vectors_model)
    listed = [t["term"] for n in report["nodes"] for t in n.get("top_weighted_terms", [])]
    assert listed and set(listed) <= set(with_vectors_model.vocabulary)  # the D vector rows name no term


def test_predictions_are_the_argmax_of_the_dense_scores_with_vectors(spark, corpus, with_vectors_model):
    rows, docs, taxonomy = corpus
    model = with_vectors_model
    X = dense_counts(rows, model.vocabulary)
    E = np.array([r[3] for r in rows], dtype=np.float32).astype(np.float64)
    W = model.linear.weights_t.T
    scores = np.hstack([dense_tfidf(X, model.linear.idf), E]) @ W.T + model.linear.bias
    expected = {r[0]: list(taxonomy.paths[j]) for r, j in zip(rows, scores.argmax(axis=1))}
    got = {r["id"]: list(r["path"]) for r in model.transform(docs).collect()}
    assert got == expected


def test_save_and_load_keep_the_vectors_part(spark, corpus, with_vectors_model, tmp_path):
    _, docs, _ = corpus
    path = str(tmp_path / "model")
    with_vectors_model.save(path)
    loaded = PathModel.load(path)
    assert loaded.linear.embedding_dim == DIM and loaded.linear.embedding_weight == 1.0
    np.testing.assert_array_equal(loaded.linear.weights_t, with_vectors_model.linear.weights_t)
    before = sorted((r["id"], r["path"], r["probability"]) for r in with_vectors_model.transform(docs).collect())
    after = sorted((r["id"], r["path"], r["probability"]) for r in loaded.transform(docs).collect())
    assert before == after
    # a warm start from it keeps fitting with vectors
    _, docs_, taxonomy = corpus
    warm, _ = train(docs_, taxonomy, FEATURES, settings(), init_model=path)
    assert warm.linear.embedding_dim == DIM


def test_predict_refuses_documents_without_the_models_vectors(spark, corpus, with_vectors_model):
    _, docs, _ = corpus
    with pytest.raises(InputError, match=r"column 'embedding' of 5 values\), and the documents have no column"):
        with_vectors_model.transform(docs.drop("embedding"))
    from pyspark.sql import functions as F

    short = docs.withColumn("embedding", F.slice("embedding", 1, 3))
    with pytest.raises(InputError, match=r"have 3 values; the model was fitted on column 'embedding' of 5 values"):
        with_vectors_model.transform(short)
    with pytest.raises(InputError, match=r"keep_columns \['embedding'\]: the documents' vectors are read by the model"):
        with_vectors_model.transform(docs, keep_columns=["embedding"])
    # a row without a vector is scored on its words alone, even when no row of its block has one
    none = docs.where(F.col("id") == "football-5").withColumn("embedding", F.lit(None).cast("array<float>"))
    assert [r["path"] for r in with_vectors_model.transform(none).collect()] != []


def test_without_vectors_the_model_and_its_predictions_do_not_change(spark, corpus):
    """A vector column the settings turn off, or a generative model, changes nothing."""
    _, docs, taxonomy = corpus
    words = docs.drop("embedding")
    plain, _ = train(words, taxonomy, FEATURES, settings())
    off, _ = train(
        docs, taxonomy, FeatureSettings(min_df=1.0, max_df=1.0, stop_words="none", embedding="none"), settings()
    )
    assert plain.linear.embedding_dim == 0 and off.linear.embedding_dim == 0
    np.testing.assert_array_equal(plain.linear.weights_t, off.linear.weights_t)
    a = sorted((r["id"], r["path"], r["probability"]) for r in plain.transform(words).collect())
    b = sorted((r["id"], r["path"], r["probability"]) for r in off.transform(docs).collect())
    assert a == b
    generative, _ = train(docs, taxonomy, FEATURES, settings(family="generative"))
    assert generative.linear is None and generative.feature_settings.embedding == "none"
    assert generative.transform(words).count() == len(corpus[0])  # it never reads vectors


def test_bad_vectors_are_rejects_with_their_reason(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.rejects import split_rejects

    rows = [
        {"id": "ok1", "text": "a", "embedding": [0.1, 0.2, 0.3]},
        {"id": "ok2", "text": "b", "embedding": [0.3, 0.2, 0.1]},
        {"id": "short", "text": "c", "embedding": [0.1, 0.2]},
        {"id": "nan", "text": "d", "embedding": [0.1, float("nan"), 0.3]},
        {"id": "none", "text": "e", "embedding": None},
    ]
    parquet = str(tmp_path / "docs.parquet")
    pq.write_table(
        pa.Table.from_pylist(
            rows, pa.schema([("id", pa.string()), ("text", pa.string()), ("embedding", pa.list_(pa.float32()))])
        ),
        parquet,
    )
    jsonl = str(tmp_path / "docs.jsonl.gz")
    with gzip.open(jsonl, "wt") as fh:
        for r in rows:
            fh.write(json.dumps({k: v for k, v in r.items() if k != "embedding" or r["id"] != "nan"}) + "\n")
        fh.write('{"id": "text", "text": "f", "embedding": ["x", 1, 2]}\n')
    for path, expected in [
        (parquet, {"nan": "embedding[1]: expected a finite number, got NaN"}),
        (jsonl, {"text": "embedding[0]: expected a number, got string"}),
    ]:
        counts: dict = {}
        good, rejects = split_rejects(read_documents(spark, path, embedding="auto"), counts=counts)
        reasons = {r["id"]: r["reason"] for r in rejects.collect()}
        assert sorted(r["id"] for r in good.collect()) == ["ok1", "ok2"]
        assert reasons["short"] == "embedding: expected 3 values (the dimension of the other vectors), got 2"
        assert reasons["none"] == "embedding: expected a vector of 3 numbers, got null"
        for key, reason in expected.items():
            assert reasons[key] == reason
        assert counts["vector_dimension"] == 3 and counts["parsed"] == counts["valid"] + len(reasons)
    with pytest.raises(InputError, match=r"column 'embedding' holds vectors of 3 values; 384 values are expected"):
        split_rejects(read_documents(spark, parquet, embedding="auto"), vectors=("embedding", 384))


# --------------------------------------------------------------------------- category names as vectors


def test_node_vectors_are_read_strictly_and_averaged_per_path(tmp_path):
    from pcem_spark.io.embeddings import load_node_vectors, path_vectors

    taxonomy = Taxonomy.from_label_paths(list(WORDS))
    good = tmp_path / "nodes.json"
    good.write_text(json.dumps({"sport": [3.0, 0.0], "football": [0.0, 2.0], "tech": [1.0, 1.0]}))
    vectors = load_node_vectors(str(good), taxonomy)
    by_path = path_vectors(vectors, taxonomy)
    football = taxonomy.paths.index(("sport", "football"))
    tennis = taxonomy.paths.index(("sport", "tennis"))
    np.testing.assert_allclose(by_path[football], unit([0.5, 0.5]))  # the mean of the unit vectors, unit length
    np.testing.assert_allclose(by_path[tennis], [1.0, 0.0])  # only its top node has one
    assert len(by_path) == 4
    for content, message in [
        ({"soccer": [1.0]}, r"1 names are not nodes of the taxonomy: \['soccer'\]"),
        ({"sport": [1.0, "x"]}, r"node 'sport'\[1\]: expected a finite number, got 'x'"),
        ({"sport": [1.0, 2.0], "tech": [1.0]}, r"several lengths: \[1, 2\]"),
        ([1, 2], "expected a JSON object node name -> vector"),
    ]:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(content))
        with pytest.raises(InputError, match=message):
            load_node_vectors(str(bad), taxonomy)
    twice = tmp_path / "twice.json"
    twice.write_text('{"sport": [1.0], "sport": [2.0]}')
    with pytest.raises(InputError, match="sport"):
        load_node_vectors(str(twice), taxonomy)


def test_name_documents_carry_their_paths_vectors_into_the_regression(corpus):
    rows, docs, taxonomy = corpus
    rng = np.random.default_rng(5)
    nodes = {n: rng.normal(size=DIM).tolist() for n in taxonomy.real_nodes}
    plain, _ = train(docs, taxonomy, FEATURES, settings(names="on"))
    named, _ = train(docs, taxonomy, FEATURES, settings(names="on"), node_vectors=nodes)
    assert plain.training_summary["names"]["node_vectors"] == 0
    assert named.training_summary["names"]["node_vectors"] == taxonomy.n_paths
    # the names' words are the same; their vectors move the vectors' weights only where names have them
    assert not np.allclose(plain.linear.weights_t, named.linear.weights_t)
    wrong = {n: [1.0, 0.0] for n in taxonomy.real_nodes}
    with pytest.raises(InputError, match="node vectors have 2 values and the documents' 5"):
        train(docs, taxonomy, FEATURES, settings(names="on"), node_vectors=wrong)


def test_names_only_choice_keeps_the_discriminative_familys_one_se_point():
    from pcem_spark.ml.grid_choice import names_only_choice
    from pcem_spark.ml.tune_settings import TuneSettings

    spec = {"family": ["combined", "generative", "discriminative"], "embedding_weight": [1.0, 2.0]}
    rows = [
        {"family": "combined", "embedding_weight": 1.0, "cv_score": 0.40, "cv_std": 0.01},
        {"family": "discriminative", "embedding_weight": 1.0, "cv_score": 0.20, "cv_std": 0.01},
        {"family": "discriminative", "embedding_weight": 2.0, "cv_score": 0.30, "cv_std": 0.01},
    ]
    pick, record = names_only_choice(rows, spec, TuneSettings(), 4, 5)
    assert pick == 2  # the best discriminative point (the other is more than a standard error below it)
    assert record["chosen"] == "discriminative" and (record["alone_held_out"], record["held_out"]) == (4, 5)
    assert names_only_choice(rows[:1], spec, TuneSettings(), 4, 5) == (None, None)


def test_at_one_label_per_leaf_with_vectors_the_family_is_the_discriminative_one(spark, corpus):
    """The folds can hold out only leaves' single documents (trained on their names alone): with vectors the
    discriminative family is kept, whatever those folds say (without vectors they decide, as test_tuning's tests
    of the family choice show)."""
    from pcem_spark.ml import TuneSettings

    rows, _, taxonomy = corpus
    one_each = [(i, t, labels if i.endswith("-0") else None, v) for i, t, labels, v in rows]
    docs = spark.createDataFrame(one_each, SCHEMA)
    tune = TuneSettings(
        folds=2,
        min_labeled_per_fold=1,
        unlabeled_weights=[0.5],
        path_weights=[1.0],
        generative_weights=[0.3],
        embedding_weights=[1.0, 4.0],
        max_iter=2,
    )
    auto = settings(names="on", family="auto", embedding_weight="auto")
    model, _ = train(docs, taxonomy, FEATURES, auto, tune=tune)
    tuning = model.training_summary["tuning"]
    assert tuning["families"]["chosen"] == "discriminative" == model.model_settings.family
    assert tuning["families"]["alone_held_out"] == tuning["families"]["held_out"] == taxonomy.n_paths
    assert model.linear.embedding_dim == DIM


# --------------------------------------------------------------------------- the commands


def _write_jsonl(path, rows, vectors=True):
    with open(path, "w") as fh:
        for doc_id, text, labels, vector in rows:
            obj = {"id": doc_id, "text": text, "labels": labels}
            if vectors:
                obj["embedding"] = vector
            fh.write(json.dumps(obj) + "\n")


QUICK = [
    "model.family=discriminative",
    "model.unlabeled_weight=0.5",
    "model.path_weight=1.0",
    "model.smoothing=0.5",
    "model.calibration=none",
    "model.names=off",
    "features.min_df=1",
    "features.max_df=1.0",
    "features.stop_words=none",
]


@pytest.mark.slow
def test_train_and_predict_commands_with_vectors_and_their_refusals(spark, corpus, tmp_path):
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker

    rows, _, _ = corpus
    docs = str(tmp_path / "docs.jsonl")
    _write_jsonl(docs, rows + [("broken", "goal match", None, [0.1, float("inf")])])
    model = str(tmp_path / "model")
    settings_args = [a for kv in QUICK + ["features.embedding_model=e5-test"] for a in ("--set", kv)]
    assert main(["train", "--docs", docs, "--model", model] + settings_args) == 0
    assert read_marker(spark, model + "_rejects")["rejected"] == 1  # the infinite value: json.dumps wrote Infinity
    loaded = PathModel.load(model)
    assert loaded.linear.embedding_dim == DIM and loaded.feature_settings.embedding_model == "e5-test"
    out = str(tmp_path / "pred")
    assert main(["predict", "--model", model, "--docs", docs, "--output", out]) == 0
    assert spark.read.parquet(out).count() == len(rows)
    # another encoder named at predict, vectors of another length, or none: exit 2 before anything is written
    other = ["--set", "features.embedding_model=minilm"]
    assert main(["predict", "--model", model, "--docs", docs, "--output", str(tmp_path / "p2")] + other) == 2
    short = str(tmp_path / "short.jsonl")
    _write_jsonl(short, [(i, t, lab, v[:3]) for i, t, lab, v in rows])
    assert main(["predict", "--model", model, "--docs", short, "--output", str(tmp_path / "p3")]) == 2
    plain = str(tmp_path / "plain.jsonl")
    _write_jsonl(plain, rows, vectors=False)
    assert main(["predict", "--model", model, "--docs", plain, "--output", str(tmp_path / "p4")]) == 2
    for name in ("p2", "p3", "p4"):
        assert not (tmp_path / name).exists()


def test_check_encoder_names_both_sides():
    from pcem_spark.model.vectors import VectorColumn, check_encoder

    vectors = VectorColumn("embedding", 384, "e5-small")
    check_encoder(vectors, "e5-small")
    check_encoder(vectors, "")  # the run names none: the dimension check stands
    check_encoder(None, "minilm")  # a model without vectors reads none
    with pytest.raises(InputError, match=r"'minilm', but the model was fitted on vectors from encoder 'e5-small'"):
        check_encoder(vectors, "minilm")


@pytest.mark.slow  # the exhaustive strategy: a CrossValidator of distributed fits
def test_pathem_fits_and_cross_validates_with_the_vectors(spark, corpus):
    """PathEM on a DataFrame, and the exhaustive cross-validation (CrossValidator over PathEM), keep them."""
    from pcem_spark.ml import PathEM, TuneSettings

    _, docs, taxonomy = corpus
    est = PathEM(
        family="discriminative",
        smoothing=0.5,
        unlabeledWeight=0.5,
        pathWeight=1.0,
        docLength=0.0,
        maxIter=3,
        calibration="none",
        names="off",
        minDF=1.0,
        maxDF=1.0,
        stopWords="none",
    )
    assert est.fit(docs).path_model.linear.embedding_dim == DIM
    tune = TuneSettings(strategy="exhaustive", folds=2, min_labeled_per_fold=1, unlabeled_weights=[0.5])
    model, _ = train(docs, taxonomy, FEATURES, settings(unlabeled_weight="auto", embedding_weight="auto"), tune=tune)
    assert model.linear.embedding_dim == DIM
    assert model.training_summary["tuning"]["chosen"]["embedding_weight"] in (1.0, 2.0, 4.0, 8.0)
