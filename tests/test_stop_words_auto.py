"""features.stop_words = "auto": the English list or none, decided by naive-Bayes cross-validation on the labels."""

import json
import os
from dataclasses import replace

import numpy as np
import pytest

from pcem_spark.core.taxonomy import Taxonomy
from pcem_spark.engine.features import AUTO_STOP_WORDS, FeatureSettings, featurize, fit_vocabulary, tokenize
from pcem_spark.errors import InputError
from pcem_spark.model.stop_words import (
    FOLDS,
    LabelledSample,
    choose_stop_words,
    decide,
    fallback_stop_words,
    hierarchical_f1,
    resolve_stop_words,
    scored_path_nodes,
    stratified_folds,
    term_counts,
    vocabulary_columns,
)

# A question-type taxonomy: the class is the question's first word, a function word on the English list.
TAX = Taxonomy({"R": ["wh", "polar"], "wh": ["what", "how", "why"], "polar": ["is", "do", "can"]})
STOP = ["what", "how", "why", "is", "do", "can", "the", "a", "of", "to", "it", "i", "you", "this", "that"]
TOPICS = {
    "what": "rocket orbit launch",
    "how": "doctor patient clinic",
    "why": "engine wheel brake",
    "is": "goalie puck season",
    "do": "window driver screen",
    "can": "church faith bible",
}
NOISE = "disk card memory price game team car space drug gun law key chip file mail".split()


def _docs(carrier: str, n_per_class: int = 30, seed: int = 0):
    """(tokens, path index) of short synthetic documents whose class is carried by ``carrier``.

    ``"function"``: the class word (a stop word) plus topical words drawn at
    random (no class signal in them); ``"topical"``: the class's own topical
    words plus stop words drawn at random.
    """
    rng = np.random.default_rng(seed)
    lookup = TAX.path_lookup()
    tokens, paths = [], []
    for path, j in sorted(lookup.items(), key=lambda kv: kv[1]):
        leaf = path[-1]
        for _ in range(n_per_class):
            if carrier == "function":
                words = [leaf] + list(rng.choice(NOISE, 6)) + list(rng.choice(STOP[6:], 2))
            else:
                own = TOPICS[leaf].split()
                words = list(rng.choice(own, 2)) + list(rng.choice(NOISE, 4)) + list(rng.choice(STOP, 3))
            tokens.append([str(w) for w in words])
            paths.append(j)
    return tokens, np.array(paths)


def _sample(carrier: str, n_per_class: int = 30, seed: int = 0) -> LabelledSample:
    tokens, paths = _docs(carrier, n_per_class, seed)
    return LabelledSample(tokens, paths)


# --------------------------------------------------------------------------- settings and the guard
def test_auto_is_the_default_and_validates():
    assert FeatureSettings().stop_words == AUTO_STOP_WORDS == "auto"
    for ok in ("auto", "english", "English", "none", "NONE", "french"):
        FeatureSettings(stop_words=ok).validate()
    with pytest.raises(InputError, match='features.stop_words must be "auto" or "none" or a language'):
        FeatureSettings(stop_words="klingon").validate()


def test_tokenize_featurize_and_fit_vocabulary_refuse_auto():
    """Featurising with "auto" unresolved is a programming error (ValueError, not InputError): never a guess."""
    for call in (
        lambda: tokenize(None, FeatureSettings()),
        lambda: featurize(None, ["a"], FeatureSettings()),
        lambda: fit_vocabulary(None, FeatureSettings()),
    ):
        with pytest.raises(ValueError, match='stop_words = "auto" reached tokenisation unresolved') as exc:
            call()
        assert not isinstance(exc.value, InputError)


def test_model_metadata_without_stop_words_reads_the_old_default():
    """Models saved before "auto" always stored stop_words; one without the key gets the old default."""
    fs = FeatureSettings.from_dict({"min_df": 1.0})
    assert fs.stop_words == "english"


# --------------------------------------------------------------------------- the pure decision
def test_function_words_carry_the_class_so_none_is_chosen():
    info = choose_stop_words(_sample("function"), scored_path_nodes(TAX), STOP, FeatureSettings(), seed=0)
    assert info["choice"] == "none", info
    s = info["scores"]
    assert s["none"]["mean"] > s["english"]["mean"] + 0.3
    assert info["gain_of_none"] > max(info["margin"], info["standard_error"])
    assert info["folds"] == FOLDS and info["n_sampled"] == 180
    assert s["none"]["vocabulary"] > s["english"]["vocabulary"]
    json.dumps(info)  # goes into the model's training summary


def test_topical_words_carry_the_class_so_the_list_is_kept():
    info = choose_stop_words(_sample("topical"), scored_path_nodes(TAX), STOP, FeatureSettings(), seed=0)
    assert info["choice"] == "english", info
    assert info["reason"].startswith("the English list kept")


def test_the_decision_is_deterministic_for_a_seed():
    sample, nodes = _sample("function", 12), scored_path_nodes(TAX)
    a = choose_stop_words(sample, nodes, STOP, FeatureSettings(), seed=3)
    b = choose_stop_words(sample, nodes, STOP, FeatureSettings(), seed=3)
    assert a == b
    folds = stratified_folds(sample.path_index, FOLDS, seed=3)
    np.testing.assert_array_equal(folds, stratified_folds(sample.path_index, FOLDS, seed=3))
    # every fold holds documents of every path (12 per path, 5 folds)
    for f in range(FOLDS):
        assert set(sample.path_index[folds == f]) == set(range(TAX.n_paths))


def test_decide_needs_a_margin_and_one_standard_error():
    english = np.array([0.50, 0.50, 0.50, 0.50, 0.50])
    assert decide({"english": english, "none": english + 0.005})[0] == "english"  # under the margin
    noisy = english + np.array([0.2, -0.15, 0.1, -0.1, 0.02])  # mean +1.4 points, SE ~6.4
    assert decide({"english": english, "none": noisy})[0] == "english"
    choice, reason, stats = decide({"english": english, "none": english + np.array([0.05, 0.04, 0.06, 0.05, 0.05])})
    assert choice == "none" and stats["gain_of_none"] == pytest.approx(0.05)
    assert decide({"english": english + 0.1, "none": english})[0] == "english"


def test_vocabulary_columns_mirror_the_vocabulary_settings():
    X, terms = term_counts([["a", "b", "c"], ["a", "b"], ["a", "d"], ["a", "b", "b"]])
    assert terms == ["a", "b", "c", "d"]
    assert X.toarray().tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 1], [1, 2, 0, 0]]
    everything = FeatureSettings(min_df=1.0, max_df=1.0, vocab_size=0)
    assert list(vocabulary_columns(X, terms, everything)) == [0, 1, 2, 3]
    assert list(vocabulary_columns(X, terms, everything, drop=["A"])) == [1, 2, 3]
    # document frequencies a 4, b 3, c 1, d 1: max_df 0.5 = at most 2 documents, 0.8 = at most 3.2
    assert list(vocabulary_columns(X, terms, replace(everything, max_df=0.5))) == [2, 3]
    assert list(vocabulary_columns(X, terms, replace(everything, max_df=0.8))) == [1, 2, 3]
    assert list(vocabulary_columns(X, terms, replace(everything, min_df=2.0))) == [0, 1]
    assert list(vocabulary_columns(X, terms, replace(everything, vocab_size=2))) == [0, 1]  # most frequent


def test_hierarchical_f1_matches_the_metric_definition():
    nodes = scored_path_nodes(TAX)  # 8 nodes: wh, polar, and the 6 leaves
    lookup = TAX.path_lookup()
    what, how, is_ = lookup[("wh", "what")], lookup[("wh", "how")], lookup[("polar", "is")]
    micro, macro = hierarchical_f1(np.array([what, what]), np.array([what, how]), nodes)
    # node counts: wh tp 2; what tp 1 fn 1; how fp 1 -> micro P = R = 3/4
    assert micro == pytest.approx(0.75)
    assert macro == pytest.approx((1.0 + 2 / 3 + 0.0) / 3)
    assert hierarchical_f1(np.array([what]), np.array([is_]), nodes) == (0.0, 0.0)


def test_too_few_labelled_documents_for_the_folds():
    tokens, paths = _docs("function", 1)
    with pytest.raises(ValueError, match="too few"):
        choose_stop_words(LabelledSample(tokens[:7], paths[:7]), scored_path_nodes(TAX), STOP, FeatureSettings())


def test_fallback_and_settings_that_are_not_auto():
    fs, info = fallback_stop_words(FeatureSettings(), "weak labels only")
    assert fs.stop_words == "english" and info == {"choice": "english", "reason": "weak labels only", "fallback": True}
    fixed = FeatureSettings(stop_words="none")
    assert fallback_stop_words(fixed, "x") == (fixed, None)
    assert resolve_stop_words(None, TAX, fixed) == (fixed, None)  # nothing to decide: no Spark job


# --------------------------------------------------------------------------- with Spark
def _frame(spark, tokens, paths, labelled=None):
    path_of = {j: list(p) for p, j in TAX.path_lookup().items()}
    rows = [
        (f"d{i}", " ".join(t), path_of[int(j)] if labelled is None or i in labelled else None)
        for i, (t, j) in enumerate(zip(tokens, paths))
    ]
    return spark.createDataFrame(rows, "id string, text string, labels array<string>")


@pytest.mark.slow  # the first Spark job of a session compiles the tokeniser: ~10 s
def test_resolve_on_documents_is_deterministic_and_chooses_none(spark):
    tokens, paths = _docs("function", 20)
    docs = _frame(spark, tokens, paths)
    fs = FeatureSettings(min_df=1.0, max_df=1.0)
    a_settings, a = resolve_stop_words(docs, TAX, fs, seed=1)
    b_settings, b = resolve_stop_words(docs, TAX, fs, seed=1)
    assert a_settings == b_settings == replace(fs, stop_words="none")
    assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    assert a["n_sampled"] == 120 and "seconds" in a and a["sample_limit"] >= 120


def test_resolve_falls_back_to_the_list_without_enough_labels(spark):
    tokens, paths = _docs("function", 4)
    none_labelled = _frame(spark, tokens, paths, labelled=set())
    fs, info = resolve_stop_words(none_labelled, TAX, FeatureSettings())
    assert fs.stop_words == "english"
    assert info["fallback"] and info["n_sampled"] == 0 and "no labelled document" in info["reason"]
    few = _frame(spark, tokens, paths, labelled={0, 5, 10})
    fs, info = resolve_stop_words(few, TAX, FeatureSettings())
    assert fs.stop_words == "english" and "only 3 labelled documents" in info["reason"]


@pytest.mark.slow
def test_a_saved_model_holds_the_resolved_value(spark, tmp_path):
    """The model, its metadata and its predictions use the chosen list; loading decides nothing."""
    from pcem_spark.ml.training import train
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    tokens, paths = _docs("function", 12)
    docs = _frame(spark, tokens, paths)
    fs, info = resolve_stop_words(docs, TAX, FeatureSettings(min_df=1.0, max_df=1.0), seed=0)
    assert fs.stop_words == "none"
    ms = ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, family="generative")
    model, _ = train(docs, TAX, fs, ms)
    assert "what" in model.vocabulary  # a stop word kept: the list is off
    path = str(tmp_path / "model")
    model.save(path)
    meta = json.loads(spark.read.text(os.path.join(path, "metadata")).first()["value"])
    assert meta["feature_settings"]["stop_words"] == "none"
    loaded = PathModel.load(path)
    assert loaded.feature_settings.stop_words == "none"
    pred = loaded.transform(docs.limit(6)).collect()
    assert len(pred) == 6


@pytest.mark.slow
def test_training_with_auto_records_the_decision(spark):
    """model.train resolves "auto" before the vocabulary and records how in the training summary."""
    from pcem_spark.ml.training import train
    from pcem_spark.model.settings import ModelSettings

    tokens, paths = _docs("function", 12)
    docs = _frame(spark, tokens, paths)
    ms = ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, family="generative")
    model, _ = train(docs, TAX, FeatureSettings(min_df=1.0, max_df=1.0), ms)
    assert model.feature_settings.stop_words == "none"
    assert model.training_summary["stop_words"]["choice"] == "none"


@pytest.mark.slow
def test_the_experiment_decides_per_split_and_records_the_choice(spark, tmp_path):
    """run_experiment resolves "auto" on each split's labelled documents; the dataless setting keeps the list."""
    from pcem_spark.experiment.protocol import run_experiment
    from pcem_spark.experiment.settings import ExperimentSettings
    from pcem_spark.model.settings import ModelSettings

    tokens, paths = _docs("function", 20)
    docs = _frame(spark, tokens, paths)
    ms = ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0, family="generative")
    # Descriptions of words off the list (the class words are on it): the dataless run needs some in its vocabulary.
    nodes = sorted(TAX.real_nodes)
    descriptions = {node: " ".join(NOISE[i % len(NOISE) : i % len(NOISE) + 2]) for i, node in enumerate(nodes)}
    rows = run_experiment(
        docs,
        TAX,
        ExperimentSettings(
            methods=["pcnb"], rates=[0.5], seeds=[0], test_fraction=0.25, settings=["labeled", "dataless"]
        ),
        FeatureSettings(min_df=1.0, max_df=1.0),
        ms,
        str(tmp_path),
        descriptions=descriptions,
    )
    by_setting = {r["setting"]: r for r in rows}
    assert by_setting["labeled"]["stop_words"] == "none"
    assert by_setting["dataless"]["stop_words"] == "english"
    assert by_setting["labeled"]["micro_f1"] > 0.6  # the class words are kept
