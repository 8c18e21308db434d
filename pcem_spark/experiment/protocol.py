"""The paper's evaluation protocol (DESIGN.md).

Per seed: pool all documents, stratified 80/20 train/test split per leaf;
a fraction ``r`` of each leaf's training documents keeps its labels (at least
one per leaf), the rest of train is unlabelled; every method trains on the
same featurisation (vocabulary fitted on the training texts only; stop words
"auto" decided per split from its labelled documents, the English list in the
dataless setting) and is scored on the test documents. Results: one CSV row per (method, rate, seed)
and a Markdown table of mean +- std per method and rate.
"""

from __future__ import annotations

import csv
import logging
import os
import time
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pcem_spark.core.methods import ALL_METHODS, DISCRIMINATIVE, GENERATIVE, check_methods
from pcem_spark.core.taxonomy import PATH_KEY_SEP, Taxonomy
from pcem_spark.engine.blocks import blocks_from_labels, blocks_from_node_scores, packed_blocks
from pcem_spark.engine.features import FeatureSettings, featurize, fit_vocabulary
from pcem_spark.engine.label_columns import first_label_path, refuse_label_paths
from pcem_spark.errors import InputError
from pcem_spark.evaluation.metrics import evaluate_predictions
from pcem_spark.experiment.settings import ExperimentSettings, SupervisionSettings
from pcem_spark.ml.estimator import PathEM
from pcem_spark.ml.tuning import TuneSettings, resolve_auto
from pcem_spark.model.fitting import fit_blocks
from pcem_spark.model.labels import check_label_paths
from pcem_spark.model.settings import ModelSettings
from pcem_spark.model.stop_words import fallback_stop_words, resolve_stop_words

__all__ = [
    "ALL_METHODS",
    "CSV_FIELDS",
    "assign_roles",
    "ExperimentPlan",
    "settings_fingerprint",
    "read_csv",
    "run_experiment",
    "write_csv",
    "summarize",
    "markdown_table",
]

log = logging.getLogger(__name__)

CSV_FIELDS = [
    "method",
    "setting",
    "rate",
    "seed",
    "micro_f1",
    "macro_f1",
    "n_labeled",
    "n_unlabeled",
    "n_test",
    "n_iter",
    "train_seconds",
    "predict_seconds",
    "config",
]


def assign_roles(
    df: DataFrame, seed: int, test_fraction: float, label_rate: float, labels_col: str = "labels"
) -> DataFrame:
    """Add a ``role`` column: ``test``, ``labeled`` or ``unlabeled``.

    Stratified per leaf (last label) with a seeded hash order, so the split is
    reproducible and computed in Spark. Per leaf with n documents:
    ``round(test_fraction * n)`` go to test, and of the remaining n_train
    ``max(1, round(label_rate * n_train))`` are labelled. Documents without
    labels are ``unlabeled``.
    """
    if not 0 <= test_fraction < 1:
        raise InputError(f"test_fraction must be in [0, 1), got {test_fraction}")
    if not 0 < label_rate <= 1:
        raise InputError(f"label rate must be in (0, 1], got {label_rate}")
    leaf = F.element_at(first_label_path(df, labels_col), -1)  # several paths: by the first one's leaf
    w = Window.partitionBy(leaf).orderBy(F.xxhash64(F.col("id"), F.lit(seed)), F.col("id"))
    n = F.count(F.lit(1)).over(Window.partitionBy(leaf))
    rank = F.row_number().over(w)
    n_test = F.round(F.lit(test_fraction) * n)
    n_lab = F.greatest(F.lit(1.0), F.round(F.lit(label_rate) * (n - n_test)))
    role = (
        F.when(F.col(labels_col).isNull(), F.lit("unlabeled"))
        .when(rank <= n_test, F.lit("test"))
        .when(rank - n_test <= n_lab, F.lit("labeled"))
        .otherwise(F.lit("unlabeled"))
    )
    return df.withColumn("role", role)


def _run_key(method: str, setting: str, rate, seed) -> Tuple[str, str, float, int]:
    return (str(method), str(setting), round(float(rate), 6), int(seed))


class ExperimentPlan(NamedTuple):
    """Everything that decides an experiment's results besides the documents, the taxonomy and the grid."""

    experiment: ExperimentSettings
    features: FeatureSettings
    model: ModelSettings
    supervision: SupervisionSettings = SupervisionSettings()
    tune: Optional[TuneSettings] = None
    descriptions: Optional[Dict[str, str]] = None  # node -> description (the dataless setting)


def settings_fingerprint(plan: ExperimentPlan, setting: str = "labeled") -> str:
    """Short hash of every setting that changes a run's result, except the grid (method, setting,
    rate, seed): runs are only resumed into a CSV made with the same fingerprint. The weak-label
    settings count only for the dataless setting."""
    import hashlib
    import json
    from dataclasses import asdict

    model_settings, tune = plan.model, plan.tune
    ms = {k: v for k, v in asdict(model_settings).items() if k not in ("method", "seed", "block_size")}
    sup = plan.supervision
    weak = (
        {"weak_mode": sup.weak_mode, "min_similarity": sup.min_similarity, "descriptions": plan.descriptions or {}}
        if setting == "dataless"
        else {}
    )
    if tune is not None and setting == "labeled" and model_settings.auto_params():
        ms["tune"] = asdict(tune)
    blob = json.dumps(
        {
            "features": asdict(plan.features),
            "model": ms,
            "test_fraction": plan.experiment.test_fraction,
            "discriminative_c": plan.experiment.discriminative_c,
            "setting": setting,
            **weak,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


def read_csv(path: str) -> List[Dict[str, object]]:
    """Rows of an earlier ``results.csv`` (empty list if there is none)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for i, r in enumerate(rows, start=2):
        missing = [k for k in ("method", "setting", "rate", "seed", "micro_f1", "macro_f1") if not r.get(k)]
        if missing:
            raise InputError(
                f"{path}:{i}: row without {', '.join(missing)}; expected a results.csv written by pcem experiment"
            )
    return rows


def _leaf_path_index(taxonomy: Taxonomy, scores_col: str = "node_scores"):
    """Column: the path whose leaf has the largest node score (null if none is > 0) -- the leaf
    label the flat methods count, used to train the discriminative baselines on weak labels.

    Ties (possible only with shallow leaves, whose padded leaf inherits a
    shallower depth's score) go to the first path in taxonomy order.
    """
    leaf_nodes = taxonomy.leaf_node_matrix().argmax(axis=1)
    leaf_scores = F.array(*[F.col(scores_col)[int(k)] for k in leaf_nodes])
    best = F.array_max(leaf_scores)
    return F.when(F.col(scores_col).isNotNull() & (best > 0), (F.array_position(leaf_scores, best) - 1).cast("int"))


def _label_path_index(taxonomy: Taxonomy, labels_col: str = "labels"):
    """Column: path index of a (validated) true label path, null when unlabelled."""
    lookup = F.create_map(*[x for j, key in enumerate(taxonomy.path_keys()) for x in (F.lit(key), F.lit(j))])
    return F.when(F.col(labels_col).isNotNull(), lookup[F.concat_ws(PATH_KEY_SEP, F.col(labels_col))])


def run_experiment(
    docs: DataFrame,
    taxonomy: Taxonomy,
    experiment: ExperimentSettings,
    feature_settings: FeatureSettings,
    model_settings: ModelSettings,
    out_dir: str,
    supervision: Optional[SupervisionSettings] = None,
    descriptions: Optional[Dict[str, str]] = None,
    tune: Optional[TuneSettings] = None,
    resume: bool = True,
) -> List[Dict[str, object]]:
    """Run settings x rates x seeds x methods; write ``results.csv`` and ``results.md`` in ``out_dir``.

    The grid is ``experiment``'s: ``settings`` (``"labeled"``, ``"dataless"``
    or a list of both), ``rates``, ``seeds`` and ``methods``; it also holds
    the test fraction, the discriminative baselines' C and the report's rate
    and paper reference.
    ``dataless``: the rate-r sample gets weak labels from ``descriptions``
    (cosine similarity, :mod:`pcem_spark.model.weak_labels`; ``supervision``'s weak_mode and
    min_similarity) instead of its true labels;
    the weak labels' own coverage and per-level accuracy are reported next to
    the classifiers' F1. With ``resume`` the runs already in
    ``out_dir/results.csv`` are kept and not recomputed. Progress (run i of
    n, elapsed, ETA) is logged after every run.
    """
    plan = ExperimentPlan(
        experiment, feature_settings, model_settings, supervision or SupervisionSettings(), tune, descriptions
    )
    methods, rates, seeds = list(experiment.methods), list(experiment.rates), list(experiment.seeds)
    setting = experiment.settings
    settings_list = [setting] if isinstance(setting, str) else list(setting)
    for st in settings_list:
        if st not in ("labeled", "dataless"):
            raise InputError(f"setting must be 'labeled' or 'dataless', got {st!r}")
    if "dataless" in settings_list and not descriptions:
        raise InputError("the dataless setting needs label descriptions (--descriptions FILE)")
    check_methods(methods)
    os.makedirs(out_dir, exist_ok=True)
    csv_path = os.path.join(out_dir, "results.csv")
    configs = {st: settings_fingerprint(plan, st) for st in ("labeled", "dataless")}
    planned = [(st, rate, seed, m) for st in settings_list for rate in rates for seed in seeds for m in methods]
    planned_keys = {_run_key(p[3], p[0], p[1], p[2]) for p in planned}
    rows: List[Dict[str, object]] = read_csv(csv_path)

    def same_config(r) -> bool:
        # Rows written before fingerprints existed have none and are trusted; so
        # are rows of a setting this call does not run (it has no say on them).
        return not r.get("config") or r["setting"] not in settings_list or r.get("config") == configs.get(r["setting"])

    other = sorted({f"{r['setting']} {r['config']}" for r in rows if not same_config(r)})
    if other and resume:
        raise InputError(
            f"{csv_path} holds runs made with other settings ({', '.join(other)}; these settings "
            f"are {', '.join(f'{k} {v}' for k, v in configs.items())}): averaging them would mix "
            "experiments. Use another --output-dir, or --no-resume to recompute the planned runs"
        )
    if not resume:
        # Recompute what is planned; keep the CSV's other runs (e.g. Table 2 next to the figures).
        rows = [
            r
            for r in rows
            if _run_key(r["method"], r["setting"], r["rate"], r["seed"]) not in planned_keys and same_config(r)
        ]
    done = {_run_key(r["method"], r["setting"], r["rate"], r["seed"]) for r in rows}
    todo = [p for p in planned if _run_key(p[3], p[0], p[1], p[2]) not in done]
    log.info(
        "experiment: %d runs planned, %d already in %s, %d to run",
        len(planned),
        len(planned) - len(todo),
        csv_path,
        len(todo),
    )
    if not todo:
        _write_reports(rows, out_dir, experiment.report_rate, experiment.paper_reference)
        return rows
    # The paper's protocol scores one true path per document (and its baselines are flat classifiers).
    refuse_label_paths(docs, "the experiment protocol (pcem experiment)")
    n_unlabelled_docs = docs.where(F.col("labels").isNull()).count()
    if n_unlabelled_docs:
        log.warning(
            "experiment: %d documents without labels are not part of the protocol "
            "(it needs true labels to split and score)",
            n_unlabelled_docs,
        )
    check_label_paths(docs, taxonomy)
    n_done = 0
    t_start = time.perf_counter()
    for st in settings_list:
        for rate in rates:
            for seed in seeds:
                pending = [m for m in methods if _run_key(m, st, rate, seed) not in done]
                if not pending:
                    continue
                for row in _run_split(docs, taxonomy, plan, configs[st], pending, st, rate, seed):
                    rows.append(row)
                    n_done += 1
                    elapsed = time.perf_counter() - t_start
                    log.info(
                        "run %d/%d (%d of %d planned done) %s %s rate=%g seed=%d: micro-F1 %.2f "
                        "macro-F1 %.2f, train %.1fs; elapsed %.0fs, ETA %.0fs",
                        n_done,
                        len(todo),
                        len(planned) - len(todo) + n_done,
                        len(planned),
                        row["method"],
                        st,
                        rate,
                        seed,
                        100 * row["micro_f1"],
                        100 * row["macro_f1"],
                        row["train_seconds"],
                        elapsed,
                        elapsed / n_done * (len(todo) - n_done),
                    )
                    write_csv(rows, csv_path, taxonomy.depth)
    _write_reports(rows, out_dir, experiment.report_rate, experiment.paper_reference)
    return rows


def _write_reports(rows: List[Dict[str, object]], out_dir: str, rate: float = 0.01, paper: str = "") -> None:
    from pcem_spark.experiment.report import PAPERS, write_report
    from pcem_spark.io.outputs import atomic_write_text

    atomic_write_text(os.path.join(out_dir, "results.md"), markdown_table(rows))
    write_report(rows, out_dir, rate, PAPERS.get(paper))


def _run_split(docs, taxonomy, plan: ExperimentPlan, config, methods, setting, rate, seed):
    """All ``methods`` on one (setting, rate, seed) split; yields one result row per method.

    ``config`` is the settings fingerprint written into every row.
    """
    from pcem_spark.baselines.discriminative import LinearSettings, fit_linear

    model_settings = plan.model
    with ExitStack() as cleanup:  # unpersists in reverse: blocks, features, test, roled
        roled = assign_roles(docs.where(F.col("labels").isNotNull()), seed, plan.experiment.test_fraction, rate)
        roled = roled.cache()
        cleanup.callback(roled.unpersist)
        train = roled.where(F.col("role") != "test")
        test = roled.where(F.col("role") == "test").select("id", "text", "labels").cache()
        cleanup.callback(test.unpersist)
        masked = train.select("id", "text", F.when(F.col("role") == "labeled", F.col("labels")).alias("labels"))
        if setting == "labeled":  # stop_words "auto": decided on this split's labelled documents only
            feature_settings, stop_words_info = resolve_stop_words(masked, taxonomy, plan.features, seed)
        else:
            feature_settings, stop_words_info = fallback_stop_words(
                plan.features, "the dataless setting trains on weak labels: no true labels to decide on"
            )
        plan = plan._replace(features=feature_settings)
        vocabulary = fit_vocabulary(masked, feature_settings)
        weak_stats: Dict[str, object] = {}
        # The list "auto" chose, a column of the results (absent when the settings named one).
        chosen = {} if stop_words_info is None else {"stop_words": feature_settings.stop_words}
        generative = [m for m in methods if m in GENERATIVE]
        linear = [m for m in methods if m in DISCRIMINATIVE]
        if setting == "labeled":
            feats = featurize(masked, vocabulary, feature_settings).cache()
            cleanup.callback(feats.unpersist)
            blocks = None
            if generative:
                path_node = taxonomy.path_node_matrix(sparse=True)
                blocks = cleanup.enter_context(
                    packed_blocks(
                        blocks_from_labels(
                            feats, taxonomy.path_lookup(), path_node, len(vocabulary), model_settings.block_size
                        )
                    )
                )
                blocks.count()  # pack before the clock starts: no method's train time pays for it
            linear_train = feats.select("features", _label_path_index(taxonomy).alias("path_index"))
        else:
            blocks, weak_stats, feats = cleanup.enter_context(
                _dataless_blocks(train, vocabulary, taxonomy, plan, keep_weak=bool(linear))
            )
            linear_train = (
                None if feats is None else feats.select("features", _leaf_path_index(taxonomy).alias("path_index"))
            )
        n_test = test.count()
        for method in methods:
            t0 = time.perf_counter()
            if method in GENERATIVE:
                ms = replace(model_settings, method=method, seed=seed)
                tuned = None
                if ms.auto_params() and setting == "labeled":
                    # "auto" weights: cross-validated on this split's labelled documents only.
                    ms, _, tuned = resolve_auto(
                        feats, taxonomy, vocabulary, feature_settings, ms, plan.tune, seed=seed, estimator_class=PathEM
                    )
                if tuned is not None:
                    model, summary = tuned, tuned.training_summary
                    n_lab, n_unlab, n_iter = summary["n_labeled"], summary["n_unlabeled"], summary["n_iter"]
                else:
                    # Dataless: no true labels to cross-validate on; "auto" weights take the paper's 1.
                    model, result = fit_blocks(blocks, taxonomy, vocabulary, feature_settings, ms.resolved())
                    n_lab, n_unlab, n_iter = result.n_labeled, result.n_unlabeled, result.n_iter
            else:
                model, n_lab = fit_linear(
                    linear_train,
                    method,
                    taxonomy,
                    vocabulary,
                    feature_settings,
                    LinearSettings(C=plan.experiment.discriminative_c),
                    block_size=model_settings.block_size,
                )
                n_unlab, n_iter = 0, 0
            t1 = time.perf_counter()
            pred = model.transform(test).cache()
            metrics = evaluate_predictions(pred, taxonomy)
            t2 = time.perf_counter()
            pred.unpersist()
            acc = metrics["level_accuracy"]
            yield {
                "method": method,
                "setting": setting,
                "rate": rate,
                "seed": seed,
                "micro_f1": metrics["micro_f1"],
                "macro_f1": metrics["macro_f1"],
                **{f"level{k}_acc": v for k, v in acc.items()},
                "n_labeled": n_lab,
                "n_unlabeled": n_unlab,
                "n_test": n_test,
                "n_iter": n_iter,
                "train_seconds": round(t1 - t0, 3),
                "predict_seconds": round(t2 - t1, 3),
                **weak_stats,
                **chosen,
                "config": config,
            }


@contextmanager
def _dataless_blocks(train: DataFrame, vocabulary, taxonomy, plan: ExperimentPlan, keep_weak: bool = False):
    """Blocks whose sampled rows carry weak node scores; plus the weak labels' own quality.

    A context manager yielding ``(blocks, stats, weak)``; ``weak`` (the cached
    featurised table with ``node_scores``) only with ``keep_weak``, else None.
    Blocks and table stay cached until the ``with`` ends.
    """
    from pcem_spark.model.weak_labels import WeakLabelSettings, weak_label

    feature_settings, block_size, sup = plan.features, plan.model.block_size, plan.supervision
    feats = featurize(train.select("id", "text", "labels", "role"), vocabulary, feature_settings)
    weak = weak_label(
        feats,
        vocabulary,
        feature_settings,
        taxonomy,
        plan.descriptions,
        WeakLabelSettings(sup.weak_mode, sup.min_similarity, block_size),
    )
    weak = (
        weak.withColumn("node_scores", F.when(F.col("role") == "labeled", F.col("node_scores")))
        .withColumn("weak_path", F.when(F.col("role") == "labeled", F.col("weak_path")))
        .cache()
    )
    try:
        sampled = weak.where(F.col("role") == "labeled")
        aggs = [F.count(F.lit(1)).alias("n"), F.count("weak_path").alias("covered")]
        for k in range(1, taxonomy.depth + 1):
            aggs.append(
                F.avg(
                    F.when(
                        F.col("weak_path").isNotNull(),
                        (F.element_at("weak_path", k) == F.element_at("labels", k)).cast("double"),
                    )
                ).alias(f"acc{k}")
            )
        q = sampled.agg(*aggs).first()
        stats = {
            "weak_coverage": q["covered"] / q["n"] if q["n"] else None,
            **{f"weak_level{k}_acc": q[f"acc{k}"] for k in range(1, taxonomy.depth + 1)},
        }
        log.info(
            "weak labels: %d sampled documents, %.1f%% got a weak label; accuracy per level: %s",
            q["n"],
            100 * (stats["weak_coverage"] or 0),
            ", ".join(
                f"{k}: {100 * q[f'acc{k}']:.1f}%" for k in range(1, taxonomy.depth + 1) if q[f"acc{k}"] is not None
            ),
        )
        with packed_blocks(blocks_from_node_scores(weak, taxonomy.n_nodes, len(vocabulary), block_size)) as blocks:
            blocks.count()  # materialise before the weak table is released
            if not keep_weak:
                weak.unpersist()
            yield blocks, stats, (weak if keep_weak else None)
    finally:
        weak.unpersist()


def write_csv(rows: List[Dict[str, object]], path: str, depth: int) -> None:
    """Write all runs so far (atomically: a killed run leaves the previous file)."""
    fields = CSV_FIELDS[:6] + [f"level{k}_acc" for k in range(1, depth + 1)] + CSV_FIELDS[6:]
    if any("weak_coverage" in r for r in rows):
        fields += ["weak_coverage"] + [f"weak_level{k}_acc" for k in range(1, depth + 1)]
    # Columns of older rows (another taxonomy depth, ...) are kept, never dropped.
    for r in rows:
        fields += [k for k in r if k is not None and k not in fields]
    import io

    from pcem_spark.io.outputs import atomic_write_text

    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=fields, restval="")
    writer.writeheader()
    for r in rows:
        writer.writerow(r)
    atomic_write_text(path, buf.getvalue())


def summarize(rows: List[Dict[str, object]]) -> List[Dict[str, object]]:
    """Mean and std (over seeds) of micro/macro F1 per (setting, rate, method)."""
    groups: Dict[tuple, List[Dict[str, object]]] = {}
    for r in rows:
        # Rows read back from results.csv hold strings ("0.01"): group on the number.
        groups.setdefault((r["setting"], round(float(r["rate"]), 6), r["method"]), []).append(r)
    out = []
    for (setting, rate, method), rs in groups.items():
        mic = np.array([float(r["micro_f1"]) for r in rs]) * 100
        mac = np.array([float(r["macro_f1"]) for r in rs]) * 100
        secs = np.array([float(r["train_seconds"]) for r in rs])
        weak = {}
        if all(r.get("weak_coverage") not in (None, "") for r in rs):
            levels = sorted(k for k in rs[0] if k.startswith("weak_level"))
            weak = {
                "weak": " / ".join(f"{100 * np.mean([float(r[k]) for r in rs]):.1f}" for k in levels),
                "weak_coverage": 100 * np.mean([float(r["weak_coverage"]) for r in rs]),
            }
        out.append(
            {
                **weak,
                "setting": setting,
                "rate": rate,
                "method": method,
                "n_seeds": len(rs),
                "micro_mean": mic.mean(),
                "micro_std": mic.std(ddof=1) if len(rs) > 1 else 0.0,
                "macro_mean": mac.mean(),
                "macro_std": mac.std(ddof=1) if len(rs) > 1 else 0.0,
                "train_seconds": secs.mean(),
            }
        )
    return out


def markdown_table(rows: List[Dict[str, object]]) -> str:
    summary = summarize(rows)
    weak = any("weak" in s for s in summary)
    lines = [
        "| setting | rate | method | seeds | micro-F1 (%) | macro-F1 (%) | train s |"
        + (" weak-label accuracy per level (%) | weak-label coverage (%) |" if weak else ""),
        "|---|---|---|---|---|---|---|" + ("---|---|" if weak else ""),
    ]
    for s in summary:
        line = (
            f"| {s['setting']} | {100 * float(s['rate']):g}% | {s['method']} | {s['n_seeds']} | "
            f"{s['micro_mean']:.2f} ± {s['micro_std']:.2f} | {s['macro_mean']:.2f} ± {s['macro_std']:.2f} | "
            f"{s['train_seconds']:.1f} |"
        )
        if weak:
            line += f" {s.get('weak', '')} | " + (f"{s['weak_coverage']:.1f} |" if "weak_coverage" in s else " |")
        lines.append(line)
    return "\n".join(lines) + "\n"
