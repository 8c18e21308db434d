"""Out-of-taxonomy benchmark: does ``in_taxonomy`` tell pages that fit no category from those that do?

Builds, from a labelled corpus (JSON Lines ``id, text, labels``; 20 Newsgroups by default), per label rate and
seed:

* **in scope**: the groups outside ``--held-out`` (top-level categories: ``talk`` leaves 16 of 20NG's 20
  groups), split per leaf into 80% training (``--rate`` of it labelled: a share, or ``1`` = one per leaf, the
  rest unlabelled) and 20% test;
* **out of taxonomy**, mixed into the test documents:
  ``held-out``: the held-out categories' documents (as many as ``--sample`` gives);
  ``foreign``: pages of ``--foreign-sentences`` consecutive lines of ``--foreign FILE`` (another language's
  sentences, e.g. the German of Universal Dependencies' GSD treebank, CC BY-SA 4.0:
  ``git clone https://github.com/UniversalDependencies/UD_German-GSD`` then the ``# text =`` lines of
  ``de_gsd-ud-test.conllu``);
  ``shuffled``: pages of tokens drawn at random from all the in-scope test documents (lengths as theirs),
  a bag of words that is every topic at once, as boilerplate and keyword spam are.

``pcem train``'s defaults (``pcem_spark.ml.train``) fit on the training documents; then each score of each test
document is compared, side by side, with the in-scope test documents as positives:

* ``in_taxonomy`` (the default: per-token log-likelihood ratio of the predicted path against the training corpus,
  unknown words included, ``pcem_spark.core.in_taxonomy``);
* ``llr-known``: the same ratio over the known words only (unknown words ignored);
* ``path-loglik``: the per-token log-likelihood of the known words under the predicted path, no background
  (what Ren et al. 2019 show a likelihood ratio improves on);
* ``probability``: the calibrated probability of the predicted path (maximum softmax probability);
* ``typicality``: -KL of the document's words from its path's;
* ``sk-lr``: scikit-learn's LogisticRegression (C = 10, TF-IDF sublinear, English stop words, 20k features,
  min_df 2, fitted on every training text) maximum probability: what a user would use instead (the ``bench`` extra).

Reported per out-of-taxonomy kind and all kinds together: AUROC, and the share of out-of-taxonomy documents
caught at the thresholds that keep 95% and 90% of the in-scope test documents. Rows go to ``OUT/results.csv``
(a rerun skips those there); ``OUT/summary.md`` has the means over seeds and the checks (the default's AUROC
>= sk-lr's + 0.04 and its recall at 95% kept >= 1.3x sk-lr's, every rate). Example (~25 min on 2 cores)::

    pip install -e ".[bench]"
    python scripts/bench_in_taxonomy.py --docs out/20ng.jsonl.gz --foreign out/de_sentences.txt \\
        --out out/in_taxonomy --rates 1,0.01,0.1 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import sys
import time
from typing import Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_results import quiet_logging, read_results, write_results  # noqa: E402

log = logging.getLogger("bench_in_taxonomy")

SCORES = ["in_taxonomy", "llr-known", "path-loglik", "probability", "typicality", "sk-lr"]
KINDS = ["held-out", "foreign", "shuffled", "all"]
FIELDS = [
    "rate",
    "seed",
    "score",
    "kind",
    "auroc",
    "recall_at_95",
    "recall_at_90",
    "n_in",
    "n_out",
    "micro_f1",
    # in_taxonomy only: at the model's suggested threshold (pcem predict --min-in-taxonomy suggested)
    "kept_at_suggested",
    "recall_at_suggested",
    "suggested_threshold",
]
AUROC_MARGIN, RECALL_FACTOR = 0.04, 1.3


def read_jsonl(path: str) -> List[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def sample_by_leaf(rows: List[dict], per_leaf: int, seed: int) -> List[dict]:
    """At most ``per_leaf`` documents of each leaf (0: all), seeded."""
    if per_leaf <= 0:
        return rows
    rng = np.random.default_rng(seed)
    by_leaf: Dict[str, List[dict]] = {}
    for r in rows:
        by_leaf.setdefault(r["labels"][-1], []).append(r)
    out = []
    for leaf in sorted(by_leaf):
        group = by_leaf[leaf]
        out += [group[i] for i in sorted(rng.permutation(len(group))[:per_leaf])]
    return out


def split(docs: List[dict], rate: float, seed: int, test_fraction: float = 0.2):
    """(training documents, their labelled mask, test documents): per leaf, seeded; ``rate`` >= 1 is labelled
    documents per leaf, below 1 the share of the leaf's training documents (at least one)."""
    rng = np.random.default_rng(seed)
    by_leaf: Dict[str, List[dict]] = {}
    for d in docs:
        by_leaf.setdefault(d["labels"][-1], []).append(d)
    train, labelled, test = [], [], []
    for leaf in sorted(by_leaf):
        group = by_leaf[leaf]
        order = rng.permutation(len(group))
        n_test = int(round(test_fraction * len(group)))
        test += [group[i] for i in order[:n_test]]
        n_train = len(group) - n_test
        k = int(rate) if rate >= 1 else max(1, int(round(rate * n_train)))
        for rank, i in enumerate(order[n_test:]):
            train.append(group[i])
            labelled.append(rank < k)
    return train, np.array(labelled), test


def foreign_pages(path: str, sentences: int) -> List[str]:
    with open(path, encoding="utf-8") as fh:
        lines = [line.strip() for line in fh if line.strip()]
    return [" ".join(lines[i : i + sentences]) for i in range(0, len(lines) - sentences + 1, sentences)]


def shuffled_pages(texts: List[str], n: int, seed: int) -> List[str]:
    """``n`` pages of whitespace tokens drawn from all of ``texts`` at once, each as long as one of them."""
    rng = np.random.default_rng(seed + 1000)
    token_lists = [t.split() for t in texts]
    pool = np.array([tok for toks in token_lists for tok in toks], dtype=object)
    lengths = [len(toks) for toks in token_lists if toks]
    return [" ".join(rng.choice(pool, size=min(int(rng.choice(lengths)), 400))) for _ in range(n)]


def auroc(in_scores: np.ndarray, out_scores: np.ndarray) -> float:
    """P(an in-scope document scores above an out-of-taxonomy one), ties counted half (Mann-Whitney)."""
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([in_scores, out_scores]))
    n_in, n_out = len(in_scores), len(out_scores)
    return float((ranks[:n_in].sum() - n_in * (n_in + 1) / 2) / (n_in * n_out))


def recall_at(in_scores: np.ndarray, out_scores: np.ndarray, kept: float) -> float:
    """Share of out-of-taxonomy documents strictly below the threshold that keeps ``kept`` of the in-scope ones."""
    threshold = np.quantile(in_scores, 1.0 - kept, method="lower")
    return float(np.mean(out_scores < threshold))


def local_scores(model, texts: List[str], best: np.ndarray) -> Dict[str, np.ndarray]:
    """The score variants computed here, in numpy, from the model's tables (one block: a benchmark's size)."""
    import pyarrow as pa
    import scipy.sparse as sp

    from pcem_spark.core.in_taxonomy import in_taxonomy_scores
    from pcem_spark.model.in_taxonomy import model_background

    X, unknown = model.text_featurizer().matrix_and_unknown(pa.array(texts, pa.string()))
    params, background = model.params, model_background(model)
    known = in_taxonomy_scores(
        X, None, params.log_base, params.log_ratio, best, background._replace(log_known_ratio=0.0)
    )
    # the path's own log-likelihood per known token: the ratio with a uniform "background" of 0s
    flat = background._replace(log_background=np.zeros_like(background.log_background), log_known_ratio=0.0)
    own = in_taxonomy_scores(X, None, params.log_base, params.log_ratio, best, flat)
    lengths = np.asarray(sp.csr_matrix(X).sum(axis=1)).ravel()
    empty = lengths == 0
    # a document with no known word: the lowest score of its kind (it has none)
    for values in (known, own):
        values[empty] = -np.inf
    return {"llr-known": known, "path-loglik": own, "unknown": unknown}


def sk_lr_scores(train_texts, train_leaves, labelled, test_texts) -> np.ndarray:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(sublinear_tf=True, stop_words="english", max_features=20000, min_df=2)
    Xtr = vec.fit_transform(train_texts)
    y = np.array(train_leaves, dtype=object)
    clf = LogisticRegression(C=10.0, max_iter=2000).fit(Xtr[labelled], y[labelled])
    return clf.predict_proba(vec.transform(test_texts)).max(axis=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="out/20ng.jsonl.gz")
    ap.add_argument("--held-out", default="talk", help="top-level categories kept out of training (comma-separated)")
    ap.add_argument("--foreign", default=None, help="a text file of another language's sentences, one per line")
    ap.add_argument("--foreign-sentences", type=int, default=5)
    ap.add_argument("--sample", type=int, default=150, help="documents per leaf (0: all)")
    ap.add_argument("--out", default="out/in_taxonomy")
    ap.add_argument("--rates", default="1,0.01,0.1")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--summary-only", action="store_true")
    args = ap.parse_args(argv)
    quiet_logging()
    csv_path, rows = read_results(args.out)
    done = {(float(r["rate"]), int(r["seed"])) for r in rows}

    def save():
        write_results(csv_path, rows, FIELDS)
        write_summary(rows, os.path.join(args.out, "summary.md"))

    if args.summary_only:
        save()
        return 0
    from pcem_spark.cli.config import load_settings
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.session import build_session
    from pcem_spark.evaluation.metrics import evaluate_predictions
    from pcem_spark.ml import train

    settings = load_settings(None, args.overrides)
    spark = build_session(settings.spark)
    spark.sparkContext.setLogLevel("WARN")
    held = {h for h in args.held_out.split(",") if h}
    corpus = sample_by_leaf(read_jsonl(args.docs), args.sample, 0)
    in_scope = [d for d in corpus if d["labels"][0] not in held]
    held_docs = [d for d in corpus if d["labels"][0] in held]
    foreign = foreign_pages(args.foreign, args.foreign_sentences) if args.foreign else []
    taxonomy = Taxonomy.from_label_paths(sorted({tuple(d["labels"]) for d in in_scope}))
    log.info(
        "in scope: %d documents, %r; held out: %d; foreign pages: %d",
        len(in_scope),
        taxonomy,
        len(held_docs),
        len(foreign),
    )
    schema = "id string, text string, labels array<string>"
    for rate in [float(r) for r in args.rates.split(",")]:
        for seed in [int(s) for s in args.seeds.split(",")]:
            if (rate, seed) in done:
                continue
            train_docs, labelled, test_docs = split(in_scope, rate, seed)
            rng = np.random.default_rng(seed)
            n_out = len(test_docs) // 3  # each kind a third of the in-scope test documents (at most what there is)
            held_test = [held_docs[i] for i in rng.permutation(len(held_docs))[:n_out]]
            foreign_test = [foreign[i] for i in rng.permutation(len(foreign))[:n_out]]
            shuffled_test = shuffled_pages([d["text"] for d in test_docs], n_out, seed)
            tests = [(d["id"], d["text"], d["labels"], "in") for d in test_docs]
            tests += [(f"held-{i}", d["text"], None, "held-out") for i, d in enumerate(held_test)]
            tests += [(f"foreign-{i}", t, None, "foreign") for i, t in enumerate(foreign_test)]
            tests += [(f"shuffled-{i}", t, None, "shuffled") for i, t in enumerate(shuffled_test)]
            kinds = np.array([t[3] for t in tests])
            train_df = spark.createDataFrame(
                [(d["id"], d["text"], d["labels"] if lab else None) for d, lab in zip(train_docs, labelled)], schema
            )
            test_df = spark.createDataFrame([t[:3] for t in tests], schema)
            t0 = time.perf_counter()
            model, _ = train(train_df, taxonomy, settings.features, settings.model, tune=settings.tune, seed=seed)
            log.info(
                "rate %s seed %s: trained in %.0f s (%s)",
                rate,
                seed,
                time.perf_counter() - t0,
                model.training_summary.get("in_taxonomy"),
            )
            pred = model.transform_outputs(test_df, model_outputs(typicality=True)).toPandas()
            pred = pred.set_index("id").loc[[t[0] for t in tests]]
            leaf_index = {p[-1]: j for j, p in enumerate(taxonomy.paths)}
            best = np.array([leaf_index[p[-1]] for p in pred["path"]])
            scores = {
                "in_taxonomy": pred["in_taxonomy"].to_numpy(float),
                "probability": pred["probability"].to_numpy(float),
                "typicality": np.nan_to_num(pred["typicality"].to_numpy(float), nan=-np.inf),
            }
            scores.update(local_scores(model, [t[1] for t in tests], best))
            scores.pop("unknown")
            scores["sk-lr"] = sk_lr_scores(
                [d["text"] for d in train_docs], [d["labels"][-1] for d in train_docs], labelled, [t[1] for t in tests]
            )
            in_pred = spark.createDataFrame(
                [(t[0], list(p), t[2]) for t, p in zip(tests, pred["path"]) if t[3] == "in"],
                "id string, path array<string>, labels array<string>",
            )
            f1 = evaluate_predictions(in_pred, taxonomy, where=f"rate={rate} seed={seed}")["micro_f1"]
            inside = kinds == "in"
            suggested = (model.training_summary.get("in_taxonomy") or {}).get("suggested_threshold")
            for name, values in scores.items():
                for kind in KINDS:
                    out = (~inside) if kind == "all" else kinds == kind
                    if not out.any():
                        continue
                    rows.append(
                        {
                            "rate": rate,
                            "seed": seed,
                            "score": name,
                            "kind": kind,
                            "auroc": round(auroc(values[inside], values[out]), 4),
                            "recall_at_95": round(recall_at(values[inside], values[out], 0.95), 4),
                            "recall_at_90": round(recall_at(values[inside], values[out], 0.90), 4),
                            "n_in": int(inside.sum()),
                            "n_out": int(out.sum()),
                            "micro_f1": round(100 * f1, 2),
                        }
                    )
                    if name == "in_taxonomy" and suggested is not None:
                        rows[-1].update(
                            kept_at_suggested=round(float(np.mean(values[inside] >= suggested)), 4),
                            recall_at_suggested=round(float(np.mean(values[out] < suggested)), 4),
                            suggested_threshold=round(float(suggested), 4),
                        )
            save()
            log.info("rate %s seed %s done", rate, seed)
    spark.stop()
    return 0


def model_outputs(**kw):
    from pcem_spark.model.schema import OutputOptions

    return OutputOptions(**kw)


def write_summary(rows: List[Dict[str, object]], path: str) -> None:
    """Means over seeds per rate, score and kind; the checks of the default against sk-lr."""
    table: Dict[tuple, List[dict]] = {}
    for r in rows:
        table.setdefault((float(r["rate"]), r["score"], r["kind"]), []).append(r)
    rates = sorted({k[0] for k in table})
    lines = ["# in_taxonomy benchmark", "", "Means over seeds: AUROC / recall at 95% in-scope kept / at 90%.", ""]
    for kind in KINDS:
        lines += [
            f"## {kind}",
            "",
            "| score | " + " | ".join(f"rate {r:g}" for r in rates) + " |",
            "|---" * (len(rates) + 1) + "|",
        ]
        for score in SCORES:
            cells = []
            for rate in rates:
                got = table.get((rate, score, kind))
                if not got:
                    cells.append("")
                    continue
                mean = {k: np.mean([float(g[k]) for g in got]) for k in ("auroc", "recall_at_95", "recall_at_90")}
                cells.append(
                    f"{mean['auroc']:.3f} / {mean['recall_at_95']:.3f} / {mean['recall_at_90']:.3f} ({len(got)})"
                )
            lines.append(f"| {score} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## checks (all kinds together)", ""]
    for rate in rates:
        ours, theirs = table.get((rate, "in_taxonomy", "all")), table.get((rate, "sk-lr", "all"))
        if not ours or not theirs:
            continue
        a = np.mean([float(g["auroc"]) for g in ours]) - np.mean([float(g["auroc"]) for g in theirs])
        r_ours = np.mean([float(g["recall_at_95"]) for g in ours])
        r_theirs = np.mean([float(g["recall_at_95"]) for g in theirs])
        ratio = r_ours / r_theirs if r_theirs > 0 else float("inf")
        ok = a >= AUROC_MARGIN and ratio >= RECALL_FACTOR
        lines.append(
            f"- rate {rate:g}: AUROC {a:+.3f} against sk-lr (>= +{AUROC_MARGIN}), recall at 95% kept "
            f"{r_ours:.3f} vs {r_theirs:.3f} = {ratio:.2f}x (>= {RECALL_FACTOR}x): {'met' if ok else 'NOT met'}"
        )
    lines += ["", "## at the suggested threshold (in_taxonomy, all kinds)", ""]
    for rate in rates:
        got = [g for g in table.get((rate, "in_taxonomy", "all"), []) if g.get("kept_at_suggested") not in (None, "")]
        if got:
            kept = np.mean([float(g["kept_at_suggested"]) for g in got])
            caught = np.mean([float(g["recall_at_suggested"]) for g in got])
            lines.append(f"- rate {rate:g}: in-scope test documents kept {kept:.3f}, others caught {caught:.3f}")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
