"""A wide model over Spark Connect: train and predict 1,000 leaves x 2^18 terms from a client, with its memory.

The synthetic corpus of ``bench_large_taxonomy.py`` (each document 60 words of
its leaf's 200-word topic and 40 Zipf background words over V = 2^``--vocab-bits``
terms; ``--label-rate`` of them labelled), built on the client as term-count
vectors and sent with ``createDataFrame``. Over a Spark Connect server started
here (``sbin/start-connect-server.sh`` of the installed pyspark, ``local[2]``,
127.0.0.1 on a free port), the client then runs what a user runs:

* ``PathEM(featuresCol=..., taxonomy=...).fit`` -- PCEM with fixed settings
  (no cross-validation: ``--iters`` EM iterations, smoothing 1,
  ``posterior_top_k`` 5), every pass on the DataFrame API alone;
* ``PathEMModel.save`` / ``load`` through the Connect persistence;
* ``transform`` of ``--test-docs`` held-out documents, and the share whose
  generating path is predicted.

Reported (JSON to ``--out``): seconds per EM iteration, fit / save / load /
predict seconds, the parameters' non-zeros and pickled size (what each pass
ships in its plan), the client process's peak RSS (``VmHWM``), and the peak
RSS of the server's JVM and of its Python workers::

    python scripts/bench_connect_wide.py --shape 10,10,10 --vocab-bits 18 --docs 20000 --iters 3
    python scripts/bench_connect_wide.py ... --staging   # the parameters as files, not in the plan
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402


def client(args) -> dict:
    """The client phase (its own process, SPARK_REMOTE set): build, fit, save, load, predict."""
    from bench_large_taxonomy import build_taxonomy, generator
    from pyspark.ml.linalg import SparseVector, VectorUDT
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T

    from pcem_spark.core.estep import scoring_tables
    from pcem_spark.engine.session import setup_logging
    from pcem_spark.ml.estimator import PathEM, PathEMModel

    setup_logging("INFO")
    spark = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
    shape = [int(x) for x in args.shape.split(",")]
    V = 1 << args.vocab_bits
    taxonomy = build_taxonomy(shape)
    M = taxonomy.n_paths
    real_paths = [taxonomy.real_path(j) for j in range(M)]
    doc = generator(M, V)
    rng = np.random.default_rng(1000)
    schema = T.StructType(
        [
            T.StructField("id", T.StringType()),
            T.StructField("features", VectorUDT()),
            T.StructField("labels", T.ArrayType(T.StringType())),
        ]
    )
    rows = []
    for i in range(args.docs):
        leaf, idx, cnt = doc(rng)
        labels = real_paths[leaf] if rng.random() < args.label_rate else None
        rows.append((f"d{i}", SparseVector(V, idx.tolist(), cnt.astype(float).tolist()), labels))
    t0 = time.perf_counter()
    train = spark.createDataFrame(rows, schema).repartition(args.partitions).cache()
    n_train = train.count()
    send_s = time.perf_counter() - t0
    del rows
    test_rows, truth = [], []
    trng = np.random.default_rng(99)
    for i in range(args.test_docs):
        leaf, idx, cnt = doc(trng)
        test_rows.append((f"t{i}", SparseVector(V, idx.tolist(), cnt.astype(float).tolist()), None))
        truth.append(leaf)
    test = spark.createDataFrame(test_rows, schema)
    del test_rows
    est = PathEM(
        featuresCol="features",
        taxonomy=taxonomy.to_json(),
        method="pcem",
        maxIter=args.iters,
        tol=0.0,
        smoothing=1.0,
        unlabeledWeight=1.0,
        pathWeight=1.0,
        posteriorTopK=5,
        calibration="none",
    )
    t0 = time.perf_counter()
    model = est.fit(train)
    fit_s = time.perf_counter() - t0
    pm = model.path_model
    summary = pm.training_summary
    tables_bytes = len(pickle.dumps(scoring_tables(pm.params, "float64"), protocol=pickle.HIGHEST_PROTOCOL))
    out_dir = os.path.join(args.work, "model")
    t0 = time.perf_counter()
    model.write().overwrite().save(out_dir) if hasattr(model, "write") else model.save(out_dir)
    save_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded = PathEMModel.load(out_dir)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = loaded.transform(test).select("id", "leaf").toArrow().to_pylist()
    predict_s = time.perf_counter() - t0
    leaf_of = {f"t{i}": taxonomy.leaves[truth[i]] if hasattr(taxonomy, "leaves") else None for i in range(len(truth))}
    acc = float(np.mean([r["leaf"] == leaf_of[r["id"]] for r in pred]))
    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:"))
    spark.stop()
    its = summary.get("iter_seconds", [])
    return {
        "leaves": M,
        "vocab_size": V,
        "docs": n_train,
        "labelled": summary.get("n_labeled"),
        "send_seconds": round(send_s, 2),
        "fit_seconds": round(fit_s, 2),
        "iteration_seconds": [round(s, 2) for s in its],
        "median_iteration_seconds": float(np.median(its)) if its else None,
        "save_seconds": round(save_s, 2),
        "load_seconds": round(load_s, 2),
        "predict_seconds": round(predict_s, 2),
        "test_docs": len(pred),
        "leaf_accuracy": acc,
        "nonzero_parameters": int(pm.params.log_ratio.nnz),
        "scoring_tables_pickled_mb": round(tables_bytes / 2**20, 1),
        "client_peak_rss_mb": round(hwm),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="10,10,10")
    ap.add_argument("--vocab-bits", type=int, default=18)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--test-docs", type=int, default=2000)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--label-rate", type=float, default=0.01)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--server-memory", default="6g")
    ap.add_argument(
        "--staging",
        action="store_true",
        help="ship the parameters as staged files (PCEM_STAGING_DIR in the work directory) instead of in the plan",
    )
    ap.add_argument("--out", default="out/bench/connect_wide.json")
    ap.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.client:
        print("RESULT " + json.dumps(client(args)), flush=True)
        return 0

    from bench_connect import free_port, start_connect_server, stop_connect_server
    from bench_large_taxonomy import MemorySampler

    work = tempfile.mkdtemp(prefix="pcem-connect-wide-")
    port = free_port()
    server = start_connect_server(port, work, memory=args.server_memory)
    try:
        env = dict(os.environ, SPARK_REMOTE=f"sc://127.0.0.1:{port}")
        if args.staging:
            env["PCEM_STAGING_DIR"] = os.path.join(work, "staged")
        cmd = [sys.executable, os.path.abspath(__file__), "--client", "--work", work, *(argv or sys.argv[1:])]
        with MemorySampler() as mem:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        sys.stderr.write(proc.stderr[-4000:])
        line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if proc.returncode != 0 or not line:
            print(proc.stdout[-2000:])
            return 1
        result = json.loads(line[0][len("RESULT ") :])
        result["server_jvm_peak_rss_mb"] = round(mem.jvm_peak)
        result["server_python_workers_peak_rss_mb"] = round(mem.workers_peak)
        result["parameters_shipped"] = "staged file" if args.staging else "in the plan"
    finally:
        stop_connect_server(server)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
