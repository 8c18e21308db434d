"""What ``pcem train``'s checkpoints cost, and what a resume saves.

1. **Cost per write**, at the sizes of docs/BENCHMARKS.md's EM benchmarks: the EM state of 20 paths x
   20,000 terms (``--nnz-20``, the non-zero parameters of a 20NG model) and of 1,000 leaves x 2^18 terms
   (``--nnz-1000``: 2,729,611, the sparse 1,000-leaf run of ``bench_large_taxonomy.py``), written the way
   ``pcem train`` writes it on a classic session (Hadoop's file system through the JVM) to a local disk;
   median of ``--repeats``. Set against an iteration's time (``--iter-20``, ``--iter-1000``: the medians
   of those benchmarks) with the default cadence (one write per 5 iterations) and with one per iteration.
2. **A resume after a kill at 80%** (``--docs``, e.g. ``out/20ng.jsonl.gz``): a default ``pcem train``
   (``--label-rate``) start to end; the same command killed (SIGKILL) after the EM iteration at 80% of the
   uninterrupted run's iterations; the same command again, which resumes. Reported: each run's wall time,
   where in the uninterrupted run (fraction of its wall time) the kill came, and the time the resume saved.

    python scripts/bench_checkpoint.py --docs out/20ng.jsonl.gz --out out/bench_checkpoint
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def _params(n_paths: int, n_terms: int, nnz: int, seed: int = 0):
    import numpy as np
    import scipy.sparse as sp

    from pcem_spark.core.parameters import PathParameters

    rng = np.random.default_rng(seed)
    rows = rng.integers(0, n_paths, nnz)
    cols = rng.integers(0, n_terms, nnz)
    ratio = sp.csr_matrix((rng.random(nnz) + 0.01, (rows, cols)), shape=(n_paths, n_terms))
    ratio.sum_duplicates()
    return PathParameters(np.log(np.full(n_paths, 1.0 / n_paths)), -np.log(np.full(n_paths, n_terms * 2.0)), ratio)


def write_cost(args) -> list:
    from pyspark.sql import SparkSession

    from pcem_spark.engine.em_checkpoint import EMState
    from pcem_spark.io.checkpoints import CheckpointStore
    from pcem_spark.io.hadoop_fs import HadoopFS
    from pcem_spark.ml.checkpointing import TrainCheckpoint

    spark = SparkSession.builder.master("local[2]").appName("bench_checkpoint").getOrCreate()
    rows = []
    for label, (paths, terms, nnz, iteration) in {
        "20 paths x 20,000 terms": (20, 20000, args.nnz_20, args.iter_20),
        "1,000 leaves x 2^18 terms": (1000, 1 << 18, args.nnz_1000, args.iter_1000),
    }.items():
        params = _params(paths, terms, nnz)
        directory = os.path.abspath(os.path.join(args.out, "store", f".m{paths}.pcem-checkpoint"))
        ck = TrainCheckpoint(CheckpointStore(HadoopFS(spark, directory), directory), {"bench": label}, resume=False)
        seconds = []
        for i in range(args.repeats):
            state = EMState(i + 1, params, [0.0] * (i + 1), [1.0] * (i + 1))
            t0 = time.perf_counter()
            ck.em = state
            ck._save()
            seconds.append(time.perf_counter() - t0)
        size = os.path.getsize(os.path.join(directory, sorted(os.listdir(directory))[-1]))
        write = statistics.median(seconds)
        rows.append(
            {
                "model": label,
                "nonzero_parameters": int(params.log_ratio.nnz),
                "file_mb": round(size / 1e6, 2),
                "write_seconds": round(write, 3),
                "iteration_seconds": iteration,
                "per_iteration_pct_every_5": round(100 * write / 5 / iteration, 2),
                "per_iteration_pct_every_1": round(100 * write / iteration, 2),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    spark.stop()
    return rows


def _train(args, model: str, kill_at: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PCEM_KILL_AT"}
    if kill_at:
        env["PCEM_KILL_AT"] = kill_at
    command = [sys.executable, "-m", "pcem_spark.cli", "train", "--docs", args.docs, "--model", model]
    command += ["--label-rate", str(args.label_rate), "--seed", "0"]
    t0 = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    with open(os.path.join(args.out, os.path.basename(model) + (".killed" if kill_at else "") + ".log"), "w") as fh:
        fh.write(proc.stderr)
    return {"returncode": proc.returncode, "seconds": round(seconds, 1), "log": proc.stderr}


def _stamp(line: str) -> float:
    day, clock = line.split(" ")[:2]
    return time.mktime(time.strptime(f"{day} {clock.split(',')[0]}", "%Y-%m-%d %H:%M:%S")) + int(clock[-3:]) / 1e3


def resume_saving(args) -> dict:
    model = os.path.join(args.out, "model")
    whole = _train(args, os.path.join(args.out, "whole"))
    assert whole["returncode"] == 0, whole["log"][-2000:]
    lines = [ln for ln in whole["log"].splitlines() if re.match(r"\d{4}-\d\d-\d\d \d", ln)]
    n_iter = int(re.search(r"(\d+) EM iterations", whole["log"]).group(1))
    at = max(1, round(0.8 * n_iter))
    first, last = _stamp(lines[0]), _stamp(lines[-1])
    # The refit's iterations are the ones after the cross-validation's choice (its folds log theirs too).
    refit = lines[next(i for i, ln in enumerate(lines) if "completed and written" in ln and "cross_validation" in ln) :]
    kill_line = next(ln for ln in refit if f"PCEM EM iteration {at}:" in ln)
    iteration_seconds = [float(m) for m in re.findall(r"PCEM EM iteration \d+: .*?, ([\d.]+)s,", "\n".join(refit))]
    write_seconds = [float(m) for m in re.findall(r"checkpoint: EM iteration \d+ written \(([\d.]+)s\)", whole["log"])]
    killed = _train(args, model, kill_at=f"checkpoint:em:{at}:done")
    resumed = _train(args, model)
    assert resumed["returncode"] == 0, resumed["log"][-2000:]
    out = {
        "docs": args.docs,
        "label_rate": args.label_rate,
        "em_iterations": n_iter,
        "em_iteration_seconds_median": statistics.median(iteration_seconds),
        "em_checkpoint_writes": len(write_seconds),
        "em_checkpoint_write_seconds_median": statistics.median(write_seconds),
        "nonzero_parameters": int(re.findall(r"(\d+) non-zero word parameters", "\n".join(refit))[-1]),
        "killed_after_iteration": at,
        "kill_at_fraction_of_the_run": round((_stamp(kill_line) - first) / (last - first), 3),
        "uninterrupted_seconds": whole["seconds"],
        "killed_run_seconds": killed["seconds"],
        "killed_returncode": killed["returncode"],
        "resumed_run_seconds": resumed["seconds"],
        "saved_seconds": round(whole["seconds"] - resumed["seconds"], 1),
        "skipped": re.findall(r"checkpoint: skipping (\w+)", resumed["log"]),
    }
    print(json.dumps(out), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out/bench_checkpoint")
    ap.add_argument("--docs", default="", help="documents for the kill-and-resume runs ('' to skip them)")
    ap.add_argument("--label-rate", type=float, default=0.01)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--nnz-20", type=int, default=250000)
    ap.add_argument("--nnz-1000", type=int, default=2729611)
    ap.add_argument("--iter-20", type=float, default=2.52, help="s per EM iteration, 20 paths (963k documents)")
    ap.add_argument("--iter-1000", type=float, default=3.69, help="s per EM iteration, 1,000 leaves (20k documents)")
    args = ap.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    result = {"write_cost": write_cost(args)}
    if args.docs:
        result["resume"] = resume_saving(args)
    with open(os.path.join(args.out, "bench_checkpoint.json"), "w") as fh:
        json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
