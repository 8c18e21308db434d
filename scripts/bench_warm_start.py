"""Warm-start benchmark: training on "today's" batch from "yesterday's" model (issue 13, part 2).

20 Newsgroups' train split is cut into two halves by id (sorted by the MD5 of
the id: a fixed, label-blind split). For each label rate and seed:

* ``A``      -- ``pcem train`` on half 1 (``--label-rate r --seed s``: r of each
  leaf's documents keep their labels, stratified);
* ``cold``   -- ``pcem train`` on half 2, same rate and seed, from naive Bayes;
* ``warm``   -- the same command with ``--init-model A``;
* ``warm-nolabels`` -- half 2 with every label removed, ``--init-model A``
  (EM over unlabelled documents only, started from A).

Every model is scored by ``pcem predict`` + ``pcem evaluate`` on the 20NG test
split. Fixed numeric settings (``--set model.smoothing=0.1
model.unlabeled_weight=0.3 model.path_weight=0``, the other settings at
their defaults) so the cross-validation of "auto" settings does not dominate
the time and cold / warm runs use the same settings. Commands run in one
Python process (one SparkSession, no JVM start per command); "total seconds"
is the wall time of the ``pcem train`` call (reading, vocabulary,
featurisation, naive Bayes pass, EM, save), "EM seconds" the sum of the EM
iterations' times from the training summary.

Rows are appended to ``OUT/results.csv`` as they finish (a rerun skips rows
already there); ``OUT/summary.md`` has the means and standard deviations over
seeds. Example::

    python scripts/bench_warm_start.py --docs out/20ng.jsonl.gz --out out/warm --rates 0.01 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import os
import statistics
import sys
import time
from typing import Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

FIELDS = [
    "rate",
    "seed",
    "run",
    "n_labeled",
    "n_unlabeled",
    "n_iter",
    "converged",
    "em_seconds",
    "train_seconds",
    "micro_f1",
    "macro_f1",
    "terms_kept",
    "terms_dropped",
    "terms_new",
]
SETTINGS = ["--set", "model.smoothing=0.1", "--set", "model.unlabeled_weight=0.3", "--set", "model.path_weight=0"]
RUNS = ("A", "cold", "warm", "warm-nolabels")


def split_halves(docs_path: str, out_dir: str) -> Dict[str, str]:
    """half1 / half2 / half2 without labels / test as JSON Lines (written once)."""
    paths = {k: os.path.join(out_dir, f"{k}.jsonl.gz") for k in ("half1", "half2", "half2_nolabels", "test")}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    train, test = [], []
    with gzip.open(docs_path, "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            (train if doc.get("split") == "train" else test).append(doc)
    train.sort(key=lambda d: hashlib.md5(d["id"].encode("utf-8")).hexdigest())
    half = len(train) // 2
    parts = {
        "half1": train[:half],
        "half2": train[half:],
        "test": test,
        "half2_nolabels": [{**d, "labels": None} for d in train[half:]],
    }
    for name, rows in parts.items():
        tmp = paths[name] + ".tmp"
        with gzip.open(tmp, "wt", encoding="utf-8") as fh:
            for d in rows:
                fh.write(json.dumps(d) + "\n")
        os.replace(tmp, paths[name])
    print(f"halves: {half} + {len(train) - half} training documents, {len(test)} test documents", file=sys.stderr)
    return paths


def done_rows(csv_path: str) -> List[dict]:
    if not os.path.exists(csv_path):
        return []
    with open(csv_path) as fh:
        return list(csv.DictReader(fh))


def append_row(csv_path: str, row: dict) -> None:
    new = not os.path.exists(csv_path)
    with open(csv_path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)


def run_one(main, paths, out_dir, rate, seed, run) -> dict:
    from pcem_spark.model.path_model import PathModel

    tag = f"r{rate:g}_s{seed}"
    model = os.path.join(out_dir, "models", f"{run}_{tag}")
    a_model = os.path.join(out_dir, "models", f"A_{tag}")
    args = ["train", "--model", model, "--overwrite", *SETTINGS, "--seed", str(seed)]
    if run == "A":
        args += ["--docs", paths["half1"], "--label-rate", str(rate)]
    elif run == "cold":
        args += ["--docs", paths["half2"], "--label-rate", str(rate)]
    elif run == "warm":
        args += ["--docs", paths["half2"], "--label-rate", str(rate), "--init-model", a_model]
    else:
        args += ["--docs", paths["half2_nolabels"], "--init-model", a_model]
    t0 = time.perf_counter()
    rc = main(args)
    train_seconds = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"pcem {' '.join(args)} exited {rc}")
    pred = os.path.join(out_dir, "predictions", f"{run}_{tag}")
    metrics = os.path.join(out_dir, "metrics", f"{run}_{tag}.json")
    os.makedirs(os.path.dirname(metrics), exist_ok=True)
    if main(["predict", "--model", model, "--docs", paths["test"], "--output", pred, "--overwrite"]) != 0:
        raise RuntimeError(f"predict {run} {tag} failed")
    if main(["evaluate", "--predictions", pred, "--model", model, "--output", metrics, "--overwrite"]) != 0:
        raise RuntimeError(f"evaluate {run} {tag} failed")
    with open(metrics) as fh:
        m = json.load(fh)
    summary = PathModel.load(model).training_summary
    ws = summary.get("warm_start") or {}
    return {
        "rate": rate,
        "seed": seed,
        "run": run,
        "n_labeled": summary["n_labeled"],
        "n_unlabeled": summary["n_unlabeled"],
        "n_iter": summary["n_iter"],
        "converged": summary["converged"],
        "em_seconds": round(sum(summary["iter_seconds"]), 2),
        "train_seconds": round(train_seconds, 2),
        "micro_f1": round(100 * m["micro_f1"], 2),
        "macro_f1": round(100 * m["macro_f1"], 2),
        "terms_kept": ws.get("terms_kept", ""),
        "terms_dropped": ws.get("terms_dropped", ""),
        "terms_new": ws.get("terms_new", ""),
    }


def summarise(rows: List[dict]) -> str:
    def stat(values):
        values = [float(v) for v in values]
        if len(values) < 2:
            return f"{values[0]:.2f}" if values else "-"
        return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"

    out = [
        "| rate | run | seeds | labelled | EM iterations | EM seconds | train seconds | micro-F1 | macro-F1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rate in sorted({float(r["rate"]) for r in rows}):
        for run in RUNS:
            sel = [r for r in rows if float(r["rate"]) == rate and r["run"] == run]
            if not sel:
                continue
            out.append(
                f"| {rate:g} | {run} | {len(sel)} | {stat(r['n_labeled'] for r in sel)} | "
                f"{stat(r['n_iter'] for r in sel)} | {stat(r['em_seconds'] for r in sel)} | "
                f"{stat(r['train_seconds'] for r in sel)} | {stat(r['micro_f1'] for r in sel)} | "
                f"{stat(r['macro_f1'] for r in sel)} |"
            )
    return "\n".join(out) + "\n"


def main_bench(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="out/20ng.jsonl.gz")
    ap.add_argument("--out", default="out/warm")
    ap.add_argument("--rates", default="0.01")
    ap.add_argument("--seeds", default="0,1,2")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    paths = split_halves(args.docs, args.out)
    from pcem_spark.cli import main

    csv_path = os.path.join(args.out, "results.csv")
    have = {(float(r["rate"]), int(r["seed"]), r["run"]) for r in done_rows(csv_path)}
    for rate in [float(x) for x in args.rates.split(",")]:
        for seed in [int(x) for x in args.seeds.split(",")]:
            for run in RUNS:
                if (rate, seed, run) in have:
                    continue
                row = run_one(main, paths, args.out, rate, seed, run)
                append_row(csv_path, row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    table = summarise(done_rows(csv_path))
    with open(os.path.join(args.out, "summary.md"), "w") as fh:
        fh.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main_bench())
