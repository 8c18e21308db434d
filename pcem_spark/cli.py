"""The ``pcem`` command: ingest-20ng, ingest-warc, train, predict, evaluate, inspect, experiment, report.

Every command reads its settings from a TOML file (``--config``, default
``conf/pcem.toml`` when present) with ``--set section.key=value`` overrides.
Exit codes, for schedulers (Airflow, cron, spark-submit wrappers), decided
by the failure's kind in :mod:`pcem_spark.failures`:

* 0  done;
* 2  bad input or settings: the request itself is wrong (the message names the
  file, row, field or setting); retrying will not help;
* 75 (``EX_TEMPFAIL``) a runtime failure -- Spark tasks failing after their
  retries, a lost executor or JVM, an I/O error: retry;
* 1  a bug in pcem-spark (a traceback is printed); retrying will not help.

The message on stderr names the root cause (the Python exception raised in a
Spark worker, or the Java cause), never only the py4j call that carried it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import List, Optional

from .errors import InputError
# Re-exported: schedulers' wrappers and the tests import them from here.
from .failures import (EXIT_BAD_INPUT, EXIT_BUG, EXIT_OK, EXIT_TRANSIENT,  # noqa: F401
                       classify_failure, root_cause)

log = logging.getLogger("pcem")

DEFAULT_CONFIG = "conf/pcem.toml"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None,
                   help=f"TOML settings file (default: {DEFAULT_CONFIG} if it exists)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one setting, e.g. --set model.max_iter=20 (repeatable)")
    p.add_argument("--log-level", default="INFO")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pcem", description="Path cost-sensitive NB/EM on Spark")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest-20ng", help="20news-bydate archive -> documents table (JSON Lines or Parquet)")
    p.add_argument("--archive", default="../shared/data/20news-bydate.tar.gz")
    p.add_argument("--output", required=True, help="*.jsonl[.gz] (no Spark needed) or a Parquet directory")
    p.add_argument("--headers", default="subject", choices=["keep", "strip", "subject"],
                   help="mail headers: keep, strip, or keep only the Subject text (default)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    _common(p)

    p = sub.add_parser("ingest-warc", help="WARC / WET files (Common Crawl) -> documents table (Parquet) + rejects")
    p.add_argument("--input", action="append", required=True, metavar="PATHS",
                   help="WARC or WET files: paths, globs or directories, any Hadoop URI (hdfs://, s3a://, ...); "
                        "repeatable or comma-separated (plain, .gz, .zst, .lz4)")
    p.add_argument("--output", required=True, help="documents table (Parquet directory)")
    p.add_argument("--rejects", help="where to write rejected records (default: OUTPUT_rejects)")
    p.add_argument("--id", dest="id_field", default="record", choices=["record", "url"],
                   help="document id: the WARC-Record-ID (default) or the WARC-Target-URI; every copy of a "
                        "repeated id is rejected ('duplicate id')")
    p.add_argument("--min-text-chars", type=int, default=1,
                   help="reject texts shorter than this many characters (after stripping; default 1: keep every "
                        "non-empty text; an empty text is always rejected)")
    p.add_argument("--overwrite", action="store_true")
    _common(p)

    p = sub.add_parser("train", help="fit PCNB / PCEM / flat NB / flat EM and save the model")
    p.add_argument("--docs", required=True, help="documents table (Parquet or JSON Lines)")
    p.add_argument("--format", dest="docs_format", choices=["json", "parquet"],
                   help="format of --docs (default: from the file names; a folder from the files in it)")
    p.add_argument("--model", required=True, help="output model directory")
    p.add_argument("--taxonomy", help="taxonomy file (TSV parent<TAB>child or JSON); inferred from labels if omitted")
    p.add_argument("--method", help="pcnb | pcem | flat-nb | flat-em | nbmc | emmc | tdnb | tdem | wdnb | wdem "
                                    "(overrides model.method)")
    p.add_argument("--split", help="train only on documents with this split value")
    p.add_argument("--label-rate", type=float,
                   help="keep the labels of this stratified fraction per leaf (>= 1 per leaf), hide the rest")
    p.add_argument("--seed", type=int, default=0, help="seed of --label-rate")
    p.add_argument("--supervision", default=None, choices=["labels", "descriptions", "similarities"],
                   help="labels: the documents' true label paths; descriptions: weak labels from "
                        "--descriptions; similarities: weak labels from the documents' own "
                        "'similarities' map column (node -> score). The weak kinds need --taxonomy "
                        "when the documents have no labels (default: [supervision] kind)")
    p.add_argument("--descriptions", help="JSON node -> description text (default: [supervision] descriptions)")
    p.add_argument("--weak-mode", default=None, choices=["argmax", "soft", "path"])
    p.add_argument("--min-similarity", type=float, default=None)
    p.add_argument("--rejects", help="where to write rejected rows (default: MODEL_rejects)")
    p.add_argument("--tune", action="store_true",
                   help="also cross-validate the [tune] grid (e.g. tune.grid.smoothing = [0.03, 0.1, 0.3]) on "
                        "the labelled documents; settings left at \"auto\" are always cross-validated")
    p.add_argument("--init-model", metavar="PREVIOUS",
                   help="warm start: start EM from this saved model (same taxonomy and method; terms mapped by "
                        "name, new terms start from the smoothing prior). Settings left at \"auto\" take its "
                        "values (--tune cross-validates the weights again); the taxonomy defaults to its. A "
                        "batch without labelled documents is then allowed")
    p.add_argument("--overwrite", action="store_true")
    _common(p)

    p = sub.add_parser("predict", help="write predictions (Parquet) with a saved model")
    p.add_argument("--model", required=True)
    p.add_argument("--docs", required=True)
    p.add_argument("--format", dest="docs_format", choices=["json", "parquet"],
                   help="format of --docs (default: from the file names; a folder from the files in it)")
    p.add_argument("--output", required=True, help="Parquet output directory")
    p.add_argument("--split", help="predict only documents with this split value")
    p.add_argument("--rejects", help="where to write rejected rows (default: OUTPUT_rejects)")
    p.add_argument("--min-probability", type=float, default=None, metavar="P",
                   help="abstain: stop each path at its deepest node whose marginal probability is >= P, in "
                        "[0, 1]; adds path_probability (default [predict] min_probability = 0: full paths)")
    p.add_argument("--top-k", type=int, default=None, metavar="K",
                   help="add top_paths: the K most probable paths with their probabilities "
                        "(default [predict] top_k = 0: no such column)")
    p.add_argument("--overwrite", action="store_true")
    _common(p)

    p = sub.add_parser("evaluate", help="hierarchical micro/macro F1 and per-level accuracy")
    p.add_argument("--predictions", required=True)
    p.add_argument("--model", help="model directory (for its taxonomy)")
    p.add_argument("--taxonomy", help="taxonomy file, instead of --model")
    p.add_argument("--output", help="write the metrics as JSON here")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    _common(p)

    p = sub.add_parser("inspect", help="per node: training mass, prior, top terms vs siblings; taxonomy view; "
                                       "with --predictions a per-level confusion table (Markdown/JSON/HTML/PNG)")
    p.add_argument("--model", required=True, help="model directory")
    p.add_argument("--output", required=True, help="local output directory (model.md, model.json, "
                                                   "taxonomy.html, taxonomy.png, confusion.md/json)")
    p.add_argument("--predictions", help="predictions table with true labels (pcem predict): adds the "
                                         "per-level confusion tables")
    p.add_argument("--top-terms", type=int, default=10, help="top terms per node (default 10)")
    p.add_argument("--rank-terms", default="llr", choices=["llr", "log-odds"],
                   help="order the top terms by the signed log-likelihood ratio against the siblings (default: "
                        "frequent distinctive words first) or by the log-odds itself (favours rare exclusive terms)")
    p.add_argument("--overwrite", action="store_true")
    _common(p)

    p = sub.add_parser("experiment", help="the paper's protocol: methods x settings x label rates x seeds")
    p.add_argument("--docs", required=True)
    p.add_argument("--format", dest="docs_format", choices=["json", "parquet"],
                   help="format of --docs (default: from the file names; a folder from the files in it)")
    p.add_argument("--output-dir", required=True,
                   help="results.csv (resumed: runs already in it are skipped), results.md, table2.md, "
                        "efficiency.md and the PNG figures")
    p.add_argument("--taxonomy")
    p.add_argument("--methods", help="comma-separated (default from [experiment]); generative: pcnb, pcem, "
                                     "flat-nb, flat-em, nbmc, emmc, tdnb, tdem, wdnb, wdem; discriminative: "
                                     "lr, svm, hiercost")
    p.add_argument("--rates", help="comma-separated label rates, e.g. 0.01,0.05")
    p.add_argument("--seeds", help="comma-separated seeds or a count, e.g. 5")
    p.add_argument("--setting",
                   help="labeled, dataless or labeled,dataless (default from [experiment] settings). labeled: "
                        "the sample keeps its true labels; dataless: it gets weak labels from --descriptions")
    p.add_argument("--descriptions", help="JSON node -> description (dataless setting)")
    p.add_argument("--weak-mode", choices=["argmax", "soft", "path"],
                   help="argmax: the paper's per-depth rule; soft: per-depth normalised similarities; "
                        "path: the path with the largest summed similarity (default from [supervision])")
    p.add_argument("--min-similarity", type=float,
                   help="no weak label when the best similarity at some depth is not above this")
    p.add_argument("--no-resume", action="store_true",
                   help="recompute the planned runs even if results.csv already has them (its other runs "
                        "are kept unless they were made with other settings)")
    _common(p)

    p = sub.add_parser("report", help="rebuild table2.md, efficiency.md and the figures from a results.csv")
    p.add_argument("--results", required=True, help="results.csv written by pcem experiment")
    p.add_argument("--output-dir", help="where to write (default: the CSV's directory)")
    p.add_argument("--rate", type=float, help="label rate of the Table-2 columns (default [experiment] "
                                              "report_rate)")
    _common(p)
    return parser


def _settings(args):
    from .config import load_settings
    path = args.config
    if path is None and os.path.exists(DEFAULT_CONFIG):
        path = DEFAULT_CONFIG
    return load_settings(path, args.overrides)


def _taxonomy(args, docs=None):
    from .taxonomy import load_taxonomy
    if getattr(args, "taxonomy", None):
        return load_taxonomy(args.taxonomy)
    from .checks import warn_singleton_leaves
    from .model import infer_taxonomy
    taxonomy = infer_taxonomy(docs)
    # Before --label-rate hides labels: sampling would make false singletons.
    warn_singleton_leaves(docs, taxonomy, where=getattr(args, "docs", None))
    return taxonomy


def _check_outputs(spark, outputs, inputs, overwrite: bool, check_existing: bool = True) -> None:
    """Fail before any work if an output would replace an input, another output or existing data."""
    from .output_paths import check_output_paths
    check_output_paths(spark, outputs, inputs, overwrite, check_existing)


def _rejects_output(args, main_path: str, docs: str):
    """The rejects table's Output: --rejects, or MAIN_rejects beside the main output."""
    import re
    from .output_paths import Output
    if not args.rejects and re.fullmatch(r"(?:[A-Za-z][\w+.-]*:/*[^/]*)?/*", main_path.rstrip("/")):
        # A bucket or file system root: "s3a://bucket_rejects" would be another bucket.
        raise InputError(f"{main_path!r} is the root of a file system or bucket: give --rejects PATH")
    if args.rejects:
        return Output("--rejects", args.rejects, "rejects", source=docs)
    return Output("--rejects (default: beside the main output)", main_path.rstrip("/") + "_rejects", "rejects",
                  source=docs)


def _check_label_rate(rate: Optional[float]) -> None:
    if rate is not None and not 0.0 < rate <= 1.0:
        raise InputError(f"--label-rate must be in (0, 1], got {rate}")


def _read_valid(spark, path: str, rejects_path: str, split: Optional[str], counts: Optional[dict] = None,
                fmt: Optional[str] = None):
    """Read documents, write the rejects table (atomically), log counts; return the valid rows.

    Rejects are decided on the whole table before ``--split`` filters, so a
    malformed row (whose split is unknown) is never lost to the filter. The
    rejects table belongs to the run's main output, whose existence the
    caller has checked, so a leftover of a failed run is replaced; its marker
    holds the counts (rows read = valid + rejected). ``counts`` (a dict) is
    filled with them for the main output's marker.
    """
    from pyspark.sql import functions as F
    from .documents import count_input_rows, detect_format, log_counts, read_documents, split_rejects
    from .outputs import atomic_output
    fmt = fmt or detect_format(spark, path)
    raw = read_documents(spark, path, fmt)
    good, rejects = split_rejects(raw)  # both read one persisted, fully parsed copy
    # Counted from the stored rows (lines), not from the parser's output: the check below then proves
    # that every input row is either valid or rejected.
    n_in, n_good = count_input_rows(spark, path, fmt), good.count()
    with atomic_output(spark, rejects_path, "rejects", overwrite=True) as staged:
        rejects.write.parquet(staged.tmp)
        by_reason = log_counts(path, n_in, n_good, rejects)
        n_rej = spark.read.parquet(staged.tmp).count()
        if n_rej != n_in - n_good:  # the contract: every input row is valid or rejected, never lost
            raise RuntimeError(f"{path}: {n_in} rows read, {n_good} valid, but {n_rej} rejects written")
        summary = {"source": path, "rows_read": n_in, "valid": n_good, "rejected": n_rej,
                   "rejected_by_reason": by_reason}
        staged.info.update(summary)
    if counts is not None:
        counts.update({**summary, "rejects": rejects_path})
    if n_in != n_good:
        log.warning("%d rejected rows written to %s", n_in - n_good, rejects_path)
    if split is not None:
        good = good.where(F.col("split") == split)
        n_split = good.count()
        log.info("%s: %d valid documents with split=%r, %d valid documents with another split left out",
                 path, n_split, split, n_good - n_split)
        n_good = n_split
        if counts is not None:
            counts["split"], counts["selected"] = split, n_split
    if n_good == 0:
        raise InputError(f"{path}: no valid documents" + (f" with split={split!r}" if split else "")
                         + f" (the rejects, with their reasons, are in {rejects_path})")
    return good


def cmd_ingest(args, settings) -> int:
    from .ingest import iter_20ng, write_jsonl
    from .output_paths import Output
    t0 = time.perf_counter()
    out = args.output
    inputs = [("--archive", args.archive)]
    jsonl = out.rstrip("/").endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz"))
    # Before the archive is read: a JSON Lines file is local, so all of it; a Parquet table only by its path
    # (where it lives -- local disk or HDFS -- only Spark can say; checked in full below).
    _check_outputs(None, [Output("--output", out, None, directory=False) if jsonl
                          else Output("--output", out, "documents")], inputs, args.overwrite,
                   check_existing=jsonl)
    if jsonl:
        n, per_split = write_jsonl(iter_20ng(args.archive, args.headers), out)
    else:
        from .documents import DOCUMENT_SCHEMA
        from .outputs import atomic_output
        from .session import build_session
        # The archive is read on the driver; the rows reach the executors inside
        # their tasks (parallelize), so no file has to be visible to every node,
        # and the Parquet folder appears whole, with its marker, or not at all.
        rows, per_split = [], {}
        for doc in iter_20ng(args.archive, args.headers):
            rows.append((doc["id"], doc["text"], doc["labels"], doc["split"], None))
            per_split[doc["split"]] = per_split.get(doc["split"], 0) + 1
        n = len(rows)
        spark = build_session(settings.spark)
        _check_outputs(spark, [Output("--output", out, "documents")], inputs, args.overwrite)
        slices = max(spark.sparkContext.defaultParallelism, n // 2000 + 1)  # ~2,000 messages per task
        df = spark.createDataFrame(spark.sparkContext.parallelize(rows, slices), DOCUMENT_SCHEMA)
        with atomic_output(spark, out, "documents", overwrite=args.overwrite) as staged:
            df.write.parquet(staged.tmp)
            staged.info.update({"rows": n, "per_split": per_split})
    log.info("ingest-20ng: %d documents (%s) -> %s in %.1fs", n,
             ", ".join(f"{k}: {v}" for k, v in sorted(per_split.items())), out, time.perf_counter() - t0)
    return 0


def cmd_ingest_warc(args, settings) -> int:
    from .session import build_session
    from .warc import ingest_warc, require_libraries, split_inputs
    from .output_paths import Output
    require_libraries()  # before starting Spark: a missing library is exit 2 in a second
    spark = build_session(settings.spark)
    rejects = _rejects_output(args, args.output, ",".join(args.input))
    _check_outputs(spark, [Output("--output", args.output, "documents"), rejects],
                   [("--input", path) for path in split_inputs(args.input)], args.overwrite)
    ingest_warc(spark, args.input, args.output, rejects.path,
                id_field=args.id_field, min_text_chars=args.min_text_chars, overwrite=args.overwrite)
    return 0


def cmd_train(args, settings) -> int:
    from pyspark.sql import functions as F
    from .experiment import assign_roles
    from .model import train
    from .session import build_session
    if args.method:
        settings.model.method = args.method
        settings.model.validate()
    _check_label_rate(args.label_rate)
    # Cheap checks before the read: a wrong taxonomy or descriptions path fails in a second.
    given_taxonomy = _taxonomy(args) if args.taxonomy else None
    for path in (args.descriptions,):
        if path and "://" not in path and not os.path.exists(path):
            raise FileNotFoundError(f"--descriptions {path!r} does not exist")
    spark = build_session(settings.spark)
    t0 = time.perf_counter()
    from .output_paths import Output
    rejects = _rejects_output(args, args.model, args.docs)
    _check_outputs(spark, [Output("--model", args.model, "model"), rejects],
                   [("--docs", args.docs), ("--taxonomy", args.taxonomy),
                    ("--descriptions", args.descriptions or settings.supervision.descriptions),
                    ("--init-model", args.init_model)], args.overwrite)
    warm = None
    if args.init_model:  # read and checked before the documents: a wrong init model fails in seconds
        from .warm import WarmStart
        warm = WarmStart.load(args.init_model)
        warm.check(given_taxonomy or warm.model.taxonomy, settings.model, where="--init-model")
    counts: dict = {}
    docs = _read_valid(spark, args.docs, rejects.path, args.split, counts, args.docs_format)
    taxonomy = given_taxonomy or (warm.model.taxonomy if warm is not None else _taxonomy(args, docs))
    sup = settings.supervision
    args.supervision = args.supervision or sup.kind
    args.descriptions = args.descriptions or sup.descriptions or None
    args.weak_mode = args.weak_mode or sup.weak_mode
    args.min_similarity = sup.min_similarity if args.min_similarity is None else args.min_similarity
    if args.supervision in ("descriptions", "similarities"):
        from .model import train_weak
        from .weak import load_descriptions
        descriptions = None
        if args.supervision == "descriptions":
            if not args.descriptions:
                raise InputError("--supervision descriptions needs --descriptions FILE (JSON node -> description)")
            descriptions = load_descriptions(args.descriptions, taxonomy)
        weak_col = None
        if args.label_rate is not None:
            docs = docs.withColumn("_weak", F.rand(args.seed) < args.label_rate)
            weak_col = "_weak"
        if args.tune:
            raise InputError("--tune cross-validates against true labels; it does not apply to weak supervision")
        model, result = train_weak(docs, taxonomy, descriptions, settings.features,
                                   settings.model if warm is not None else settings.model.resolved(),
                                   args.weak_mode, args.min_similarity, weak_col, warm_start=warm)
    else:
        if args.label_rate is not None:
            roled = assign_roles(docs, args.seed, 0.0, args.label_rate)
            docs = roled.select("id", "text",
                                F.when(F.col("role") == "labeled", F.col("labels")).alias("labels"))
            log.info("train: --label-rate %g (seed %d) keeps the labels of a stratified sample",
                     args.label_rate, args.seed)
        if args.tune and not settings.tune.grid and not settings.model.auto_params():
            raise InputError("--tune: nothing to tune; set [tune] grid (e.g. --set 'tune.grid={\"smoothing\": "
                             "[0.03, 0.1, 0.3]}') or leave model.unlabeled_weight / path_weight at \"auto\"")
        model, result = train(docs, taxonomy, settings.features, settings.model, tune=settings.tune,
                              seed=args.seed, extra_grid=settings.tune.grid if args.tune else None,
                              init_model=warm, retune_auto=args.tune)
        tuning = model.training_summary.get("tuning")
        if tuning and tuning.get("tuned"):
            log.info("train: cross-validation (%d folds, %s) chose %s", tuning["folds"], tuning["metric"],
                     tuning["chosen"])
    log.info("train: smoothing %g, unlabeled_weight %s, path_weight %s", model.model_settings.smoothing,
             model.model_settings.unlabeled_weight, model.model_settings.path_weight)
    ws = model.training_summary.get("warm_start")
    if ws:
        log.info("train: warm start from %s (%d terms kept, %d dropped, %d new; from it: %s)", ws["path"],
                 ws["terms_kept"], ws["terms_dropped"], ws["terms_new"],
                 ", ".join(f"{k} {v}" for k, v in ws["inherited"].items()) or "no setting")
    model.training_summary = {**(model.training_summary or {}), "input": counts}
    model.save(args.model, overwrite=args.overwrite)
    its = result.iter_seconds
    log.info("train: %s on %d labelled + %d unlabelled documents, %d EM iterations (%s), "
             "median iteration %.2fs, total %.1fs -> %s", settings.model.method, result.n_labeled,
             result.n_unlabeled, result.n_iter, "converged" if result.converged else "not converged",
             float(sorted(its)[len(its) // 2]) if its else 0.0, time.perf_counter() - t0, args.model)
    return 0


def cmd_predict(args, settings) -> int:
    from .model import PathModel
    from .outputs import atomic_output
    from .progress import log_progress
    from .model import check_prediction_options
    from .session import build_session
    # Flags override [predict]; checked before Spark starts.
    min_probability = settings.predict.min_probability if args.min_probability is None else args.min_probability
    top_k = settings.predict.top_k if args.top_k is None else args.top_k
    check_prediction_options(min_probability, top_k, names=(
        "--min-probability" if args.min_probability is not None else "predict.min_probability",
        "--top-k" if args.top_k is not None else "predict.top_k"))
    spark = build_session(settings.spark)
    t0 = time.perf_counter()
    from .output_paths import Output
    rejects = _rejects_output(args, args.output, args.docs)
    _check_outputs(spark, [Output("--output", args.output, "predictions"), rejects],
                   [("--model", args.model), ("--docs", args.docs)], args.overwrite)
    model = PathModel.load(args.model)
    counts: dict = {}
    docs = _read_valid(spark, args.docs, rejects.path, args.split, counts, args.docs_format).cache()
    n_in = docs.count()
    pred = model.transform(docs, min_probability=min_probability, top_k=top_k)
    # Written to a temporary sibling and moved into place with its marker: --overwrite keeps the old
    # predictions until the new ones are complete, and a killed run never leaves part files to be read.
    with atomic_output(spark, args.output, "predictions", overwrite=args.overwrite) as staged:
        with log_progress(spark, "predict", n_in):
            pred.write.parquet(staged.tmp)
        n_out = spark.read.parquet(staged.tmp).count()
        if n_out != n_in:  # the contract: exactly one row per valid input document
            raise RuntimeError(f"predict wrote {n_out} rows for {n_in} valid documents")
        staged.info.update({"rows": n_out, "model": args.model, "input": counts,
                            "min_probability": float(min_probability), "top_k": int(top_k)})
        if min_probability > 0:
            from .model import abstention_counts
            staged.info["abstention"] = abstention_counts(spark.read.parquet(staged.tmp), model.taxonomy)
            log.info("predict: --min-probability %g: %s", min_probability, staged.info["abstention"])
    log.info("predict: %d predictions -> %s in %.1fs", n_out, args.output, time.perf_counter() - t0)
    return 0


def cmd_evaluate(args, settings) -> int:
    from .evaluate import evaluate_predictions, format_metrics
    from .model import PathModel
    from .session import build_session
    from .taxonomy import load_taxonomy
    from pyspark.sql import functions as F
    from .outputs import atomic_write_text, require_complete
    if not (args.taxonomy or args.model):
        raise InputError("evaluate needs --model or --taxonomy (the set of nodes to score)")
    spark = build_session(settings.spark)
    if args.output:
        from .output_paths import Output
        _check_outputs(None, [Output("--output", args.output, None, directory=False)],
                       [("--predictions", args.predictions), ("--model", args.model), ("--taxonomy", args.taxonomy)],
                       args.overwrite)
    require_complete(spark, args.predictions, "predictions")
    if args.taxonomy:
        taxonomy = load_taxonomy(args.taxonomy)
    else:
        taxonomy = PathModel.load(args.model).taxonomy
    pred = spark.read.parquet(args.predictions)
    for col in ("path", "labels"):
        if col not in pred.columns:
            raise InputError(f"{args.predictions}: column {col!r} is missing (found {pred.columns})")
    n_rows, n_labeled = pred.select(F.count(F.lit(1)), F.count("labels")).first()
    if n_labeled == 0:
        raise InputError(f"{args.predictions}: none of the {n_rows} predictions has true labels to score "
                         "against (predict documents that carry a 'labels' path)")
    if n_labeled < n_rows:
        log.warning("evaluate: %d of %d predictions have no true labels; they are not scored",
                    n_rows - n_labeled, n_rows)
    # Rows without labels are counted (n_without_labels), not scored. Predictions whose labels or paths the
    # taxonomy does not know: a warning and counts in the metrics, or, for most rows, exit 2 before any output.
    source = f"--taxonomy {args.taxonomy}" if args.taxonomy else f"the taxonomy of --model {args.model}"
    metrics = evaluate_predictions(pred, taxonomy, where=f"{args.predictions} scored against {source}")
    print(format_metrics(metrics))
    if args.output:
        atomic_write_text(args.output, json.dumps(metrics, indent=2))
        log.info("evaluate: metrics -> %s", args.output)
    return 0


def cmd_inspect(args, settings) -> int:
    """Per-node masses, priors and top terms (+ per-level confusion) as plain files (pcem_spark.inspect)."""
    from .inspect import (check_local_output, confusion_counts, confusion_tables, inspect_model,
                          inspection_files, write_inspection)
    from .model import PathModel
    from .outputs import require_complete
    from .session import build_session
    if args.top_terms < 1:
        raise InputError(f"--top-terms must be >= 1, got {args.top_terms}")
    from .inspect import INSPECT_KIND
    from .output_paths import Output
    out = check_local_output(args.output)
    # Before starting Spark (local paths only: inspect writes plain files).
    _check_outputs(None, [Output("--output", out, INSPECT_KIND)],
                   [("--model", args.model), ("--predictions", args.predictions)], args.overwrite)
    t0 = time.perf_counter()
    spark = build_session(settings.spark)
    model = PathModel.load(args.model)
    report = inspect_model(model, args.top_terms, model_path=args.model, rank=args.rank_terms)
    confusion = None
    if args.predictions:
        require_complete(spark, args.predictions, "predictions")
        pred = spark.read.parquet(args.predictions)
        cells, n_scored, n_without = confusion_counts(pred)
        if n_scored == 0:
            raise InputError(f"--predictions {args.predictions}: none of the {n_without} predictions has true "
                             "labels to build a confusion table from (predict documents that carry 'labels')")
        if n_without:
            log.warning("inspect: %d of %d predictions have no true labels; not in the confusion tables",
                        n_without, n_scored + n_without)
        confusion = confusion_tables(cells, model.taxonomy, n_scored, n_without)
        confusion["predictions"] = args.predictions
    files = inspection_files(report, confusion)
    write_inspection(out, files, overwrite=args.overwrite,
                     info={"model": args.model, "predictions": args.predictions})
    log.info("inspect: %s -> %s (%s) in %.1fs", args.model, out, ", ".join(sorted(files)),
             time.perf_counter() - t0)
    return 0


def cmd_experiment(args, settings) -> int:
    from .experiment import ALL_METHODS, run_experiment
    from .session import build_session
    exp = settings.experiment
    # Every setting that decides the planned runs is checked before Spark starts: a plan of no runs
    # (--seeds 0, no rates, no methods) is a mistake, not an empty result (exit 2, naming the setting).

    def flag(name: str, raw: str) -> str:  # how a message names a command-line value
        return f"--{name} {raw if raw.strip() else repr(raw)}"

    def plan_error(where: str, what: str) -> InputError:
        return InputError(f"{where}: {what} (pcem experiment runs every method x label rate x seed)")

    if args.methods is not None:
        methods, where_m = [m.strip() for m in args.methods.split(",")], flag("methods", args.methods)
    else:
        methods, where_m = list(exp.methods), "[experiment] methods"
    if not any(methods):
        raise plan_error(where_m, "no methods, so no runs; name at least one, e.g. pcnb,pcem")
    if "" in methods:
        raise plan_error(where_m, "an empty method name (a stray comma?)")
    for m in methods:
        if m not in ALL_METHODS:
            raise plan_error(where_m, f"unknown method {m!r}; known: {', '.join(ALL_METHODS)}")
    if args.rates is not None:
        where_r = flag("rates", args.rates)
        parts = [r.strip() for r in args.rates.split(",")]
        if any(parts) and "" in parts:
            raise plan_error(where_r, "an empty label rate (a stray comma?)")
        try:
            rates = [float(r) for r in parts if r]
        except ValueError:
            raise plan_error(where_r, "expected comma-separated label rates in (0, 1], e.g. 0.01,0.05") from None
    else:
        rates, where_r = list(exp.rates), "[experiment] rates"
    if not rates:
        raise plan_error(where_r, "no label rates, so no runs; give at least one in (0, 1], e.g. 0.01")
    bad = [r for r in rates if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r <= 1]
    if bad:
        raise plan_error(where_r, f"label rates must be in (0, 1] (the share of each leaf's training documents "
                                  f"that keeps its labels), got {bad}")
    if args.seeds is not None:
        # "5" means five seeds 0..4; "3,7" means exactly those seeds.
        where_s = flag("seeds", args.seeds)
        try:
            numbers = [int(p) for p in args.seeds.split(",")]
        except ValueError:
            raise plan_error(where_s, "expected a number of seeds (e.g. 5: seeds 0..4) or comma-separated "
                                      "seeds (e.g. 0,1,2)") from None
        if len(numbers) == 1:
            if numbers[0] < 1:
                raise plan_error(where_s, f"{numbers[0]} seeds plan no runs; give a count >= 1 (e.g. 5: seeds "
                                          "0..4) or the seeds themselves (e.g. 0,1,2)")
            seeds = list(range(numbers[0]))
        else:
            seeds = numbers
    else:
        seeds, where_s = list(exp.seeds), "[experiment] seeds"
        if not seeds:
            raise plan_error(where_s, "no seeds, so no runs; give at least one, e.g. [0, 1, 2]")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad:
        raise plan_error(where_s, f"seeds must be integers >= 0, got {bad}")
    if args.setting is not None:
        setting_list, where_st = args.setting.split(","), flag("setting", args.setting)
    else:
        setting_list, where_st = list(exp.settings), "[experiment] settings"
    for st in setting_list:
        if st not in ("labeled", "dataless"):
            raise plan_error(where_st, f"expected labeled, dataless or labeled,dataless, got {st!r}")
    sup = settings.supervision
    weak_mode = args.weak_mode or sup.weak_mode
    min_similarity = sup.min_similarity if args.min_similarity is None else args.min_similarity
    desc_path = args.descriptions or sup.descriptions
    if "dataless" in setting_list and not desc_path:
        raise InputError("the dataless setting needs --descriptions FILE (JSON node -> description) "
                         "or [supervision] descriptions in the settings")
    given_taxonomy = _taxonomy(args) if args.taxonomy else None
    # The results folder is resumed by design (files in it are replaced one by one); it may not be, or lie
    # inside, an input, nor be a model or other output; its rejects table is rewritten by every run.
    from .output_paths import Output
    inputs = [("--docs", args.docs), ("--taxonomy", args.taxonomy), ("--descriptions", desc_path)]
    rejects_path = os.path.join(args.output_dir, "rejects")
    _check_outputs(None, [Output("--output-dir", args.output_dir, None)], inputs, False)
    _check_outputs(None, [Output("--output-dir (its rejects)", rejects_path, "rejects", source=args.docs)], inputs,
                   True)
    spark = build_session(settings.spark)
    os.makedirs(args.output_dir, exist_ok=True)
    docs = _read_valid(spark, args.docs, rejects_path, None, None, args.docs_format)
    taxonomy = given_taxonomy or _taxonomy(args, docs)
    descriptions = None
    if "dataless" in setting_list:
        from .weak import load_descriptions
        descriptions = load_descriptions(desc_path, taxonomy)
    rows = run_experiment(docs, taxonomy, settings.features, settings.model, methods, rates, seeds,
                          exp.test_fraction, args.output_dir, setting=setting_list,
                          descriptions=descriptions, weak_mode=weak_mode,
                          min_similarity=min_similarity, resume=not args.no_resume,
                          discriminative_c=exp.discriminative_c, report_rate=exp.report_rate,
                          paper=exp.paper_reference, tune=settings.tune)
    from .report import table2
    print(table2(rows, exp.report_rate))
    return 0


def cmd_report(args, settings) -> int:
    from .experiment import read_csv
    from .report import PAPERS, table2, write_report
    rows = read_csv(args.results)
    if not rows:
        raise InputError(f"{args.results}: no results (expected results.csv of pcem experiment)")
    out_dir = args.output_dir or os.path.dirname(os.path.abspath(args.results))
    os.makedirs(out_dir, exist_ok=True)
    rate = settings.experiment.report_rate if args.rate is None else args.rate
    written = write_report(rows, out_dir, rate, PAPERS.get(settings.experiment.paper_reference))
    print(table2(rows, rate))
    print("written: " + ", ".join(os.path.join(out_dir, w) for w in written))
    return 0


COMMANDS = {"ingest-20ng": cmd_ingest, "ingest-warc": cmd_ingest_warc, "train": cmd_train, "predict": cmd_predict,
            "evaluate": cmd_evaluate, "inspect": cmd_inspect, "experiment": cmd_experiment,
            "report": cmd_report}


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    from .session import setup_logging
    setup_logging(args.log_level)
    try:
        settings = _settings(args)
        return COMMANDS[args.command](args, settings)
    except KeyboardInterrupt:
        print(f"pcem {args.command}: interrupted", file=sys.stderr)
        return 130
    except BaseException as exc:  # noqa: BLE001 - the one place that turns exceptions into exit codes
        if isinstance(exc, SystemExit):
            raise
        code, message = classify_failure(exc)
        if code == EXIT_BUG:
            log.exception("unexpected error (a bug in pcem-spark; please report it)")
        else:
            log.error("%s", message)
            log.debug("details", exc_info=exc)
        kind = {EXIT_BAD_INPUT: "error", EXIT_TRANSIENT: "runtime failure (retry)", EXIT_BUG: "internal error"}[code]
        print(f"pcem {args.command}: {kind}: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
