"""No-regret benchmark: PCEM's defaults against the paper's settings and the classifiers a user would pick.

For each taxonomy (20NG's two levels, and 20NG's dotted group names as a
variable-depth tree: comp -> comp.sys -> comp.sys.mac -> comp.sys.mac.hardware),
label rate and seed, on the paper protocol's split (``assign_roles``: pooled
corpus, stratified 80/20, rate r of each leaf's training documents labelled):

* our generative models on one shared featurisation (``--variants``):
  ``pcem-default`` (this package's defaults: smoothing, unlabelled weight and
  path weight chosen from the data), ``pcem-paper`` (smoothing 1, lambda 1,
  gamma 1), ``flat-em`` and ``emmc`` (at the package's default smoothing, so
  the baselines get the same help), plus any ``name:method:key=value;...``
  (e.g. ``combined:pcem:family=combined;generative_weight=1``, the model families);
  a variant prefixed ``pipeline:`` (``pipeline:pcem-default``) runs ``pcem train``'s
  whole pipeline instead (``pcem_spark.ml.train``: its own stop words, vocabulary,
  category names as evidence, cross-validation and calibration) -- what a user
  gets; the others share one featurisation and skip the names and calibration;
* scikit-learn on the same split (the ``bench`` extra, never a runtime
  dependency): ``TfidfVectorizer(sublinear_tf, english stop words, 20k
  features, min_df 2)`` fitted on all training texts + ``LogisticRegression(C=10)``
  on the labelled rows; ``CountVectorizer`` with the same limits +
  ``MultinomialNB(alpha=0.1)``; ``SelfTrainingClassifier(LogisticRegression)``
  on labelled + unlabelled rows (``--sk-stop-words none`` keeps every word);
  ``sk-lr-kept`` is the same LR keeping every word whatever ``--sk-stop-words`` says,
  so one run has LR with stop words removed and kept;
* ``em-soft-lr`` and ``em-pseudo-lr``: the same LR on the labelled rows plus the
  unlabelled ones labelled by the `pcem train` default generative model --
  every unlabelled row under each of its 3 most probable paths, weighted by
  their calibrated probabilities (soft labels), or under its top path when
  that has probability >= 0.9 (pseudo-labels). Their seconds include that
  model's train;
* ``fasttext`` (``fasttext-community``, in the ``bench`` extra): supervised fastText on the
  labelled texts, lower-cased, with the settings its tutorial recommends
  (``FASTTEXT_SETTINGS``: lr 0.5, 25 epochs, word bigrams; one thread, so a seed repeats);
  Their predicted leaf becomes a path and is scored by the same hierarchical
  F1 as ``pcem evaluate``;
* with ``--mllib mllib-lr`` (or ``mllib-svm``) this package's MLlib
  one-vs-rest baseline (``pcem_spark.baselines.discriminative``) on the labelled rows,
  TF-IDF over the package's own vocabulary, ``C = --mllib-c`` (10, as the
  scikit-learn peer): what a Spark user would pick instead.

Any ``--taxonomies`` name other than ``dotted`` uses the documents' own
labels (``scripts/bench_stopwords.py`` runs it on a question corpus).

Rows are appended to ``OUT/results.csv`` as they finish (a rerun skips the
rows already there); ``OUT/summary.md`` has the means over seeds and the
"done when" checks of issue 9; ``OUT/summaries/`` holds each of our models'
training summary (every grid point's per-fold scores), so that a choice rule can
be replayed without refitting. Example (20NG, ~2 h on 2 cores)::

    pip install -e ".[bench]"
    python scripts/bench_noregret.py --docs out/20ng.jsonl.gz --out out/noregret \\
        --rates 0.01,0.05,0.1,0.3,0.9 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import time
from dataclasses import replace
from typing import Dict, List

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench_results import quiet_logging, read_results, write_results  # noqa: E402

log = logging.getLogger("bench_noregret")

SK_METHODS = ("sk-lr", "sk-lr-kept", "sk-mnb", "sk-selftrain", "fasttext", "em-soft-lr", "em-pseudo-lr")
# The semi-supervised combinations of PCEM with a regression other than the pooled ("combined") family:
# scikit-learn's LR (the sk-lr peer's features and C) on the labelled rows plus every unlabelled row
# weighted by the `pcem train` default model's calibrated posterior of each of its top paths (soft labels,
# Nigam et al.'s EM posteriors as targets), or only the rows whose top path has probability >= this
# (pseudo-labels, weight 1).
PSEUDO_LABEL_PROBABILITY = 0.9
SOFT_LABEL_PATHS = 3
FASTTEXT_SETTINGS = dict(lr=0.5, epoch=25, wordNgrams=2, minCount=1, dim=100, loss="softmax", thread=1)
DEFAULT_VARIANTS = ["pcem-default", "pcem-paper", "flat-em", "emmc"]
FIELDS = [
    "taxonomy",
    "rate",
    "seed",
    "method",
    "micro_f1",
    "macro_f1",
    "train_seconds",
    "n_labeled",
    "n_unlabeled",
    "n_test",
    "chosen",
]


def dotted_labels(labels: List[str]) -> List[str]:
    """20NG's 2-level path -> the prefixes of its dotted group name (depth 2-5)."""
    parts = labels[-1].split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


INT_SETTINGS = ("posterior_top_k", "max_iter", "components", "seed", "block_size")


def labelled_corpus(spark, path: str, dotted: bool = False):
    """(labelled documents ``id, text, labels``, cached; the taxonomy of their label paths) of a JSON Lines file.

    ``dotted``: the labels become 20NG's dotted-name paths (:func:`dotted_labels`).
    """
    from pyspark.sql import functions as F

    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.rejects import split_rejects

    docs, _ = split_rejects(read_documents(spark, path))
    docs = docs.where(F.col("labels").isNotNull()).select("id", "text", "labels")
    if dotted:
        # dotted_labels in Spark SQL: no Python UDF, so the executors need not import this script
        parts = F.split(F.element_at("labels", -1), r"\.")
        prefixes = F.transform(F.sequence(F.lit(1), F.size(parts)), lambda i: F.array_join(F.slice(parts, 1, i), "."))
        docs = docs.withColumn("labels", prefixes)
    docs = docs.cache()
    return docs, Taxonomy.from_label_paths([r[0] for r in docs.select("labels").distinct().collect()])


def _number_or_text(value: str):
    """A variant's setting value: a number when it reads as one (smoothing=0.1), else the text (family=combined)."""
    try:
        return float(value)
    except ValueError:
        return value


def variant_settings(name: str, base):
    """(method, ModelSettings) of a variant name."""
    from pcem_spark.model.settings import PAPER_MODEL_SETTINGS

    if name == "pcem-default":
        return replace(base, method="pcem")
    if name == "pcem-paper":  # the paper's PCEM: generative, its settings
        return replace(base, method="pcem", family="generative", **PAPER_MODEL_SETTINGS)
    if ":" in name:
        _, method, kv = (name.split(":", 2) + [""])[:3]
        values = {}
        for item in filter(None, kv.split(";")):
            k, v = item.split("=")
            values[k] = v if v == "auto" else int(v) if k in INT_SETTINGS else _number_or_text(v)
        return replace(base, method=method, **values)
    # A baseline by its method name (flat-em, emmc, ...) is the paper's generative model: never given the
    # regression that model.family = "auto" may add.
    return replace(base, method=name, family="generative")


def soft_label_rows(X, y, lab, posteriors, method):
    """``(X, y, sample_weight)`` of ``em-soft-lr`` / ``em-pseudo-lr``: the labelled rows (weight 1) plus the
    unlabelled rows by their PCEM posteriors. ``posteriors``: per training row, ``[(leaf, probability)]``
    (the top paths; empty for a labelled row)."""
    import scipy.sparse as sp

    rows, targets, weights = list(np.flatnonzero(lab)), list(y[lab]), [1.0] * int(lab.sum())
    for i in np.flatnonzero(~lab):
        top = posteriors[i]
        if method == "em-pseudo-lr":
            top = top[:1] if top and top[0][1] >= PSEUDO_LABEL_PROBABILITY else []
        for leaf, probability in top:
            rows.append(i)
            targets.append(leaf)
            weights.append(1.0 if method == "em-pseudo-lr" else float(probability))
    return sp.csr_matrix(X)[rows], np.array(targets, dtype=object), np.array(weights)


def sklearn_runs(train_pdf, test_pdf, methods, seed, stop_words="english", posteriors=None):
    """scikit-learn peers on one split: yields (method, predicted leaf list, seconds).

    ``stop_words``: scikit-learn's English list, or ``"none"`` (keep every word).
    ``posteriors``: for ``em-soft-lr`` / ``em-pseudo-lr``, the PCEM posteriors of each training row
    (:func:`soft_label_rows`).
    """
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.semi_supervised import SelfTrainingClassifier

    lab = train_pdf["leaf"].notna().to_numpy()
    texts = train_pdf["text"].tolist()
    y = train_pdf["leaf"].to_numpy()
    limits = dict(stop_words=None if stop_words == "none" else stop_words, max_features=20000, min_df=2)
    for m in methods:
        t0 = time.perf_counter()
        if m == "fasttext":
            yield m, fasttext_leaves(texts, y, lab, test_pdf["text"].tolist(), seed), time.perf_counter() - t0
            continue
        if m in ("sk-lr", "sk-lr-kept", "sk-selftrain", "em-soft-lr", "em-pseudo-lr"):
            kept = dict(limits, stop_words=None) if m == "sk-lr-kept" else limits
            vec = TfidfVectorizer(sublinear_tf=True, **kept).fit(texts)
            X, Xt = vec.transform(texts), vec.transform(test_pdf["text"].tolist())
            if m in ("sk-lr", "sk-lr-kept"):
                clf = LogisticRegression(C=10, max_iter=1000).fit(X[lab], y[lab])
            elif m in ("em-soft-lr", "em-pseudo-lr"):
                Xs, ys, ws = soft_label_rows(X, y, lab, posteriors, m)
                clf = LogisticRegression(C=10, max_iter=1000).fit(Xs, ys, sample_weight=ws)
            else:
                y_semi = np.where(lab, y, None)
                classes = sorted(set(y[lab]))
                code = {c: i for i, c in enumerate(classes)}
                y_int = np.array([code[v] if v is not None else -1 for v in y_semi])
                st = SelfTrainingClassifier(LogisticRegression(C=10, max_iter=1000)).fit(X, y_int)
                pred = [classes[i] for i in st.predict(Xt)]
                yield m, pred, time.perf_counter() - t0
                continue
        else:
            vec = CountVectorizer(**limits).fit(texts)
            X, Xt = vec.transform(texts), vec.transform(test_pdf["text"].tolist())
            clf = MultinomialNB(alpha=0.1).fit(X[lab], y[lab])
        yield m, list(clf.predict(Xt)), time.perf_counter() - t0


def fasttext_leaves(texts, leaves, labelled, test_texts, seed) -> List[str]:
    """Supervised fastText on the labelled texts; the predicted leaf of each test text."""
    import tempfile

    import fasttext

    def line(text: str) -> str:  # fastText reads one document per line, tokens split on whitespace
        return " ".join(str(text).lower().split())

    code, lines = {}, []
    for text, leaf, keep in zip(texts, leaves, labelled):
        if keep:
            label = "__label__" + str(leaf).replace(" ", "_")
            code[label] = leaf
            lines.append(f"{label} {line(text)}\n")
    # fastText's SGD reads the file in order: the split's rows come grouped by leaf, and on them fastText
    # forgets all but the last leaves (46.6 micro-F1 on 20NG at 90%); shuffled, as its tutorial's data is.
    np.random.default_rng(seed).shuffle(lines)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.writelines(lines)
        train_file = f.name
    try:
        model = fasttext.train_supervised(input=train_file, seed=seed, verbose=0, **FASTTEXT_SETTINGS)
    finally:
        os.unlink(train_file)
    labels, _ = model.predict([line(t) for t in test_texts], k=1)
    return [code[ls[0]] for ls in labels]


def default_posteriors(masked, taxonomy, settings, seed, train_pdf):
    """``([(leaf, probability)] per row of train_pdf, seconds)``: the `pcem train` default generative model's calibrated
    top paths of each unlabelled training row (empty for labelled rows), fitted on the split's training rows."""
    from pcem_spark.ml import train as train_pipeline

    t0 = time.perf_counter()
    from dataclasses import replace

    generative = replace(settings.model, family="generative")  # the EM's posteriors, whatever the default family
    model, _ = train_pipeline(masked, taxonomy, settings.features, generative, tune=settings.tune, seed=seed)
    unlabelled = masked.where("labels IS NULL")
    top = {
        r["id"]: [(p["path"][-1], float(p["probability"])) for p in r["top_paths"]]
        for r in model.transform(unlabelled, top_k=SOFT_LABEL_PATHS).select("id", "top_paths").collect()
    }
    return [top.get(i, []) for i in train_pdf["id"]], time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="out/20ng.jsonl.gz")
    ap.add_argument("--out", default="out/noregret")
    ap.add_argument(
        "--taxonomies",
        default="20ng,dotted",
        help="'dotted' = 20NG's dotted group names; any other name = the documents' own labels "
        "(the name is what the CSV calls them)",
    )
    ap.add_argument("--rates", default="0.01,0.05,0.1,0.3,0.9")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help="generative variants (pcem-default, pcem-paper, a method name, or name:method:k=v;k=v)",
    )
    ap.add_argument("--sklearn", default=",".join(SK_METHODS), help="scikit-learn peers ('' for none)")
    ap.add_argument(
        "--mllib",
        default="",
        help="this package's MLlib baselines on the labelled documents, as 'mllib-lr', 'mllib-svm' "
        "(C = --mllib-c, TF-IDF over the package's vocabulary; '' for none)",
    )
    ap.add_argument(
        "--mllib-c",
        type=float,
        default=10.0,
        help="C of the MLlib baselines (10 = the scikit-learn peer's C; `pcem experiment` uses 1)",
    )
    ap.add_argument(
        "--emmc-rates",
        default="0.3,0.9",
        help="rates at which the emmc variant runs (issue 9 compares with EMMC at 30%% and 90%%; 'all' for every rate)",
    )
    ap.add_argument(
        "--sk-stop-words",
        default="english",
        choices=["english", "none"],
        help="stop words of the scikit-learn peers (match features.stop_words)",
    )
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--config", default=None)
    args = ap.parse_args(argv)
    quiet_logging()

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from pcem_spark import engine
    from pcem_spark.cli.config import load_settings
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.features import featurize, fit_vocabulary
    from pcem_spark.engine.session import build_session
    from pcem_spark.evaluation.metrics import evaluate_predictions
    from pcem_spark.experiment.protocol import assign_roles
    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.rejects import split_rejects
    from pcem_spark.ml import PathEM, tuning
    from pcem_spark.model.fitting import fit_blocks
    from pcem_spark.model.stop_words import resolve_stop_words

    settings = load_settings(args.config, args.overrides)
    spark = build_session(settings.spark)
    spark.sparkContext.setLogLevel("WARN")
    csv_path, rows = read_results(args.out)
    done = {(r["taxonomy"], float(r["rate"]), int(r["seed"]), r["method"]) for r in rows}

    def save():
        write_results(csv_path, rows, FIELDS)

    base_docs, _ = split_rejects(read_documents(spark, args.docs))
    base_docs = base_docs.where(F.col("labels").isNotNull()).select("id", "text", "labels").cache()
    dotted_udf = F.udf(dotted_labels, T.ArrayType(T.StringType()))
    variants = [v for v in args.variants.split(",") if v]
    sk_methods = [m for m in args.sklearn.split(",") if m]
    mllib_methods = [m for m in args.mllib.split(",") if m]
    bad = [m for m in mllib_methods if m not in ("mllib-lr", "mllib-svm")]
    if bad:
        ap.error(f"--mllib: unknown {bad}; known: mllib-lr, mllib-svm")
    for tax_name in args.taxonomies.split(","):
        docs = base_docs if tax_name != "dotted" else base_docs.withColumn("labels", dotted_udf("labels")).cache()
        paths = [r[0] for r in docs.select("labels").distinct().collect()]
        taxonomy = Taxonomy.from_label_paths(paths)
        log.info("taxonomy %s: %r", tax_name, taxonomy)
        for rate in [float(r) for r in args.rates.split(",")]:
            for seed in [int(s) for s in args.seeds.split(",")]:
                todo = [
                    m
                    for m in variants + sk_methods + mllib_methods
                    if (tax_name, rate, seed, m) not in done
                    and (
                        m != "emmc"
                        or args.emmc_rates == "all"
                        or rate in [float(r) for r in args.emmc_rates.split(",") if r]
                    )
                ]
                if not todo:
                    continue
                roled = assign_roles(docs, seed, 0.2, rate).cache()
                train = roled.where(F.col("role") != "test")
                test = roled.where(F.col("role") == "test").select("id", "text", "labels").cache()
                masked = train.select(
                    "id", "text", F.when(F.col("role") == "labeled", F.col("labels")).alias("labels")
                ).cache()
                n_lab = masked.where(F.col("labels").isNotNull()).count()
                n_unlab = masked.count() - n_lab
                n_test = test.count()
                # features.stop_words = "auto": decided on this split's labelled documents, as pcem train does.
                cell_features, _ = resolve_stop_words(masked, taxonomy, settings.features, seed)
                vocabulary = fit_vocabulary(masked, cell_features)
                feats = featurize(masked, vocabulary, cell_features).cache()
                blocks, release_blocks = None, contextlib.ExitStack()

                def record(method, metrics, secs, chosen=""):
                    row = {
                        "taxonomy": tax_name,
                        "rate": rate,
                        "seed": seed,
                        "method": method,
                        "micro_f1": round(100 * metrics["micro_f1"], 3),
                        "macro_f1": round(100 * metrics["macro_f1"], 3),
                        "train_seconds": round(secs, 2),
                        "n_labeled": n_lab,
                        "n_unlabeled": n_unlab,
                        "n_test": n_test,
                        "chosen": chosen,
                    }
                    rows.append(row)
                    save()
                    log.info(
                        "%s rate=%g seed=%d %-14s micro %.2f macro %.2f (%.1fs) %s",
                        tax_name,
                        rate,
                        seed,
                        method,
                        row["micro_f1"],
                        row["macro_f1"],
                        secs,
                        chosen,
                    )

                for v in [m for m in todo if m in variants]:
                    pipeline = v.startswith("pipeline:")
                    ms = variant_settings(v.split(":", 1)[1] if pipeline else v, settings.model)
                    t0 = time.perf_counter()
                    model, info = None, None
                    if pipeline:
                        from pcem_spark.ml import train as train_pipeline

                        model, _ = train_pipeline(
                            masked, taxonomy, settings.features, ms, tune=settings.tune, seed=seed
                        )
                    elif ms.auto_params():
                        ms, info, model = tuning.resolve_auto(
                            feats,
                            taxonomy,
                            vocabulary,
                            cell_features,
                            ms,
                            settings.tune,
                            seed=seed,
                            estimator_class=PathEM,
                        )
                    if model is None:
                        if blocks is None:
                            blocks = release_blocks.enter_context(
                                engine.packed_blocks(
                                    engine.blocks_from_labels(
                                        feats,
                                        taxonomy.path_lookup(),
                                        taxonomy.path_node_matrix(sparse=True),
                                        len(vocabulary),
                                        settings.model.block_size,
                                    )
                                )
                            )
                        model, _ = fit_blocks(blocks, taxonomy, vocabulary, cell_features, ms.resolved())
                        if info is not None:  # the sampled cross-validation returns no model: its choice
                            model.training_summary["tuning"] = info
                    secs = time.perf_counter() - t0
                    summary = model.training_summary
                    # Every fold's score of every grid point: a choice rule can be replayed without refitting.
                    summaries = os.path.join(args.out, "summaries")
                    os.makedirs(summaries, exist_ok=True)
                    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{tax_name}-{rate:g}-{seed}-{v}")
                    with open(os.path.join(summaries, name + ".json"), "w") as fh:
                        json.dump(summary, fh, default=str)
                    chosen = json.dumps(
                        {
                            **summary.get("tuning", {}).get("chosen", {}),
                            "smoothing": model.model_settings.smoothing,
                            "n_iter": summary.get("n_iter"),
                            "family": model.model_settings.family,
                            "names": (summary.get("names") or {}).get("choice"),
                        }
                    )
                    pred = model.transform(test).cache()
                    record(v, evaluate_predictions(pred, taxonomy), secs, chosen)
                    pred.unpersist()
                for m in [m for m in todo if m in mllib_methods]:
                    from pcem_spark.baselines.discriminative import LinearSettings, fit_linear
                    from pcem_spark.experiment.protocol import _label_path_index

                    t0 = time.perf_counter()
                    model, _ = fit_linear(
                        feats.select("features", _label_path_index(taxonomy).alias("path_index")),
                        m.split("-", 1)[1],
                        taxonomy,
                        vocabulary,
                        cell_features,
                        LinearSettings(C=args.mllib_c),
                        block_size=settings.model.block_size,
                    )
                    secs = time.perf_counter() - t0
                    pred = model.transform(test).cache()
                    record(m, evaluate_predictions(pred, taxonomy), secs, json.dumps({"C": args.mllib_c}))
                    pred.unpersist()
                if any(m in sk_methods for m in todo):
                    # scikit-learn is single-process: the split's texts go to the driver (benchmark only).
                    train_pdf = masked.select("id", "text", F.element_at("labels", -1).alias("leaf")).toPandas()
                    test_pdf = test.select("id", "text", "labels").toPandas()
                    path_of_leaf = {p[-1]: list(p) for p in paths}
                    posteriors, em_secs = None, 0.0
                    if any(m in ("em-soft-lr", "em-pseudo-lr") for m in todo):
                        posteriors, em_secs = default_posteriors(masked, taxonomy, settings, seed, train_pdf)
                    for m, leaves, secs in sklearn_runs(
                        train_pdf,
                        test_pdf,
                        [m for m in todo if m in sk_methods],
                        seed,
                        args.sk_stop_words,
                        posteriors,
                    ):
                        secs += em_secs if m in ("em-soft-lr", "em-pseudo-lr") else 0.0
                        pred = spark.createDataFrame(
                            [
                                (i, path_of_leaf[leaf], list(lab))
                                for i, leaf, lab in zip(test_pdf["id"], leaves, test_pdf["labels"])
                            ],
                            "id string, path array<string>, labels array<string>",
                        )
                        record(m, evaluate_predictions(pred, taxonomy), secs)
                release_blocks.close()
                for df in (feats, masked, test, roled):
                    df.unpersist()
        write_summary(rows, os.path.join(args.out, "summary.md"))
    write_summary(rows, os.path.join(args.out, "summary.md"))
    return 0


def _rate_name(rate: float) -> str:
    """A rate as the tables show it: 1/leaf for a rate below 0.1% (assign_roles keeps >= 1 per leaf)."""
    return "1/leaf" if rate < 0.001 else f"{100 * rate:g}%"


def default_method(methods) -> str:
    """The row that is the package's default: the whole ``pcem train`` pipeline when it was run."""
    return "pipeline:pcem-default" if "pipeline:pcem-default" in methods else "pcem-default"


def write_summary(rows, path: str, margin: float = 0.3) -> None:
    """Means over seeds per (taxonomy, rate, method), the default's gap to each peer, and the default against
    the best peer of each cell (micro and macro apart; "ok" when it is within ``margin`` of it)."""
    groups: Dict[tuple, List[dict]] = {}
    for r in rows:
        groups.setdefault((r["taxonomy"], float(r["rate"]), r["method"]), []).append(r)
    mean = {
        k: (np.mean([float(r["micro_f1"]) for r in v]), np.mean([float(r["macro_f1"]) for r in v]), len(v))
        for k, v in groups.items()
    }
    methods = sorted({k[2] for k in mean}, key=lambda m: (m.startswith("sk-"), m))
    default = default_method(methods)
    lines = []
    for tax in sorted({k[0] for k in mean}):
        rates = sorted({k[1] for k in mean if k[0] == tax})
        lines += [
            f"### {tax}: micro / macro F1 (%), mean over seeds (n)",
            "",
            "| rate | " + " | ".join(methods) + " |",
            "|---|" + "---|" * len(methods),
        ]
        for rate in rates:
            cells = []
            for m in methods:
                v = mean.get((tax, rate, m))
                cells.append("" if v is None else f"{v[0]:.2f} / {v[1]:.2f} ({v[2]})")
            lines.append(f"| {_rate_name(rate)} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += [
            f"Gap of {default} to each peer (micro / macro; positive = default ahead):",
            "",
            "| rate | " + " | ".join(m for m in methods if m != default) + " |",
            "|---|" + "---|" * (len(methods) - 1),
        ]
        for rate in rates:
            d = mean.get((tax, rate, default))
            cells = []
            for m in methods:
                if m == default:
                    continue
                v = mean.get((tax, rate, m))
                cells.append("" if v is None or d is None else f"{d[0] - v[0]:+.2f} / {d[1] - v[1]:+.2f}")
            lines.append(f"| {_rate_name(rate)} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += [
            f"{default} against the best peer of each cell (ok: within {margin} F1 of it):",
            "",
            "| rate | default | best peer, micro | gap | best peer, macro | gap | |",
            "|---|---|---|---|---|---|---|",
        ]
        for rate in rates:
            d = mean.get((tax, rate, default))
            peers = {m: mean[(tax, rate, m)] for m in methods if m != default and (tax, rate, m) in mean}
            if d is None or not peers:
                continue
            micro = max(peers, key=lambda m: peers[m][0])
            macro = max(peers, key=lambda m: peers[m][1])
            g1, g2 = d[0] - peers[micro][0], d[1] - peers[macro][1]
            verdict = "ok" if min(g1, g2) >= -margin else "**behind**"
            lines.append(
                f"| {_rate_name(rate)} | {d[0]:.2f} / {d[1]:.2f} ({d[2]}) | {micro} {peers[micro][0]:.2f} | "
                f"{g1:+.2f} | {macro} {peers[macro][1]:.2f} | {g2:+.2f} | {verdict} |"
            )
        lines.append("")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
