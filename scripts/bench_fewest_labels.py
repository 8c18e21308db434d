"""The fewest labels: 1, 2 and 5 labelled documents per leaf, with and without category names as evidence.

For each corpus (``--corpora``: ``20ng`` and ``dotted`` from 20 Newsgroups'
posts, ``subjects`` from their subject lines -- a short-text corpus, median 5
words, see :func:`subject_corpus`), each number of labelled documents per leaf
(``--per-leaf``) and seed: the pooled documents are split 80/20 (stratified by
leaf, seeded), ``k`` training documents of each leaf keep their labels (a seeded
hash order) and the rest of the training split is unlabelled. Then, on the
same split:

* ``pcem`` variants, each the whole ``pcem train`` pipeline (stop words,
  cross-validation, calibration; ``pcem_spark.ml.train``): ``pcem-default``
  (``model.names = "auto"``), ``pcem-names-on``, ``pcem-names-off``;
* the scikit-learn peers (the ``bench`` extra): ``TfidfVectorizer(sublinear_tf,
  min_df=2, max_features=20000)`` + ``LogisticRegression(C=10)`` and
  ``CountVectorizer`` + ``MultinomialNB(alpha=0.1)`` on the labelled documents
  (stop words kept, as a user on short texts would), their top class probability
  as the probability.

Reported per row: hierarchical micro / macro F1 (``pcem evaluate``'s), the leaf
accuracy (the predicted path is the true one), the mean ``probability`` of the
predicted path, top-label ECE (15 equal-width bins of that probability against
exact-path correctness), precision and coverage at probability >= 0.5 / 0.7 /
0.9, and for pcem the calibration's out-of-fold counts, the names' decision and
the EM iterations. ``OUT/results.csv`` (resumable: rows already there are
skipped) and ``OUT/summary.md`` (means over seeds)::

    pip install -e ".[bench]"
    python scripts/bench_fewest_labels.py --docs out/20ng.jsonl.gz --out out/fewest \\
        --corpora subjects,20ng,dotted --per-leaf 1,2,5 --seeds 0,1,2
    # the same with the release before, for the "today" rows:
    PYTHONPATH=/path/to/b0d0c13 python scripts/bench_fewest_labels.py ... --variants pcem-default --sklearn ""
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import logging
import os
import re
import sys
import time
from dataclasses import fields, replace
from typing import Dict, Iterable, List

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench_noregret import dotted_labels  # the dotted-name taxonomy, as the no-regret benchmark builds it
from bench_results import quiet_logging, read_results, write_results  # noqa: E402

log = logging.getLogger("bench_fewest_labels")

VARIANTS = {"pcem-default": "auto", "pcem-names-on": "on", "pcem-names-off": "off"}
SK_METHODS = ("sk-lr", "sk-mnb")
THRESHOLDS = (0.5, 0.7, 0.9)
FIELDS = [
    "corpus",
    "per_leaf",
    "seed",
    "method",
    "micro_f1",
    "macro_f1",
    "accuracy",
    "mean_probability",
    "ece",
    *[f"precision_{t}" for t in THRESHOLDS],
    *[f"coverage_{t}" for t in THRESHOLDS],
    "names",
    "calibration",
    "oof_scored",
    "oof_skipped",
    "n_iter",
    "converged",
    "train_seconds",
    "n_labeled",
    "n_unlabeled",
    "n_test",
]

_PREFIX = re.compile(r"^((re|fwd?)\s*:\s*)+", re.IGNORECASE)


def subject_corpus(docs: Iterable[dict]) -> List[dict]:
    """20 Newsgroups' subject lines as documents: ``Re:`` / ``Fwd:`` stripped, at least 2 words, the first copy
    of each (case-insensitive) subject only (a thread repeats it), the post's labels.

    >>> subject_corpus([{"id": "a", "text": "Re: Re: Mac II\\n\\nbody", "labels": ["comp", "mac"], "split": "train"},
    ...                 {"id": "b", "text": "re: mac ii\\n\\nmore", "labels": ["comp", "mac"], "split": "test"}])
    [{'id': 'a', 'text': 'Mac II', 'labels': ['comp', 'mac']}]
    """
    seen, out = set(), []
    for d in docs:
        head = d["text"].split("\n\n", 1)[0].strip() if "\n\n" in d["text"] else ""
        subject = _PREFIX.sub("", head).strip()
        if len(re.findall(r"[A-Za-z]+", subject)) < 2 or subject.lower() in seen:
            continue
        seen.add(subject.lower())
        out.append({"id": d["id"], "text": subject, "labels": d["labels"]})
    return out


def read_jsonl(path: str) -> List[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def split(docs: List[dict], per_leaf: int, seed: int, test_fraction: float = 0.2):
    """(labelled + unlabelled training documents, test documents): stratified by leaf, seeded."""
    rng = np.random.default_rng(seed)
    by_leaf: Dict[tuple, List[dict]] = {}
    for d in docs:
        by_leaf.setdefault(tuple(d["labels"]), []).append(d)
    train, test = [], []
    for leaf in sorted(by_leaf):
        group = by_leaf[leaf]
        order = rng.permutation(len(group))
        n_test = int(round(test_fraction * len(group)))
        test += [group[i] for i in order[:n_test]]
        for rank, i in enumerate(order[n_test:]):
            d = group[i]
            train.append({**d, "labels": d["labels"] if rank < per_leaf else None})
    return train, test


def probability_report(correct: np.ndarray, probability: np.ndarray) -> Dict[str, float]:
    """Accuracy, mean probability, top-label ECE (15 bins) and precision / coverage at the thresholds."""
    correct = np.asarray(correct, dtype=float)
    probability = np.clip(np.asarray(probability, dtype=float), 0.0, 1.0)
    bins = np.minimum((probability * 15).astype(int), 14)
    ece = sum(
        abs(correct[bins == b].mean() - probability[bins == b].mean()) * (bins == b).mean()
        for b in range(15)
        if (bins == b).any()
    )
    out = {"accuracy": correct.mean(), "mean_probability": probability.mean(), "ece": ece}
    for t in THRESHOLDS:
        kept = probability >= t
        out[f"coverage_{t}"] = kept.mean()
        out[f"precision_{t}"] = correct[kept].mean() if kept.any() else float("nan")
    return {k: round(float(v), 4) for k, v in out.items()}


def sklearn_runs(train, test, methods):
    """(method, predicted leaf per test document, its probability, seconds) of the scikit-learn peers."""
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import MultinomialNB

    texts = [d["text"] for d in train]
    lab = np.array([d["labels"] is not None for d in train])
    y = np.array([d["labels"][-1] if d["labels"] else "" for d in train], dtype=object)
    limits = dict(max_features=20000, min_df=2)
    for m in methods:
        t0 = time.perf_counter()
        if m == "sk-lr":
            vec = TfidfVectorizer(sublinear_tf=True, **limits).fit(texts)
            clf = LogisticRegression(C=10, max_iter=2000).fit(vec.transform(texts)[lab], y[lab])
        else:
            vec = CountVectorizer(**limits).fit(texts)
            clf = MultinomialNB(alpha=0.1).fit(vec.transform(texts)[lab], y[lab])
        proba = clf.predict_proba(vec.transform([d["text"] for d in test]))
        best = proba.argmax(axis=1)
        yield m, [clf.classes_[i] for i in best], proba[np.arange(len(best)), best], time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", default="out/20ng.jsonl.gz", help="20 Newsgroups as JSON Lines (pcem ingest-20ng)")
    ap.add_argument("--out", default="out/fewest")
    ap.add_argument("--corpora", default="subjects,20ng,dotted")
    ap.add_argument("--per-leaf", default="1,2,5")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--sklearn", default=",".join(SK_METHODS))
    ap.add_argument(
        "--before",
        default="",
        help="OUT of a run of the release before (its results.csv): its pcem rows join summary.md as 'before'",
    )
    ap.add_argument("--summary-only", action="store_true", help="only rewrite summary.md from the CSVs")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = ap.parse_args(argv)
    quiet_logging()

    from pcem_spark.cli.config import load_settings
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.session import build_session
    from pcem_spark.evaluation.metrics import evaluate_predictions
    from pcem_spark.ml import train

    settings = load_settings(None, args.overrides)
    csv_path, rows = read_results(args.out)
    done = {(r["corpus"], int(r["per_leaf"]), int(r["seed"]), r["method"]) for r in rows}

    def save():
        write_results(csv_path, rows, FIELDS)
        before = []
        if args.before and os.path.exists(os.path.join(args.before, "results.csv")):
            with open(os.path.join(args.before, "results.csv"), newline="") as fh:
                before = [{**r, "method": "before"} for r in csv.DictReader(fh) if r["method"].startswith("pcem")]
        write_summary(rows + before, os.path.join(args.out, "summary.md"))

    if args.summary_only:
        save()
        return 0
    spark = build_session(settings.spark)
    spark.sparkContext.setLogLevel("WARN")

    posts = read_jsonl(args.docs)
    schema = "id string, text string, labels array<string>"
    for corpus in args.corpora.split(","):
        if corpus == "subjects":
            docs = subject_corpus(posts)
        else:
            docs = [{"id": d["id"], "text": d["text"], "labels": d["labels"]} for d in posts]
        if corpus == "dotted":
            docs = [{**d, "labels": dotted_labels(d["labels"])} for d in docs]
        taxonomy = Taxonomy.from_label_paths(sorted({tuple(d["labels"]) for d in docs}))
        for per_leaf in [int(k) for k in args.per_leaf.split(",")]:
            for seed in [int(s) for s in args.seeds.split(",")]:
                methods = [m for m in args.variants.split(",") + args.sklearn.split(",") if m]
                todo = [m for m in methods if (corpus, per_leaf, seed, m) not in done]
                if not todo:
                    continue
                train_docs, test_docs = split(docs, per_leaf, seed)
                n_lab = sum(d["labels"] is not None for d in train_docs)
                base = {
                    "corpus": corpus,
                    "per_leaf": per_leaf,
                    "seed": seed,
                    "n_labeled": n_lab,
                    "n_unlabeled": len(train_docs) - n_lab,
                    "n_test": len(test_docs),
                }
                truth = {d["id"]: list(d["labels"]) for d in test_docs}
                train_df = spark.createDataFrame([(d["id"], d["text"], d["labels"]) for d in train_docs], schema)
                test_df = spark.createDataFrame([(d["id"], d["text"], d["labels"]) for d in test_docs], schema)
                train_df, test_df = train_df.cache(), test_df.cache()
                for m in [m for m in todo if m in VARIANTS]:
                    t0 = time.perf_counter()
                    # (an older pcem-spark, on PYTHONPATH to compare with, has no names setting: its own default)
                    has_names = "names" in {f.name for f in fields(settings.model)}
                    model_settings = replace(settings.model, names=VARIANTS[m]) if has_names else settings.model
                    model, result = train(
                        train_df, taxonomy, settings.features, model_settings, tune=settings.tune, seed=seed
                    )
                    secs = time.perf_counter() - t0
                    pred = model.transform(test_df).select("id", "path", "probability", "labels").cache()
                    metrics = evaluate_predictions(pred, taxonomy, where=f"{corpus} k={per_leaf} seed={seed}")
                    got = {r["id"]: (list(r["path"] or []), float(r["probability"] or 0.0)) for r in pred.collect()}
                    pred.unpersist()
                    correct = np.array([got[i][0] == truth[i] for i in truth])
                    prob = np.array([got[i][1] for i in truth])
                    summary = model.training_summary
                    cal = summary.get("calibration") or {}
                    rows.append(
                        {
                            **base,
                            "method": m,
                            "micro_f1": round(100 * metrics["micro_f1"], 3),
                            "macro_f1": round(100 * metrics["macro_f1"], 3),
                            **probability_report(correct, prob),
                            "names": (summary.get("names") or {}).get("choice", ""),
                            "calibration": cal.get("method", ""),
                            "oof_scored": cal.get("out_of_fold_scored", ""),
                            "oof_skipped": cal.get("out_of_fold_skipped", ""),
                            "n_iter": result.n_iter,
                            "converged": result.converged,
                            "train_seconds": round(secs, 1),
                        }
                    )
                    log.info("%s", rows[-1])
                    save()
                sk = [m for m in todo if m in SK_METHODS]
                if sk:
                    for m, leaves, prob, secs in sklearn_runs(train_docs, test_docs, sk):
                        leaf_path = {tuple(p)[-1]: list(p) for p in (tuple(d["labels"]) for d in docs)}
                        predicted = [leaf_path[leaf] for leaf in leaves]
                        pred = spark.createDataFrame(
                            [(d["id"], p, d["labels"]) for d, p in zip(test_docs, predicted)],
                            "id string, path array<string>, labels array<string>",
                        )
                        metrics = evaluate_predictions(pred, taxonomy, where=f"{corpus} {m}")
                        correct = np.array([p == d["labels"] for d, p in zip(test_docs, predicted)])
                        rows.append(
                            {
                                **base,
                                "method": m,
                                "micro_f1": round(100 * metrics["micro_f1"], 3),
                                "macro_f1": round(100 * metrics["macro_f1"], 3),
                                **probability_report(correct, prob),
                                "train_seconds": round(secs, 1),
                            }
                        )
                        log.info("%s", rows[-1])
                        save()
                train_df.unpersist()
                test_df.unpersist()
    spark.stop()
    return 0


def write_summary(rows: List[Dict[str, object]], path: str) -> None:
    """Means over seeds per (corpus, per_leaf, method)."""
    groups: Dict[tuple, List[Dict[str, object]]] = {}
    for r in rows:
        groups.setdefault((r["corpus"], int(r["per_leaf"]), r["method"]), []).append(r)

    def mean(rs, key):
        vals = [float(r[key]) for r in rs if r.get(key) not in ("", None) and str(r[key]) != "nan"]
        return float(np.mean(vals)) if vals else float("nan")

    cols = [
        "micro_f1",
        "macro_f1",
        "accuracy",
        "mean_probability",
        "ece",
        *[f"precision_{t}" for t in THRESHOLDS],
        "coverage_0.7",
    ]
    lines = [
        "| corpus | per leaf | method | seeds | " + " | ".join(cols) + " | names on |",
        "|---|---|---|---|" + "---|" * (len(cols) + 1),
    ]
    for (corpus, k, method), rs in sorted(groups.items()):
        names_on = sum(r.get("names") == "on" for r in rs)
        lines.append(
            f"| {corpus} | {k} | {method} | {len(rs)} | "
            + " | ".join(
                f"{mean(rs, c):.3f}" if c not in ("micro_f1", "macro_f1") else f"{mean(rs, c):.2f}" for c in cols
            )
            + f" | {names_on if method.startswith('pcem') else '-'} |"
        )
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
