"""Synthetic large-taxonomy EM runs: iteration time, driver / executor memory, shuffle and broadcast bytes.

Documents draw 60 words from their leaf's 200-word topic and 40 from a Zipf
background over the whole vocabulary; ``--label-rate`` of them carry their
path. PCNB + PCEM (the paper's Eq. 2 path scores) run on Spark ``local[2]``
through ``engine.fit``; a held-out sample of ``--test-docs`` generated
documents measures how often the generating path is recovered (exact argmax,
and a beam over the tree when ``--beam`` is given).

Reported per run (JSON to ``--out``): seconds per EM iteration, the driver
Python process's peak RSS, the peak RSS of the JVM and of the Python workers
(the executors in local mode), shuffle-write bytes per iteration (Spark's
REST API), broadcast bytes per iteration, non-zero parameters, and accuracy.

``--engine-src DIR`` runs the same configuration with the engine of another
checkout (e.g. ``git archive 41aaca5`` of the dense engine) in a subprocess,
so two engines are compared in one run::

    python scripts/bench_large_taxonomy.py --shape 10,10,10 --vocab-bits 18 --docs 20000 \\
        --iters 3 --compare-src /tmp/dense_engine --compare-dtype float32
    python scripts/bench_large_taxonomy.py --shape 10,10,100 --vocab-bits 20 --docs 100000 --iters 50
    python scripts/bench_large_taxonomy.py --shape 10,10,10 --vocab-bits 18 --docs 20000 --iters 3 --top-k 5 \
        --frame-pass   # the RDD pass and the DataFrame-only pass side by side
    python scripts/bench_large_taxonomy.py --shape 10,100 --vocab-bits 18 --docs 100000 --label-rate 0.1 \
        --iters 3 --driver-memory 2g --linear   # the discriminative family at 1,000 leaves x 2^18 terms
    python scripts/bench_large_taxonomy.py --shape 10,10,10 --vocab-bits 18 --docs 100000 --iters 6 --top-k 5 \
        --references   # the iteration against one-core scipy and MLlib NaiveBayes.fit, medians of --repeats

``--references`` times the same EM iteration (the engine's sparse scoring tables, E-step and sparse
M-step) as one process on one CSR matrix of all the documents, and MLlib ``NaiveBayes.fit`` on the same
documents with their generating leaves as labels, and reports the Spark iteration's ratio to each.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import pickle
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np


def _rss_mb(pid: int, field: str = "VmRSS:") -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _descendants(root: int):
    """(pid, cmdline) of every process below ``root``."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            try:
                with open(f"/proc/{c}/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                cmd = ""
            out.append((c, cmd))
            todo.append(c)
    return out


class MemorySampler:
    """Peak RSS of the JVM and of the Python workers below this process, sampled every 0.2 s."""

    def __init__(self):
        self.jvm_peak = 0.0
        self.workers_peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            jvm = workers = 0.0
            for pid, cmd in _descendants(os.getpid()):
                if "java" in cmd.split(" ")[0]:
                    jvm += _rss_mb(pid)
                elif "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
                    workers += _rss_mb(pid)
            self.jvm_peak = max(self.jvm_peak, jvm)
            self.workers_peak = max(self.workers_peak, workers)
            time.sleep(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _stage_shuffle_bytes(sc, after_stage: int):
    """(shuffle-write bytes, last stage id) of the completed stages with id > ``after_stage``."""
    url = sc.uiWebUrl
    if not url:
        return None, after_stage
    try:
        with urllib.request.urlopen(
            f"{url}/api/v1/applications/{sc.applicationId}/stages?status=complete", timeout=30
        ) as resp:
            stages = json.load(resp)
    except Exception:  # noqa: BLE001 - the UI is optional; the number is then missing, not wrong
        return None, after_stage
    new = [s for s in stages if s["stageId"] > after_stage]
    last = max([after_stage] + [s["stageId"] for s in stages])
    return sum(int(s.get("shuffleWriteBytes", 0)) for s in new), last


def generator(M: int, V: int, seed: int = 7):
    topics = np.random.default_rng(seed).integers(0, V, size=(M, 200))
    zipf_cdf = np.cumsum(1.0 / np.arange(1, V + 1))
    zipf_cdf /= zipf_cdf[-1]

    def doc(rng):
        leaf = int(rng.integers(M))
        words = np.concatenate(
            [rng.choice(topics[leaf], 60), np.minimum(np.searchsorted(zipf_cdf, rng.random(40)), V - 1)]
        )
        idx, cnt = np.unique(words, return_counts=True)
        return leaf, idx, cnt

    return doc


def build_taxonomy(shape):
    from pcem_spark.core.taxonomy import Taxonomy

    children = {"ROOT": [f"n{i}" for i in range(shape[0])]}
    frontier = list(children["ROOT"])
    for b in shape[1:]:
        nxt = []
        for node in frontier:
            children[node] = [f"{node}.{j}" for j in range(b)]
            nxt.extend(children[node])
        frontier = nxt
    return Taxonomy(children)


def scipy_iteration(X, fixed, labeled, fit, options):
    """One EM iteration of the engine's arithmetic on the whole corpus in one process, on one core.

    The same sparse scoring tables, E-step (``posterior_top_k`` truncation, sparse sums) and sparse
    M-step as a partition of the Spark pass, on one CSR matrix: the one-core limit at this width.
    """
    from pcem_spark import core
    from pcem_spark.core.parameters import sparse_log_parameters, sparse_log_prior_density

    tables = core.scoring_tables(fit.params, options.dtype)
    e_opts = core.EStepOptions(use_unlabeled=True, sparse_density=1.0, top_k=options.top_k)
    st = core.e_step(X, fixed, labeled, None, None, e_opts, tables=tables)
    loglik = st.loglik + sparse_log_prior_density(fit.params, fit.smoothing, fit.prior_smoothing)
    return sparse_log_parameters(st.word_counts, st.path_totals, fit.smoothing, None, fit.prior_smoothing), loglik


def references(spark, blocks, df, fit, pc_scores, V: int, args) -> dict:
    """The EM iteration against one-core scipy and MLlib NaiveBayes.fit on the same documents (medians)."""
    import scipy.sparse as sp
    from pyspark.ml.classification import NaiveBayes

    from pcem_spark.core.structure import path_scores
    from pcem_spark.engine.sums import PassOptions

    parts_x, parts_fixed, parts_labeled = [], [], []
    for blk in blocks.toLocalIterator():  # benchmark reference only: the corpus in one process
        parts_x.append(blk.X)
        parts_fixed.append(path_scores(blk.node_scores, pc_scores))
        parts_labeled.append(blk.labeled)
    X = sp.vstack(parts_x, format="csr").astype(np.float64)
    fixed, labeled = np.vstack(parts_fixed), np.concatenate(parts_labeled)
    del parts_x, parts_fixed
    options = PassOptions(dtype=args.dtype, top_k=args.top_k)
    scipy_times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        scipy_iteration(X, fixed, labeled, fit, options)
        scipy_times.append(time.perf_counter() - t0)
    del X, fixed, labeled
    nb_df = df.select("features", df["leaf"].alias("label")).cache()
    nb_df.count()
    nb = NaiveBayes(smoothing=1.0, modelType="multinomial")
    nb_times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        nb.fit(nb_df)
        nb_times.append(time.perf_counter() - t0)
    nb_df.unpersist()
    spark_s = statistics.median(fit.iter_seconds)
    row = {
        "scipy_iteration_seconds": [round(s, 2) for s in scipy_times],
        "scipy_median_iteration_seconds": statistics.median(scipy_times),
        "mllib_nb_fit_seconds": [round(s, 2) for s in nb_times],
        "mllib_nb_fit_median_seconds": statistics.median(nb_times),
    }
    row["spark_over_scipy"] = round(spark_s / row["scipy_median_iteration_seconds"], 3)
    row["spark_over_mllib_nb"] = round(spark_s / row["mllib_nb_fit_median_seconds"], 3)
    print(
        f"references: Spark iteration {spark_s:.2f}s, one-core scipy {row['scipy_median_iteration_seconds']:.2f}s "
        f"({row['spark_over_scipy']:.2f}x), NaiveBayes.fit {row['mllib_nb_fit_median_seconds']:.2f}s "
        f"({row['spark_over_mllib_nb']:.2f}x)",
        flush=True,
    )
    return row


def run(args) -> dict:
    import scipy.sparse as sp
    from pyspark.ml.linalg import SparseVector, VectorUDT
    from pyspark.sql import types as T

    from pcem_spark import core, engine
    from pcem_spark.cli.config import SparkSettings
    from pcem_spark.engine.session import build_session, setup_logging
    from pcem_spark.model.fitting import score_matrix

    setup_logging("INFO")
    spark = build_session(
        SparkSettings(
            master="local[2]",
            app_name="pcem-large-taxonomy",
            conf={
                "spark.driver.memory": args.driver_memory,
                "spark.ui.enabled": "true",
                "spark.ui.port": "4090",
                "spark.driver.maxResultSize": args.max_result_size,
                "spark.ui.showConsoleProgress": "false",
            },
        )
    )
    sc = spark.sparkContext
    shape = [int(x) for x in args.shape.split(",")]
    V = 1 << args.vocab_bits
    taxonomy = build_taxonomy(shape)
    M = taxonomy.n_paths
    real_paths = [taxonomy.real_path(j) for j in range(M)]
    n, label_rate, parts = args.docs, args.label_rate, args.partitions
    doc = generator(M, V)

    def generate(pidx, _):
        rng = np.random.default_rng(1000 + pidx)
        for i in range(pidx, n, parts):
            leaf, idx, cnt = doc(rng)
            labels = real_paths[leaf] if rng.random() < label_rate else None
            yield (f"d{i}", SparseVector(V, idx.tolist(), cnt.astype(float).tolist()), labels, float(leaf))

    schema = T.StructType(
        [
            T.StructField("id", T.StringType()),
            T.StructField("features", VectorUDT()),
            T.StructField("labels", T.ArrayType(T.StringType())),
            # the generating leaf of every document: MLlib NaiveBayes's label in --references
            T.StructField("leaf", T.DoubleType()),
        ]
    )
    df = spark.createDataFrame(sc.parallelize(range(parts), parts).mapPartitionsWithIndex(generate), schema)
    try:
        path_node = taxonomy.path_node_matrix(sparse=True)
    except TypeError:  # the dense engine of --compare-src
        path_node = taxonomy.path_node_matrix()
    blocks = engine.cache_blocks(engine.blocks_from_labels(df, taxonomy.path_lookup(), path_node, V, 4096))
    t0 = time.perf_counter()
    n_blocks = blocks.count()
    pack_s = time.perf_counter() - t0

    settings = dict(
        em=True,
        max_iter=args.iters,
        tol=args.tol,
        label="large-taxonomy",
        posterior_floor=args.posterior_floor,
        dtype=args.dtype,
        smoothing=args.smoothing,
    )
    # Engines of --compare-src older than engine.EMSettings take the settings as keywords.
    new_api = hasattr(engine, "EMSettings")
    fit_params = inspect.signature(engine.fit).parameters
    pass_stats = None
    kwargs = {}
    if new_api or "top_k" in fit_params:
        settings["top_k"] = args.top_k
    if "stats" in fit_params:
        pass_stats = []
        kwargs["stats"] = pass_stats
    if new_api:
        kwargs["settings"] = engine.EMSettings(**settings)
    else:
        kwargs.update(settings)
    _, last_stage = _stage_shuffle_bytes(sc, -1)
    t0 = time.perf_counter()
    with MemorySampler() as mem:
        fit = engine.fit(blocks, score_matrix(taxonomy, "pcem"), V, **kwargs)
    total = time.perf_counter() - t0
    shuffle, _ = _stage_shuffle_bytes(sc, last_stage)
    driver_peak = _rss_mb(os.getpid(), "VmHWM:")
    linear, linear_row = None, {}
    if args.linear:
        # The discriminative family's softmax regression on the same cached blocks (its labelled rows),
        # after the EM: its own time, the driver's peak RSS when it is done, its free weights.
        from pcem_spark.model.linear_family import fit_linear_blocks
        from pcem_spark.model.settings import ModelSettings

        ms = ModelSettings(family="discriminative", linear_c=args.linear_c, linear_weights=args.linear_weights)
        t0 = time.perf_counter()
        with MemorySampler() as lmem:
            linear, info = fit_linear_blocks(blocks, taxonomy, V, ms)
        linear_row = {
            "linear_seconds": round(time.perf_counter() - t0, 2),
            "linear_weights": info["weights"],
            "linear_n_weights": info["n_weights"],
            "linear_n_iter": info["n_iter"],
            "linear_converged": info["converged"],
            "linear_driver_python_peak_rss_mb": round(_rss_mb(os.getpid(), "VmHWM:")),
            "linear_jvm_peak_rss_mb": round(lmem.jvm_peak),
            "linear_python_workers_peak_rss_mb": round(lmem.workers_peak),
        }
        print(f"softmax regression: {json.dumps(linear_row)}", flush=True)
    profile = None
    if args.profile:
        # One more pass as the fit runs it, phase by phase (scripts/em_profile.py: Spark's stage metrics
        # from the UI's REST API, the driver's clock, the partition function on a sample of the blocks).
        from em_profile import profile_iteration

        from pcem_spark.engine.sums import PassOptions

        profile = profile_iteration(
            sc, blocks, fit, score_matrix(taxonomy, "pcem"), V, 20_000, PassOptions(dtype=args.dtype, top_k=args.top_k)
        )
    reference_row = {}
    if args.references:
        reference_row = references(spark, blocks, df, fit, score_matrix(taxonomy, "pcem"), V, args)
    if profile is not None:
        from em_profile import profile_table

        scipy = {"iteration": reference_row["scipy_median_iteration_seconds"]} if reference_row else {}
        reference_row["profile"] = profile
        reference_row["profile_table"] = profile_table(profile, scipy, statistics.median(fit.iter_seconds))
        print(f"one iteration, phase by phase\n{reference_row['profile_table']}", flush=True)
    blocks.unpersist()
    frame_row = {}
    if args.frame_pass:
        # The DataFrame-only pass (engine.frame_sums, what Spark Connect runs) on the same documents, right
        # after the RDD fit: packed as a cached DataFrame, the same EM settings and iterations.
        frame = engine.packed_label_frame(df, taxonomy.path_lookup(), path_node, 4096).cache()
        frame.count()
        frame_fit = engine.fit(frame, score_matrix(taxonomy, "pcem"), V, settings=kwargs["settings"])
        frame.unpersist()
        diff = (frame_fit.params.log_ratio - fit.params.log_ratio).tocsr()
        frame_row = {
            "frame_iteration_seconds": [round(s, 2) for s in frame_fit.iter_seconds],
            "frame_median_iteration_seconds": statistics.median(frame_fit.iter_seconds),
            "frame_max_abs_log_ratio_diff": float(abs(diff).max()) if diff.nnz else 0.0,
        }
        print(
            f"DataFrame-only pass {frame_row['frame_median_iteration_seconds']:.2f}s per iteration "
            f"(RDD {statistics.median(fit.iter_seconds):.2f}s)",
            flush=True,
        )

    # Held-out documents from the same generator: is the generating path recovered?
    rng = np.random.default_rng(99)
    rows, cols, vals, truth = [], [], [], []
    for i in range(args.test_docs):
        leaf, idx, cnt = doc(rng)
        rows.extend([i] * len(idx))
        cols.extend(idx)
        vals.extend(cnt)
        truth.append(leaf)
    X = sp.csr_matrix((np.asarray(vals, float), (rows, cols)), shape=(args.test_docs, V))
    truth = np.asarray(truth)
    t0 = time.perf_counter()
    if hasattr(fit, "params"):
        tables = core.scoring_tables(fit.params, args.dtype)
        best, _ = core.predict_paths(X, None, None, tables=tables)
        nnz = int(fit.params.log_ratio.nnz)
        bc_bytes = [s.get("broadcast_bytes") for s in pass_stats or []]
    else:
        best, _ = core.predict_paths(X, fit.log_prior, fit.log_theta)
        nnz = M * V
        one = len(
            pickle.dumps(
                (fit.log_prior.astype(args.dtype), fit.log_theta.T.astype(args.dtype)), protocol=pickle.HIGHEST_PROTOCOL
            )
        )
        bc_bytes = [one] * (fit.n_iter + 1)
    predict_s = time.perf_counter() - t0
    if linear is not None:
        scores = core.pooled_scores(np.zeros((X.shape[0], M)), X, linear)
        linear_row["linear_path_accuracy"] = float(np.mean(scores.argmax(axis=1) == truth))
    path_nodes = np.array([[taxonomy.node_index[x] for x in p] for p in taxonomy.paths])
    out = {
        "engine_src": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(engine.__file__)))),
        "shape": shape,
        "leaves": M,
        "nodes": taxonomy.n_nodes,
        "vocab_size": V,
        "docs": n,
        "partitions": parts,
        "blocks": n_blocks,
        "dtype": args.dtype,
        "top_k": args.top_k,
        "posterior_floor": args.posterior_floor,
        "n_labeled": fit.n_labeled,
        "pack_seconds": round(pack_s, 2),
        "fit_seconds": round(total, 2),
        "n_iter": fit.n_iter,
        "converged": fit.converged,
        "iteration_seconds": [round(s, 2) for s in fit.iter_seconds],
        "median_iteration_seconds": statistics.median(fit.iter_seconds) if fit.iter_seconds else None,
        "driver_python_peak_rss_mb": round(driver_peak),
        "jvm_peak_rss_mb": round(mem.jvm_peak),
        "python_workers_peak_rss_mb": round(mem.workers_peak),
        "shuffle_write_mb_per_pass": None if shuffle is None else round(shuffle / 2**20 / (fit.n_iter + 1), 2),
        "broadcast_mb_per_iteration": [round(b / 2**20, 2) for b in bc_bytes if b is not None],
        "nonzero_parameters": nnz,
        "dense_cells": M * V,
        "test_docs": args.test_docs,
        "path_accuracy": float(np.mean(best == truth)),
        # share of held-out documents whose predicted node at depth d is the generating one
        "depth_accuracy": [
            float(np.mean(path_nodes[best, d] == path_nodes[truth, d])) for d in range(path_nodes.shape[1])
        ],
        "predict_seconds": round(predict_s, 2),
        "loglik_history": fit.loglik_history,
        **frame_row,
        **linear_row,
        **reference_row,
    }
    if args.beam and hasattr(core, "beam_predict_paths"):
        tree = core.beam_tables(fit.params, path_node, args.smoothing)
        for b in [int(x) for x in args.beam.split(",")]:
            t0 = time.perf_counter()
            bb, _ = core.beam_predict_paths(X, tree, b)
            out.setdefault("beam", []).append(
                {
                    "beam": b,
                    "path_accuracy": float(np.mean(bb == truth)),
                    "depth_accuracy": [
                        float(np.mean(path_nodes[bb, d] == path_nodes[truth, d])) for d in range(path_nodes.shape[1])
                    ],
                    "agreement_with_exact": float(np.mean(bb == best)),
                    "seconds": round(time.perf_counter() - t0, 2),
                }
            )
    spark.stop()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="10,10,10", help="children per node at each level (depth = its length)")
    ap.add_argument("--vocab-bits", type=int, default=18)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--test-docs", type=int, default=5000)
    ap.add_argument("--iters", type=int, default=3, help="max EM iterations (tol 0 runs exactly this many)")
    ap.add_argument("--tol", type=float, default=0.0)
    ap.add_argument("--smoothing", type=float, default=1.0)
    ap.add_argument("--label-rate", type=float, default=0.01)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--max-result-size", default="8g")
    ap.add_argument("--posterior-floor", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=0, help="model.posterior_top_k (0 = exact)")
    ap.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    ap.add_argument("--beam", default="", help="comma-separated beam widths to measure against the exact argmax")
    ap.add_argument("--compare-src", default="", help="also run with the pcem_spark of this source tree")
    ap.add_argument("--compare-dtype", default="", help="dtype of the comparison run (default: --dtype)")
    ap.add_argument(
        "--frame-pass",
        action="store_true",
        help="also fit with the DataFrame-only pass (Spark Connect's engine) on the same documents, side by side",
    )
    ap.add_argument(
        "--linear",
        action="store_true",
        help="also fit the discriminative family's softmax regression on the blocks (its time, driver RSS, accuracy)",
    )
    ap.add_argument("--linear-c", type=float, default=10.0)
    ap.add_argument("--linear-weights", default="auto", choices=["auto", "dense", "observed"])
    ap.add_argument(
        "--references",
        action="store_true",
        help="also time the same EM iteration as one-core scipy on one CSR matrix, and MLlib NaiveBayes.fit on "
        "the same documents with their generating leaves (medians of --repeats); ratios in the JSON",
    )
    ap.add_argument("--repeats", type=int, default=5, help="timings of each --references reference")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also the per-phase profile of one more pass (scripts/em_profile.py), set against the one-core "
        "scipy iteration when --references runs",
    )
    ap.add_argument("--out", default="out/bench/large_taxonomy.json")
    args = ap.parse_args(argv)
    results = []
    if args.compare_src:
        # The other engine first, in its own process (its own driver peak), then this one.
        sub = [a for a in (argv if argv is not None else sys.argv[1:])]
        cmd = (
            [sys.executable, os.path.abspath(__file__)]
            + _without(sub, "--compare-src", "--compare-dtype", "--out", "--beam", "--dtype")
            + ["--out", args.out + ".compare.json", "--dtype", args.compare_dtype or args.dtype]
        )
        env = dict(os.environ, PYTHONPATH=args.compare_src)
        rc = subprocess.call(cmd, env=env)
        if rc == 0:
            with open(args.out + ".compare.json") as fh:
                results.extend(json.load(fh)["runs"])
        else:
            results.append({"engine_src": args.compare_src, "failed": f"exit code {rc}"})
    results.append(run(args))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"args": vars(args), "runs": results}, fh, indent=2)
    print(json.dumps({"runs": [{k: v for k, v in r.items() if k != "loglik_history"} for r in results]}, indent=2))
    return 0


def _without(argv, *names):
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in names:
            skip = True
            continue
        if any(a.startswith(n + "=") for n in names):
            continue
        out.append(a)
    return out


if __name__ == "__main__":
    sys.exit(main())
