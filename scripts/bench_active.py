"""The labelling loop: suggested labels (``pcem suggest-labels``) against random and stratified random labels.

For each corpus (``--taxonomies``: 20NG, the dotted taxonomy, or the documents' own labels, e.g. the
subject lines of ``scripts/make_subjects.py``), start (``--starts``: ``leaf`` = 1 labelled document per
leaf, or a rate such as 0.01) and seed, on the paper protocol's split (``assign_roles``: pooled corpus,
stratified 80/20):

1. round 0: train on the start's labels (``pcem train``'s whole default pipeline,
   ``pcem_spark.ml.train``; ``--set`` fixes settings) and score the test documents;
2. each strategy adds ``--per-round`` labels (``leaf`` = as many as the taxonomy has leaves) to its own
   labelled set, taking the true labels of the documents it picks, and trains again, for ``--rounds``:

   * ``suggested``: the model's own suggestions (:func:`pcem_spark.ops.suggestions.suggest_labels`,
     ``--criterion`` / ``--batch``);
   * ``random``: uniformly among the unlabelled training documents;
   * ``stratified``: one per leaf in turn (equal per leaf; random within a leaf).

Rows go to ``OUT/results.csv`` as they finish (a rerun skips those there); ``OUT/summary.md`` has each
round's mean over seeds per strategy and how many labels the suggestions needed to reach the F1 random
labels reached at the end; ``OUT/active.png`` plots F1 against the number of labels (extra ``plots``).
Example (~2 h per corpus on 2 cores with the default pipeline)::

    python scripts/bench_active.py --docs out/20ng.jsonl.gz --out out/active --taxonomies 20ng,dotted \\
        --starts leaf,0.01 --rounds 4 --seeds 0,1,2
    python scripts/bench_active.py --docs out/subjects.jsonl.gz --out out/active_subjects \\
        --taxonomies subjects --starts leaf,0.01 --rounds 4 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from bench_results import quiet_logging, read_results, write_results  # noqa: E402

log = logging.getLogger("bench_active")

STRATEGIES = ("suggested", "random", "stratified")
FIELDS = ["taxonomy", "start", "seed", "strategy", "round", "n_labels", "micro_f1", "macro_f1", "seconds", "chosen"]


def chosen_settings(model) -> str:
    """What the default pipeline chose for one training (JSON): the cross-validated settings and their CV
    score, the stop words and the category names; the picks of a strategy change what the folds score."""
    summary = model.training_summary or {}
    tuning = summary.get("tuning") or {}
    return json.dumps(
        {
            **tuning.get("chosen", {}),
            "cv_score": tuning.get("pick_score"),
            "family": model.model_settings.family,
            "stop_words": (summary.get("stop_words") or {}).get("choice"),
            "names": (summary.get("names") or {}).get("choice"),
        },
        default=str,
    )


def labels_to_reach(n_labels: Sequence[float], f1: Sequence[float], target: float) -> Optional[float]:
    """The number of labels at which a learning curve first reaches ``target`` F1, linearly interpolated
    between its points (``n_labels`` increasing); None when it never does."""
    points = list(zip(n_labels, f1))
    for i, (n, value) in enumerate(points):
        if value >= target:
            if i == 0:
                return float(n)
            n0, v0 = points[i - 1]
            return float(n0 + (n - n0) * (target - v0) / (value - v0))
    return None


def mean_curves(rows: List[Dict]) -> Dict:
    """``{(taxonomy, start, strategy): [(round, mean labels, mean micro, mean macro, seeds)]}``."""
    by = defaultdict(list)
    for r in rows:
        by[(r["taxonomy"], r["start"], r["strategy"], int(r["round"]))].append(r)
    curves = defaultdict(list)
    for (tax, start, strategy, rnd), rs in sorted(by.items()):
        curves[(tax, start, strategy)].append(
            (
                rnd,
                sum(float(r["n_labels"]) for r in rs) / len(rs),
                sum(float(r["micro_f1"]) for r in rs) / len(rs),
                sum(float(r["macro_f1"]) for r in rs) / len(rs),
                len(rs),
            )
        )
    return curves


def summary_markdown(rows: List[Dict]) -> str:
    """The per-round table (micro / macro F1, mean over seeds) and the labels the suggestions needed."""
    curves = mean_curves(rows)
    lines = []
    for tax, start in sorted({(t, s) for t, s, _ in curves}):
        lines += [f"## {tax}, start {start}", ""]
        rounds = max(len(curves.get((tax, start, s), [])) for s in STRATEGIES)
        lines.append("| round | labels | " + " | ".join(STRATEGIES) + " | suggested - random (micro) |")
        lines.append("|---" * (len(STRATEGIES) + 3) + "|")
        for i in range(rounds):
            cells, n = [], ""
            for s in STRATEGIES:
                c = curves.get((tax, start, s), [])
                if i < len(c):
                    n = f"{c[i][1]:.0f}"
                    cells.append(f"{c[i][2]:.2f} / {c[i][3]:.2f} ({c[i][4]} seeds)")
                else:
                    cells.append("")
            sug, ran = curves.get((tax, start, "suggested"), []), curves.get((tax, start, "random"), [])
            gap = f"{sug[i][2] - ran[i][2]:+.2f}" if i < len(sug) and i < len(ran) else ""
            lines.append(f"| {i} | {n} | " + " | ".join(cells) + f" | {gap} |")
        sug, ran = curves.get((tax, start, "suggested"), []), curves.get((tax, start, "random"), [])
        if sug and ran:
            need = labels_to_reach([c[1] for c in sug], [c[2] for c in sug], ran[-1][2])
            lines += [
                "",
                f"Random labels reach {ran[-1][2]:.2f} micro F1 with {ran[-1][1]:.0f} labels; the suggestions "
                + (f"reach it with {need:.0f}." if need is not None else "do not reach it in these rounds."),
            ]
        lines.append("")
    return "\n".join(lines)


def plot(rows: List[Dict], path: str) -> None:
    """F1 (micro) against labels, one panel per corpus and start, a line per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = mean_curves(rows)
    panels = sorted({(t, s) for t, s, _ in curves})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (tax, start) in zip(axes[0], panels):
        for s in STRATEGIES:
            c = curves.get((tax, start, s))
            if c:
                ax.plot([p[1] for p in c], [p[2] for p in c], marker="o", label=s)
        ax.set_title(f"{tax}, start {start}")
        ax.set_xlabel("labelled documents")
        ax.set_ylabel("hierarchical micro F1 (%)")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="out/20ng.jsonl.gz")
    ap.add_argument("--out", default="out/active")
    ap.add_argument("--taxonomies", default="20ng", help="'dotted' = 20NG's dotted names; other = the own labels")
    ap.add_argument("--starts", default="leaf,0.01", help="'leaf' = 1 labelled document per leaf, or a rate")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--per-round", default="leaf", help="labels added per round: 'leaf' = one per leaf, or a count")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--criterion", default="margin")
    ap.add_argument("--batch", default="spread")
    ap.add_argument("--committee-size", type=int, default=4)
    ap.add_argument(
        "--density-weight", type=float, default=0.0, help="beta of exp(beta * typicality) (suggest-labels' flag)"
    )
    ap.add_argument(
        "--warm-start",
        action="store_true",
        help="each round's training warm-starts from the same strategy's previous model (pcem train --warm-start: "
        "the cross-validated settings are inherited, not chosen again on the grown labelled set)",
    )
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--config", default=None)
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    quiet_logging()

    from bench_noregret import labelled_corpus
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from pcem_spark.cli.config import load_settings
    from pcem_spark.engine.session import build_session
    from pcem_spark.evaluation.metrics import evaluate_predictions
    from pcem_spark.experiment.protocol import assign_roles
    from pcem_spark.ml import train
    from pcem_spark.model.warm import WarmStart
    from pcem_spark.ops.suggestions import Scoring, suggest_labels

    settings = load_settings(args.config, args.overrides)
    spark = build_session(settings.spark)
    spark.sparkContext.setLogLevel("WARN")
    csv_path, rows = read_results(args.out)
    done = {(r["taxonomy"], r["start"], int(r["seed"]), r["strategy"], int(r["round"])) for r in rows}

    def save():
        write_results(csv_path, rows, FIELDS)
        with open(os.path.join(args.out, "summary.md"), "w") as fh:
            fh.write(summary_markdown(rows))

    strategies = [s for s in args.strategies.split(",") if s]
    for tax_name in args.taxonomies.split(","):
        docs, taxonomy = labelled_corpus(spark, args.docs, dotted=tax_name == "dotted")
        n_leaves = taxonomy.n_paths
        per_round = n_leaves if args.per_round == "leaf" else int(args.per_round)
        for start in args.starts.split(","):
            rate = 1e-9 if start == "leaf" else float(start)  # assign_roles keeps >= 1 per leaf
            for seed in [int(s) for s in args.seeds.split(",")]:
                roled = assign_roles(docs, seed, 0.2, rate).cache()
                pool = roled.where(F.col("role") != "test").select("id", "text", "labels").cache()
                test = roled.where(F.col("role") == "test").select("id", "text", "labels").cache()
                start_ids = [r.id for r in roled.where(F.col("role") == "labeled").select("id").collect()]
                leaf = F.element_at("labels", -1)

                def fit(labelled_ids, previous=None):
                    ids = spark.createDataFrame([(i,) for i in labelled_ids], "id string").withColumn("_l", F.lit(1))
                    masked = pool.join(F.broadcast(ids), "id", "left").select(
                        "id", "text", F.when(F.col("_l") == 1, F.col("labels")).alias("labels")
                    )
                    init = WarmStart("the previous round's model", previous) if previous is not None else None
                    model, _ = train(
                        masked,
                        taxonomy,
                        settings.features,
                        settings.model,
                        tune=settings.tune,
                        seed=seed,
                        init_model=init,
                    )
                    return model, masked

                def record(strategy, rnd, labelled_ids, model, secs):
                    m = evaluate_predictions(model.transform(test), taxonomy)
                    row = {
                        "taxonomy": tax_name,
                        "start": start,
                        "seed": seed,
                        "strategy": strategy,
                        "round": rnd,
                        "n_labels": len(labelled_ids),
                        "micro_f1": round(100 * m["micro_f1"], 3),
                        "macro_f1": round(100 * m["macro_f1"], 3),
                        "seconds": round(secs, 1),
                        "chosen": chosen_settings(model),
                    }
                    rows.append(row)
                    save()
                    log.info("%s", row)

                base: Dict = {}  # round 0: the same labels for every strategy, trained once
                for strategy in strategies:
                    labelled = list(start_ids)
                    model = previous = None
                    for rnd in range(args.rounds + 1):
                        if rnd > 0:
                            if model is None and (strategy == "suggested" or args.warm_start):
                                model, _ = fit(labelled)  # resumed: refit the last round's
                            unlabelled = pool.join(
                                F.broadcast(spark.createDataFrame([(i,) for i in labelled], "id string")),
                                "id",
                                "left_anti",
                            )
                            tie = F.xxhash64("id", F.lit(seed), F.lit(rnd))
                            if strategy == "suggested":
                                picked = suggest_labels(
                                    model,
                                    unlabelled.withColumn("labels", F.lit(None).cast("array<string>")),
                                    per_round,
                                    Scoring(args.criterion, args.committee_size, args.density_weight),
                                    batch=args.batch,
                                    seed=seed,
                                )
                            elif strategy == "random":
                                picked = unlabelled.orderBy(tie).limit(per_round)
                            else:  # stratified: one per leaf in turn, random within a leaf
                                turn = F.row_number().over(Window.partitionBy(leaf).orderBy(tie))
                                picked = unlabelled.withColumn("_turn", turn).orderBy("_turn", tie).limit(per_round)
                            labelled += [r.id for r in picked.select("id").collect()]
                            previous, model = (model if args.warm_start else None), None
                        key = (tax_name, start, seed, strategy, rnd)
                        if key in done:
                            continue
                        if rnd == 0 and base:
                            model = base["model"]
                            record(strategy, rnd, labelled, model, base["seconds"])
                            continue
                        t0 = time.perf_counter()
                        model, _ = fit(labelled, previous if rnd > 0 else None)
                        secs = time.perf_counter() - t0
                        if rnd == 0:
                            base.update(model=model, seconds=secs)
                        record(strategy, rnd, labelled, model, secs)
                roled.unpersist()
    save()
    if not args.no_plot:
        try:
            plot(rows, os.path.join(args.out, "active.png"))
        except ImportError:
            log.warning("matplotlib is not installed (extra 'plots'): no figure")
    print(summary_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
