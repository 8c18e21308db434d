"""Prediction throughput with document vectors: ``pcem predict`` on the same documents, a model fitted on the
words alone against one fitted on the words and a 384-value vector per document.

Reads a Parquet corpus that ``scripts/embed_docs.py`` wrote (``id, text, labels, embedding``), trains two
models on it (``pcem_spark.ml.train``, the combined family at fixed settings: the regression is what the
vectors change), writes ``--copies`` copies of the documents (distinct ids, the vectors kept) as one Parquet
input, and times ``pcem predict`` (in this process, the SparkSession started before the clock) with each
model, alternating, ``--repeats`` times: reading and checking the documents (the vectors' dimension and
finiteness included for the model that reads them), tokenising, scoring, writing the predictions and their
marker. Reported: documents per second of the whole command (median), and the ratio of the model with
vectors to the model without; JSON to ``OUT/predict_vectors.json``::

    python scripts/bench_predict_vectors.py --corpus out/subjects_e5.parquet --copies 24 --out out/bench_vectors
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

FIXED = dict(
    family="combined",
    smoothing=0.1,
    unlabeled_weight=0.3,
    path_weight=0.0,
    generative_weight=0.1,
    embedding_weight=4.0,
    calibration="none",
    names="off",
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True, help="Parquet of id, text, labels, embedding (embed_docs.py)")
    ap.add_argument("--copies", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="out/bench_vectors")
    ap.add_argument("--reuse", action="store_true", help="predict with the models and input OUT already holds")
    args = ap.parse_args(argv)
    from dataclasses import replace

    from pyspark.sql import functions as F

    from pcem_spark.cli import main as pcem
    from pcem_spark.cli.config import load_settings
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.session import build_session
    from pcem_spark.ml import train

    settings = load_settings(None, [])
    spark = build_session(settings.spark)
    spark.sparkContext.setLogLevel("WARN")
    os.makedirs(args.out, exist_ok=True)
    docs = spark.read.parquet(args.corpus).select("id", "text", "labels", "embedding").cache()
    paths = sorted({tuple(r["labels"]) for r in docs.select("labels").distinct().collect()})
    taxonomy = Taxonomy.from_label_paths(paths)
    model_settings = replace(settings.model, **FIXED)
    models = {name: os.path.join(args.out, f"model_{name}") for name in ("words", "vectors")}
    input_path = os.path.join(args.out, "docs.parquet")
    if not args.reuse:
        for name, embedding in (("words", "none"), ("vectors", "auto")):
            features = replace(settings.features, embedding=embedding)
            model, _ = train(docs, taxonomy, features, model_settings, tune=settings.tune, seed=0)
            model.save(models[name], overwrite=True)
        copies = spark.range(args.copies).withColumnRenamed("id", "copy")
        big = docs.crossJoin(copies).select(
            F.concat_ws("#", "id", F.col("copy").cast("string")).alias("id"), "text", "labels", "embedding"
        )
        big.repartition(8).write.mode("overwrite").parquet(input_path)
    n_docs = spark.read.parquet(input_path).count()
    seconds = {name: [] for name in models}
    for repeat in range(args.repeats):
        for name, model in models.items():
            out = os.path.join(args.out, f"pred_{name}")
            t0 = time.perf_counter()
            code = pcem(["predict", "--model", model, "--docs", input_path, "--output", out, "--overwrite"])
            seconds[name].append(time.perf_counter() - t0)
            if code != 0:
                raise SystemExit(f"pcem predict exited {code} ({name})")
            print(f"repeat {repeat} {name}: {n_docs / seconds[name][-1]:,.0f} documents/s", flush=True)
    rates = {name: n_docs / statistics.median(s) for name, s in seconds.items()}
    report = {
        "documents": n_docs,
        "dimension": len(docs.first()["embedding"]),
        "seconds": {k: [round(x, 2) for x in v] for k, v in seconds.items()},
        "documents_per_second": {k: round(v) for k, v in rates.items()},
        "vectors_over_words": round(rates["vectors"] / rates["words"], 3),
        "cpus": os.cpu_count(),
    }
    with open(os.path.join(args.out, "predict_vectors.json"), "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2)
    print(json.dumps(report), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
