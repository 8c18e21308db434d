"""Settings chosen from the data: Spark ML's CrossValidator over PathEM, featuresCol pipelines, folds."""

import json
import math

import numpy as np
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from test_predict_evaluate import TAX, WORDS  # noqa: E402 (the same four-topic corpus)

from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary
from pcem_spark.ml import PathEM
from pcem_spark.ml.grid_choice import preference as _preference
from pcem_spark.ml.tuning import TuneSettings, resolve_auto, select_grid_point, stratified_folds
from pcem_spark.model.settings import ModelSettings

SHARED = "match player score device power market"  # words every class uses: a harder problem
FS = FeatureSettings(min_df=1, max_df=1.0, vocab_size=0, stop_words="english")


def _corpus(spark, n_per_leaf=16, n_labeled=6, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for leaf, words in WORDS.items():
        parent = "sport" if leaf in ("football", "tennis") else "tech"
        vocab = words.split() + SHARED.split() * 2
        for i in range(n_per_leaf):
            text = " ".join(rng.choice(vocab, size=6))
            rows.append((f"{leaf}-{i}", text, [parent, leaf] if i < n_labeled else None))
    return spark.createDataFrame(rows, "id string, text string, labels array<string>")


def _features(spark, docs):
    vocab = fit_vocabulary(docs, FS)
    return featurize(docs, vocab, FS).cache(), vocab


def test_stratified_folds_cover_every_leaf_and_are_deterministic(spark):
    docs = _corpus(spark).where(F.col("labels").isNotNull())
    a = stratified_folds(docs, 3, seed=7)
    b = stratified_folds(docs, 3, seed=7)
    assert_df_equality(a, b, ignore_row_order=True)
    counts = {
        (r["leaf"], r["fold"]): r["n"]
        for r in a.groupBy(F.element_at("labels", -1).alias("leaf"), "fold").agg(F.count("*").alias("n")).collect()
    }
    # 6 labelled per leaf, 3 folds: every leaf twice in every fold
    assert counts == {(leaf, f): 2 for leaf in WORDS for f in range(3)}
    c = stratified_folds(docs, 3, seed=8)
    assert sorted(r["fold"] for r in c.orderBy("id").collect()) == sorted(r["fold"] for r in a.orderBy("id").collect())
    assert [r["fold"] for r in c.orderBy("id").collect()] != [r["fold"] for r in a.orderBy("id").collect()]


@pytest.mark.slow
def test_cross_validator_over_a_spark_ml_pipeline_with_path_em(spark):
    """RegexTokenizer -> StopWordsRemover -> CountVectorizer -> PathEM, tuned by Spark ML's CrossValidator."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import CountVectorizer, RegexTokenizer, StopWordsRemover
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    from pcem_spark.evaluation.evaluator import HierarchicalF1Evaluator
    from pcem_spark.ml.estimator import PathEM, PathEMModel

    docs = _corpus(spark).where(F.col("labels").isNotNull())
    tok = RegexTokenizer(inputCol="text", outputCol="words", pattern=r"\w+", gaps=False)
    stop = StopWordsRemover(inputCol="words", outputCol="tokens")
    cv_stage = CountVectorizer(inputCol="tokens", outputCol="tf", minDF=1.0)
    est = PathEM(
        featuresCol="tf",
        taxonomy=TAX.to_json(),
        maxIter=5,
        smoothing=0.5,
        unlabeledWeight=1.0,
        pathWeight=1.0,
        family="generative",  # every fit fixed: family auto would cross-validate inside each of the 17 fits
    )
    pipe = Pipeline(stages=[tok, stop, cv_stage, est])
    grid = (
        ParamGridBuilder()
        .addGrid(est.pathWeight, [0.0, 1.0])
        .addGrid(est.smoothing, [0.1, 1.0])
        .addGrid(stop.stopWords, [StopWordsRemover.loadDefaultStopWords("english"), []])
        .build()
    )
    ev = HierarchicalF1Evaluator(metricName="macroF1", taxonomy=TAX.to_json())
    cv = CrossValidator(estimator=pipe, estimatorParamMaps=grid, evaluator=ev, numFolds=2, seed=1)
    model = cv.fit(docs)
    assert len(model.avgMetrics) == 8 and all(0 <= m <= 1 for m in model.avgMetrics)
    best = model.bestModel.stages[-1]
    assert isinstance(best, PathEMModel) and best.path_model.features_col == "tf"
    out = model.transform(docs)
    assert out.count() == docs.count()
    assert ev.evaluate(out) > 0.9


@pytest.mark.slow
def test_resolve_auto_keeps_unlabelled_docs_in_every_fold_and_is_deterministic(spark):
    docs = _corpus(spark)
    feats, vocab = _features(spark, docs)
    n_unlabeled = docs.where(F.col("labels").isNull()).count()
    tune = TuneSettings(
        folds=3, unlabeled_weights=[0.0, 1.0], path_weights=[0.0, 1.0], selection="best", strategy="exhaustive"
    )
    # the weights' grid is the point: the family, the names and the calibration fixed (each cross-validates)
    ms = ModelSettings(method="pcem", max_iter=5, family="generative", names="off", calibration="none")
    s1, info1, model1 = resolve_auto(feats, TAX, vocab, FS, ms, tune, seed=3, estimator_class=PathEM)
    s2, info2, _ = resolve_auto(feats, TAX, vocab, FS, ms, tune, seed=3, estimator_class=PathEM)
    assert info1["chosen"] == info2["chosen"]
    assert [g["cv_score"] for g in info1["grid"]] == [g["cv_score"] for g in info2["grid"]]
    assert len(info1["grid"]) == 4 and info1["folds"] == 3 and info1["metric"] == "meanF1"
    assert (s1.unlabeled_weight, s1.path_weight) == (
        info1["chosen"]["unlabeled_weight"],
        info1["chosen"]["path_weight"],
    )
    best = max(info1["grid"], key=lambda g: g["cv_score"])
    assert info1["chosen"] == {k: best[k] for k in ("unlabeled_weight", "path_weight")}
    # the refitted model saw every labelled and every unlabelled document
    assert model1.training_summary["n_unlabeled"] == n_unlabeled
    assert model1.training_summary["n_labeled"] == 24
    assert model1.vocabulary == vocab and model1.training_summary["tuning"]["chosen"] == info1["chosen"]


@pytest.mark.slow
def test_every_fold_model_trains_on_all_unlabelled_documents(spark):
    """Spark's CrossValidator with the fold column and the unlabelled view that resolve_auto sets up."""
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    from pcem_spark.evaluation.evaluator import HierarchicalF1Evaluator
    from pcem_spark.ml.estimator import PathEM

    docs = _corpus(spark)
    feats, _ = _features(spark, docs)
    unl = feats.where(F.col("labels").isNull())
    unl.createOrReplaceTempView("test_unlabeled_docs")
    labeled = stratified_folds(feats.where(F.col("labels").isNotNull()), 3, seed=0)
    est = PathEM(
        featuresCol="features",
        taxonomy=TAX.to_json(),
        maxIter=3,
        smoothing=1.0,
        unlabeledWeight=1.0,
        pathWeight=1.0,
        family="generative",  # a grid of your own needs every "auto" set (fitMultiple refuses nested tuning)
        unlabeledTable="test_unlabeled_docs",
    )
    grid = ParamGridBuilder().addGrid(est.unlabeledWeight, [0.5, 1.0]).build()
    cv = CrossValidator(
        estimator=est,
        estimatorParamMaps=grid,
        evaluator=HierarchicalF1Evaluator(),
        numFolds=3,
        foldCol="fold",
        collectSubModels=True,
    )
    model = cv.fit(labeled)
    for fold_models in model.subModels:
        for m in fold_models:
            s = m.path_model.training_summary
            assert s["n_unlabeled"] == unl.count() and s["n_labeled"] == 16  # 2 of 3 folds of 24
    spark.catalog.dropTempView("test_unlabeled_docs")


@pytest.mark.slow
def test_path_em_defaults_choose_weights_by_cross_validation(spark):
    from pcem_spark.ml.estimator import PathEM

    docs = _corpus(spark)
    model = PathEM(taxonomy=TAX.to_json(), maxIter=5, minDF=1.0, maxDF=1.0, vocabSize=0, tuneFolds=2).fit(docs)
    tuning = model.path_model.training_summary["tuning"]
    # the defaults: EM-lambda, the path weight, the model family and the combined family's beta
    assert tuning["tuned"]
    assert set(tuning["chosen"]) == {"unlabeled_weight", "path_weight", "family", "generative_weight"}
    ms = model.path_model.model_settings
    assert ms.family == tuning["chosen"]["family"] == tuning["families"]["chosen"]
    assert ms.unlabeled_weight == tuning["chosen"]["unlabeled_weight"]
    assert isinstance(ms.smoothing, float) and ms.smoothing > 0  # "auto" smoothing resolved by evidence
    assert model.transform(docs).count() == docs.count()


def test_too_few_labels_fall_back_to_the_paper_weights(spark):
    docs = _corpus(spark, n_labeled=1)  # 4 labelled documents, 3 folds x 2 needed
    feats, vocab = _features(spark, docs)
    ms, info, model = resolve_auto(
        feats, TAX, vocab, FS, ModelSettings(method="pcem", max_iter=3), TuneSettings(folds=3), estimator_class=PathEM
    )
    assert model is None and not info["tuned"]
    assert (ms.unlabeled_weight, ms.path_weight) == (1.0, 1.0)


@pytest.mark.slow
def test_pcem_train_tune_records_the_choice_in_the_model(spark, tmp_path):
    from pcem_spark.cli import main
    from pcem_spark.model.path_model import PathModel

    rows = _corpus(spark).collect()
    src = tmp_path / "docs.jsonl"
    with open(src, "w") as fh:
        for r in rows:
            fh.write(json.dumps({"id": r["id"], "text": r["text"], "labels": r["labels"]}) + "\n")
    out = str(tmp_path / "model")
    rc = main(
        [
            "train",
            "--docs",
            str(src),
            "--model",
            out,
            "--tune",
            "--set",
            "model.max_iter=4",
            "--set",
            "model.unlabeled_weight=1.0",
            "--set",
            "model.path_weight=1.0",
            "--set",
            "model.family=generative",
            "--set",
            "tune.grid={'smoothing': [0.1, 1.0]}",
            "--set",
            "tune.folds=2",
            "--set",
            "features.min_df=1.0",
            "--set",
            "features.max_df=1.0",
        ]
    )
    assert rc == 0
    tuning = PathModel.load(out).training_summary["tuning"]
    assert tuning["tuned"] and set(tuning["chosen"]) == {"smoothing"}
    assert [g["smoothing"] for g in tuning["grid"]] == [0.1, 1.0]
    assert PathModel.load(out).model_settings.smoothing == tuning["chosen"]["smoothing"]


def test_select_grid_point_one_standard_error_rule():
    scores, stds = [0.7266, 0.7250, 0.6956, 0.7301], [0.02, 0.02, 0.02, 0.02]
    pref = [0, 1, 2, 3]
    assert select_grid_point(scores, stds, pref, 3, "best") == 3
    # SE of the best = 0.02 / sqrt(2) = 0.0141: points 0, 1 and 3 are within it; 0 is preferred
    assert select_grid_point(scores, stds, pref, 3, "one_se") == 0
    assert select_grid_point(scores, stds, [3, 2, 1, 0], 3, "one_se") == 3
    # a clear winner beats preference
    assert select_grid_point([0.60, 0.70], [0.01, 0.01], [0, 1], 3, "one_se") == 1
    # zero spread: one_se is the argmax, ties go to the preferred point
    assert select_grid_point([0.5, 0.5], [0.0, 0.0], [1, 0], 3, "one_se") == 1
    with pytest.raises(ValueError, match="selection"):
        select_grid_point(scores, stds, pref, 3, "median")


def test_the_pooled_one_standard_error_rule_takes_the_folds_spread_from_every_point():
    # the dotted taxonomy at 1%, seed 2: a best point whose 3 folds happened to agree, its neighbours' did not
    scores, stds, pref = [0.7386, 0.7475, 0.6987, 0.7685], [0.0687, 0.0620, 0.0518, 0.0146], [0, 1, 2, 3]
    assert select_grid_point(scores, stds, pref, 3, "one_se") == 3  # slack 0.0146 / sqrt(2) = 0.0103
    pooled = np.sqrt(np.mean(np.square(stds))) / np.sqrt(2)  # 0.0378, computed independently
    assert select_grid_point(scores, stds, pref, 3, "one_se_pooled") == 0
    assert scores[3] - pooled <= scores[0] and scores[3] - pooled > scores[2]
    # a clear winner still wins, and equal spreads give the plain rule's choice
    assert select_grid_point([0.60, 0.70], [0.01, 0.01], [0, 1], 3, "one_se_pooled") == 1
    same = [0.7266, 0.7250, 0.6956, 0.7301], [0.02] * 4
    pref = [0, 1, 2, 3]
    assert select_grid_point(*same, pref, 3, "one_se_pooled") == select_grid_point(*same, pref, 3, "one_se")
    # a point with no scored fold (score 0, spread 0) or an undefined spread says nothing of the folds: left out
    # (pooled over the two others: 0.0351, so 0.7386 is within; with the empty point's 0 it would be 0.0287)
    assert select_grid_point([0.7386, 0.7685, 0.0], [0.0687, 0.0146, 0.0], [0, 1, 2], 3, "one_se_pooled") == 0
    assert select_grid_point([0.7386, 0.7685, 0.5], [0.0687, 0.0146, np.nan], [0, 1, 2], 3, "one_se_pooled") == 0
    with pytest.raises(ValueError, match="selection"):
        TuneSettings(selection="median").validate()


def test_every_default_rule_is_the_pooled_one_standard_error_rule():
    import inspect

    from pcem_spark.cli.config import load_settings

    # the package's settings file (what `pcem train` uses), the dataclass (what PathEM uses) and the function agree
    default = inspect.signature(select_grid_point).parameters["selection"].default
    assert load_settings(None).tune.selection == TuneSettings().selection == default == "one_se_pooled"
    # and it is not the best point's own spread: on the dotted split above the two rules differ
    scores, stds, pref = [0.7386, 0.7475, 0.6987, 0.7685], [0.0687, 0.0620, 0.0518, 0.0146], [0, 1, 2, 3]
    assert select_grid_point(scores, stds, pref, 3) != select_grid_point(scores, stds, pref, 3, "one_se")


def test_preference_follows_the_order_of_the_configured_lists():
    spec = {"unlabeled_weight": [0.3, 1.0], "path_weight": [0.0, 1.0]}
    rows = [{"unlabeled_weight": u, "path_weight": g} for u in (0.3, 1.0) for g in (0.0, 1.0)]
    # first values preferred; then fewer steps away from them; ties lexicographic
    assert _preference(rows, spec) == [0, 1, 2, 3]
    spec = {"unlabeled_weight": [1.0, 0.3], "path_weight": [1.0, 0.0]}
    assert _preference(rows, spec) == [3, 2, 1, 0]


@pytest.mark.slow
def test_one_se_choice_is_refitted_and_recorded(spark):
    docs = _corpus(spark, seed=1)
    feats, vocab = _features(spark, docs)
    # the preferred point (lambda 0, gamma 0) is listed first
    tune = TuneSettings(folds=3, unlabeled_weights=[0.0, 1.0], path_weights=[0.0, 1.0], strategy="exhaustive")
    # the weights' grid is the point: the family, the names and the calibration fixed (each cross-validates)
    ms = ModelSettings(method="pcem", max_iter=5, family="generative", names="off", calibration="none")
    settings, info, model = resolve_auto(feats, TAX, vocab, FS, ms, tune, seed=5, estimator_class=PathEM)
    grid = info["grid"]
    best = max(grid, key=lambda g: g["cv_score"])
    # the default rule: one standard error, the folds' spread pooled over every scored point
    scored = [g["cv_std"] for g in grid if g["cv_score"] > 0]
    se = np.sqrt(np.mean(np.square(scored))) / np.sqrt(2)
    within = [g for g in grid if g["cv_score"] >= best["cv_score"] - se]
    expected = min(within, key=lambda g: (g["unlabeled_weight"] + g["path_weight"], g["unlabeled_weight"]))
    assert info["selection"] == "one_se_pooled"
    assert info["chosen"] == {"unlabeled_weight": expected["unlabeled_weight"], "path_weight": expected["path_weight"]}
    assert info["best_cv"] == {"unlabeled_weight": best["unlabeled_weight"], "path_weight": best["path_weight"]}
    # the returned model was fitted with the chosen values, on every document
    assert (
        (model.model_settings.unlabeled_weight, model.model_settings.path_weight)
        == (settings.unlabeled_weight, settings.path_weight)
        == (expected["unlabeled_weight"], expected["path_weight"])
    )
    assert model.training_summary["n_labeled"] == 24
    assert model.training_summary["n_unlabeled"] == docs.where(F.col("labels").isNull()).count()


def test_default_grid_takes_pcnb_only_when_clearly_better():
    """λ = 0 (PCNB, no EM) is in the default grid, last: within one SE of the best it loses to λ 0.3."""
    import os

    from pcem_spark.cli.config import load_settings

    tune = TuneSettings()
    conf = load_settings(os.path.join(os.path.dirname(__file__), "..", "conf", "pcem.toml")).tune
    assert conf.unlabeled_weights == tune.unlabeled_weights and conf.path_weights == tune.path_weights
    assert 0.0 in tune.unlabeled_weights
    spec = {"unlabeled_weight": tune.unlabeled_weights, "path_weight": tune.path_weights}
    rows = [
        {"unlabeled_weight": lam, "path_weight": gam} for lam in spec["unlabeled_weight"] for gam in spec["path_weight"]
    ]
    pref = _preference(rows, spec)
    pcnb = [i for i, r in enumerate(rows) if r["unlabeled_weight"] == 0.0]
    assert sorted(pref[i] for i in pcnb) == [len(rows) - 2, len(rows) - 1]
    preferred = pref.index(0)
    assert rows[preferred] == {"unlabeled_weight": tune.unlabeled_weights[0], "path_weight": tune.path_weights[0]}
    stds = [0.02] * len(rows)  # SE = 0.02 / sqrt(2) ~ 0.014 with 3 folds
    scores = [0.70] * len(rows)
    scores[preferred], scores[pcnb[0]] = 0.80, 0.81  # PCNB best by less than one SE
    assert select_grid_point(scores, stds, pref, 3) == preferred
    scores[pcnb[0]] = 0.85  # ... by more than one SE: PCNB
    assert select_grid_point(scores, stds, pref, 3) == pcnb[0]


# ------------------------------------------------------ a taxonomy with one leaf (issue D)
def _no_cross_validation(monkeypatch):
    from pyspark.ml import tuning as ml_tuning

    def refuse(*a, **k):
        raise AssertionError("cross-validation ran on a single leaf")

    monkeypatch.setattr(ml_tuning.CrossValidator, "fit", refuse)
    monkeypatch.setattr("pcem_spark.ml.tuning.stratified_folds", refuse)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra", [[], ["--tune", "--set", "tune.grid={'smoothing': [0.1, 1.0]}"]], ids=["auto", "tune-grid"]
)
def test_single_leaf_trains_without_cross_validation_and_warns(spark, tmp_path, monkeypatch, caplog, extra):
    import logging

    from pcem_spark.cli import main
    from pcem_spark.model.path_model import PathModel

    _no_cross_validation(monkeypatch)
    src = tmp_path / "docs.jsonl"
    with open(src, "w") as fh:
        for i in range(10):
            fh.write(
                json.dumps(
                    {"id": str(i), "text": "goal striker penalty league", "labels": ["only", "leaf"] if i < 8 else None}
                )
                + "\n"
            )
    out = str(tmp_path / "model")
    with caplog.at_level(logging.WARNING):
        rc = main(
            [
                "train",
                "--docs",
                str(src),
                "--model",
                out,
                "--set",
                "model.max_iter=3",
                "--set",
                "features.min_df=1.0",
                "--set",
                "features.max_df=1.0",
                *extra,
            ]
        )
    assert rc == 0
    warnings = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "one leaf, 'leaf': every document will get this path, ['only', 'leaf']" in warnings, warnings
    assert "tuning skipped" in warnings
    model = PathModel.load(out)
    tuning = model.training_summary["tuning"]
    assert tuning["tuned"] is False and tuning["skipped"] is True and "one leaf" in tuning["reason"]
    ms = model.model_settings
    assert (ms.unlabeled_weight, ms.path_weight) == (1.0, 1.0)  # the paper's values, as with too few labels
    assert isinstance(ms.smoothing, float)


@pytest.mark.slow
def test_single_leaf_path_em_skips_cross_validation(spark, monkeypatch, caplog):
    import logging

    from pyspark.ml.feature import CountVectorizer, RegexTokenizer

    from pcem_spark.ml.estimator import PathEM

    _no_cross_validation(monkeypatch)
    docs = spark.createDataFrame(
        [(str(i), "serve racket volley", ["leaf"]) for i in range(10)], "id string, text string, labels array<string>"
    )
    tokens = RegexTokenizer(inputCol="text", outputCol="tokens").transform(docs)
    feats = CountVectorizer(inputCol="tokens", outputCol="tf").fit(tokens).transform(tokens)
    for est, data in (
        (PathEM(maxIter=2, minDF=1.0, maxDF=1.0, vocabSize=0), docs),
        (PathEM(featuresCol="tf", maxIter=2), feats),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            model = est.fit(data)
        assert "one leaf, 'leaf': every document will get this path" in caplog.text
        assert model.path_model.training_summary["tuning"]["skipped"] is True
        assert {r["leaf"] for r in model.transform(data).collect()} == {"leaf"}


def _reference_paired_choice(scores):
    """The paired rule from its statement: the most preferred family not clearly beaten by the best."""
    means = [sum(row) / len(row) for row in scores]
    best = max(range(len(means)), key=lambda i: (means[i], -i))
    k = len(scores[0])
    for family in range(len(scores)):
        d = [scores[best][j] - scores[family][j] for j in range(k)]
        mean = sum(d) / k
        std = math.sqrt(sum((x - mean) ** 2 for x in d) / k)
        if mean <= std / math.sqrt(k - 1):
            return family
    raise AssertionError("the best family always qualifies")


def test_the_paired_family_rule_matches_its_statement_on_random_scores():
    from pcem_spark.ml.grid_choice import paired_choice

    rng = np.random.default_rng(0)
    for _ in range(500):
        n_families, k = int(rng.integers(1, 4)), int(rng.integers(2, 6))
        base = rng.uniform(0.6, 0.9, size=k)  # folds differ much more than families do
        scores = base[None, :] + rng.normal(0, 0.01, size=(n_families, k))
        assert paired_choice(scores) == _reference_paired_choice(scores.tolist())


def test_a_gain_on_every_fold_wins_where_the_unpaired_rule_keeps_the_preferred_family():
    from pcem_spark.ml.grid_choice import paired_choice

    preferred = np.array([0.80, 0.86, 0.83])
    better = preferred + np.array([0.006, 0.008, 0.007])
    assert paired_choice(np.vstack([preferred, better])) == 1
    # the grid's one-SE rule (the pooled std / sqrt(k - 1)) keeps the preferred one
    assert select_grid_point([preferred.mean(), better.mean()], [preferred.std(), better.std()], [0, 1], 3) == 0


def _family_grid(folds):
    """Grid rows of ``{(family, lambda, beta): fold scores}`` as the sampled cross-validation records them."""
    rows = []
    for (family, lam, beta), scores in folds.items():
        scores = np.asarray(scores, dtype=float)
        rows.append(
            {
                "family": family,
                "unlabeled_weight": lam,
                "generative_weight": beta,
                "cv_score": float(scores.mean()),
                "cv_std": float(scores.std()),
            }
        )
    return rows


def test_each_family_is_compared_at_the_preferred_familys_em_settings():
    """The combined family's own best point runs another EM (lambda 1); at the generative point's EM (lambda
    0.3) it gains on every fold, and that pair -- the regression's effect alone -- decides."""
    from pcem_spark.ml.grid_choice import family_choice, family_representatives

    gen = np.array([0.80, 0.86, 0.83])
    folds = {
        ("generative", 0.3, 0.3): gen,
        ("generative", 1.0, 0.3): gen + np.array([-0.02, 0.025, 0.0]),
        ("combined", 0.3, 0.3): gen + np.array([0.004, 0.006, 0.005]),
        ("combined", 0.3, 0.1): gen + np.array([0.003, 0.004, 0.002]),
        ("combined", 1.0, 0.3): np.array([0.84, 0.845, 0.845]),  # the family's best, clearly: its own one-SE point
        ("discriminative", 0.3, 0.3): gen - 0.03,
    }
    rows = _family_grid(folds)
    spec = {
        "unlabeled_weight": [0.3, 1.0],
        "family": ["generative", "combined", "discriminative"],
        "generative_weight": [0.3, 0.1],
    }
    tune = TuneSettings(folds=3)
    reps = family_representatives(rows, spec, tune)
    assert [(rows[i]["family"], rows[i]["unlabeled_weight"], rows[i]["generative_weight"]) for i in reps] == [
        ("generative", 0.3, 0.3),
        ("combined", 0.3, 0.3),
        ("discriminative", 0.3, 0.3),
    ]
    pick, record = family_choice(rows, [list(v) for v in folds.values()], spec, tune)
    assert rows[pick]["family"] == "combined" and rows[pick]["unlabeled_weight"] == 0.3
    assert record["chosen"] == "combined" and [f["point"] for f in record["families"]] == reps
    # the combined family's own one-SE point is lambda 1; against the generative point's other EM the pairs
    # are noisy (+0.04, -0.015, +0.015), and the gain would be hidden
    from pcem_spark.ml.grid_choice import paired_choice

    combined = [i for i, r in enumerate(rows) if r["family"] == "combined"]
    own = combined[select_grid_point(*zip(*[(rows[i]["cv_score"], rows[i]["cv_std"], 0) for i in combined]), 3)]
    assert rows[own]["unlabeled_weight"] == 1.0
    assert paired_choice(np.vstack([gen, folds[("combined", 1.0, 0.3)]])) == 0
    # a family with a fold not scored is not compared
    unscored = [list(v) for v in folds.values()]
    unscored[2] = [None, 0.866, 0.835]
    assert family_choice(rows, unscored, spec, tune) == (None, None)
