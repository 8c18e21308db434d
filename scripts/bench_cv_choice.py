"""The automatic cross-validation's choice: the default (sampled) CV against the exhaustive one, per seed.

On the protocol split of ``bench_noregret.py`` (``assign_roles``: 20% test, the
rest labelled at ``--rate``), each seed's training documents are featurised
once (stop words resolved, vocabulary fitted), and
``pcem_spark.ml.tuning.resolve_auto`` runs with each ``--variants`` entry
(``TuneSettings`` overrides; ``{}`` is the default, ``{"strategy":
"exhaustive"}`` Spark ML's CrossValidator over every document). Where two
variants choose the same values the refit, and so the test F1, is the same
model. One JSON line per (seed, variant): the choice, the CV's seconds and
every grid point's score::

    python scripts/bench_cv_choice.py --docs out/20ng.jsonl.gz --rate 0.01 --seeds 0,1,2
    python scripts/bench_cv_choice.py --docs out/20ng.jsonl.gz --dotted --rate 0.9
    python scripts/bench_cv_choice.py --docs out/questions.jsonl.gz --rate 0.1 \\
        --variants '[{}, {"max_unlabeled": 1000000000, "max_iter": 0}]'
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", default="out/20ng.jsonl.gz", help="labelled documents (JSON Lines)")
    ap.add_argument("--dotted", action="store_true", help="20NG's dotted-name taxonomy (depth 2-5)")
    ap.add_argument("--rate", type=float, default=0.01, help="share of the training documents labelled")
    ap.add_argument("--seeds", default="0,1,2")
    variants = '[{}, {"strategy": "exhaustive"}]'
    ap.add_argument("--variants", default=variants, help="JSON list of TuneSettings overrides")
    ap.add_argument("--config", default=None, help="settings file layered over the package defaults")
    args = ap.parse_args(argv)

    from pyspark.sql import functions as F

    from pcem_spark.cli.config import load_settings
    from pcem_spark.engine.features import featurize, fit_vocabulary
    from pcem_spark.engine.session import build_session
    from pcem_spark.experiment.protocol import assign_roles
    from pcem_spark.ml import PathEM, tuning
    from pcem_spark.model.stop_words import resolve_stop_words

    settings = load_settings(args.config, [])
    spark = build_session(settings.spark)
    spark.sparkContext.setLogLevel("WARN")
    from bench_noregret import labelled_corpus

    docs, taxonomy = labelled_corpus(spark, args.docs, args.dotted)
    for seed in [int(s) for s in args.seeds.split(",")]:
        roled = assign_roles(docs, seed, 0.2, args.rate).cache()
        train = roled.where(F.col("role") != "test")
        masked = train.select("id", "text", F.when(F.col("role") == "labeled", F.col("labels")).alias("labels"))
        masked = masked.cache()
        features, _ = resolve_stop_words(masked, taxonomy, settings.features, seed)
        vocabulary = fit_vocabulary(masked, features)
        feats = featurize(masked, vocabulary, features).cache()
        for variant in json.loads(args.variants):
            tune = replace(settings.tune, **variant)
            t0 = time.perf_counter()
            model_settings, info, _ = tuning.resolve_auto(
                feats, taxonomy, vocabulary, features, settings.model, tune, seed=seed, estimator_class=PathEM
            )
            grid = [
                (g.get("unlabeled_weight"), g.get("path_weight"), round(g["cv_score"], 4), round(g.get("cv_std", 0), 4))
                for g in info.get("grid", [])
            ]
            row = {
                "docs": args.docs,
                "dotted": args.dotted,
                "rate": args.rate,
                "seed": seed,
                "tune": variant,
                "chosen": info.get("chosen"),
                "smoothing": model_settings.smoothing,
                "seconds": round(time.perf_counter() - t0, 1),
                "grid": grid,
            }
            print(json.dumps(row), flush=True)
        for df in (feats, masked, roled):
            df.unpersist()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
