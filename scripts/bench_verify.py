"""What verified outputs cost: ``pcem predict`` then ``pcem evaluate`` at a million documents, per tree.

The predictions' commit hashes every file it wrote (SHA-256, in the marker),
and ``evaluate`` checks them before it reads (up to ``output.verify_max_bytes``;
beyond, the Parquet pages' checksums as it reads). This times both commands
end to end, in this process, on the same documents, for whichever pcem-spark
is imported: run it once per tree, the other tree first on ``PYTHONPATH``::

    python scripts/bench_verify.py --out out/bench_verify --label "checksums"
    PYTHONPATH=/path/to/other/tree python scripts/bench_verify.py --out out/bench_verify --label before

A synthetic 20-leaf PCNB model over 2^18 terms (``scripts/bench_predict.py``'s
generator) is saved by the tree being measured; ``--docs`` distinct documents
(~150 distinct terms each) are written once as Parquet and repeated
``--copies`` times with distinct ids (kept in ``OUT/docs``, so every tree
reads the same files). The SparkSession is started before the clock. Each
repeat runs predict (``--overwrite``) then evaluate; the row appended to
``OUT/bench_verify.md`` has the medians, the predictions' size and the
evaluate run with ``--set output.verify_max_bytes=0`` (page checksums only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--docs", type=int, default=100000, help="distinct documents")
    ap.add_argument("--copies", type=int, default=10, help="the documents this many times over (distinct ids)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="6g")
    args = ap.parse_args(argv)

    # pcem-spark from PYTHONPATH (the tree measured) before the scripts folder's imports add this checkout.
    import numpy as np

    import pcem_spark
    from pcem_spark.cli import main as pcem
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.engine.session import SparkSettings, build_session
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    saved_path = list(sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_predict import _write_copies, _write_docs, synthetic_model

    sys.path[:] = saved_path
    code = os.path.dirname(os.path.dirname(os.path.abspath(pcem_spark.__file__)))
    from pcem_spark.io.output_policy import OutputSettings

    has_verify_setting = hasattr(OutputSettings(), "verify_max_bytes")
    conf = {"spark.driver.memory": args.driver_memory}
    spark = build_session(SparkSettings(master=args.master, app_name="pcem-bench-verify", conf=conf))
    spark.sparkContext.setLogLevel("ERROR")
    taxonomy, params, gen = synthetic_model((4, 5), 18, 10)
    settings = ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0)
    vocabulary = [f"w{i}" for i in range(1 << 18)]
    model = PathModel(taxonomy, vocabulary, None, params, FeatureSettings(stop_words="none"), settings)
    here = os.path.join(args.out, args.label.replace(" ", "_"))
    model_dir = os.path.join(here, "model")
    model.save(model_dir, overwrite=True)
    docs = os.path.join(args.out, "docs", f"{args.docs}x{args.copies}")
    if not os.path.exists(docs):
        rng = np.random.default_rng(99)
        truth = rng.integers(taxonomy.n_paths, size=args.docs)
        tokens = gen.tokens(rng, truth, 60, 110)
        texts = [" ".join(f"w{t}" for t in row) for row in tokens]
        labels = [list(taxonomy.real_path(int(j))) for j in truth]
        base = docs + "-base"
        _write_docs(spark, base, "parquet", [f"d{i}" for i in range(args.docs)], texts, labels)
        _write_copies(spark, base, docs, args.copies)
    n_docs = args.docs * args.copies
    predictions = os.path.join(here, "predictions")
    quiet = ["--log-level", "WARNING"]
    timings = {"load": [], "predict": [], "evaluate": [], "evaluate, pages only": []}
    for _ in range(args.repeats + 1):  # the first round warms the JVM up, untimed
        t0 = time.perf_counter()
        PathModel.load(model_dir)
        t1 = time.perf_counter()
        predict = ["predict", "--model", model_dir, "--docs", docs, "--output", predictions, "--overwrite"]
        assert pcem([*predict, *quiet]) == 0
        t2 = time.perf_counter()
        assert pcem(["evaluate", "--model", model_dir, "--predictions", predictions, *quiet]) == 0
        t3 = time.perf_counter()
        if has_verify_setting:  # a tree before checksums has no such setting: nothing to compare
            pages = ["--set", "output.verify_max_bytes=0"]
            assert pcem(["evaluate", "--model", model_dir, "--predictions", predictions, *pages, *quiet]) == 0
        t4 = time.perf_counter()
        for key, seconds in zip(timings, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            timings[key].append(seconds)
    med = {k: statistics.median(v[1:]) for k, v in timings.items()}
    pages_only = f"{med['evaluate, pages only']:.1f}" if has_verify_setting else "-"
    row = (
        f"| {args.label} | {n_docs:,} | {_size(predictions) / 2**20:.1f} | {med['load']:.2f} | {med['predict']:.1f} | "
        f"{med['evaluate']:.1f} | {pages_only} | {args.repeats} | {code} |"
    )
    table = os.path.join(args.out, "bench_verify.md")
    if not os.path.exists(table):
        with open(table, "w", encoding="utf-8") as fh:
            fh.write(
                "| tree | documents | predictions MiB | model load s | predict s | evaluate s | "
                "evaluate (pages only) s | repeats | code |\n|---|---|---|---|---|---|---|---|---|\n"
            )
    with open(table, "a", encoding="utf-8") as fh:
        fh.write(row + "\n")
    print(row)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
