"""Prototype benchmark: one EM pass without the RDD API, over Spark Connect (issue 11, part 5).

The product's EM pass (``engine.sufficient_stats``) needs the RDD API: packed
CSR blocks cached as an RDD, ``log theta`` broadcast, ``mapPartitions`` +
``reduceByKey`` + ``collect``. Spark Connect has none of these. This script
measures whether a DataFrame-only pass could replace it:

* ``rdd``            the product's pass (``engine.sufficient_stats``) on
                     ``engine.blocks_from_labels`` blocks, classic ``local[2]``;
* ``df-rows``        a cached DataFrame of per-document sparse vectors;
                     ``mapInArrow`` builds a CSR matrix per Arrow slice of
                     ``--block-size`` rows, runs ``core.e_step`` with log theta
                     shipped inside the UDF's closure (Connect has no broadcast)
                     and yields the partition's partial sums as Arrow rows
                     (key, float64 bytes); the driver sums them from ``toArrow()``;
* ``df-blocks``      the same on a cached DataFrame of packed CSR blocks (one row
                     of bytes per block, ``engine``'s own Arrow packing);
* ``df-blocks-agg``  ``df-blocks`` with the partial sums reduced on the server
                     (``groupBy(key).applyInArrow``), so only M + 1 rows reach the
                     driver, as with the RDD path's ``reduceByKey``;

the three ``df-*`` passes both on a classic local session and over a Spark
Connect server (``sbin/start-connect-server.sh`` of the installed pyspark,
bound to 127.0.0.1 on a free port, ``local[2]``, started and stopped here).
Every pass gets the same documents, partitions and parameters; the script
reports seconds per pass (median of ``--repeats``, passes interleaved) and the
largest absolute difference of every sum from the RDD path's.

It also times what a user does before fitting (read + reject split + count,
vocabulary, featurise + count), which works over Connect.

    python scripts/bench_connect.py --docs out/20ng.jsonl.gz --n-docs 8000 --out out/bench_connect.json
    python scripts/bench_connect.py --n-docs 8000 --scale 8 --no-workflow   # 64,000 documents

Each phase runs in its own Python process (a classic SparkContext and a
Connect client do not mix in one process). Needs the Connect client packages
(grpcio, grpcio-status, googleapis-common-protos, zstandard). Nothing is
asserted; the numbers go to docs/CLUSTER.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import numpy as np  # noqa: E402

DF_METHODS = ("df-rows", "df-blocks", "df-blocks-agg")


# ---------------------------------------------------------------------------
# The DataFrame-only pass (the prototype)
# ---------------------------------------------------------------------------


def _rows_blocks(batches, block_size, keys, path_nodes, vocab_size, n_nodes):
    """(X, node_scores, labeled) per slice of <= block_size documents (features, labels columns)."""
    import scipy.sparse as sp

    from pcem_spark import engine

    for b in engine.arrow_blocks(batches, block_size):
        indptr, indices, data = engine.sparse_vector_arrays(b.column(0))
        X = sp.csr_matrix((data, indices, indptr), shape=(b.num_rows, vocab_size))
        ns_ptr, ns_idx, ns_val = engine.node_score_rows(b.column(1), keys, path_nodes)
        yield X, sp.csr_matrix((ns_val, ns_idx, ns_ptr), shape=(b.num_rows, n_nodes)), np.diff(ns_ptr) > 0


def _packed_blocks(batches, vocab_size, n_nodes):
    """(X, node_scores, labeled) of each packed block row (engine.blocks.BLOCK_ROW columns)."""
    from pcem_spark.engine.blocks import block_from_row  # the reader of the compact ids and counts

    for b in batches:
        cols = [b.column(i).to_pylist() for i in range(7)]
        for r in range(b.num_rows):
            blk = block_from_row([cols[i][r] for i in range(7)], vocab_size, n_nodes)
            yield blk.X, blk.node_scores, blk.labeled


def make_pass_udf(layout, log_prior, log_theta, score_matrix, keys, path_nodes, vocab_size, n_nodes, block_size):
    """mapInArrow body: one partition's E-step sums as M + 1 Arrow rows (key, float64 bytes).

    Parameters travel in the closure: log theta transposed (V, M), as the
    engine broadcasts it, so ``X @ log theta.T`` needs no copy per block.
    Key j < M: the word sums of path j with its total appended; key -1:
    (loglik, labelled rows, unlabelled rows).
    """
    theta_t = np.ascontiguousarray(log_theta.T)
    n_paths = score_matrix.shape[0]

    def pass_partition(batches):
        import pyarrow as pa

        from pcem_spark import core

        log_theta_v = theta_t.T
        acc = np.zeros((n_paths, vocab_size + 1))
        scalars = np.zeros(3)
        blocks = (
            _rows_blocks(batches, block_size, keys, path_nodes, vocab_size, n_nodes)
            if layout == "rows"
            else _packed_blocks(batches, vocab_size, n_nodes)
        )
        for X, node_scores, labeled in blocks:
            fixed = core.path_scores(node_scores, score_matrix)
            st = core.e_step(X, fixed, labeled, log_prior, log_theta_v, core.EStepOptions(use_unlabeled=True))
            acc[:, :-1] += st.word_counts
            acc[:, -1] += st.path_totals
            n_lab = int(labeled.sum())
            scalars += (st.loglik, n_lab, len(labeled) - n_lab)
        rows = [acc[j].tobytes() for j in range(n_paths)] + [scalars.tobytes()]
        yield pa.RecordBatch.from_arrays(
            [pa.array(list(range(n_paths)) + [-1], pa.int32()), pa.array(rows, pa.binary())], names=["key", "value"]
        )

    return pass_partition


def _sum_groups(table):
    """applyInArrow body: the element-wise sum of one key's float64 byte rows."""
    import pyarrow as pa

    values = table.column("value").to_pylist()
    total = np.sum([np.frombuffer(v, dtype=np.float64) for v in values], axis=0)
    return pa.table(
        {
            "key": pa.array([table.column("key")[0].as_py()], pa.int32()),
            "value": pa.array([total.tobytes()], pa.binary()),
        }
    )


def assemble(table, n_paths, vocab_size):
    """(word_counts (M, V), path_totals (M,), loglik, n_lab, n_unlab) from the pass's Arrow rows."""
    acc = np.zeros((n_paths, vocab_size + 1))
    scalars = np.zeros(3)
    for key, value in zip(table.column("key").to_pylist(), table.column("value").to_pylist()):
        arr = np.frombuffer(value, dtype=np.float64)
        if key < 0:
            scalars += arr
        else:
            acc[key] += arr
    return acc[:, :-1], acc[:, -1].copy(), float(scalars[0]), int(scalars[1]), int(scalars[2])


def df_pass(method, frames, params):
    """One DataFrame-only pass; returns the assembled sums."""
    layout = "rows" if method == "df-rows" else "blocks"
    udf = make_pass_udf(
        layout,
        params["log_prior"],
        params["log_theta"],
        params["score_matrix"],
        params["keys"],
        params["path_nodes"],
        params["vocab_size"],
        params["n_nodes"],
        params["block_size"],
    )
    src = frames["rows"] if layout == "rows" else frames["blocks"]
    sums = src.mapInArrow(udf, "key int, value binary")
    if method == "df-blocks-agg":
        sums = sums.groupBy("key").applyInArrow(_sum_groups, "key int, value binary")
    return assemble(sums.toArrow(), params["score_matrix"].shape[0], params["vocab_size"])


# ---------------------------------------------------------------------------
# Phases (each in its own process)
# ---------------------------------------------------------------------------


def _classic_session(app, memory="2g"):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", memory)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _load_params(work):
    from pcem_spark.core.taxonomy import Taxonomy

    z = np.load(os.path.join(work, "params.npz"))
    with open(os.path.join(work, "meta.json")) as fh:
        meta = json.load(fh)
    taxonomy = Taxonomy.from_json(meta["taxonomy"])
    path_node = taxonomy.path_node_matrix()
    lookup = taxonomy.path_lookup()
    keys = [None] * path_node.shape[0]
    for labels, j in lookup.items():
        keys[j] = "\x1f".join(labels)
    path_nodes = np.array([np.flatnonzero(path_node[j]) for j in range(path_node.shape[0])], dtype=np.int32)
    return dict(
        log_prior=z["log_prior"],
        log_theta=z["log_theta"],
        score_matrix=np.array(path_node, dtype=float),
        keys=keys,
        path_nodes=path_nodes,
        vocab_size=int(meta["vocab_size"]),
        n_nodes=path_node.shape[1],
        block_size=int(meta["block_size"]),
        taxonomy=taxonomy,
        lookup=lookup,
        path_node=path_node,
        partitions=int(meta["partitions"]),
    )


def _frames(spark, work, params):
    """Cached per-document and packed-block DataFrames of the features table (P partitions each)."""
    from pcem_spark import engine
    from pcem_spark.engine import blocks as engine_blocks

    rows = (
        spark.read.parquet(os.path.join(work, "features"))
        .repartition(params["partitions"])
        .select("features", "labels")
        .cache()
    )
    rows.count()
    keys, path_nodes, bs = params["keys"], params["path_nodes"], params["block_size"]

    def pack(batches):
        return engine_blocks._pack_arrow_partition(
            batches, lambda col: engine.node_score_rows(col, keys, path_nodes), bs
        )

    blocks = rows.mapInArrow(pack, engine_blocks.BLOCK_ROW).cache()
    blocks.count()
    return {"rows": rows, "blocks": blocks}


def _workflow(spark, sample_path):
    """Seconds of what a user does before fitting (all DataFrame API)."""
    from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary
    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.rejects import split_rejects

    out = {}
    t = time.perf_counter()
    good, rejects = split_rejects(read_documents(spark, sample_path, "json"))
    n = good.count()
    out["read + split_rejects + count"] = time.perf_counter() - t
    docs = good.select("id", "text", "labels")
    t = time.perf_counter()
    vocab = fit_vocabulary(docs, FeatureSettings(stop_words="english"))
    out["fit_vocabulary"] = time.perf_counter() - t
    t = time.perf_counter()
    featurize(docs, vocab, FeatureSettings()).select("features").count()
    out["featurize + count"] = time.perf_counter() - t
    return {"n_docs": n, "vocab": len(vocab), "seconds": out}


def _timed_passes(methods, run_one, repeats):
    """Warm-up pass per method, then ``repeats`` rounds with the methods interleaved."""
    times = {m: [] for m in methods}
    results = {m: run_one(m) for m in methods}  # warm-up: Python workers, closures, caches
    for _ in range(repeats):
        for m in methods:
            t = time.perf_counter()
            results[m] = run_one(m)
            times[m].append(time.perf_counter() - t)
    return times, results


def _save_sums(work, tag, results):
    arrays = {}
    for m, (wc, totals, ll, n_lab, n_unlab) in results.items():
        arrays[f"{m}|wc"] = wc
        arrays[f"{m}|totals"] = totals
        arrays[f"{m}|scalars"] = np.array([ll, n_lab, n_unlab])
    np.savez(os.path.join(work, f"sums_{tag}.npz"), **arrays)


def phase_prep(args):
    """Sample the corpus, featurise it, write the features and the NB-initialised parameters."""
    from pyspark.sql import functions as F

    from pcem_spark import core, engine
    from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary
    from pcem_spark.model.labels import infer_taxonomy

    work = args.work
    rng = random.Random(args.seed)
    with gzip.open(args.docs, "rt", encoding="utf-8") if args.docs.endswith(".gz") else open(args.docs) as fh:
        lines = fh.readlines()
    lines = rng.sample(lines, min(args.n_docs, len(lines)))
    sample = os.path.join(work, "sample.jsonl")
    with open(sample, "w", encoding="utf-8") as out:
        out.writelines(lines)
    spark = _classic_session("bench-connect-prep")
    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.rejects import split_rejects

    good, _ = split_rejects(read_documents(spark, sample, "json"))
    docs = good.select("id", "text", "labels")
    taxonomy = infer_taxonomy(docs)
    settings = FeatureSettings(vocab_size=args.vocab_size, stop_words="english")
    vocabulary = fit_vocabulary(docs, settings)
    # Hide labels: keep those of a seeded --label-rate share (at least one per leaf is not needed
    # for a timing; the NB initialisation smooths empty paths).
    hidden = docs.withColumn("labels", F.when(F.rand(args.seed) < args.label_rate, F.col("labels")))
    feats = featurize(hidden, vocabulary, settings).select("id", "features", "labels")
    if args.scale > 1:
        # Larger corpora as in docs/BENCHMARKS.md: the featurised documents repeated --scale times
        # (the vocabulary and labelled share stay those of the sample).
        feats = feats.crossJoin(spark.range(args.scale).withColumnRenamed("id", "_copy")).select(
            F.concat_ws("#", "id", F.col("_copy").cast("string")).alias("id"), "features", "labels"
        )
    feats.repartition(args.partitions).write.mode("overwrite").parquet(os.path.join(work, "features"))
    feats = spark.read.parquet(os.path.join(work, "features")).repartition(args.partitions)
    with engine.packed_blocks(
        engine.blocks_from_labels(
            feats, taxonomy.path_lookup(), taxonomy.path_node_matrix(), len(vocabulary), args.block_size
        )
    ) as blocks:
        score_matrix = np.array(taxonomy.path_node_matrix(), dtype=float)
        wc, totals, _, n_lab, n_unlab = engine.sufficient_stats(
            blocks, None, score_matrix, len(vocabulary), engine.PassOptions(use_unlabeled=False)
        )
        log_prior, log_theta = core.log_parameters(wc, totals, 1.0)
        np.savez(os.path.join(work, "params.npz"), log_prior=log_prior, log_theta=log_theta)
        meta = {
            "taxonomy": taxonomy.to_json(),
            "vocab_size": len(vocabulary),
            "block_size": args.block_size,
            "partitions": args.partitions,
            "n_docs": n_lab + n_unlab,
            "n_labeled": n_lab,
            "n_paths": taxonomy.n_paths,
            "nnz": int(blocks.map(lambda b: b.X.nnz).sum()),
        }
    with open(os.path.join(work, "meta.json"), "w") as fh:
        json.dump(meta, fh)
    spark.stop()


def phase_classic(args):
    from pcem_spark import core, engine

    work = args.work
    params = _load_params(work)
    spark = _classic_session("bench-connect-classic")
    report = {}
    if args.workflow:
        report["workflow"] = _workflow(spark, os.path.join(work, "sample.jsonl"))
    frames = _frames(spark, work, params)
    with engine.packed_blocks(
        engine.blocks_from_labels(
            frames["rows"], params["lookup"], params["path_node"], params["vocab_size"], params["block_size"]
        )
    ) as blocks:
        blocks.count()

        def run_one(method):
            if method == "rdd":
                return engine.sufficient_stats(
                    blocks,
                    core.PathParameters.from_log_theta(params["log_prior"], params["log_theta"]),
                    params["score_matrix"],
                    params["vocab_size"],
                    engine.PassOptions(use_unlabeled=True),
                )
            return df_pass(method, frames, params)

        times, results = _timed_passes(("rdd",) + DF_METHODS, run_one, args.repeats)
    report["passes"] = times
    _save_sums(work, "classic", results)
    with open(os.path.join(work, "report_classic.json"), "w") as fh:
        json.dump(report, fh)
    spark.stop()


def phase_connect(args):
    import pyspark.cloudpickle as cloudpickle
    from pyspark.sql import SparkSession

    work = args.work
    params = _load_params(work)
    spark = SparkSession.builder.remote(args.remote).getOrCreate()
    report = {}
    if args.workflow:
        report["workflow"] = _workflow(spark, os.path.join(work, "sample.jsonl"))
    frames = _frames(spark, work, params)
    times, results = _timed_passes(DF_METHODS, lambda m: df_pass(m, frames, params), args.repeats)
    report["passes"] = times
    udf = make_pass_udf(
        "blocks",
        params["log_prior"],
        params["log_theta"],
        params["score_matrix"],
        params["keys"],
        params["path_nodes"],
        params["vocab_size"],
        params["n_nodes"],
        params["block_size"],
    )
    report["closure_bytes"] = len(cloudpickle.dumps(udf))
    # What the product does on this session (the clear error of pcem_spark.engine.session).
    try:
        from pcem_spark import engine

        engine.blocks_from_labels(frames["rows"], params["lookup"], params["path_node"], params["vocab_size"])
        report["rdd_path_on_connect"] = "no error (?)"
    except Exception as exc:  # noqa: BLE001 - reported, not handled
        report["rdd_path_on_connect"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    _save_sums(work, "connect", results)
    with open(os.path.join(work, "report_connect.json"), "w") as fh:
        json.dump(report, fh)
    spark.stop()


# ---------------------------------------------------------------------------
# The Connect server and the driver of the phases
# ---------------------------------------------------------------------------


def _pythonpath() -> str:
    """This checkout first, so every process (and the server's Python workers) imports its pcem_spark."""
    return os.pathsep.join([REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_connect_server(
    port: int, log_dir: str, master: str = "local[2]", memory: str = "2g", timeout: float = 180.0
) -> subprocess.Popen:
    """The installed pyspark's Spark Connect server, in the foreground of its own process group.

    Bound to 127.0.0.1 only (gRPC, driver, block manager; no UI). Its Python
    workers run this interpreter and import pcem_spark from this checkout.
    """
    import pyspark

    script = os.path.join(os.path.dirname(pyspark.__file__), "sbin", "start-connect-server.sh")
    env = dict(
        os.environ,
        SPARK_LOG_DIR=log_dir,
        SPARK_PID_DIR=log_dir,
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=_pythonpath(),
    )
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    cmd = [
        "bash",
        script,
        "--wait",
        "--master",
        master,
        "--driver-memory",
        memory,
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=4",
    ]
    log = open(os.path.join(log_dir, "connect-server.out"), "w")
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited ({proc.returncode}); see {log.name}")
        with socket.socket() as s:
            s.settimeout(1.0)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(1.0)
    stop_connect_server(proc)
    raise RuntimeError(f"the Spark Connect server did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


def stop_connect_server(proc: subprocess.Popen) -> None:
    """Stop the server's process group (the one this script started) and wait for it."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _run_phase(phase, args, extra=()):
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--phase",
        phase,
        "--work",
        args.work,
        "--docs",
        args.docs,
        "--n-docs",
        str(args.n_docs),
        "--repeats",
        str(args.repeats),
        "--partitions",
        str(args.partitions),
        "--block-size",
        str(args.block_size),
        "--vocab-size",
        str(args.vocab_size),
        "--label-rate",
        str(args.label_rate),
        "--seed",
        str(args.seed),
        "--scale",
        str(args.scale),
        *(["--no-workflow"] if not args.workflow else []),
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=_pythonpath())
    env.pop("SPARK_REMOTE", None)
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True)
    return time.perf_counter() - t


def compare(work):
    """Max |difference| of every method's sums from the RDD path's (word sums, totals, log-likelihood)."""
    classic = np.load(os.path.join(work, "sums_classic.npz"))
    connect = np.load(os.path.join(work, "sums_connect.npz"))
    ref_wc, ref_tot, ref_sc = classic["rdd|wc"], classic["rdd|totals"], classic["rdd|scalars"]
    out = {}
    for tag, z in (("classic", classic), ("connect", connect)):
        for m in DF_METHODS:
            wc, tot, sc = z[f"{m}|wc"], z[f"{m}|totals"], z[f"{m}|scalars"]
            out[f"{m} ({tag})"] = {
                "max_abs_diff_word_sums": float(np.max(np.abs(wc - ref_wc))),
                "max_abs_diff_path_totals": float(np.max(np.abs(tot - ref_tot))),
                "abs_diff_loglik": float(abs(sc[0] - ref_sc[0])),
                "rel_diff_loglik": float(abs(sc[0] - ref_sc[0]) / abs(ref_sc[0])),
                "same_counts": bool(sc[1] == ref_sc[1] and sc[2] == ref_sc[2]),
            }
    out["_scale"] = {"max_word_sum": float(ref_wc.max()), "loglik": float(ref_sc[0])}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", default=os.path.join(REPO, "out", "20ng.jsonl.gz"), help="documents (JSON Lines, .gz ok)")
    p.add_argument("--n-docs", type=int, default=8000, help="documents sampled from --docs")
    p.add_argument("--label-rate", type=float, default=0.01)
    p.add_argument("--scale", type=int, default=1, help="repeat the featurised sample this many times")
    p.add_argument("--vocab-size", type=int, default=20000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--block-size", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-workflow", dest="workflow", action="store_false", help="skip timing read / vocabulary / featurise"
    )
    p.add_argument("--out", default=None, help="write the report (JSON) here")
    p.add_argument("--phase", choices=("prep", "classic", "connect"), help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--remote", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.phase:
        {"prep": phase_prep, "classic": phase_classic, "connect": phase_connect}[args.phase](args)
        return 0

    from pyspark.sql.connect.utils import check_dependencies

    check_dependencies()  # fails early, naming the missing Connect client package
    with tempfile.TemporaryDirectory(prefix="pcem-bench-connect-") as work:
        args.work = work
        wall = {"prep": _run_phase("prep", args), "classic": _run_phase("classic", args)}
        port = free_port()
        t = time.perf_counter()
        server = start_connect_server(port, work)
        wall["connect server start"] = time.perf_counter() - t
        try:
            wall["connect"] = _run_phase("connect", args, ["--remote", f"sc://127.0.0.1:{port}"])
        finally:
            stop_connect_server(server)
        with open(os.path.join(work, "meta.json")) as fh:
            meta = json.load(fh)
        meta.pop("taxonomy")
        reports = {}
        for tag in ("classic", "connect"):
            with open(os.path.join(work, f"report_{tag}.json")) as fh:
                reports[tag] = json.load(fh)
        diffs = compare(work)

    load = os.getloadavg()
    result = {
        "data": meta,
        "repeats": args.repeats,
        "load_average": load,
        "wall_seconds": wall,
        "passes": {f"{m} ({tag})": sorted(v) for tag in reports for m, v in reports[tag]["passes"].items()},
        "workflow": {tag: reports[tag].get("workflow") for tag in reports},
        "closure_bytes": reports["connect"].get("closure_bytes"),
        "rdd_path_on_connect": reports["connect"].get("rdd_path_on_connect"),
        "differences_from_rdd": diffs,
    }
    print(
        f"\n{meta['n_docs']:,} documents ({meta['n_labeled']} labelled), V = {meta['vocab_size']:,}, "
        f"M = {meta['n_paths']} paths, {meta['nnz']:,} non-zeros, {meta['partitions']} partitions, "
        f"local[2]; load average {load[0]:.1f}"
    )
    print("\n| pass | session | median s | min s | max s | max abs diff of sums vs rdd |")
    print("|---|---|---|---|---|---|")
    for key, ts in result["passes"].items():
        m, tag = key.rsplit(" (", 1)
        tag = tag.rstrip(")")
        d = diffs.get(key)
        dd = (
            "reference"
            if m == "rdd"
            else (
                f"{max(d['max_abs_diff_word_sums'], d['max_abs_diff_path_totals']):.1e} "
                f"(loglik {d['abs_diff_loglik']:.1e})"
            )
        )
        print(f"| {m} | {tag} | {statistics.median(ts):.3f} | {min(ts):.3f} | {max(ts):.3f} | {dd} |")
    for tag, wf in result["workflow"].items():
        if wf:
            print(
                f"\nworkflow ({tag}, {wf['n_docs']} docs, V={wf['vocab']}): "
                + ", ".join(f"{k} {v:.2f}s" for k, v in wf["seconds"].items())
            )
    print(
        f"\nclosure of the pass UDF: {result['closure_bytes']:,} bytes; RDD path on Connect: "
        f"{result['rdd_path_on_connect']}"
    )
    print("wall: " + ", ".join(f"{k} {v:.1f}s" for k, v in wall.items()))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
