"""Node precision vs coverage of abstaining predictions (``pcem predict --min-probability p``) on 20NG at 1%.

For each taxonomy -- 20NG's two levels, and its dotted group names as a
variable-depth tree (comp -> comp.sys -> comp.sys.mac -> comp.sys.mac.hardware,
``dotted_labels`` of scripts/bench_noregret.py) -- a PCEM model is trained
once with the package defaults, exactly as the demo (scripts/demo_20ng.sh)
does::

    pcem train --config conf/20ng.toml --docs D --split train --label-rate 0.01 --seed 0 --model M

(skipped when ``M`` is already complete; ``--retrain`` forces it). The test
split is predicted once with every path's posterior (``top_k`` = number of
paths); the marginal probability of each node of a document's predicted path
is the sum of the posteriors of the paths through it, so the prefix kept at
any ``p`` follows without predicting again (one extra prediction at
``--check-p`` verifies this against ``PathModel.transform(min_probability=p)``).
Per ``p``, with Spark aggregations (only per-node and per-``p`` counts reach
the driver, never the documents):

* node precision = correct predicted nodes / predicted nodes (``pcem evaluate``'s micro precision),
* coverage = predicted nodes / true nodes, node recall = correct predicted nodes / true nodes,
* the share of documents given their full predicted path, a partial path, or nothing,
* hierarchical micro- and macro-F1 (``pcem evaluate``).

Writes ``--csv`` (docs/bench/abstain_curve.csv) and ``--png``
(docs/figures/abstain_precision_coverage.png). Example (~25 min on 2 cores)::

    python scripts/abstain_curve.py --docs out/20ng.jsonl.gz --out out/abstain
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

log = logging.getLogger("abstain_curve")

GRID = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
FIELDS = [
    "taxonomy",
    "min_probability",
    "node_precision",
    "node_coverage",
    "node_recall",
    "micro_f1",
    "macro_f1",
    "full_path",
    "partial_path",
    "no_path",
    "n_documents",
    "n_paths",
    "depth",
]


def dotted_documents(spark, docs_path: str, out_path: str) -> str:
    """The documents table with 20NG's dotted-name label paths (Parquet, written once, atomically)."""
    from bench_noregret import dotted_labels
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.outputs import atomic_output, read_marker
    from pcem_spark.io.rejects import split_rejects

    if read_marker(spark, out_path) is not None:
        return out_path
    good, _ = split_rejects(read_documents(spark, docs_path))
    # The executors import the helper from the shipped script, as the driver does.
    spark.sparkContext.addPyFile(os.path.join(HERE, "bench_noregret.py"))
    dotted = F.udf(dotted_labels, T.ArrayType(T.StringType()))
    table = good.select("id", "text", F.when(F.col("labels").isNotNull(), dotted("labels")).alias("labels"), "split")
    with atomic_output(spark, out_path, "documents", overwrite=True) as staged:
        table.write.parquet(staged.tmp)
        staged.info["rows"] = spark.read.parquet(staged.tmp).count()
    return out_path


def train_like_the_demo(spark, docs: str, model: str, retrain: bool) -> None:
    from pcem_spark.cli import main
    from pcem_spark.io.outputs import read_marker

    if not retrain and read_marker(spark, model) is not None:
        log.info("%s exists: not retrained (--retrain to force)", model)
        return
    argv = [
        "train",
        "--config",
        "conf/20ng.toml",
        "--docs",
        docs,
        "--split",
        "train",
        "--label-rate",
        "0.01",
        "--seed",
        "0",
        "--model",
        model,
        "--overwrite",
    ]
    log.info("pcem %s", " ".join(argv))
    rc = main(argv)
    if rc != 0:
        raise SystemExit(f"pcem train failed with exit code {rc}")


def kept_column(size_col, marginal_cols: List[str], p: float):
    """Spark column: how many leading nodes of the predicted path have a marginal >= p (the kept prefix).

    ``when(ok_1, when(ok_2, ... D ... otherwise(1)).otherwise(0)`` with ``ok_d`` = the path has a d-th
    node and its marginal (column ``marginal_cols[d-1]``) is >= p.
    """
    from pyspark.sql import functions as F

    expr = F.lit(len(marginal_cols))
    for d in range(len(marginal_cols), 0, -1):
        ok = (size_col >= d) & (F.col(marginal_cols[d - 1]) >= p)
        expr = F.when(ok, expr).otherwise(F.lit(d - 1))
    return expr


def curve(spark, model_dir: str, docs: str, tax_name: str, grid, check_p: float) -> List[Dict[str, object]]:
    from pyspark.sql import functions as F

    from pcem_spark.evaluation.metrics import evaluate_predictions
    from pcem_spark.io.documents import read_documents
    from pcem_spark.io.rejects import split_rejects
    from pcem_spark.model.path_model import PathModel

    model = PathModel.load(model_dir)
    tax = model.taxonomy
    good, _ = split_rejects(read_documents(spark, docs))
    test = good.where(F.col("split") == "test").select("id", "text", "labels").cache()
    n_test = test.count()
    t0 = time.perf_counter()
    # The (calibrated) marginal of each node of the predicted path, as --min-probability cuts at it.
    pred = model.transform(test, node_probabilities=True)
    D = tax.depth
    marg = [F.try_element_at("node_probabilities", F.lit(d)).alias(f"m{d}") for d in range(1, D + 1)]
    scored = pred.select("id", "path", "labels", *marg).cache()
    assert scored.count() == n_test
    log.info(
        "%s: %d test documents predicted with their node probabilities (%d paths) in %.1fs",
        tax_name,
        n_test,
        tax.n_paths,
        time.perf_counter() - t0,
    )
    cols = [f"m{d}" for d in range(1, D + 1)]
    rows = []
    for p in grid:
        kept = kept_column(F.size("path"), cols, p)
        cut = scored.select(
            "id", F.slice("path", 1, kept).alias("path"), "labels", kept.alias("kept"), F.size("path").alias("full")
        )
        m = evaluate_predictions(cut, tax)
        shares = cut.agg(
            F.avg((F.col("kept") == F.col("full")).cast("double")).alias("full_path"),
            F.avg(((F.col("kept") > 0) & (F.col("kept") < F.col("full"))).cast("double")).alias("partial_path"),
            F.avg((F.col("kept") == 0).cast("double")).alias("no_path"),
        ).first()
        per_node = m["per_node"].values()
        n_pred = sum(v["tp"] + v["fp"] for v in per_node)
        n_true = sum(v["tp"] + v["fn"] for v in per_node)
        n_tp = sum(v["tp"] for v in per_node)
        rows.append(
            {
                "taxonomy": tax_name,
                "min_probability": p,
                "node_precision": round(n_tp / n_pred, 4) if n_pred else "",
                "node_coverage": round(n_pred / n_true, 4),
                "node_recall": round(n_tp / n_true, 4),
                "micro_f1": round(m["micro_f1"], 4),
                "macro_f1": round(m["macro_f1"], 4),
                "full_path": round(shares["full_path"], 4),
                "partial_path": round(shares["partial_path"], 4),
                "no_path": round(shares["no_path"], 4),
                "n_documents": m["n_documents"],
                "n_paths": tax.n_paths,
                "depth": D,
            }
        )
        log.info("%s p=%.2f: %s", tax_name, p, rows[-1])
    if check_p > 0:
        # The same prefixes straight from PathModel.transform(min_probability=check_p).
        direct = model.transform(test, min_probability=check_p).select("id", F.col("path").alias("direct"))
        kept = kept_column(F.size("path"), cols, check_p)
        mine = scored.select("id", F.slice("path", 1, kept).alias("curve"))
        n_diff = mine.join(direct, "id").where(F.col("curve") != F.col("direct")).count()
        log.info(
            "%s: check at p=%g: %d of %d prefixes differ from transform(min_probability)",
            tax_name,
            check_p,
            n_diff,
            n_test,
        )
        if n_diff:
            raise SystemExit(
                f"{tax_name}: {n_diff} prefixes differ from PathModel.transform(min_probability="
                f"{check_p}); the curve would not describe pcem predict"
            )
    scored.unpersist()
    test.unpersist()
    return rows


def plot(rows, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.3))
    styles = {"20ng": ("tab:blue", "o"), "dotted": ("tab:orange", "s")}
    labels = {"20ng": "20NG, 2 levels", "dotted": "20NG dotted names, 2-5 levels"}
    for tax in sorted({r["taxonomy"] for r in rows}):
        rs = [r for r in rows if r["taxonomy"] == tax]
        color, marker = styles.get(tax, ("tab:gray", "^"))
        ax.plot(
            [r["node_coverage"] for r in rs],
            [r["node_precision"] for r in rs],
            marker=marker,
            color=color,
            label=labels.get(tax, tax),
        )
        for r in rs:
            ax.annotate(
                f"{r['min_probability']:g}",
                (r["node_coverage"], r["node_precision"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
                color=color,
            )
        ps = [r["min_probability"] for r in rs]
        bx.plot(ps, [r["full_path"] for r in rs], marker=marker, color=color, label=f"{labels.get(tax, tax)}: full")
        bx.plot(
            ps,
            [r["no_path"] for r in rs],
            marker=marker,
            color=color,
            linestyle=":",
            label=f"{labels.get(tax, tax)}: none",
        )
    ax.set_xlabel("coverage (predicted nodes / true nodes)")
    ax.set_ylabel("node precision (correct / predicted nodes)")
    ax.set_title("pcem predict --min-probability p (labels: p)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    bx.set_xlabel("min probability p")
    bx.set_ylabel("share of test documents")
    bx.set_title("full predicted path vs nothing predicted")
    bx.grid(alpha=0.3)
    bx.legend(fontsize=7)
    fig.suptitle("PCEM, 20 Newsgroups, 1% labelled (seed 0), test split", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="out/20ng.jsonl.gz")
    ap.add_argument("--out", default="out/abstain", help="models and the dotted documents table go here")
    ap.add_argument("--taxonomies", default="20ng,dotted")
    ap.add_argument("--grid", default=",".join(f"{p:g}" for p in GRID))
    ap.add_argument(
        "--check-p",
        type=float,
        default=0.8,
        help="verify the curve's prefixes against transform(min_probability) at this p (0 = skip)",
    )
    ap.add_argument("--retrain", action="store_true")
    ap.add_argument("--csv", default="docs/bench/abstain_curve.csv")
    ap.add_argument("--png", default="docs/figures/abstain_precision_coverage.png")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from pcem_spark.cli.config import load_settings
    from pcem_spark.engine.session import build_session

    spark = build_session(load_settings("conf/20ng.toml").spark)
    spark.sparkContext.setLogLevel("WARN")
    os.makedirs(args.out, exist_ok=True)
    grid = [float(p) for p in args.grid.split(",")]
    rows: List[Dict[str, object]] = []
    for tax_name in args.taxonomies.split(","):
        if tax_name == "20ng":
            docs, model = args.docs, os.path.join(args.out, "model")
        elif tax_name == "dotted":
            docs = dotted_documents(spark, args.docs, os.path.join(args.out, "20ng_dotted"))
            model = os.path.join(args.out, "model_dotted")
        else:
            raise SystemExit(f"--taxonomies: unknown taxonomy {tax_name!r} (20ng, dotted)")
        train_like_the_demo(spark, docs, model, args.retrain)
        rows += curve(spark, model, docs, tax_name, grid, args.check_p)
    os.makedirs(os.path.dirname(args.csv) or ".", exist_ok=True)
    with open(args.csv, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    plot(rows, args.png)
    log.info("written %s and %s", args.csv, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
