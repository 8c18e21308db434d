"""The fewest labels: folds that never hold out a leaf's last labelled document, a calibration that falls back
instead of collapsing, and category names as evidence (``model.names``)."""

import json

import numpy as np
import pytest
import scipy.sparse as sp
from cli_args import set_args
from test_predict_evaluate import TAX  # noqa: E402 (the four-topic taxonomy: sport/football ... tech/chips)

from pcem_spark.core.names import name_words, path_name_text
from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.features import FeatureSettings
from pcem_spark.model.sampled_cv import KEPT_PART, cv_task, trained_paths
from pcem_spark.model.settings import ModelSettings
from pcem_spark.model.stop_words import stratified_folds as numpy_folds

FS = FeatureSettings(min_df=1, max_df=1.0, vocab_size=0, stop_words="english")
TOPIC_WORDS = {
    ("sport", "football"): "goal keeper striker league pitch referee",
    ("sport", "tennis"): "serve racket volley court deuce wimbledon",
    ("tech", "phones"): "android screen battery camera apps mobile",
    ("tech", "chips"): "silicon transistor wafer foundry nanometer cpu",
}


# ------------------------------------------------------------------------------- the fold rule
def test_numpy_folds_never_hold_out_a_paths_only_document():
    y = np.array([0, 1, 1, 2, 2, 2, 2, 2, 3])
    for seed in range(5):
        folds = numpy_folds(y, 3, seed)
        assert folds[0] == -1 and folds[8] == -1  # paths 0 and 3 have one document each
        assert len(set(folds[1:3])) == 2  # path 1's two documents: held out in different folds
        assert (folds[3:8] >= 0).all()


def test_a_leafs_only_document_is_held_out_when_its_name_document_keeps_the_leaf_known(spark):
    from pcem_spark.ml.tuning import stratified_folds
    from pcem_spark.model.names import NAME_ID_PREFIX

    rows = [("a1", ["sport", "football"]), (NAME_ID_PREFIX + "0", ["sport", "football"]), ("b1", ["sport", "tennis"])]
    got = {
        r["id"]: r["fold"]
        for r in stratified_folds(spark.createDataFrame(rows, "id string, labels array<string>"), 3, 0).collect()
    }
    assert got[NAME_ID_PREFIX + "0"] == KEPT_PART and got["b1"] == KEPT_PART  # tennis has no name document
    assert 0 <= got["a1"] < 3


def test_spark_folds_keep_a_leafs_only_document_in_every_training_set(spark):
    from pcem_spark.ml.tuning import stratified_folds

    rows = [("a1", ["sport", "football"]), ("b1", ["sport", "tennis"]), ("b2", ["sport", "tennis"])]
    rows += [(f"c{i}", ["tech", "chips"]) for i in range(5)]
    df = spark.createDataFrame(rows, "id string, labels array<string>")
    for seed in (0, 1, 2):
        got = {r["id"]: r["fold"] for r in stratified_folds(df, 3, seed).collect()}
        assert got["a1"] == KEPT_PART  # the only football document: trained on by every fold
        assert got["b1"] != got["b2"] and {got["b1"], got["b2"]} <= {0, 1, 2}
        assert all(0 <= got[f"c{i}"] < 3 for i in range(5))
        assert got == {r["id"]: r["fold"] for r in stratified_folds(df, 3, seed).collect()}  # deterministic


def test_a_cv_task_scores_only_held_out_documents_whose_path_is_trained():
    from pcem_spark.engine.blocks import Block

    paths = TAX.path_node_matrix(sparse=True)
    V = 6

    def block(rows):  # rows: (path index, term index)
        n = len(rows)
        X = sp.csr_matrix((np.ones(n), (np.arange(n), [t for _, t in rows])), shape=(n, V))
        ns = sp.vstack([paths[p] for p, _ in rows]).tocsr().astype(np.float64)
        return Block(X, ns, np.ones(n, dtype=bool))

    parts = [
        (0, block([(0, 0), (1, 1)])),  # fold 0 holds out a path-0 and a path-1 document
        (1, block([(0, 0), (2, 2)])),  # fold 1 trains path 0 and 2 (not path 1)
        (KEPT_PART, block([(3, 3)])),
    ]
    ms = ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=0.0, doc_length=0.0)
    out = cv_task(parts, 0, TAX, V, ms.resolved())
    assert out["scored"] == 1 and out["skipped"] == 1  # path 1 has no labelled document in training
    assert trained_paths([b.node_scores for p, b in parts if p != 0], paths, TAX.is_dummy).tolist() == [
        True,
        False,
        True,
        True,
    ]


# ------------------------------------------------------------------------------- names
@pytest.mark.parametrize(
    "name,words",
    [
        ("book_flight", ["book", "flight"]),
        ("SoccerPlayer", ["soccer", "player"]),
        ("comp.sys.ibm.pc.hardware", ["comp", "sys", "ibm", "pc", "hardware"]),
        ("HTTPServer2", ["http", "server", "2"]),
        ("windows95-apps", ["windows", "95", "apps"]),
        ("talk politics", ["talk", "politics"]),
        ("Ünïcode_Straße", ["ünïcode", "straße"]),
        ("x", ["x"]),
    ],
)
def test_name_words_split_dots_underscores_camel_case_and_digits(name, words):
    assert name_words(name) == words


def test_a_paths_name_text_joins_its_nodes_and_their_descriptions():
    assert path_name_text(["comp", "comp.sys.mac"], {"comp.sys.mac": "apple macintosh"}) == (
        "comp comp sys mac apple macintosh"
    )


# Twelve leaves under three topics; each leaf's documents use its own words, among them its name.
LEAVES = {
    "sport": ["football", "tennis", "golf", "boxing"],
    "tech": ["phones", "chips", "laptops", "routers"],
    "food": ["pasta", "sushi", "curry", "salad"],
}
WIDE = Taxonomy.from_label_paths([[top, leaf] for top, leaves in LEAVES.items() for leaf in leaves])


def _corpus(spark, labelled_per_leaf, n_per_leaf=25, seed=0, names=None):
    """Documents of twelve leaves; the leaf names are words of their documents unless ``names`` renames them."""
    rng = np.random.default_rng(seed)
    rows = []
    for top, leaves in LEAVES.items():
        for leaf in leaves:
            own = [f"{leaf}{suffix}" for suffix in ("er", "ing", "s", "ist")]
            vocab = own + [leaf] * 2 + [top, f"{top}y"] + "common shared words across topics".split()
            for i in range(n_per_leaf):
                text = " ".join(rng.choice(vocab, size=4))
                path = [top, (names or {}).get(leaf, leaf)]
                rows.append((f"{leaf}-{i}", text, path if i < labelled_per_leaf else None))
    return spark.createDataFrame(rows, "id string, text string, labels array<string>")


def _train(spark, docs, names, taxonomy=WIDE, **settings):
    from pcem_spark.ml import train

    # The generative family: the names and the calibration are the point here (family auto would cross-validate it).
    base = dict(method="pcem", smoothing=1.0, unlabeled_weight=1.0, path_weight=0.0, max_iter=5, family="generative")
    ms = ModelSettings(**{**base, **settings, "names": names})
    model, _ = train(docs, taxonomy, FS, ms)
    return model


# The tests of the names: the calibration plays no part in them (the names are decided and weighed before it), off.
NAMES_ONLY = dict(calibration="none")
PCNB = dict(method="pcnb", unlabeled_weight=0.0, **NAMES_ONLY)  # naive Bayes, no EM: the names' weight, read off theta


@pytest.fixture(scope="module")
def one_label(spark):
    """The twelve leaves at one labelled document each, and naive Bayes models of it with the names on and off
    (trained once: the tests only read them)."""
    docs = _corpus(spark, labelled_per_leaf=1)
    return docs, _train(spark, docs, "on", **PCNB), _train(spark, docs, "off", **PCNB)


@pytest.fixture(scope="module")
def several_labels(spark):
    """names = auto at four labelled documents per leaf whose names are words (trained once: read by two tests)."""
    return _train(spark, _corpus(spark, labelled_per_leaf=4), "auto", **NAMES_ONLY)


@pytest.mark.slow
def test_names_auto_turns_on_at_one_label_per_leaf_when_names_are_words(spark, one_label):
    docs, on, off = one_label
    model = _train(spark, docs, "auto", **NAMES_ONLY)
    names = model.training_summary["names"]
    assert names["choice"] == "on" and names["rule"] == "names alone against shuffled names"
    assert names["paths_with_words"] == 12 and names["names_without_vocabulary"] == 0
    # the names are one more labelled document of each path: its words weigh more on it (naive Bayes, no EM)
    j = WIDE.path_lookup()[("sport", "football")]
    w = on.vocabulary.index("football")
    assert on.log_theta[j, w] > off.log_theta[j, w]
    assert off.training_summary["names"]["choice"] == "off"


def test_names_that_are_not_words_stay_off_and_are_counted(spark):
    renamed = {leaf: f"qx{i}" for i, leaf in enumerate(sum(LEAVES.values(), []))}
    tax = Taxonomy.from_label_paths([[top, renamed[leaf]] for top, leaves in LEAVES.items() for leaf in leaves])
    docs = _corpus(spark, labelled_per_leaf=1, names=renamed)
    names = _train(spark, docs, "auto", tax, **NAMES_ONLY).training_summary["names"]
    # the twelve leaf names are no words (the top names are, but they cannot tell a top's four leaves apart)
    assert names["names_without_vocabulary"] == 12 and names["leaves_with_words"] == 0
    assert names["choice"] == "off" and "leaf names have a word" in names["reason"]


def test_names_auto_cross_validates_when_leaves_have_several_labelled_documents(several_labels):
    names = several_labels.training_summary["names"]
    assert names["rule"] == "cross-validation" and names["held_out"] == 48  # every labelled document: 4 x 12 leaves
    assert names["choice"] in ("on", "off") and "standard error" in names["reason"]


@pytest.mark.slow
def test_the_names_setting_is_validated_and_saved(one_label, tmp_path):
    from pcem_spark.errors import InputError
    from pcem_spark.model.path_model import PathModel

    with pytest.raises(InputError, match="names"):
        ModelSettings(names="maybe").validate()
    _, model, _ = one_label
    model.save(str(tmp_path / "m"))
    assert PathModel.load(str(tmp_path / "m")).model_settings.names == "on"


def test_a_name_documents_weight_fades_with_its_paths_labelled_documents():
    from pcem_spark.model.names import faded_name_weights

    n = np.array([0, 1, 2, 4, 9])
    np.testing.assert_allclose(faded_name_weights(n, 1.0), [1, 1, 1 / 2, 1 / 4, 1 / 9])
    np.testing.assert_allclose(faded_name_weights(n, 0.5), [1, 1, 2**-0.5, 1 / 2, 1 / 3])
    np.testing.assert_allclose(faded_name_weights(n, 0.0), np.ones(5))  # the fixed weight
    # a name document of 200 tokens keeps 20 at every count; the other 180 fade
    np.testing.assert_allclose(faded_name_weights(n, 1.0, 200, 20), [1, 1, 0.55, 0.325, (20 + 20) / 200])
    np.testing.assert_allclose(faded_name_weights(n, 1.0, 10, 20), np.ones(5))  # shorter than what is kept


@pytest.mark.parametrize("several", [False, True])
def test_labelled_documents_are_counted_per_path_from_the_leaf_coverage(spark, several):
    from pcem_spark.model.label_checks import label_coverage
    from pcem_spark.model.names import labelled_per_path

    football, chips = ["sport", "football"], ["tech", "chips"]
    if several:  # a document in two categories counts once for each
        rows = [("a", [football]), ("b", [football, chips]), ("c", None)]
        schema = "id string, labels array<array<string>>"
    else:
        rows = [("a", football), ("b", football), ("b2", chips), ("c", None)]
        schema = "id string, labels array<string>"
    counts = labelled_per_path(label_coverage(spark.createDataFrame(rows, schema), TAX), TAX)
    want = np.zeros(TAX.n_paths, dtype=int)
    want[TAX.path_lookup()[tuple(football)]] = 2
    want[TAX.path_lookup()[tuple(chips)]] = 1
    assert counts.tolist() == want.tolist()


@pytest.mark.slow
def test_a_paths_name_weighs_less_once_the_path_has_labelled_documents_of_its_own(spark):
    from pyspark.sql import functions as F

    # football has six labelled documents, every other leaf one
    docs = _corpus(spark, labelled_per_leaf=6).withColumn(
        "labels", F.when(F.col("id").startswith("football-") | F.col("id").endswith("-0"), F.col("labels"))
    )
    pcnb = dict(PCNB, names_kept_tokens=0.0)
    fading, fixed = _train(spark, docs, "on", names_fade=1.0, **pcnb), _train(spark, docs, "on", names_fade=0.0, **pcnb)
    off = _train(spark, docs, "off", **pcnb)
    summary = fading.training_summary["names"]
    assert summary["weight_max"] == pytest.approx(2.0) and summary["weight_min"] == pytest.approx(2.0 / 6)
    assert fixed.training_summary["names"]["weight_min"] == pytest.approx(2.0)
    lookup = WIDE.path_lookup()
    football, tennis = lookup[("sport", "football")], lookup[("sport", "tennis")]
    w, v = fading.vocabulary.index("football"), fading.vocabulary.index("tennis")
    # six documents of its own: the name's pull on its word shrinks, but is still there
    assert off.log_theta[football, w] < fading.log_theta[football, w] < fixed.log_theta[football, w]
    # one document of its own: the name weighs what it always did
    assert fading.log_theta[tennis, v] == pytest.approx(fixed.log_theta[tennis, v])
    assert fading.log_theta[tennis, v] > off.log_theta[tennis, v]
    with pytest.raises(Exception, match="names_fade"):
        ModelSettings(names_fade=-1.0).validate()


# ------------------------------------------------------------------------------- the calibration at the fewest labels
@pytest.mark.slow
def test_at_one_label_per_leaf_the_calibration_is_skipped_with_the_numbers_not_collapsed(spark):
    docs, tax = _twenty_four_leaves(spark)  # enough labelled documents, none that can be held out
    model = _train(spark, docs, "off", tax)
    cal = model.training_summary["calibration"]
    assert cal["method"] == "none" and "can be held out" in cal["reason"]
    assert cal["out_of_fold_scored"] == 0 and cal["out_of_fold_skipped"] == 24
    assert model.temperature is None
    tuning = model.training_summary.get("tuning") or {}
    assert not tuning.get("tuned", False)


def _twenty_four_leaves(spark):
    """24 leaves of one labelled document each (the twelve, and a copy of each named ``LEAF2``)."""
    twins = {leaf: leaf + "2" for leaf in sum(LEAVES.values(), [])}
    docs = (
        _corpus(spark, labelled_per_leaf=1)
        .unionByName(_corpus(spark, 1, seed=1).where("labels is null"))
        .unionByName(
            _corpus(spark, labelled_per_leaf=1, names=twins)
            .where("labels is not null")
            .selectExpr("concat(id, 'b') as id", "text", "labels")
        )
    )
    tax = Taxonomy.from_label_paths(
        [[top, leaf + suffix] for top, leaves in LEAVES.items() for leaf in leaves for suffix in ("", "2")]
    )
    return docs, tax


@pytest.mark.slow
def test_with_names_one_label_per_leaf_is_scored_out_of_fold_and_calibrated(spark):
    docs, tax = _twenty_four_leaves(spark)
    model = _train(spark, docs, "on", tax)
    cal = model.training_summary["calibration"]
    # each leaf stays known by its name document, so its only labelled document is held out and scored
    assert cal["out_of_fold_scored"] == 24 and cal["out_of_fold_skipped"] == 0
    assert model.temperature is not None and cal["method"] == "temperature"  # too few documents for a map
    # 24 documents: the spread says so (at least the binomial error of their precision) and the warning fires
    from pcem_spark.ml.calibrating import SPREAD_WARNING

    assert cal["probability_spread"] > SPREAD_WARNING


def test_a_temperature_alone_reports_at_least_the_binomial_error_of_its_precision():
    from pcem_spark.core.calibration import out_of_fold
    from pcem_spark.core.calibration_spread import mean_precision_error, probability_spread

    rng = np.random.default_rng(0)
    jll = rng.normal(size=(20, 12)) * 30  # sharp scores: a temperature fitted on 20 documents barely moves
    true = np.where(rng.random(20) < 0.2, jll.argmax(axis=1), (jll.argmax(axis=1) + 1) % 12)
    oof = out_of_fold(jll, true, k=12)
    flat = np.arange(12).reshape(12, 1)
    correct = (jll.argmax(axis=1) == true).astype(float)
    assert mean_precision_error(correct, 20) == pytest.approx(np.sqrt(correct.mean() * (1 - correct.mean()) / 20))
    assert mean_precision_error(correct, 20) > 0.05 > probability_spread(oof, flat, None)  # what the bootstrap hides


def test_few_scorable_documents_give_the_temperature_alone():
    from pcem_spark.ml.calibrating import _never_collapsed

    probability = np.linspace(0.05, 0.95, 200)
    correct = (np.arange(200) % 2).astype(float)  # precision 0.5 everywhere
    collapse = (np.array([0.0, 1.0]), np.array([0.0, 0.01]))  # a map sending every probability to ~0
    assert _never_collapsed(probability, correct, np.zeros(200, int), "logistic", collapse) == ("", None)
    honest = (np.array([0.0, 1.0]), np.array([0.5, 0.5]))
    assert _never_collapsed(probability, correct, np.zeros(200, int), "isotonic", honest)[0] == "isotonic"


@pytest.mark.slow
def test_pcem_train_records_the_names_and_descriptions_count(spark, tmp_path, capsys):
    from pcem_spark.cli import main

    docs = tmp_path / "docs.jsonl"
    rng = np.random.default_rng(3)
    with open(docs, "w") as fh:
        for (parent, leaf), words in TOPIC_WORDS.items():
            for i in range(12):
                text = " ".join(rng.choice(words.split() + [leaf], size=5))
                fh.write(json.dumps({"id": f"{leaf}-{i}", "text": text, "labels": [parent, leaf] if i == 0 else None}))
                fh.write("\n")
    descriptions = tmp_path / "desc.json"
    descriptions.write_text(json.dumps({"football": "soccer goal", "chips": "cpu silicon"}))
    model = str(tmp_path / "model")
    args = ["train", "--docs", str(docs), "--model", model, "--descriptions", str(descriptions)]
    fast = ["--set", "model.max_iter=3", "--set", "features.min_df=1", "--log-level", "WARNING"]
    # fixed settings: what is recorded of the names is the point, not the default pipeline's choices
    fixed = ["model.smoothing=1", "model.unlabeled_weight=1", "model.path_weight=0", "model.family=generative"]
    fixed += ["model.calibration=none", "features.stop_words=none"]
    fast += set_args(*fixed)
    assert main([*args, "--set", "model.names=on", *fast]) == 0
    from pcem_spark.model.path_model import PathModel

    names = PathModel.load(model).training_summary["names"]
    assert names["choice"] == "on" and names["setting"] == "on" and names["paths_with_words"] == 4


# ------------------------------------------------------------------------------- convergence advice
def test_the_advice_for_a_slow_em_names_the_iterations_and_the_tol_that_would_stop():
    from pcem_spark.core.convergence import not_converged_advice

    slow = [-1000.0 * (1 + 0.5 * 0.9**t) for t in range(50)]  # linear convergence at rate 0.9
    advice = not_converged_advice(slow, 1e-6, 50, truncated=False)
    assert "shrinking x0.90" in advice and "model.max_iter =" in advice
    more = int(advice.split("about ")[1].split(" more")[0])
    rel = 0.5 * 0.9**49 * 0.1 / (1 + 0.5 * 0.9**48)  # the last relative change of that history
    assert abs(more - np.log(1e-6 / rel) / np.log(0.9)) <= 1.5
    assert "max_iter = 10 iterations by request" in not_converged_advice(slow[:10], 0.0, 10, truncated=False)
    flat = [-100.0, -90.0, -80.0, -70.0, -60.0]  # a change that keeps its size is not converging at all
    assert "not shrinking" in not_converged_advice(flat, 1e-6, 5, truncated=False)


# ------------------------------------------------------------------------------- the shuffled-names test's statistic
def _named_corpus(n_paths=20, hit=0.3, seed=0, vocab=60):
    """One labelled document per path, 5 words from a shared pool; with probability ``hit`` one is its path's name
    word (word p for path p)."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(n_paths):
        words = rng.integers(n_paths, vocab, size=5)
        if rng.random() < hit:
            words[0] = p
        rows.append(np.bincount(words, minlength=vocab))
    X = sp.csr_matrix(np.array(rows, dtype=float))
    name_X = sp.csr_matrix(np.eye(n_paths, vocab))  # path p's name is word p
    return X, np.arange(n_paths), name_X, np.arange(n_paths)


def test_the_name_rank_is_the_share_of_other_paths_the_true_path_outscores():
    from pcem_spark.model.names import shuffled_name_ranks
    from pcem_spark.model.stop_words import naive_bayes_scores

    X, y, name_X, name_y = _named_corpus(seed=4)
    actual, shuffled = shuffled_name_ranks(X, y, name_X, name_y, 20, seed=0)
    S = naive_bayes_scores(name_X, name_y, X, 20)  # the dense computation, row by row
    want = np.mean([((S[i] < S[i, y[i]]).sum() + 0.5 * ((S[i] == S[i, y[i]]).sum() - 1)) / 19 for i in range(len(y))])
    assert actual == pytest.approx(want)
    assert len(shuffled) >= 20 and abs(shuffled.mean() - 0.5) < 0.05  # a shuffle says nothing, on average


def test_names_that_point_at_their_paths_pass_the_test_and_misplaced_names_fail_it():
    from pcem_spark.model.names import SHUFFLE_P, shuffled_name_ranks

    passed = failed = 0
    for seed in range(6):
        X, y, name_X, name_y = _named_corpus(seed=seed, hit=0.3)
        actual, shuffled = shuffled_name_ranks(X, y, name_X, name_y, 20, seed=seed)
        passed += (1 + (shuffled >= actual).sum()) / (1 + len(shuffled)) < SHUFFLE_P
        wrong = np.roll(name_y, 1)  # every name on another path
        actual, shuffled = shuffled_name_ranks(X, y, name_X, wrong, 20, seed=seed)
        failed += (1 + (shuffled >= actual).sum()) / (1 + len(shuffled)) >= SHUFFLE_P
    assert passed == 6 and failed == 6


def test_with_several_labels_names_stay_on_unless_the_folds_show_they_clearly_cost(spark, several_labels):
    right = several_labels.training_summary["names"]
    assert right["rule"] == "cross-validation" and right["choice"] == "on"
    # every leaf named after its neighbour in the same top node: the names point at the wrong paths
    swapped = {}
    for kids in LEAVES.values():
        for i, leaf in enumerate(kids):
            swapped[leaf] = kids[(i + 1) % len(kids)]
    tax = Taxonomy.from_label_paths([[top, swapped[leaf]] for top, kids in LEAVES.items() for leaf in kids])
    wrong = _corpus(spark, labelled_per_leaf=4, names=swapped)
    wrong = _train(spark, wrong, "auto", tax, **NAMES_ONLY).training_summary["names"]
    assert wrong["choice"] == "off" and "clearly cost" in wrong["reason"], wrong["reason"]
