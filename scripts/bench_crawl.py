"""Crawl-shaped benchmark: what the default ``pcem train`` costs against the same train with its choices fixed.

Builds a corpus the size of a small crawl from 20 Newsgroups: the archive's
train split replicated ``--copies`` times (each copy drops a seeded tenth of
each post's words, so no two copies are identical), ``--label-rate`` of it
labelled, on 20NG's 2-level taxonomy or its dotted group names
(``--taxonomy dotted``: comp -> comp.sys -> comp.sys.mac -> ...). The test
split is kept once, as it is, to score the models.

``--synthetic 10,10,10`` (1,000 leaves) or ``10,10,100`` (10,000) writes
documents of ``scripts/bench_large_taxonomy.py``'s generator as text
instead (``--vocab-bits``, ``--synthetic-docs``; pass
``--set features.vocab_size=0 --set features.min_df=1`` to keep every term).

Then, side by side in one process and one SparkSession, through the same
``pcem`` commands a user runs:

* ``default``: ``pcem train`` with every default (cross-validation of the
  "auto" settings on a bounded sample, stop words chosen from the data);
* ``fixed``: the same train with the values the default chose given as
  numbers (no cross-validation, no stop-word decision): one fit;
* ``exhaustive`` (``--exhaustive``): ``tune.strategy = "exhaustive"``, Spark ML's
  CrossValidator over every document -- the behaviour before the sampled CV;
* ``pcem predict`` on the test split with exact decoding and with
  ``predict.beam`` = each of ``--beams``, then ``pcem evaluate``.

Reported per run: wall seconds, Spark jobs (a job group per run, counted by
the status tracker), the chosen values, test micro / macro F1, and the
default's ratio to the fixed train; for the predictions the agreement of
each beam with exact argmax. JSON to ``--out``, a markdown table on stdout.

    python -m pcem_spark.cli ingest-20ng --output out/20ng.jsonl.gz
    python scripts/bench_crawl.py --docs out/20ng.jsonl.gz --copies 11 --out out/bench/crawl.json
    python scripts/bench_crawl.py --docs out/20ng.jsonl.gz --copies 1 --exhaustive --out out/bench/crawl_1x.json
    python scripts/bench_crawl.py --synthetic 10,10,10 --vocab-bits 18 --synthetic-docs 100000 \
        --set features.vocab_size=0 --set features.min_df=1 --out out/bench/crawl_1000.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import uuid
from typing import Dict, List

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

DOTTED_TAXONOMY = "dotted"


def build_corpus(spark, docs_path: str, copies: int, out_dir: str, dotted: bool) -> Dict[str, int]:
    """Write ``OUT/docs`` (Parquet): ``copies`` perturbed copies of the train split, the test split once."""
    from pyspark.sql import functions as F

    docs = spark.read.json(docs_path)
    if dotted:
        # 20NG's dotted group name, as a path of its prefixes: comp.sys.mac.hardware -> comp, comp.sys, ...
        leaf = F.element_at("labels", -1)
        parts = F.split(leaf, r"\.")
        docs = docs.withColumn(
            "labels",
            F.transform(F.sequence(F.lit(1), F.size(parts)), lambda n: F.array_join(F.slice(parts, 1, n), ".")),
        )
    train = docs.where(F.col("split") == "train")
    test = docs.where(F.col("split") == "test")
    copy = spark.range(copies).select(F.col("id").cast("int").alias("copy"))
    words = F.split(F.col("text"), r"\s+")
    # Copy 0 is the post itself; copy k > 0 drops the words whose (id, k, position) hash is 0 mod 10.
    kept = F.filter(words, lambda w, i: (F.col("copy") == 0) | (F.pmod(F.xxhash64("id", "copy", i), F.lit(10)) != 0))
    replicated = train.crossJoin(copy).select(
        F.concat_ws("~", "id", F.col("copy").cast("string")).alias("id"),
        F.array_join(kept, " ").alias("text"),
        "labels",
        F.lit("train").alias("split"),
    )
    out = replicated.unionByName(test.select("id", "text", "labels", "split"))
    path = os.path.join(out_dir, "docs")
    out.repartition(max(4, copies)).write.mode("overwrite").parquet(path)
    counts = {r["split"]: r["count"] for r in spark.read.parquet(path).groupBy("split").count().collect()}
    return {"path": path, "train": counts.get("train", 0), "test": counts.get("test", 0)}


def build_synthetic(
    spark, shape: List[int], vocab_bits: int, n_docs: int, n_test: int, out_dir: str, label_rate: float
) -> Dict:
    """Write ``OUT/docs``: documents of scripts/bench_large_taxonomy.py's generator as text (term t -> "wT").

    A ``label_rate`` share of the training documents keep their labels (every
    ``1 / label_rate``-th one, as bench_large_taxonomy.py labels them): at
    10,000 leaves ``--label-rate``'s stratified split would keep one per leaf,
    10% of a 100,000-document corpus.
    """
    every = max(1, round(1 / label_rate))
    # The generator runs in the executors' Python workers, which do not see this folder on their path.
    spark.sparkContext.addPyFile(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_large_taxonomy.py"))
    from bench_large_taxonomy import build_taxonomy, generator

    taxonomy = build_taxonomy(shape)
    leaf_paths = [taxonomy.real_path(j) for j in range(taxonomy.n_paths)]
    M, V = taxonomy.n_paths, 1 << vocab_bits

    def rows(index, it):
        import numpy as np

        doc = generator(M, V)
        rng = np.random.default_rng([index, 17])
        for i in it:
            leaf, idx, cnt = doc(rng)
            text = " ".join(f"w{t}" for t, c in zip(idx, cnt) for _ in range(int(c)))
            test = i < n_test
            labels = leaf_paths[leaf] if test or (i - n_test) % every == 0 else None
            yield (f"d{i}", text, labels, "test" if test else "train")

    n = n_docs + n_test
    df = spark.createDataFrame(
        spark.sparkContext.range(n, numSlices=max(8, n // 20000)).mapPartitionsWithIndex(rows),
        "id string, text string, labels array<string>, split string",
    )
    path = os.path.join(out_dir, "docs")
    df.write.mode("overwrite").parquet(path)
    # The whole tree: inferred from 1% labels it would hold only the leaves that drew a labelled document.
    taxonomy_path = os.path.join(out_dir, "taxonomy.json")
    with open(taxonomy_path, "w", encoding="utf-8") as fh:
        fh.write(taxonomy.to_json())
    return {"path": path, "train": n_docs, "test": n_test, "leaves": M, "vocab": V, "taxonomy": taxonomy_path}


def run_counted(spark, name: str, argv: List[str]) -> Dict[str, object]:
    """Run one ``pcem`` command in this process; its wall seconds and Spark jobs (one job group)."""
    from pcem_spark.cli import main

    sc = spark.sparkContext
    group = f"bench-{name}-{uuid.uuid4().hex[:8]}"
    sc.setJobGroup(group, name)
    t0 = time.perf_counter()
    code = main(argv)
    secs = time.perf_counter() - t0
    jobs = len(sc.statusTracker().getJobIdsForGroup(group))
    sc.setLocalProperty("spark.jobGroup.id", None)
    if code != 0:
        raise SystemExit(f"{name}: pcem {' '.join(argv)} exited {code}")
    print(f"{name}: {secs:.1f}s, {jobs} Spark jobs", flush=True)
    return {"run": name, "seconds": round(secs, 1), "spark_jobs": jobs}


def chosen_settings(model_dir: str) -> Dict[str, object]:
    """The values the default train chose, as ``--set`` pairs for the fixed train."""
    from pcem_spark.model.path_model import PathModel

    m = PathModel.load(model_dir)
    ms, fs = m.model_settings, m.feature_settings
    chosen = {
        "model.unlabeled_weight": ms.unlabeled_weight,
        "model.path_weight": ms.path_weight,
        "model.smoothing": ms.smoothing,
        "model.family": ms.family,
        "features.stop_words": fs.stop_words,
    }
    if ms.family == "combined":
        chosen["model.generative_weight"] = ms.generative_weight
    names = (m.training_summary or {}).get("names", {}).get("choice")
    if names in ("on", "off"):  # decided from the data under "auto": the fixed train is given the decision
        chosen["model.names"] = names
    return chosen


def evaluate(spark, name: str, model: str, predictions: str, out_dir: str) -> Dict[str, float]:
    metrics_path = os.path.join(out_dir, f"metrics-{name}.json")
    run_counted(
        spark,
        f"evaluate-{name}",
        ["evaluate", "--predictions", predictions, "--model", model, "--output", metrics_path, "--overwrite"],
    )
    with open(metrics_path) as f:
        m = json.load(f)
    return {"micro_f1": round(100 * m["micro_f1"], 2), "macro_f1": round(100 * m["macro_f1"], 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", default="out/20ng.jsonl.gz", help="20NG JSON Lines from `pcem ingest-20ng`")
    ap.add_argument("--copies", type=int, default=11, help="copies of the train split (11 x 11,314 = 124,454)")
    ap.add_argument("--label-rate", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--taxonomy", default="20ng", choices=["20ng", DOTTED_TAXONOMY])
    ap.add_argument("--exhaustive", action="store_true", help="also train with tune.strategy = exhaustive")
    ap.add_argument("--beams", default="3", help="comma-separated predict.beam widths to compare with exact")
    ap.add_argument("--synthetic", default="", help="children per level, e.g. 10,10,10: a synthetic taxonomy instead")
    ap.add_argument("--vocab-bits", type=int, default=18, help="--synthetic: 2^bits terms")
    ap.add_argument("--synthetic-docs", type=int, default=100_000, help="--synthetic: training documents")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="--set for every train")
    ap.add_argument("--work", default="out/bench/crawl-work")
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--out", default="out/bench/crawl.json")
    args = ap.parse_args(argv)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench_crawl")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.retainedJobs", "100000")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    name = f"synthetic-{args.synthetic}-{args.vocab_bits}" if args.synthetic else f"{args.taxonomy}-x{args.copies}"
    work = os.path.join(args.work, name)
    os.makedirs(work, exist_ok=True)
    t0 = time.perf_counter()
    if args.synthetic:
        shape = [int(x) for x in args.synthetic.split(",")]
        corpus = build_synthetic(spark, shape, args.vocab_bits, args.synthetic_docs, 5000, work, args.label_rate)
    else:
        corpus = build_corpus(spark, args.docs, args.copies, work, args.taxonomy == DOTTED_TAXONOMY)
    corpus["build_seconds"] = round(time.perf_counter() - t0, 1)
    print(f"corpus: {corpus['train']:,} train documents ({args.label_rate:.0%} labelled), {corpus['test']:,} test")

    def train(name: str, extra: List[str]) -> Dict[str, object]:
        model = os.path.join(work, f"model-{name}")
        common = ["--docs", corpus["path"], "--split", "train"]
        if not args.synthetic:  # the synthetic corpus carries its own labels (build_synthetic)
            common += ["--label-rate", str(args.label_rate)]
        else:
            common += ["--taxonomy", corpus["taxonomy"]]
        sets = [a for kv in args.overrides for a in ("--set", kv)]
        argv = ["train", *common, "--seed", str(args.seed), "--model", model, "--overwrite", *sets, *extra]
        row = run_counted(spark, f"train-{name}", argv)
        row["model"] = model
        return row

    # Untimed warm-up: the first command in a fresh JVM and Python workers pays start-up, JIT and
    # first-read costs that would otherwise be charged to whichever timed run came first.
    warm = ["--set", "model.method=pcnb", "--set", "model.smoothing=0.01", "--set", "features.stop_words=english"]
    warm += ["--set", "model.unlabeled_weight=0", "--set", "model.path_weight=0"]
    corpus["warmup_seconds"] = train("warmup", warm)["seconds"]
    runs = [train("default", [])]
    chosen = chosen_settings(runs[0]["model"])
    runs[0]["chosen"] = chosen
    fixed_args = [a for k, v in chosen.items() for a in ("--set", f"{k}={v}")]
    runs.append(train("fixed", fixed_args))
    runs[-1]["chosen"] = chosen
    if args.exhaustive:
        runs.append(train("exhaustive", ["--set", "tune.strategy=exhaustive"]))
        runs[-1]["chosen"] = chosen_settings(runs[-1]["model"])
    from pcem_spark.model.path_model import PathModel

    for row in runs:
        summary = PathModel.load(row["model"]).training_summary
        tuning = summary.get("tuning", {})
        row["tuning_seconds"] = tuning.get("seconds")
        row["stop_words_seconds"] = summary.get("stop_words", {}).get("seconds")
        row["n_iter"] = summary.get("n_iter")
        pred = os.path.join(work, f"pred-{row['run']}")
        argv = ["predict", "--model", row["model"], "--docs", corpus["path"], "--split", "test"]
        run_counted(spark, f"predict-{row['run']}", [*argv, "--output", pred, "--overwrite"])
        row.update(evaluate(spark, row["run"], row["model"], pred, work))
    fixed_secs = runs[1]["seconds"]
    for row in runs:
        row["ratio_to_fixed"] = round(row["seconds"] / fixed_secs, 2)

    predictions = []
    model = runs[0]["model"]
    exact_dir = os.path.join(work, "pred-exact")
    base = ["predict", "--model", model, "--docs", corpus["path"], "--split", "test"]
    row = run_counted(spark, "predict-exact", [*base, "--set", "predict.beam=0", "--output", exact_dir, "--overwrite"])
    row.update(evaluate(spark, "exact", model, exact_dir, work), agreement=1.0)
    predictions.append(row)
    exact = spark.read.parquet(exact_dir).select("id", F.col("leaf").alias("exact_leaf"))
    beams = [int(b) for b in args.beams.split(",") if b.strip()]
    trained = PathModel.load(model) if beams else None
    if trained is not None and trained.linear is not None:
        # A model with a regression (combined or discriminative family) scores every path exactly; a beam
        # has nothing to prune, and predict refuses one rather than decode the generative part alone.
        family = trained.model_settings.family
        print(f"predict: no beam compared, the default chose the {family} family, which decodes exactly")
        beams = []
    for beam in beams:
        out = os.path.join(work, f"pred-beam{beam}")
        row = run_counted(
            spark, f"predict-beam{beam}", [*base, "--set", f"predict.beam={beam}", "--output", out, "--overwrite"]
        )
        row.update(evaluate(spark, f"beam{beam}", model, out, work))
        joined = spark.read.parquet(out).join(exact, "id")
        row["agreement"] = round(joined.where(F.col("leaf") == F.col("exact_leaf")).count() / joined.count(), 4)
        predictions.append(row)

    result = {"args": vars(args), "corpus": corpus, "train": runs, "predict": predictions}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2, default=str)
    print("\n| run | wall s | Spark jobs | CV s | ratio to fixed | chosen | micro-F1 | macro-F1 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        ch = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in r["chosen"].items())
        print(
            f"| {r['run']} | {r['seconds']} | {r['spark_jobs']} | {r['tuning_seconds']} | {r['ratio_to_fixed']} "
            f"| {ch} | {r['micro_f1']} | {r['macro_f1']} |"
        )
    print("\n| predict | wall s | Spark jobs | micro-F1 | macro-F1 | agreement with exact |")
    print("|---|---|---|---|---|---|")
    for r in predictions:
        cells = [r["run"], r["seconds"], r["spark_jobs"], r["micro_f1"], r["macro_f1"], r["agreement"]]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    if os.environ.get("BENCH_CRAWL_KEEP") != "1":
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
