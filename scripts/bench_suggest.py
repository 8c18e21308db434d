"""A round of suggestions: ``pcem suggest-labels --budget N`` against ``pcem predict`` on the same documents.

A synthetic PCNB model and unlabelled documents are built as in ``scripts/bench_predict.py`` (``--shape``
children per node at each depth; ``--docs`` documents, then ``--copies`` times over with distinct ids:
``--docs 100000 --copies 10`` = 1,000,000). Then, in this process, alternating for ``--repeats`` rounds:
``pcem predict`` (exact decoding, the default columns) and ``pcem suggest-labels --budget N`` (the
default criterion and batch rule). Both commands are timed whole: reading and checking the documents,
the rejects table, loading the model, scoring, writing the output and its marker. The ratio of the
medians is the criterion (a round of suggestions within 1.5x a prediction); the suggestions' output has
N rows, all the driver ever holds of the documents. Output: ``OUT/bench_suggest.json`` and a line of
Markdown. Examples::

    python scripts/bench_suggest.py --docs 20000 --copies 1 --budget 1000 --out out/bench_suggest_smoke
    python scripts/bench_suggest.py --docs 100000 --copies 10 --budget 1000 --repeats 3 --out out/bench_suggest
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))


def _timed(argv) -> float:
    from pcem_spark.cli import main as pcem

    t0 = time.perf_counter()
    rc = pcem(argv + ["--overwrite", "--log-level", "WARN"])
    if rc != 0:
        raise SystemExit(f"pcem {argv[0]} exited {rc}")
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="4,5", help="children per node at each depth (4,5 = 20 leaves)")
    ap.add_argument("--vocab-bits", type=int, default=18)
    ap.add_argument("--train-per-leaf", type=int, default=10)
    ap.add_argument("--docs", type=int, default=100000, help="distinct documents generated")
    ap.add_argument("--copies", type=int, default=10, help="the documents this many times over (distinct ids)")
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--config", default=None, help="the settings file both commands read (its [spark])")
    ap.add_argument("--out", default="out/bench_suggest")
    args = ap.parse_args(argv)
    from bench_predict import _write_copies, _write_docs, synthetic_model

    from pcem_spark.cli.config import load_settings
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.engine.session import build_session
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    shape = [int(x) for x in args.shape.split(",")]
    spark = build_session(load_settings(args.config, []).spark)
    spark.sparkContext.setLogLevel("WARN")
    taxonomy, params, gen = synthetic_model(shape, args.vocab_bits, args.train_per_leaf)
    vocabulary = [f"w{i}" for i in range(1 << args.vocab_bits)]
    settings = ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0)
    model = PathModel(taxonomy, vocabulary, None, params, FeatureSettings(stop_words="none"), settings)
    os.makedirs(args.out, exist_ok=True)
    model_dir = os.path.join(args.out, "model")
    model.save(model_dir, overwrite=True)
    rng = np.random.default_rng(99)
    truth = rng.integers(taxonomy.n_paths, size=args.docs)
    tokens = gen.tokens(rng, truth, 60, 110)
    texts = [" ".join(f"w{t}" for t in row) for row in tokens]
    one = os.path.join(args.out, "docs_1x")
    _write_docs(spark, one, "parquet", [f"d{i}" for i in range(args.docs)], texts, [None] * args.docs)
    docs = one
    if args.copies > 1:
        docs = os.path.join(args.out, f"docs_{args.copies}x")
        _write_copies(spark, one, docs, args.copies)
    n_docs = args.docs * args.copies
    common = ["--model", model_dir, "--docs", docs]
    predict, suggest = [], []
    for _ in range(args.repeats):  # alternating, so that a slow spell of the machine hits both
        predict.append(_timed(["predict", *common, "--output", os.path.join(args.out, "pred")]))
        suggest.append(
            _timed(
                ["suggest-labels", *common, "--output", os.path.join(args.out, "sugg"), "--budget", str(args.budget)]
            )
        )
    rows = spark.read.parquet(os.path.join(args.out, "sugg")).count()
    result = {
        "documents": n_docs,
        "leaves": taxonomy.n_paths,
        "budget": args.budget,
        "suggestions": rows,
        "predict_seconds": predict,
        "suggest_seconds": suggest,
        "predict_median": statistics.median(predict),
        "suggest_median": statistics.median(suggest),
        "ratio": statistics.median(suggest) / statistics.median(predict),
    }
    with open(os.path.join(args.out, "bench_suggest.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    print(
        f"| {n_docs:,} documents, {taxonomy.n_paths} leaves | budget {args.budget:,} | predict "
        f"{result['predict_median']:.1f} s | suggest-labels {result['suggest_median']:.1f} s | "
        f"ratio {result['ratio']:.2f} | {rows:,} rows |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
