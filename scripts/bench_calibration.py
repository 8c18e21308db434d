"""Calibration of the predicted probabilities: reliability before and after, on the test split.

On the protocol split of ``bench_noregret.py`` (``assign_roles``: 20% test, the
rest labelled at each ``--rates`` value), for each seed the default model is
trained as ``pcem train`` trains it (``pcem_spark.ml.training.train``: stop
words, vocabulary, the automatic CV, the refit, and the calibration fitted
on out-of-fold predictions of the training documents only). The test
documents are then predicted with every path's probability (``top_k`` = all
paths), once with the model's temperature and once uncalibrated (T = 1).

The events a threshold acts on are the real nodes of each predicted path:
a node's probability is its marginal (the mass of the paths through it), it
is correct when the true path passes through it. Reported per (corpus, rate,
seed, calibration):

* ``ece`` -- expected calibration error of those events (15 equal bins);
* for each P in ``--thresholds``: node precision and coverage of
  ``--min-probability P`` (the kept prefix: the deepest node whose marginal is
  >= P and its ancestors; coverage = kept nodes / predicted-path nodes);
* micro / macro F1 of the full paths (the same calibrated or not: tested).

Every probability of a documents' predicted path is read from the
``node_probabilities`` column (``pcem predict --node-probabilities``).

The candidates, all fitted on the same out-of-fold predictions at training:
``none`` (T = 1, the raw posterior), ``temperature`` (the fitted T alone) and
``temperature+isotonic`` (the product's default: T, then the monotone map of
node marginals to precision, ``core.calibration.isotonic_map``); the test
events come from ``node_probabilities``. Two more numbers per run say how far any calibration fitted on that many
labelled documents can be trusted:

* ``spread`` -- the training summary's ``probability_spread``: how far the
  calibrated probabilities move when the calibration is refitted on a
  bootstrap of its out-of-fold documents (``core.calibration_spread``);
* ``floor`` (``--floor-draws``) -- the test ECE of the product's calibration
  procedure (temperature, then the cross-fitted map) fitted on as many
  *test* documents as the model had out-of-fold ones, scored by the final
  model itself, and measured on the other test documents; the mean over
  draws. No fold-model mismatch and no selection: only the noise of that
  many labels. A calibration fitted on n labelled documents cannot be
  expected to do better than this floor. Measured only while the test
  split holds at least four times n documents (at 1% labelled, not at 10%).

One JSON line per run, and ``OUT/bench_calibration.md``::

    python scripts/bench_calibration.py --docs out/20ng.jsonl.gz --rates 0.01,0.1 --seeds 0,1,2
    python scripts/bench_calibration.py --docs out/20ng.jsonl.gz --dotted --rates 0.01,0.1
    python scripts/bench_calibration.py --docs out/questions.jsonl.gz --rates 0.01,0.1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def threshold_table(pred_rows, probability_of, thresholds):
    """Node precision and coverage of ``--min-probability P`` for each P (prefix semantics, as the product)."""
    out = {}
    for P in thresholds:
        kept = right = total = 0
        for row, marg in zip(pred_rows, probability_of):
            path, labels = list(row["path"]), list(row["labels"])
            keep = 0
            for d in range(len(path)):
                if marg[d] >= P:
                    keep = d + 1
                else:
                    break
            total += len(path)
            kept += keep
            right += sum(1 for d in range(keep) if labels[: d + 1] == path[: d + 1])
        out[str(P)] = {"precision": right / kept if kept else float("nan"), "coverage": kept / total}
    return out


def per_row(pred_rows, probs):
    """Split the flat event probabilities back into one list per row (one per node of its path)."""
    out, i = [], 0
    for row in pred_rows:
        n = len(row["path"])
        out.append(list(probs[i : i + n]))
        i += n
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", default="out/20ng.jsonl.gz", help="labelled documents (JSON Lines)")
    ap.add_argument("--dotted", action="store_true", help="20NG's dotted-name taxonomy (depth 2-5)")
    ap.add_argument("--rates", default="0.01,0.1", help="shares of the training documents labelled")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--thresholds", default="0.7,0.8,0.9,0.95")
    ap.add_argument("--config", default=None, help="settings file layered over the package defaults")
    ap.add_argument("--out", default="out/bench_calibration")
    ap.add_argument(
        "--floor-draws", type=int, default=20, help="draws of the noise floor (0 = not measured, see the docstring)"
    )
    args = ap.parse_args(argv)
    thresholds = [float(x) for x in args.thresholds.split(",")]
    os.makedirs(args.out, exist_ok=True)

    from pyspark.sql import functions as F

    from pcem_spark.cli.config import load_settings
    from pcem_spark.core.calibration import expected_calibration_error, map_from_record
    from pcem_spark.engine.session import build_session
    from pcem_spark.evaluation.metrics import evaluate_predictions
    from pcem_spark.experiment.protocol import assign_roles
    from pcem_spark.ml import PathEM
    from pcem_spark.ml.training import TrainOptions, train

    settings = load_settings(args.config, [])
    spark = build_session(settings.spark)
    spark.sparkContext.setLogLevel("WARN")
    from bench_noregret import labelled_corpus

    docs, taxonomy = labelled_corpus(spark, args.docs, args.dotted)
    corpus = os.path.basename(args.docs).split(".")[0] + ("-dotted" if args.dotted else "")
    rows = []
    for rate in [float(r) for r in args.rates.split(",")]:
        for seed in [int(s) for s in args.seeds.split(",")]:
            roled = assign_roles(docs, seed, 0.2, rate).cache()
            train_docs = roled.where(F.col("role") != "test").select(
                "id", "text", F.when(F.col("role") == "labeled", F.col("labels")).alias("labels")
            )
            test = roled.where(F.col("role") == "test").select("id", "text", "labels")
            t0 = time.perf_counter()
            model, _ = train(
                train_docs,
                taxonomy,
                settings.features,
                settings.model,
                TrainOptions(tune=settings.tune, seed=seed, estimator_class=PathEM),
            )
            train_seconds = time.perf_counter() - t0
            summary = model.training_summary.get("calibration", {})
            temperature, probability_map = model.temperature, model.probability_map
            results = {}
            candidates = [("none", None, None), ("temperature", temperature, None)]
            # Every map the calibration fitted (the training summary keeps them all); "default" = the chosen one.
            for kind, m in summary.get("maps", {}).items():
                candidates.append((f"temperature+{kind}", temperature, map_from_record(m)))
            candidates.append(("default", temperature, probability_map))
            for name, t, mapping in candidates:
                model.temperature, model.probability_map = t, mapping
                pred = model.transform(test, node_probabilities=True).cache()
                pred_rows = pred.select("path", "labels", "node_probabilities").collect()
                probs = np.array([p for r in pred_rows for p in r["node_probabilities"]])
                correct = np.array(
                    [
                        list(r["labels"])[: d + 1] == list(r["path"])[: d + 1]
                        for r in pred_rows
                        for d in range(len(r["path"]))
                    ]
                )
                f1 = evaluate_predictions(pred, taxonomy)
                results[name] = {
                    "ece": expected_calibration_error(probs, correct),
                    "thresholds": threshold_table(pred_rows, per_row(pred_rows, probs), thresholds),
                    "micro_f1": f1["micro_f1"],
                    "macro_f1": f1["macro_f1"],
                }
                pred.unpersist()
            model.temperature, model.probability_map = temperature, probability_map
            n_fit = int(summary.get("documents") or 0)
            floor = noise_floor(model, test, taxonomy, n_fit, args.floor_draws, seed) if n_fit else None
            row = {
                "corpus": corpus,
                "rate": rate,
                "seed": seed,
                "temperature": temperature,
                "oof_ece": [summary.get(k) for k in ("ece_uncalibrated", "ece_temperature", "ece_calibrated")],
                "chosen": summary.get("method"),
                "map_held_out_log_loss": summary.get("map_held_out_log_loss"),
                "calibration_seconds": summary.get("seconds"),
                "train_seconds": round(train_seconds, 1),
                "test_events": int(correct.size),
                "out_of_fold_documents": n_fit,
                "probability_spread": summary.get("probability_spread"),
                "floor_ece": floor,
                "results": results,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            roled.unpersist()
    with open(os.path.join(args.out, f"bench_calibration_{corpus}.json"), "w") as fh:
        json.dump(rows, fh, indent=2)
    with open(os.path.join(args.out, f"bench_calibration_{corpus}.md"), "w") as fh:
        fh.write(markdown(rows, thresholds))
    print(markdown(rows, thresholds))
    spark.stop()
    return 0


NAMES = (
    "none",
    "temperature",
    "temperature+isotonic",
    "temperature+logistic",
    "temperature+logistic-depth",
    "default",
)


def test_scores(model, test, taxonomy):
    """(OutOfFold of the test documents under the final model: every path's joint log-likelihood, sorted, and
    the true path; path_nodes). A benchmark of a few thousand documents: their term counts come to the driver."""
    import scipy.sparse as sp

    from pcem_spark.core.calibration import out_of_fold
    from pcem_spark.core.decoding import block_scores
    from pcem_spark.core.estep import length_normalize, scoring_tables
    from pcem_spark.core.path_nodes import path_node_table
    from pcem_spark.engine.features import featurize

    lookup = taxonomy.path_lookup()
    rows = featurize(test, model.vocabulary, model.feature_settings).select("features", "labels").collect()
    indptr = np.cumsum([0] + [len(r["features"].indices) for r in rows])
    X = sp.csr_matrix(
        (
            np.concatenate([r["features"].values for r in rows]),
            np.concatenate([r["features"].indices for r in rows]),
            indptr,
        ),
        shape=(len(rows), len(model.vocabulary)),
    )
    settings = model.model_settings
    X = length_normalize(X, settings.doc_length) if settings.doc_length > 0 else X
    jll = np.vstack([chunk for _, chunk in block_scores(X, scoring_tables(model.params, settings.parameter_dtype))])
    true = np.array([lookup[tuple(r["labels"])] for r in rows])
    return out_of_fold(jll, true), path_node_table(taxonomy.path_node_matrix(sparse=True), taxonomy.is_dummy)


def noise_floor(model, test, taxonomy, n_fit: int, draws: int, seed: int):
    """Mean test ECE of the calibration procedure fitted on ``n_fit`` random test documents (scored by the final
    model) and measured on the others, over ``draws`` draws: the noise of ``n_fit`` labels alone."""
    from pcem_spark.core.calibration import (
        MAP_KINDS,
        OutOfFold,
        choose_map,
        expected_calibration_error,
        fit_temperature,
        predicted_node_events,
    )
    from pcem_spark.core.calibration_spread import calibrated_node_matrix

    if draws <= 0:
        return None
    scored, path_nodes = test_scores(model, test, taxonomy)
    if scored.n < 4 * n_fit:
        # fewer test documents left to measure on than three times those fitted on: too noisy an ECE to compare
        return None
    rng = np.random.default_rng(1000 + seed)
    eces = []
    for _ in range(draws):
        order = rng.permutation(scored.n)
        fit_on, held = (OutOfFold(*(a[order[part]] for a in scored)) for part in (slice(0, n_fit), slice(n_fit, None)))
        t = fit_temperature(fit_on)
        p, c, r, d = predicted_node_events(fit_on, path_nodes, t, with_rows=True, with_depth=True)
        kind, maps, _ = choose_map(p, c, r, kinds=MAP_KINDS, depth=d)
        _, correct = predicted_node_events(held, path_nodes, t)
        mapped = calibrated_node_matrix(held, path_nodes, t, maps[kind])
        # the same events in the same (depth-major) order as predicted_node_events
        probability = mapped.T[~np.isnan(mapped.T)]
        eces.append(expected_calibration_error(probability, correct))
    return round(float(np.mean(eces)), 6)


def markdown(rows, thresholds) -> str:
    """Mean over seeds per (corpus, rate, calibration): ECE and precision / coverage at each P."""
    head = "| corpus | rate | calibration | T | test ECE | " + " | ".join(
        f"P={p}: precision / coverage" for p in thresholds
    )
    lines = [head + " |", "|" + "---|" * (5 + len(thresholds))]
    keys = sorted({(r["corpus"], r["rate"]) for r in rows})
    for corpus, rate in keys:
        group = [r for r in rows if (r["corpus"], r["rate"]) == (corpus, rate)]
        for name in [n for n in NAMES if all(n in r["results"] for r in group)]:
            ece = np.mean([r["results"][name]["ece"] for r in group])
            t = "1" if name == "none" else f"{np.mean([r['temperature'] or 1.0 for r in group]):.2f}"
            cells = []
            for p in thresholds:
                prec = np.nanmean([r["results"][name]["thresholds"][str(p)]["precision"] for r in group])
                cov = np.mean([r["results"][name]["thresholds"][str(p)]["coverage"] for r in group])
                cells.append(f"{100 * prec:.1f}% / {100 * cov:.1f}%")
            if name == "default":  # which map the cross-fit chose, per seed
                name = "default (" + ", ".join(r.get("chosen", "?").split("+")[-1] for r in group) + ")"
            lines.append(f"| {corpus} | {rate:g} | {name} | {t} | {ece:.3f} | " + " | ".join(cells) + " |")
    lines += ["", "| corpus | rate | out-of-fold documents | default's test ECE | spread (training summary) | floor |"]
    lines.append("|---|---|---|---|---|---|")
    for corpus, rate in keys:
        group = [r for r in rows if (r["corpus"], r["rate"]) == (corpus, rate)]

        def mean(key, fmt=".3f", group=group):
            values = [r.get(key) for r in group]
            return format(np.mean(values), fmt) if all(v is not None for v in values) else "-"

        ece = np.mean([r["results"]["default"]["ece"] for r in group])
        lines.append(
            f"| {corpus} | {rate:g} | {mean('out_of_fold_documents', '.0f')} | {ece:.3f} | "
            f"{mean('probability_spread')} | {mean('floor_ece')} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
