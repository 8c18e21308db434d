"""A synthetic large-taxonomy run: 1,000 leaves (10 x 10 x 10), a 2^18 vocabulary.

Generates documents whose words come from a leaf-specific topic plus a shared
Zipf background, labels 1% of them, and runs PCNB + ``--iters`` PCEM
iterations of the Spark engine (``local[2]``). Reports iteration seconds, the
driver's peak RSS, the machine's lowest available memory during the run and
the bytes broadcast per iteration.

    python scripts/bench_large_taxonomy.py --docs 20000 --partitions 2 --dtype float32
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys
import threading
import time

import numpy as np


def meminfo_available_mb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--branching", type=int, default=10, help="children per node (depth 3)")
    ap.add_argument("--vocab-bits", type=int, default=18)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--label-rate", type=float, default=0.01)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--driver-memory", default="6g", help="JVM heap; a smaller heap makes the JVM collect garbage instead of growing")
    ap.add_argument("--posterior-floor", type=float, default=0.0)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                    help="model.parameter_dtype: float32 halves the broadcast and the per-path sums")
    ap.add_argument("--out", default="out/bench/large_taxonomy.json")
    args = ap.parse_args(argv)

    from pyspark.ml.linalg import SparseVector, VectorUDT
    from pyspark.sql import types as T

    from pcem_spark import engine
    from pcem_spark.config import SparkSettings
    from pcem_spark.model import score_matrix
    from pcem_spark.session import build_session, setup_logging
    from pcem_spark.taxonomy import Taxonomy

    setup_logging("INFO")
    spark = build_session(SparkSettings(master="local[2]", app_name="pcem-large-taxonomy", conf={
        "spark.driver.memory": args.driver_memory, "spark.ui.enabled": "false",
        # The summed M x V counts are collected: 1,000 x 2^18 float64 is 2 GiB dense.
        "spark.driver.maxResultSize": "8g", "spark.ui.showConsoleProgress": "false"}))
    b, V = args.branching, 1 << args.vocab_bits
    children = {"ROOT": [f"n{i}" for i in range(b)]}
    for i in range(b):
        children[f"n{i}"] = [f"n{i}.{j}" for j in range(b)]
        for j in range(b):
            children[f"n{i}.{j}"] = [f"n{i}.{j}.{k}" for k in range(b)]
    taxonomy = Taxonomy(children)
    M = taxonomy.n_paths
    real_paths = [taxonomy.real_path(j) for j in range(M)]
    n, label_rate, parts = args.docs, args.label_rate, args.partitions

    def generate(pidx, _):
        rng = np.random.default_rng(1000 + pidx)
        topic_rng = np.random.default_rng(7)  # same topics in every partition
        topics = topic_rng.integers(0, V, size=(M, 200))
        zipf_p = 1.0 / np.arange(1, V + 1)
        zipf_p /= zipf_p.sum()
        for i in range(pidx, n, parts):
            leaf = int(rng.integers(M))
            words = np.concatenate([rng.choice(topics[leaf], 60), rng.choice(V, 40, p=zipf_p)])
            idx, cnt = np.unique(words, return_counts=True)
            labels = real_paths[leaf] if rng.random() < label_rate else None
            yield (f"d{i}", SparseVector(V, idx.tolist(), cnt.astype(float).tolist()), labels)

    schema = T.StructType([T.StructField("id", T.StringType()), T.StructField("features", VectorUDT()),
                           T.StructField("labels", T.ArrayType(T.StringType()))])
    rdd = spark.sparkContext.parallelize(range(parts), parts).mapPartitionsWithIndex(generate)
    df = spark.createDataFrame(rdd, schema)
    blocks = engine.cache_blocks(engine.blocks_from_labels(
        df, taxonomy.path_lookup(), taxonomy.path_node_matrix(), V, 4096))
    t0 = time.perf_counter()
    n_blocks = blocks.count()
    pack_s = time.perf_counter() - t0

    low = [meminfo_available_mb()]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            low[0] = min(low[0], meminfo_available_mb())
            time.sleep(0.2)

    threading.Thread(target=sample, daemon=True).start()
    t0 = time.perf_counter()
    fit = engine.fit(blocks, score_matrix(taxonomy, "pcem"), V, em=True, max_iter=args.iters, tol=0.0,
                     label="large-taxonomy", posterior_floor=args.posterior_floor, dtype=args.dtype)
    total = time.perf_counter() - t0
    stop.set()
    with open("/proc/self/status") as fh:
        peak = next(int(l.split()[1]) / 1024 for l in fh if l.startswith("VmHWM:"))
    out = {"posterior_floor": args.posterior_floor, "dtype": args.dtype, "partitions": parts, "docs": n, "leaves": M, "nodes": taxonomy.n_nodes, "vocab_size": V, "blocks": n_blocks,
           "n_labeled": fit.n_labeled, "pack_seconds": pack_s, "fit_seconds": total,
           "iteration_seconds": fit.iter_seconds,
           "median_iteration_seconds": statistics.median(fit.iter_seconds) if fit.iter_seconds else None,
           "driver_peak_rss_mb": peak, "machine_min_available_mb": low[0],
           "broadcast_mb_per_iteration": len(pickle.dumps(
               (fit.log_prior.astype(args.dtype), fit.log_theta.T.astype(args.dtype)),
               protocol=pickle.HIGHEST_PROTOCOL)) / 2**20,
           "loglik_history": fit.loglik_history}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=2)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
