"""Benchmark one PCEM iteration of the Spark engine against its references.

For the 20NG training set (the protocol's stratified 80%, ~15k documents, 1%
labelled) and resampled versions of it (x4, x16, x64 ~ 1M documents), in one
process and run:

1. one PCEM iteration (E-step + M-step + log-likelihood) of the Spark engine,
   the product's own code path (``engine.fit``), median of ``--repeats``;
2. the same iteration as a single-process scipy computation on the whole
   corpus already in memory (CSR x dense): the one-core limit;
3. ``pyspark.ml.classification.NaiveBayes.fit`` on the same documents with
   their labels (one pass over the data, all in the JVM);

plus PCNB vs flat NB training time, prediction throughput (documents/s
written to Parquet), the driver's peak RSS during the Spark work and the bytes
broadcast per iteration. Writes ``bench.json`` and ``bench.md`` to --out-dir.

    python scripts/bench_em.py --docs out/20ng.jsonl.gz --scales 1,4,16,64 --out-dir out/bench

Nothing here is asserted: the numbers go to docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import os
import pickle
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_peak_mb() -> float:
    return _status_mb("VmHWM:")


def rss_now_mb() -> float:
    return _status_mb("VmRSS:")


def reset_rss_peak() -> None:
    """Reset VmHWM so the next reading is the peak of the next phase only (Linux)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def scipy_iteration(X, fixed, labeled, log_prior, log_theta, smoothing=1.0):
    """One PCEM iteration on the whole corpus in one process (the same math as a block)."""
    from pcem_spark import core

    st = core.e_step(X, fixed, labeled, log_prior, log_theta, core.EStepOptions(use_unlabeled=True))
    loglik = st.loglik + core.log_prior_density(log_prior, log_theta, smoothing)
    return core.log_parameters(st.word_counts, st.path_totals, smoothing), loglik


def engine_fit(engine, blocks, scores, vocab_size: int, **settings):
    """``engine.fit`` with one ``EMSettings`` (an engine older than it, e.g. another checkout's, takes keywords)."""
    if hasattr(engine, "EMSettings"):
        return engine.fit(blocks, scores, vocab_size, engine.EMSettings(**settings))
    if "top_k" not in inspect.signature(engine.fit).parameters:
        settings.pop("top_k", None)
    return engine.fit(blocks, scores, vocab_size, **settings)


def alternating_passes(blocks, frame, fit, scores, vocab_size: int, n_nodes: int, repeats: int, top_k: int) -> dict:
    """Seconds of one RDD pass and one DataFrame-only pass from ``fit``'s parameters, alternated ``repeats`` times.

    Two fits one after the other compare the machine's speed in two windows as much as the passes (a shared
    machine's speed drifts by a third over minutes); alternating single passes puts both in the same window,
    each engine first in every other pair.
    """
    from pcem_spark.engine.frame_sums import frame_sufficient_stats
    from pcem_spark.engine.sums import PassOptions, sufficient_stats

    options = PassOptions(use_unlabeled=True, top_k=top_k)  # as the EM's iterations run it
    seconds = {"rdd": [], "frame": []}
    passes = [
        ("rdd", lambda: sufficient_stats(blocks, fit.params, scores, vocab_size, options)),
        ("frame", lambda: frame_sufficient_stats(frame, fit.params, scores, vocab_size, n_nodes, options)),
    ]
    for repeat in range(repeats):
        for name, run in passes if repeat % 2 == 0 else passes[::-1]:
            t0 = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - t0)
    return {
        "rdd_pass_all": seconds["rdd"],
        "frame_pass_all": seconds["frame"],
        "rdd_pass_seconds": statistics.median(seconds["rdd"]),
        "frame_pass_seconds": statistics.median(seconds["frame"]),
        "frame_over_rdd_paired_median": statistics.median(f / r for f, r in zip(seconds["frame"], seconds["rdd"])),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", required=True, help="ingested 20NG documents table")
    ap.add_argument("--scales", default="1,4,16,64")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=0, help="partitions of the scaled corpora (0: 2 x cores)")
    ap.add_argument("--out-dir", default="out/bench")
    ap.add_argument("--driver-memory", default="16g")
    ap.add_argument("--skip-predict", action="store_true")
    ap.add_argument(
        "--frame-pass",
        action="store_true",
        help="also time the DataFrame-only EM pass (engine.frame_sums, what Spark Connect runs) on the same data",
    )
    ap.add_argument(
        "--engine-only",
        action="store_true",
        help="only the Spark engine's numbers (no NaiveBayes / scipy references, no prediction): "
        "for comparing two engines, e.g. PYTHONPATH=<other checkout>",
    )
    ap.add_argument("--top-k", type=int, default=0, help="model.posterior_top_k of the timed EM (0 = exact)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also the per-phase profile of one iteration (scripts/em_profile.py; turns the Spark UI on for "
        "its stage metrics), beside the one-core scipy time of the same arithmetic",
    )
    ap.add_argument(
        "--engine-set",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="set a module constant of pcem_spark.engine for an A/B run, e.g. COALESCE_TO_CORES=0 (engine.sums) "
        "or blocks.BLOCK_BATCH_BYTES=67108864 (another engine module)",
    )
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="settings override as in pcem, e.g. model.block_size=8192",
    )
    args = ap.parse_args(argv)
    if args.profile and args.engine_only:
        ap.error("--profile needs the scipy reference: leave out --engine-only")

    from pyspark.ml.classification import NaiveBayes
    from pyspark.sql import functions as F

    from pcem_spark import engine
    from pcem_spark.cli.config import SparkSettings, load_settings
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.features import featurize, fit_vocabulary
    from pcem_spark.engine.session import build_session, setup_logging
    from pcem_spark.experiment.protocol import assign_roles
    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.rejects import split_rejects
    from pcem_spark.model.fitting import score_matrix
    from pcem_spark.model.path_model import PathModel

    setup_logging("WARNING")
    settings = load_settings(None, args.overrides)
    spark = build_session(
        SparkSettings(
            master="local[2]",
            app_name="pcem-bench",
            conf={
                "spark.driver.memory": args.driver_memory,
                # The profile reads the stage metrics from the UI's REST API.
                "spark.ui.enabled": "true" if args.profile else "false",
                "spark.sql.shuffle.partitions": "8",
                "spark.ui.showConsoleProgress": "false",
            },
        )
    )
    sc = spark.sparkContext
    cores = sc.defaultParallelism
    partitions = args.partitions or 2 * cores
    os.makedirs(args.out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="pcem-bench-")

    docs, _ = split_rejects(read_documents(spark, args.docs))
    paths = [r[0] for r in docs.select("labels").distinct().collect()]
    taxonomy = Taxonomy.from_label_paths(paths)
    lookup = taxonomy.path_lookup()
    leaf_index = {"/".join(k): float(v) for k, v in lookup.items()}
    roled = assign_roles(docs, seed=0, test_fraction=0.2, label_rate=0.01).where(F.col("role") != "test")
    base = roled.select(
        "id",
        "text",
        F.col("labels").alias("true_labels"),
        F.when(F.col("role") == "labeled", F.col("labels")).alias("labels"),
    )
    if settings.features.stop_words == "auto":  # a timing: the list, as the topical 20NG posts get it
        settings.features = dataclasses.replace(settings.features, stop_words="english")
    vocabulary = fit_vocabulary(base, settings.features)
    V, M = len(vocabulary), taxonomy.n_paths
    to_leaf = F.udf(lambda labels: leaf_index["/".join(labels)], "double")  # benchmark set-up only
    base = featurize(base, vocabulary, settings.features).withColumn("label", to_leaf("true_labels")).cache()
    n_base = base.count()
    fs, ms = settings.features, settings.model
    pc_scores = score_matrix(taxonomy, "pcem")
    flat_scores = score_matrix(taxonomy, "flat-em")
    results = {
        "machine": {
            "cores": cores,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpu": platform.processor() or _cpu_name(),
        },
        "vocab_size": V,
        "n_paths": M,
        "block_size": ms.block_size,
        "partitions": partitions,
        "sizes": [],
    }
    print(f"base corpus: {n_base} documents, V={V}, M={M}, partitions={partitions}", flush=True)

    for scale in [int(s) for s in args.scales.split(",")]:
        scaled = base if scale == 1 else base.sample(withReplacement=True, fraction=float(scale), seed=scale)
        scaled = scaled.repartition(partitions)
        row = {"scale": scale}
        # --- Spark engine ---------------------------------------------------
        blocks = engine.cache_blocks(
            engine.blocks_from_labels(scaled, lookup, taxonomy.path_node_matrix(), V, ms.block_size)
        )
        t0 = time.perf_counter()
        n_blocks = blocks.count()
        row["pack_seconds"] = time.perf_counter() - t0
        reset_rss_peak()
        row["driver_rss_before_mb"] = rss_now_mb()
        t0 = time.perf_counter()
        for item in args.engine_set:
            name, value = item.split("=", 1)
            if "." in name:  # MODULE.NAME: a constant of another engine module, e.g. blocks.BLOCK_BATCH_BYTES
                module, name = name.rsplit(".", 1)
                setattr(importlib.import_module(f"{engine.__name__}.{module}"), name, int(value))
                continue
            # The pass's constants live in engine.sums (engine.passes in older engines).
            setattr(getattr(engine, "sums", None) or engine.passes, name, int(value))
        fit = engine_fit(
            engine, blocks, pc_scores, V, em=True, max_iter=args.repeats, tol=0.0, label="bench", top_k=args.top_k
        )
        row["n_docs"] = fit.n_labeled + fit.n_unlabeled
        row["n_labeled"] = fit.n_labeled
        row["spark_iteration_seconds"] = statistics.median(fit.iter_seconds)
        row["spark_iteration_all"] = fit.iter_seconds
        if args.profile:
            from em_profile import block_trip_seconds, profile_iteration

            row["profile"] = profile_iteration(sc, blocks, fit, pc_scores, V)
            row["block_trip"] = block_trip_seconds(sc, blocks, args.repeats)
            print(
                f"x{scale}: the cached blocks' trip to the Python workers alone: "
                f"{row['block_trip']['bytes_seconds']:.2f}s ({row['block_trip']['mb_per_task']:.0f} MB per task), "
                f"unpickled {row['block_trip']['unpickled_seconds']:.2f}s",
                flush=True,
            )
        if args.frame_pass:
            # The DataFrame-only pass (engine.frame_sums, what Spark Connect runs) on the same documents and
            # partitions: packed as a cached DataFrame, then the same EM iterations, right after the RDD ones.
            frame = engine.packed_label_frame(scaled, lookup, taxonomy.path_node_matrix(), ms.block_size).cache()
            frame.count()
            frame_fit = engine_fit(
                engine, frame, pc_scores, V, em=True, max_iter=args.repeats, tol=0.0, label="bench", top_k=args.top_k
            )
            row["frame_iteration_seconds"] = statistics.median(frame_fit.iter_seconds)
            row["frame_iteration_all"] = frame_fit.iter_seconds
            row["frame_max_abs_log_theta_diff"] = float(
                np.abs(frame_fit.params.log_theta() - fit.params.log_theta()).max()
            )
            alternating = alternating_passes(
                blocks, frame, fit, pc_scores, V, taxonomy.path_node_matrix().shape[1], args.repeats, args.top_k
            )
            row["alternating_passes"] = alternating
            frame.unpersist()
            print(
                f"x{scale}: DataFrame-only pass {row['frame_iteration_seconds']:.2f}s per iteration "
                f"(RDD {row['spark_iteration_seconds']:.2f}s); max |log theta| difference "
                f"{row['frame_max_abs_log_theta_diff']:.2e}; alternating single passes: RDD "
                f"{alternating['rdd_pass_seconds']:.2f}s, DataFrame {alternating['frame_pass_seconds']:.2f}s "
                f"(DataFrame / RDD, median of pairs: {alternating['frame_over_rdd_paired_median']:.2f})",
                flush=True,
            )
        row["driver_peak_rss_mb"] = rss_peak_mb()
        # What the EM loop itself adds on the driver (earlier phases of this
        # process, e.g. the scipy reference of a smaller size, stay in RSS).
        row["driver_rss_growth_mb"] = row["driver_peak_rss_mb"] - row["driver_rss_before_mb"]
        row["broadcast_bytes_per_iteration"] = len(
            pickle.dumps((fit.log_prior, fit.log_theta, pc_scores), protocol=pickle.HIGHEST_PROTOCOL)
        )
        row["pcnb_train_seconds"] = median_time(
            lambda: engine_fit(engine, blocks, pc_scores, V, em=False, label="bench-pcnb"), args.repeats
        )
        row["flatnb_train_seconds"] = median_time(
            lambda: engine_fit(engine, blocks, flat_scores, V, em=False, label="bench-flatnb"), args.repeats
        )
        print(
            f"x{scale}: {row['n_docs']} docs in {n_blocks} blocks; Spark PCEM iteration "
            f"{row['spark_iteration_seconds']:.2f}s; driver peak RSS {row['driver_peak_rss_mb']:.0f} MB",
            flush=True,
        )
        if args.engine_only:
            blocks.unpersist()
            row.update(
                engine=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(engine.__file__)))),
                top_k=args.top_k,
            )
            results["sizes"].append(row)
            with open(os.path.join(args.out_dir, "bench_engine.json"), "w") as fh:
                json.dump(results, fh, indent=2)
            continue
        # --- pyspark.ml NaiveBayes ------------------------------------------
        nb_df = scaled.select("features", "label").cache()
        nb_df.count()
        nb = NaiveBayes(smoothing=1.0, modelType="multinomial")
        row["mllib_nb_fit_seconds"] = median_time(lambda: nb.fit(nb_df), args.repeats)
        nb_df.unpersist()
        print(f"x{scale}: NaiveBayes.fit {row['mllib_nb_fit_seconds']:.2f}s", flush=True)
        # --- prediction throughput --------------------------------------------
        if not args.skip_predict:
            model = PathModel(taxonomy, vocabulary, fit.log_prior, fit.log_theta, fs, ms)
            out = os.path.join(tmp, f"pred-{scale}")
            t0 = time.perf_counter()
            model.transform(scaled.select("id", "text", "labels")).write.mode("overwrite").parquet(out)
            secs = time.perf_counter() - t0
            row["predict_docs_per_second"] = row["n_docs"] / secs
            shutil.rmtree(out, ignore_errors=True)
        # --- single-process scipy on the whole corpus -------------------------
        X_parts, N_parts, L_parts = [], [], []
        for blk in blocks.toLocalIterator():  # benchmark reference only: the corpus in one process
            X_parts.append(blk.X)
            N_parts.append(blk.node_scores)
            L_parts.append(blk.labeled)
        blocks.unpersist()
        X = sp.vstack(X_parts, format="csr")
        fixed = np.asarray(sp.vstack(N_parts) @ pc_scores.T)
        labeled = np.concatenate(L_parts)
        del X_parts, N_parts
        lp, lt = fit.log_prior, fit.log_theta
        row["scipy_iteration_seconds"] = median_time(
            lambda: scipy_iteration(X, fixed, labeled, lp, lt),  # noqa: F821 (deleted after use, below)
            args.repeats,
        )
        row["nnz"] = int(X.nnz)
        if args.profile:
            from em_profile import parallel_scipy_iteration

            parallel = parallel_scipy_iteration(X, fixed, labeled, lp, lt, cores, args.repeats)
            row["scipy_all_cores_iteration_seconds"] = parallel["wall_seconds"]
            row["scipy_all_cores_slowest_process_seconds"] = parallel["slowest_process_seconds"]
            print(
                f"x{scale}: scipy on {cores} cores at once (forked processes, no engine) "
                f"{parallel['wall_seconds']:.2f}s, slowest process {parallel['slowest_process_seconds']:.2f}s",
                flush=True,
            )
        if args.profile:
            from em_profile import profile_table, scipy_phases

            row["scipy_phases"] = scipy_phases(X, fixed, labeled, lp, lt)
            row["profile_table"] = profile_table(row["profile"], row["scipy_phases"], row["spark_iteration_seconds"])
            print(f"x{scale}: one iteration, phase by phase\n{row['profile_table']}", flush=True)
        del X, fixed, labeled
        row["spark_over_scipy"] = row["spark_iteration_seconds"] / row["scipy_iteration_seconds"]
        row["spark_over_mllib_nb"] = row["spark_iteration_seconds"] / row["mllib_nb_fit_seconds"]
        row["spark_docs_per_second_per_core"] = row["n_docs"] / row["spark_iteration_seconds"] / cores
        row["scipy_docs_per_second"] = row["n_docs"] / row["scipy_iteration_seconds"]
        print(
            f"x{scale}: scipy iteration {row['scipy_iteration_seconds']:.2f}s; "
            f"Spark/scipy {row['spark_over_scipy']:.2f}; Spark/NaiveBayes {row['spark_over_mllib_nb']:.2f}",
            flush=True,
        )
        results["sizes"].append(row)
        with open(os.path.join(args.out_dir, "bench.json"), "w") as fh:
            json.dump(results, fh, indent=2)
    if args.engine_only:
        print(json.dumps(results["sizes"], indent=2))
        shutil.rmtree(tmp, ignore_errors=True)
        return 0
    with open(os.path.join(args.out_dir, "bench.md"), "w") as fh:
        fh.write(markdown(results))
    print(markdown(results))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def markdown(results) -> str:
    m = results["machine"]
    lines = [
        f"Machine: {m['cores']} cores ({m['cpu']}), Python {m['python']}, {m['platform']}; "
        f"V={results['vocab_size']}, M={results['n_paths']} paths, block size {results['block_size']}, "
        f"{results['partitions']} partitions.",
        "",
        "| docs | Spark PCEM iteration s | scipy 1-core s | NaiveBayes.fit s | Spark/scipy | "
        "Spark/NB | docs/s/core (Spark) | PCNB train s | flat NB train s | predict docs/s | "
        "driver peak RSS MB (growth in EM) | pack s | broadcast MB/iter |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["sizes"]:
        lines.append(
            f"| {r['n_docs']:,} | {r['spark_iteration_seconds']:.2f} | {r['scipy_iteration_seconds']:.2f} | "
            f"{r['mllib_nb_fit_seconds']:.2f} | {r['spark_over_scipy']:.2f} | {r['spark_over_mllib_nb']:.2f} | "
            f"{r['spark_docs_per_second_per_core']:,.0f} | {r['pcnb_train_seconds']:.2f} | "
            f"{r['flatnb_train_seconds']:.2f} | "
            f"{r.get('predict_docs_per_second', float('nan')):,.0f} | {r['driver_peak_rss_mb']:.0f} "
            f"(+{r['driver_rss_growth_mb']:.0f}) | {r['pack_seconds']:.1f} | "
            f"{r['broadcast_bytes_per_iteration'] / 2**20:.1f} |"
        )
    for r in results["sizes"]:
        if "profile_table" in r:
            lines += ["", f"One iteration at {r['n_docs']:,} documents, phase by phase:", "", r["profile_table"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
