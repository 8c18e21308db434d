"""Where one EM iteration of the RDD pass spends its time: the per-phase profile of ``bench_em.py --profile``.

One more pass, run exactly as the EM runs it (:func:`pcem_spark.engine.sums.sufficient_stats` with the
fit's parameters), split into phases from three sources:

* the driver's own clock: the scoring tables and their broadcast, the pass's wall time, the
  M-step and log-likelihood after it;
* Spark's stage metrics (the REST API of the driver's UI: ``--profile`` turns it on), summed over
  the tasks of each stage of the pass: task deserialisation, run time (the Python worker inside
  it), result serialisation, shuffle write and fetch wait, JVM GC, and the stage's wall time;
* the same arithmetic timed in this process on a sample of the cached blocks, on one core:
  unpickling a block (what a worker does with each cached block every pass), the E-step
  (joint log-likelihoods and posteriors), the M-step sums (responsibilities x counts), and the
  whole partition function on the same blocks (the pass's own code, so the per-block work around
  the arithmetic shows), each scaled to the whole corpus; and the one-core scipy iteration's same
  phases, for the ratio. What the task's run time holds beyond these is the blocks' trip from the
  JVM's cache to the Python worker and the worker's own overhead.

Each phase is reported in seconds of wall time per iteration (task sums divided by the cores), so
the rows add up to about the iteration and each sits beside the one-core scipy time of the same
arithmetic divided by the cores (the limit two cores could reach).
"""

from __future__ import annotations

import json
import pickle
import time
import urllib.request
from typing import Dict, List

import numpy as np

STAGE_METRICS = (
    ("executorDeserializeTime", 1e-3, "task deserialisation"),
    ("executorRunTime", 1e-3, "task run time (Python worker inside)"),
    ("resultSerializationTime", 1e-3, "result serialisation"),
    ("shuffleWriteTime", 1e-9, "shuffle write"),
    ("shuffleFetchWaitTime", 1e-3, "shuffle fetch wait"),
    ("jvmGcTime", 1e-3, "JVM GC"),
)


def _rest(sc, path: str):
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{path}"
    with urllib.request.urlopen(url, timeout=30) as fh:
        return json.load(fh)


def _stages_of_group(sc, group: str) -> List[dict]:
    """The completed stage attempts of the jobs run in job group ``group``."""
    # The listener bus that feeds the REST API is asynchronous: wait for the jobs to be there.
    for _ in range(50):
        jobs = [j for j in _rest(sc, "jobs") if j.get("jobGroup") == group]
        if jobs and all(j["status"] != "RUNNING" for j in jobs):
            break
        time.sleep(0.2)
    stages = []
    for stage_id in sorted({s for j in jobs for s in j["stageIds"]}):
        for attempt in _rest(sc, f"stages/{stage_id}"):
            if attempt.get("status") == "COMPLETE":
                stages.append(attempt)
    return stages


def _stage_seconds(stage: dict) -> float:
    from datetime import datetime

    def parse(s):
        return datetime.strptime(s.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")

    return (parse(stage["completionTime"]) - parse(stage["submissionTime"])).total_seconds()


def local_phases(sample_blocks, tables, score_matrix, options) -> Dict[str, float]:
    """Seconds, in this process on one core, of each part of a worker's work on ``sample_blocks``."""
    from pcem_spark.core.estep import tables_joint_log_likelihood
    from pcem_spark.core.structure import path_scores, responsibilities

    out = {"unpickle": 0.0, "e-step": 0.0, "m-step sums": 0.0}
    for blk in sample_blocks:
        data = pickle.dumps(blk, protocol=pickle.HIGHEST_PROTOCOL)
        t0 = time.perf_counter()
        blk = pickle.loads(data)
        out["unpickle"] += time.perf_counter() - t0
        X, labeled = blk.X, blk.labeled
        t0 = time.perf_counter()
        fixed = path_scores(blk.node_scores, score_matrix)
        jll = tables_joint_log_likelihood(X, tables)
        resp = np.where(labeled[:, None], fixed, 0.0)
        post, _ = responsibilities(jll[~labeled], None)
        resp[~labeled] = options.unlabeled_weight * post
        out["e-step"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        np.asarray((X.T @ resp).T)
        resp.sum(axis=0)
        out["m-step sums"] += time.perf_counter() - t0
    return out


def scipy_phases(X, fixed, labeled, log_prior, log_theta) -> Dict[str, float]:
    """Seconds of the one-core scipy iteration's phases on the whole corpus (``bench_em``'s reference)."""
    from pcem_spark.core.estep import joint_log_likelihood
    from pcem_spark.core.structure import responsibilities

    t0 = time.perf_counter()
    jll = joint_log_likelihood(X, log_prior, log_theta)
    resp = np.where(labeled[:, None], fixed, 0.0)
    post, _ = responsibilities(jll[~labeled], None)
    resp[~labeled] = post
    e = time.perf_counter() - t0
    t0 = time.perf_counter()
    np.asarray((X.T @ resp).T)
    resp.sum(axis=0)
    return {"e-step": e, "m-step sums": time.perf_counter() - t0}


def block_trip_seconds(sc, blocks, repeats: int) -> Dict[str, float]:
    """Median seconds of two passes that do nothing but read the cached blocks, as the EM pass's tasks do.

    ``bytes``: each task receives its partitions' pickled bytes from the JVM's cache and counts them (the
    trip alone); ``unpickled``: each task also unpickles its blocks into scipy matrices (what every EM task
    does before any arithmetic). Same tasks as the EM pass (coalesced to the cores).
    """
    import statistics

    from pyspark.rdd import RDD
    from pyspark.serializers import NoOpSerializer

    cores = sc.defaultParallelism
    src = blocks.coalesce(cores) if blocks.getNumPartitions() > cores else blocks
    raw = RDD(src._jrdd, sc, NoOpSerializer())  # the same cached partitions, as their pickled batches

    def count_bytes(it):
        yield sum(len(b) for b in it)

    def count_entries(it):
        yield sum(b.X.nnz for b in it)

    out = {}
    for name, rdd, fn in (("bytes", raw, count_bytes), ("unpickled", src, count_entries)):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            sizes = rdd.mapPartitions(fn).collect()
            times.append(time.perf_counter() - t0)
        out[f"{name}_seconds"] = statistics.median(times)
        if name == "bytes":
            out["mb_per_task"] = max(sizes) / 1e6
    return out


_SHARDS: List[tuple] = []  # the row ranges a forked worker of parallel_scipy_iteration reads (inherited, not pickled)


def _shard_iteration(index: int):
    from pcem_spark import core

    X, fixed, labeled, log_prior, log_theta = _SHARDS[index]
    t0 = time.perf_counter()
    st = core.e_step(X, fixed, labeled, log_prior, log_theta, core.EStepOptions(use_unlabeled=True))
    return st.word_counts, st.path_totals, st.loglik, time.perf_counter() - t0


def parallel_scipy_iteration(X, fixed, labeled, log_prior, log_theta, workers: int, repeats: int) -> Dict:
    """The one-core scipy iteration split over ``workers`` forked processes that run at once.

    What ``workers`` cores can do with no engine at all: each process runs the E-step and M-step sums of
    one contiguous row range (the corpus is cut before the fork, so no process copies or pickles its rows),
    the parent adds the sums and runs the M-step. Set against the one-core time, it measures how far the
    cores slow each other down (a shared memory bus and last-level cache) -- the floor under any
    ``local[workers]`` engine's iteration. Returns the median wall seconds and each process's own median.
    """
    import multiprocessing
    import statistics

    from pcem_spark import core

    bounds = np.linspace(0, X.shape[0], workers + 1).astype(int)
    _SHARDS[:] = [(X[a:b], fixed[a:b], labeled[a:b], log_prior, log_theta) for a, b in zip(bounds[:-1], bounds[1:])]
    walls, own = [], []
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            pool.map(_shard_iteration, range(workers))  # warm the forked workers' imports
            for _ in range(repeats):
                t0 = time.perf_counter()
                parts = pool.map(_shard_iteration, range(workers), chunksize=1)
                word_counts = sum(p[0] for p in parts)
                totals = sum(p[1] for p in parts)
                core.log_parameters(word_counts, totals, 1.0)
                walls.append(time.perf_counter() - t0)
                own.append(max(p[3] for p in parts))
    finally:
        _SHARDS.clear()
    return {"wall_seconds": statistics.median(walls), "slowest_process_seconds": statistics.median(own)}


def profile_iteration(sc, blocks, fit, score_matrix, vocab_size: int, sample_docs: int = 100_000, options=None) -> Dict:
    """The per-phase profile of one pass from ``fit``'s parameters over the cached ``blocks`` (an RDD).

    ``options`` (:class:`pcem_spark.engine.sums.PassOptions`, default: the exact E-step): the fit's pass
    options. With a truncated posterior (``top_k``) or sparse sums, the dense E-step / M-step split of
    :func:`local_phases` is not what a worker runs (and a dense (V, M) product would not fit), so only
    the partition function is timed on the sample.
    """
    from pcem_spark.core.estep import scoring_tables
    from pcem_spark.core.parameters import sparse_log_parameters, sparse_log_prior_density
    from pcem_spark.engine.sums import PassOptions, sufficient_stats, sums_layout

    cores = sc.defaultParallelism
    options = options or PassOptions(use_unlabeled=True)
    split_arithmetic = options.top_k == 0 and not sums_layout(score_matrix.shape[0], vocab_size, options.dtype)[0]
    params = fit.params
    phases: Dict[str, float] = {}
    t0 = time.perf_counter()
    tables = scoring_tables(params, options.dtype)
    phases["driver: scoring tables"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    bc = sc.broadcast(tables)
    phases["driver: broadcast (pickle and store)"] = time.perf_counter() - t0
    bc.unpersist()
    static_bc = sc.broadcast((score_matrix, None))
    group = f"pcem-profile-{time.time_ns()}"
    sc.setJobGroup(group, "EM profile")
    t0 = time.perf_counter()
    wc, totals, _, _, _ = sufficient_stats(blocks, params, score_matrix, vocab_size, options, static_bc=static_bc)
    pass_wall = time.perf_counter() - t0
    sc.setLocalProperty("spark.jobGroup.id", None)
    static_bc.unpersist()
    t0 = time.perf_counter()
    sparse_log_parameters(wc, totals, fit.smoothing, None, fit.prior_smoothing)
    sparse_log_prior_density(params, fit.smoothing, fit.prior_smoothing)
    phases["driver: M-step and log-likelihood"] = time.perf_counter() - t0
    stages = _stages_of_group(sc, group)
    stage_wall = sum(_stage_seconds(s) for s in stages)
    tasks: Dict[str, float] = {}
    for key, scale, name in STAGE_METRICS:
        tasks[name] = sum(float(s.get(key, 0) or 0) * scale for s in stages) / cores
    # The sample the local timings run on, scaled to the corpus.
    n_docs = fit.n_labeled + fit.n_unlabeled
    sample, seen = [], 0
    for blk in blocks.toLocalIterator():  # benchmark only: a bounded sample of blocks in this process
        sample.append(blk)
        seen += blk.X.shape[0]
        if seen >= sample_docs:
            break
    local = local_phases(sample, tables, score_matrix, options) if split_arithmetic else {}
    # The partition function itself on the same (unpickled) sample: the E-step and sums above plus the
    # per-block work around them (row slices, path scores, the log-likelihood, accumulation, the chunks).
    from pcem_spark.engine.sums import local_sufficient_stats

    t0 = time.perf_counter()
    local_sufficient_stats(sample, params, score_matrix, vocab_size, options)
    local["partition function"] = time.perf_counter() - t0 - phases["driver: scoring tables"]
    local = {k: v * n_docs / seen / cores for k, v in local.items()}
    return {
        "pass_wall_seconds": pass_wall,
        "stages": [
            {"stage": s["stageId"], "tasks": s["numTasks"], "wall_seconds": _stage_seconds(s), "name": s["name"]}
            for s in stages
        ],
        "driver": phases,
        "driver_outside_stages_seconds": pass_wall - stage_wall,
        "task_metrics_per_core_seconds": tasks,
        "worker_arithmetic_per_core_seconds": local,
        "sample_docs": seen,
        "cores": cores,
    }


def profile_table(profile: Dict, scipy: Dict[str, float], iteration_seconds: float) -> str:
    """Markdown: each phase's seconds per iteration beside the one-core scipy time of the same arithmetic."""
    cores = profile["cores"]
    task = profile["task_metrics_per_core_seconds"]
    local = profile["worker_arithmetic_per_core_seconds"]
    run = task["task run time (Python worker inside)"]
    arithmetic = local.get("e-step", 0.0) + local.get("m-step sums", 0.0)
    if "e-step" in local:
        worker_rows = [
            ("worker: unpickling the cached blocks", local["unpickle"], None),
            ("worker: E-step arithmetic", local["e-step"], scipy["e-step"] / cores),
            ("worker: M-step sums", local["m-step sums"], scipy["m-step sums"] / cores),
            (
                "worker: the partition function's other work (row slices, path scores, log-likelihood, accumulation)",
                local["partition function"] - arithmetic,
                None,
            ),
        ]
        outside = run - local["unpickle"] - local["partition function"]
    else:  # a truncated or sparse E-step: the partition function as a whole against the whole scipy iteration
        worker_rows = [("worker: the partition function (E-step and sums)", local["partition function"], None)]
        outside = run - local["partition function"]
    rows = [
        (
            "driver: scoring tables + broadcast",
            profile["driver"]["driver: scoring tables"] + profile["driver"]["driver: broadcast (pickle and store)"],
            None,
        ),
        (
            "task launch and scheduling (stage wall - task time)",
            sum(s["wall_seconds"] for s in profile["stages"])
            - run
            - task["task deserialisation"]
            - task["result serialisation"],
            None,
        ),
        ("task deserialisation", task["task deserialisation"], None),
        *worker_rows,
        (
            "worker: the rest of the task (blocks streamed from the JVM cache, Python worker, reduce side)",
            outside,
            None,
        ),
        ("result serialisation", task["result serialisation"], None),
        ("shuffle write + fetch wait", task["shuffle write"] + task["shuffle fetch wait"], None),
        ("driver: collect and assemble (outside the stages)", profile["driver_outside_stages_seconds"], None),
        ("driver: M-step and log-likelihood", profile["driver"]["driver: M-step and log-likelihood"], None),
    ]
    lines = [
        f"| phase | seconds per iteration | one-core scipy / {cores} |",
        "|---|---|---|",
    ]
    for name, secs, ref in rows:
        lines.append(f"| {name} | {secs:.3f} | {'' if ref is None else f'{ref:.3f}'} |")
    lines.append(
        f"| **the iteration (median of the timed ones)** | **{iteration_seconds:.3f}** | "
        f"{sum(scipy.values()) / cores:.3f} |"
    )
    return "\n".join(lines)


__all__ = [
    "block_trip_seconds",
    "parallel_scipy_iteration",
    "profile_iteration",
    "profile_table",
    "scipy_phases",
    "local_phases",
    "STAGE_METRICS",
]
