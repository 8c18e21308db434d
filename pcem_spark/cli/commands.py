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

import json
import logging
import os
import time
from typing import Optional

from pcem_spark.cli.parser import DEFAULT_CONFIG
from pcem_spark.errors import InputError

# Re-exported: schedulers' wrappers and the tests import them from here.


log = logging.getLogger("pcem")


def _settings(args):
    from pcem_spark.cli.config import load_settings

    path = args.config
    if path is None and os.path.exists(DEFAULT_CONFIG):
        path = DEFAULT_CONFIG
    return load_settings(path, args.overrides)


def _taxonomy(args, docs=None):
    from pcem_spark.core.taxonomy import load_taxonomy

    if getattr(args, "taxonomy", None):
        return load_taxonomy(args.taxonomy)
    from pcem_spark.model.label_checks import warn_singleton_leaves
    from pcem_spark.model.labels import infer_taxonomy

    taxonomy = infer_taxonomy(docs)
    # Before --label-rate hides labels: sampling would make false singletons.
    warn_singleton_leaves(docs, taxonomy, where=getattr(args, "docs", None))
    return taxonomy


def _check_outputs(spark, outputs, inputs, overwrite: bool, check_existing: bool = True) -> None:
    """Fail before any work if an output would replace an input, another output or existing data."""
    from pcem_spark.io.output_paths import check_output_paths

    check_output_paths(spark, outputs, inputs, overwrite, check_existing)


def _rejects_output(args, main_path: str, docs: str):
    """The rejects table's Output: --rejects, or MAIN_rejects beside the main output."""
    import re

    from pcem_spark.io.output_paths import Output

    if not args.rejects and re.fullmatch(r"(?:[A-Za-z][\w+.-]*:/*[^/]*)?/*", main_path.rstrip("/")):
        # A bucket or file system root: "s3a://bucket_rejects" would be another bucket.
        raise InputError(f"{main_path!r} is the root of a file system or bucket: give --rejects PATH")
    if args.rejects:
        return Output("--rejects", args.rejects, "rejects", source=docs)
    return Output(
        "--rejects (default: beside the main output)", main_path.rstrip("/") + "_rejects", "rejects", source=docs
    )


def _check_label_rate(rate: Optional[float]) -> None:
    if rate is not None and not 0.0 < rate <= 1.0:
        raise InputError(f"--label-rate must be in (0, 1], got {rate}")


def _read_valid(
    spark, path: str, rejects_path: str, split: Optional[str], counts: Optional[dict] = None, fmt: Optional[str] = None
):
    """Read documents, write the rejects table (atomically), log counts; return the valid rows.

    Rejects are decided on the whole table before ``--split`` filters, so a
    malformed row (whose split is unknown) is never lost to the filter. The
    rejects table belongs to the run's main output, whose existence the
    caller has checked, so a leftover of a failed run is replaced; its marker
    holds the counts (rows read = valid + rejected). ``counts`` (a dict) is
    filled with them for the main output's marker.
    """
    from pyspark.sql import functions as F

    from pcem_spark.io.documents import count_input_rows, detect_format, log_counts, read_documents, split_rejects
    from pcem_spark.io.outputs import atomic_output

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
        summary = {
            "source": path,
            "rows_read": n_in,
            "valid": n_good,
            "rejected": n_rej,
            "rejected_by_reason": by_reason,
        }
        staged.info.update(summary)
    if counts is not None:
        counts.update({**summary, "rejects": rejects_path})
    if n_in != n_good:
        log.warning("%d rejected rows written to %s", n_in - n_good, rejects_path)
    if split is not None:
        good = good.where(F.col("split") == split)
        n_split = good.count()
        log.info(
            "%s: %d valid documents with split=%r, %d valid documents with another split left out",
            path,
            n_split,
            split,
            n_good - n_split,
        )
        n_good = n_split
        if counts is not None:
            counts["split"], counts["selected"] = split, n_split
    if n_good == 0:
        raise InputError(
            f"{path}: no valid documents"
            + (f" with split={split!r}" if split else "")
            + f" (the rejects, with their reasons, are in {rejects_path})"
        )
    return good


def cmd_ingest(args, settings) -> int:
    from pcem_spark.io.newsgroups import iter_20ng, write_jsonl
    from pcem_spark.io.output_paths import Output

    t0 = time.perf_counter()
    out = args.output
    inputs = [("--archive", args.archive)]
    jsonl = out.rstrip("/").endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz"))
    # Before the archive is read: a JSON Lines file is local, so all of it; a Parquet table only by its path
    # (where it lives -- local disk or HDFS -- only Spark can say; checked in full below).
    _check_outputs(
        None,
        [Output("--output", out, None, directory=False) if jsonl else Output("--output", out, "documents")],
        inputs,
        args.overwrite,
        check_existing=jsonl,
    )
    if jsonl:
        n, per_split = write_jsonl(iter_20ng(args.archive, args.headers), out)
    else:
        from pcem_spark.engine.session import build_session
        from pcem_spark.io.documents import DOCUMENT_SCHEMA
        from pcem_spark.io.outputs import atomic_output

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
    log.info(
        "ingest-20ng: %d documents (%s) -> %s in %.1fs",
        n,
        ", ".join(f"{k}: {v}" for k, v in sorted(per_split.items())),
        out,
        time.perf_counter() - t0,
    )
    return 0


def cmd_ingest_warc(args, settings) -> int:
    from pcem_spark.engine.session import build_session
    from pcem_spark.io.output_paths import Output
    from pcem_spark.io.warc import ingest_warc, split_inputs
    from pcem_spark.io.warc_records import require_libraries

    require_libraries()  # before starting Spark: a missing library is exit 2 in a second
    spark = build_session(settings.spark)
    rejects = _rejects_output(args, args.output, ",".join(args.input))
    _check_outputs(
        spark,
        [Output("--output", args.output, "documents"), rejects],
        [("--input", path) for path in split_inputs(args.input)],
        args.overwrite,
    )
    ingest_warc(
        spark,
        args.input,
        args.output,
        rejects.path,
        id_field=args.id_field,
        min_text_chars=args.min_text_chars,
        overwrite=args.overwrite,
    )
    return 0


def cmd_train(args, settings) -> int:
    from pyspark.sql import functions as F

    from pcem_spark.engine.session import build_session
    from pcem_spark.experiment.protocol import assign_roles
    from pcem_spark.ml import train

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
    from pcem_spark.io.output_paths import Output

    rejects = _rejects_output(args, args.model, args.docs)
    _check_outputs(
        spark,
        [Output("--model", args.model, "model"), rejects],
        [
            ("--docs", args.docs),
            ("--taxonomy", args.taxonomy),
            ("--descriptions", args.descriptions or settings.supervision.descriptions),
            ("--init-model", args.init_model),
        ],
        args.overwrite,
    )
    warm = None
    if args.init_model:  # read and checked before the documents: a wrong init model fails in seconds
        from pcem_spark.model.warm import WarmStart

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
        from pcem_spark.io.descriptions import load_descriptions
        from pcem_spark.ml.training import train_weak

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
        model, result = train_weak(
            docs,
            taxonomy,
            descriptions,
            settings.features,
            settings.model if warm is not None else settings.model.resolved(),
            args.weak_mode,
            args.min_similarity,
            weak_col,
            warm_start=warm,
        )
    else:
        if args.label_rate is not None:
            roled = assign_roles(docs, args.seed, 0.0, args.label_rate)
            docs = roled.select("id", "text", F.when(F.col("role") == "labeled", F.col("labels")).alias("labels"))
            log.info(
                "train: --label-rate %g (seed %d) keeps the labels of a stratified sample", args.label_rate, args.seed
            )
        if args.tune and not settings.tune.grid and not settings.model.auto_params():
            raise InputError(
                '--tune: nothing to tune; set [tune] grid (e.g. --set \'tune.grid={"smoothing": '
                '[0.03, 0.1, 0.3]}\') or leave model.unlabeled_weight / path_weight at "auto"'
            )
        model, result = train(
            docs,
            taxonomy,
            settings.features,
            settings.model,
            tune=settings.tune,
            seed=args.seed,
            extra_grid=settings.tune.grid if args.tune else None,
            init_model=warm,
            retune_auto=args.tune,
        )
        tuning = model.training_summary.get("tuning")
        if tuning and tuning.get("tuned"):
            log.info(
                "train: cross-validation (%d folds, %s) chose %s", tuning["folds"], tuning["metric"], tuning["chosen"]
            )
    log.info(
        "train: smoothing %g, unlabeled_weight %s, path_weight %s",
        model.model_settings.smoothing,
        model.model_settings.unlabeled_weight,
        model.model_settings.path_weight,
    )
    ws = model.training_summary.get("warm_start")
    if ws:
        log.info(
            "train: warm start from %s (%d terms kept, %d dropped, %d new; from it: %s)",
            ws["path"],
            ws["terms_kept"],
            ws["terms_dropped"],
            ws["terms_new"],
            ", ".join(f"{k} {v}" for k, v in ws["inherited"].items()) or "no setting",
        )
    model.training_summary = {**(model.training_summary or {}), "input": counts}
    model.save(args.model, overwrite=args.overwrite)
    its = result.iter_seconds
    log.info(
        "train: %s on %d labelled + %d unlabelled documents, %d EM iterations (%s), "
        "median iteration %.2fs, total %.1fs -> %s",
        settings.model.method,
        result.n_labeled,
        result.n_unlabeled,
        result.n_iter,
        "converged" if result.converged else "not converged",
        float(sorted(its)[len(its) // 2]) if its else 0.0,
        time.perf_counter() - t0,
        args.model,
    )
    return 0


def cmd_predict(args, settings) -> int:
    from pcem_spark.engine.progress import log_progress
    from pcem_spark.engine.session import build_session
    from pcem_spark.io.outputs import atomic_output
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.schema import check_prediction_options

    # Flags override [predict]; checked before Spark starts.
    min_probability = settings.predict.min_probability if args.min_probability is None else args.min_probability
    top_k = settings.predict.top_k if args.top_k is None else args.top_k
    check_prediction_options(
        min_probability,
        top_k,
        names=(
            "--min-probability" if args.min_probability is not None else "predict.min_probability",
            "--top-k" if args.top_k is not None else "predict.top_k",
        ),
    )
    spark = build_session(settings.spark)
    t0 = time.perf_counter()
    from pcem_spark.io.output_paths import Output

    rejects = _rejects_output(args, args.output, args.docs)
    _check_outputs(
        spark,
        [Output("--output", args.output, "predictions"), rejects],
        [("--model", args.model), ("--docs", args.docs)],
        args.overwrite,
    )
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
        staged.info.update(
            {
                "rows": n_out,
                "model": args.model,
                "input": counts,
                "min_probability": float(min_probability),
                "top_k": int(top_k),
            }
        )
        if min_probability > 0:
            from pcem_spark.model.schema import abstention_counts

            staged.info["abstention"] = abstention_counts(spark.read.parquet(staged.tmp), model.taxonomy)
            log.info("predict: --min-probability %g: %s", min_probability, staged.info["abstention"])
    log.info("predict: %d predictions -> %s in %.1fs", n_out, args.output, time.perf_counter() - t0)
    return 0


def cmd_evaluate(args, settings) -> int:
    from pyspark.sql import functions as F

    from pcem_spark.core.taxonomy import load_taxonomy
    from pcem_spark.engine.session import build_session
    from pcem_spark.evaluation.metrics import evaluate_predictions, format_metrics
    from pcem_spark.io.outputs import atomic_write_text, require_complete
    from pcem_spark.model.path_model import PathModel

    if not (args.taxonomy or args.model):
        raise InputError("evaluate needs --model or --taxonomy (the set of nodes to score)")
    spark = build_session(settings.spark)
    if args.output:
        from pcem_spark.io.output_paths import Output

        _check_outputs(
            None,
            [Output("--output", args.output, None, directory=False)],
            [("--predictions", args.predictions), ("--model", args.model), ("--taxonomy", args.taxonomy)],
            args.overwrite,
        )
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
        raise InputError(
            f"{args.predictions}: none of the {n_rows} predictions has true labels to score "
            "against (predict documents that carry a 'labels' path)"
        )
    if n_labeled < n_rows:
        log.warning(
            "evaluate: %d of %d predictions have no true labels; they are not scored", n_rows - n_labeled, n_rows
        )
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
    from pcem_spark.engine.session import build_session
    from pcem_spark.io.outputs import require_complete
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.ops.inspection import (
        check_local_output,
        confusion_counts,
        confusion_tables,
        inspect_model,
        inspection_files,
        write_inspection,
    )

    if args.top_terms < 1:
        raise InputError(f"--top-terms must be >= 1, got {args.top_terms}")
    from pcem_spark.io.output_paths import Output
    from pcem_spark.ops.inspection import INSPECT_KIND

    out = check_local_output(args.output)
    # Before starting Spark (local paths only: inspect writes plain files).
    _check_outputs(
        None,
        [Output("--output", out, INSPECT_KIND)],
        [("--model", args.model), ("--predictions", args.predictions)],
        args.overwrite,
    )
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
            raise InputError(
                f"--predictions {args.predictions}: none of the {n_without} predictions has true "
                "labels to build a confusion table from (predict documents that carry 'labels')"
            )
        if n_without:
            log.warning(
                "inspect: %d of %d predictions have no true labels; not in the confusion tables",
                n_without,
                n_scored + n_without,
            )
        confusion = confusion_tables(cells, model.taxonomy, n_scored, n_without)
        confusion["predictions"] = args.predictions
    files = inspection_files(report, confusion)
    write_inspection(out, files, overwrite=args.overwrite, info={"model": args.model, "predictions": args.predictions})
    log.info("inspect: %s -> %s (%s) in %.1fs", args.model, out, ", ".join(sorted(files)), time.perf_counter() - t0)
    return 0


def cmd_experiment(args, settings) -> int:
    from pcem_spark.engine.session import build_session
    from pcem_spark.experiment.protocol import ALL_METHODS, run_experiment

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
        raise plan_error(
            where_r,
            f"label rates must be in (0, 1] (the share of each leaf's training documents "
            f"that keeps its labels), got {bad}",
        )
    if args.seeds is not None:
        # "5" means five seeds 0..4; "3,7" means exactly those seeds.
        where_s = flag("seeds", args.seeds)
        try:
            numbers = [int(p) for p in args.seeds.split(",")]
        except ValueError:
            raise plan_error(
                where_s, "expected a number of seeds (e.g. 5: seeds 0..4) or comma-separated seeds (e.g. 0,1,2)"
            ) from None
        if len(numbers) == 1:
            if numbers[0] < 1:
                raise plan_error(
                    where_s,
                    f"{numbers[0]} seeds plan no runs; give a count >= 1 (e.g. 5: seeds "
                    "0..4) or the seeds themselves (e.g. 0,1,2)",
                )
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
        raise InputError(
            "the dataless setting needs --descriptions FILE (JSON node -> description) "
            "or [supervision] descriptions in the settings"
        )
    given_taxonomy = _taxonomy(args) if args.taxonomy else None
    # The results folder is resumed by design (files in it are replaced one by one); it may not be, or lie
    # inside, an input, nor be a model or other output; its rejects table is rewritten by every run.
    from pcem_spark.io.output_paths import Output

    inputs = [("--docs", args.docs), ("--taxonomy", args.taxonomy), ("--descriptions", desc_path)]
    rejects_path = os.path.join(args.output_dir, "rejects")
    _check_outputs(None, [Output("--output-dir", args.output_dir, None)], inputs, False)
    _check_outputs(
        None, [Output("--output-dir (its rejects)", rejects_path, "rejects", source=args.docs)], inputs, True
    )
    spark = build_session(settings.spark)
    os.makedirs(args.output_dir, exist_ok=True)
    docs = _read_valid(spark, args.docs, rejects_path, None, None, args.docs_format)
    taxonomy = given_taxonomy or _taxonomy(args, docs)
    descriptions = None
    if "dataless" in setting_list:
        from pcem_spark.io.descriptions import load_descriptions

        descriptions = load_descriptions(desc_path, taxonomy)
    rows = run_experiment(
        docs,
        taxonomy,
        settings.features,
        settings.model,
        methods,
        rates,
        seeds,
        exp.test_fraction,
        args.output_dir,
        setting=setting_list,
        descriptions=descriptions,
        weak_mode=weak_mode,
        min_similarity=min_similarity,
        resume=not args.no_resume,
        discriminative_c=exp.discriminative_c,
        report_rate=exp.report_rate,
        paper=exp.paper_reference,
        tune=settings.tune,
    )
    from pcem_spark.experiment.report import table2

    print(table2(rows, exp.report_rate))
    return 0


def cmd_report(args, settings) -> int:
    from pcem_spark.experiment.protocol import read_csv
    from pcem_spark.experiment.report import PAPERS, table2, write_report

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
