"""What reading a saved model costs: ``PathModel.load`` of an unchanged model, median of repeats.

A synthetic model of ``--paths`` paths (a flat taxonomy of that many leaves
under ``--tops`` top-level nodes) over ``--vocab`` terms, each path with
``--nnz`` non-zero word parameters, is saved once to ``OUT/model`` (kept
between runs, so two trees load the very same files). Then ``PathModel.load``
runs ``--repeats`` times after ``--warmup`` untimed loads; the SparkSession is
started before the clock.

To compare two versions of pcem-spark on the same model, run the script once
per tree, the other tree first on ``PYTHONPATH``::

    python scripts/bench_model_load.py --out out/bench_load --label today
    PYTHONPATH=/path/to/other/tree python scripts/bench_model_load.py --out out/bench_load --label before

Each run appends a row to ``OUT/bench_model_load.md`` (median, min and max
seconds, the model's shape and the pcem-spark version's directory).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def _model(paths: int, tops: int, vocab: int, nnz: int, seed: int = 0):
    import numpy as np
    import scipy.sparse as sp

    from pcem_spark.core.parameters import PathParameters
    from pcem_spark.core.taxonomy import Taxonomy
    from pcem_spark.engine.features import FeatureSettings
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.settings import ModelSettings

    rng = np.random.default_rng(seed)
    children = {"ROOT": [f"t{t}" for t in range(tops)]}
    for j in range(paths):
        children.setdefault(f"t{j % tops}", []).append(f"leaf{j}")
    taxonomy = Taxonomy(children, root="ROOT")
    rows = np.repeat(np.arange(paths), nnz)
    cols = np.concatenate([rng.choice(vocab, size=nnz, replace=False) for _ in range(paths)])
    ratio = sp.csr_matrix((rng.random(paths * nnz) * 3.0, (rows, cols)), shape=(paths, vocab))
    params = PathParameters(np.log(np.full(paths, 1.0 / paths)), np.full(paths, -np.log(vocab)), ratio)
    settings = ModelSettings(method="pcnb", smoothing=1.0, unlabeled_weight=1.0, path_weight=1.0)
    return PathModel(taxonomy, [f"w{i}" for i in range(vocab)], None, params, FeatureSettings(), settings)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--paths", type=int, default=20)
    ap.add_argument("--tops", type=int, default=7)
    ap.add_argument("--vocab", type=int, default=20000)
    ap.add_argument("--nnz", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)

    import pcem_spark
    from pcem_spark.engine.session import SparkSettings, build_session
    from pcem_spark.model.path_model import PathModel

    spark = build_session(SparkSettings(master=args.master, app_name="pcem-bench-model-load", conf={}))
    spark.sparkContext.setLogLevel("ERROR")
    os.makedirs(args.out, exist_ok=True)
    model_dir = os.path.join(args.out, f"model-{args.paths}x{args.vocab}-{args.nnz}")
    if not os.path.exists(model_dir):
        _model(args.paths, args.tops, args.vocab, args.nnz).save(model_dir)
    for _ in range(args.warmup):
        PathModel.load(model_dir)
    seconds = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        loaded = PathModel.load(model_dir)
        seconds.append(time.perf_counter() - t0)
    assert loaded.params.shape == (args.paths, args.vocab)
    row = (
        f"| {args.label} | {args.paths} x {args.vocab:,} ({args.paths * args.nnz:,} non-zeros) | "
        f"{statistics.median(seconds):.3f} | {min(seconds):.3f} | {max(seconds):.3f} | {args.repeats} | "
        f"{os.path.dirname(os.path.dirname(os.path.abspath(pcem_spark.__file__)))} |"
    )
    table = os.path.join(args.out, "bench_model_load.md")
    if not os.path.exists(table):
        with open(table, "w", encoding="utf-8") as fh:
            fh.write("| tree | model | median s | min s | max s | repeats | code |\n|---|---|---|---|---|---|---|\n")
    with open(table, "a", encoding="utf-8") as fh:
        fh.write(row + "\n")
    print(row)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
