"""One function per ``pcem`` command but ``experiment`` / ``report`` (:mod:`pcem_spark.cli.experiment_commands`).

Each ``cmd_*(args, settings)`` gets the parsed arguments and the settings
(:func:`pcem_spark.cli.inputs.settings_from_args`), checks every output path
and cheap input before Spark starts where it can, calls the library and
returns the exit code (0); failures are raised and turned into exit codes by
:func:`pcem_spark.cli.app.main`. Spark is started inside each command
(``build_session`` imported when the command runs).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import NamedTuple

from pcem_spark.cli.inputs import (
    check_label_rate,
    check_outputs,
    connect_staging,
    read_valid_documents,
    rejects_output,
    taxonomy_for,
)
from pcem_spark.errors import InputError

__all__ = [
    "cmd_ingest",
    "cmd_ingest_warc",
    "cmd_train",
    "cmd_predict",
    "cmd_evaluate",
    "cmd_inspect",
]

log = logging.getLogger("pcem")


def cmd_ingest(args, settings) -> int:
    from pcem_spark.io.newsgroups import iter_20ng, write_jsonl
    from pcem_spark.io.output_paths import Output

    t0 = time.perf_counter()
    out = args.output
    inputs = [("--archive", args.archive)]
    jsonl = out.rstrip("/").endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz"))
    # Before the archive is read: a JSON Lines file is local, so all of it; a Parquet table only by its path
    # (where it lives -- local disk or HDFS -- only Spark can say; checked in full below).
    check_outputs(
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
        check_outputs(spark, [Output("--output", out, "documents")], inputs, args.overwrite)
        slices = max(spark.sparkContext.defaultParallelism, n // 2000 + 1)  # ~2,000 messages per task
        df = spark.createDataFrame(spark.sparkContext.parallelize(rows, slices), DOCUMENT_SCHEMA)
        with atomic_output(spark, out, "documents", overwrite=args.overwrite, parts=[""]) as staged:
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
    rejects = rejects_output(args, args.output, ",".join(args.input))
    check_outputs(
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

    from pcem_spark.engine.session import build_session

    if args.method:
        settings.model.method = args.method
        settings.model.validate()
    check_label_rate(args.label_rate)
    # Cheap checks before the read: a wrong taxonomy or descriptions path fails in a second.
    given_taxonomy = taxonomy_for(args) if args.taxonomy else None
    for path in (args.descriptions,):
        if path and "://" not in path and not os.path.exists(path):
            raise FileNotFoundError(f"--descriptions {path!r} does not exist")
    spark = build_session(settings.spark, connect_ok=True)
    with connect_staging(spark, args.model):
        return _train_on(spark, args, settings, given_taxonomy)


def _train_on(spark, args, settings, given_taxonomy) -> int:
    """``pcem train`` once the session exists (the staging directory of a Connect session around it)."""
    from pyspark.sql import functions as F

    from pcem_spark.experiment.protocol import assign_roles
    from pcem_spark.ml import train

    t0 = time.perf_counter()
    from pcem_spark.io.output_paths import Output

    rejects = rejects_output(args, args.model, args.docs)
    check_outputs(
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
    docs = read_valid_documents(
        spark,
        args.docs,
        rejects.path,
        args.split,
        counts,
        args.docs_format,
        allow_incomplete=args.allow_incomplete_input,
        require_success=args.require_success,
    )
    taxonomy = given_taxonomy or (warm.model.taxonomy if warm is not None else taxonomy_for(args, docs))
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

    from pcem_spark.core.beam import check_beam
    from pcem_spark.engine.session import build_session
    from pcem_spark.model.schema import check_multi_path, check_output_columns, check_prediction_options

    # Flags override [predict]; checked before Spark starts.
    min_probability = settings.predict.min_probability if args.min_probability is None else args.min_probability
    top_k = settings.predict.top_k if args.top_k is None else args.top_k
    beam_name = "--beam" if args.beam is not None else "predict.beam"
    beam = settings.predict.beam if args.beam is None else args.beam
    check_beam(beam, beam_name)
    check_prediction_options(
        min_probability,
        top_k,
        names=(
            "--min-probability" if args.min_probability is not None else "predict.min_probability",
            "--top-k" if args.top_k is not None else "predict.top_k",
        ),
    )
    keep, partition_by, output_names = _output_columns(args, settings)
    node_probabilities = bool(args.node_probabilities or settings.predict.node_probabilities)
    multi_path = settings.predict.multi_path if args.multi_path is None else args.multi_path
    check_multi_path(multi_path, "--multi-path" if args.multi_path is not None else "predict.multi_path")
    check_output_columns(keep, partition_by, min_probability, top_k, names=output_names)
    spark = build_session(settings.spark, connect_ok=True)
    options = _PredictOptions(
        min_probability, top_k, beam, beam_name, keep, partition_by, output_names, node_probabilities, multi_path
    )
    with connect_staging(spark, args.output):
        return _predict_on(spark, args, settings, options)


class _PredictOptions(NamedTuple):
    """``pcem predict``'s options, flags over ``[predict]``, checked before Spark starts."""

    min_probability: float
    top_k: int
    beam: object
    beam_name: str
    keep: list
    partition_by: str
    output_names: tuple
    node_probabilities: bool
    multi_path: float


def _predict_on(spark, args, settings, options: _PredictOptions) -> int:
    """``pcem predict`` once the session exists (the staging directory of a Connect session around it)."""
    (
        min_probability,
        top_k,
        beam,
        beam_name,
        keep,
        partition_by,
        output_names,
        node_probabilities,
        multi_path,
    ) = options
    from pyspark.sql import functions as F

    from pcem_spark.engine.progress import log_progress
    from pcem_spark.io.outputs import atomic_output
    from pcem_spark.io.partition_folders import FOLDER_NAME_BYTES, check_partition_folders, partition_folder
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.schema import LEVEL1

    t0 = time.perf_counter()
    from pcem_spark.io.output_paths import Output

    rejects = rejects_output(args, args.output, args.docs)
    check_outputs(
        spark,
        [Output("--output", args.output, "predictions"), rejects],
        [("--model", args.model), ("--docs", args.docs)],
        args.overwrite,
    )
    model = PathModel.load(args.model)
    model.tokenizer = settings.predict.tokenizer
    width = model.beam_width(beam, beam_name)  # "auto" resolved; a beam for a method that has none refused
    max_partitions = settings.predict.max_partitions
    if partition_by == LEVEL1:  # the folders are the level-1 nodes (and one for an empty path): known now
        level1 = [n for n in model.taxonomy.children(model.taxonomy.root) if n in model.taxonomy.real_nodes]
        check_partition_folders(LEVEL1, level1, output_names[1])
        _check_partition_count(len(level1) + 1, max_partitions, output_names[1], LEVEL1)
    counts: dict = {}
    # Not cached again: the valid rows are a filter of the checked rows read_valid_documents persisted,
    # and it has counted them.
    docs = read_valid_documents(
        spark,
        args.docs,
        rejects.path,
        args.split,
        counts,
        args.docs_format,
        keep,
        allow_incomplete=args.allow_incomplete_input,
        require_success=args.require_success,
        distinct=partition_by if partition_by and partition_by != LEVEL1 else None,
    )
    n_in = counts["selected"] if args.split is not None else counts["valid"]
    if "distinct_values" in counts:  # counted in the pass that counted the rows: before anything is written
        _check_partition_count(counts["distinct_values"], max_partitions, output_names[1], partition_by)
        longest = len(partition_folder(partition_by, "").split("=", 1)[0]) + 1 + counts["longest_folder_value"]
        if longest > FOLDER_NAME_BYTES:
            raise InputError(
                f"{output_names[1]} = {partition_by!r}: a value of the column would be written to a folder named "
                f"{longest} bytes long, over the {FOLDER_NAME_BYTES} a folder name may have; partition by "
                "another column"
            )
    if partition_by and partition_by != LEVEL1:
        kind = docs.schema[partition_by].dataType.simpleString()
        if kind.startswith(("array", "map", "struct", "binary")):
            raise InputError(
                f"{output_names[1]} = {partition_by!r}: column of type {kind}; a partition column must be a "
                "string, number, date or boolean (its values become folder names)"
            )
    if width > 0:
        log.info(
            "predict: beam search of width %d over %d paths (%s = %r)", width, model.taxonomy.n_paths, beam_name, beam
        )
    pred = model.transform(
        docs,
        min_probability=min_probability,
        top_k=top_k,
        beam=width,
        keep_columns=keep,
        node_probabilities=node_probabilities,
        multi_path=multi_path,
    )
    writer = pred.write
    if partition_by == LEVEL1:
        pred = pred.withColumn(LEVEL1, F.try_element_at(F.col("path"), F.lit(1)))  # null for an empty path
        writer = pred.write
    if partition_by:
        # Partition values are folder names: Spark escapes the characters a path cannot hold, and reads
        # the column back from them (a null becomes __HIVE_DEFAULT_PARTITION__ on disk, null when read).
        writer = writer.partitionBy(partition_by)
    # Written to a temporary sibling and moved into place with its marker: --overwrite keeps the old
    # predictions until the new ones are complete, and a killed run never leaves part files to be read.
    with atomic_output(spark, args.output, "predictions", overwrite=args.overwrite, parts=[""]) as staged:
        with log_progress(spark, "predict", n_in):
            writer.parquet(staged.tmp)
        n_out = spark.read.parquet(staged.tmp).count()
        if n_out != n_in:  # the contract: exactly one row per valid input document
            raise RuntimeError(f"predict wrote {n_out} rows for {n_in} valid documents")
        staged.info.update(
            {
                "rows": n_out,
                "model": args.model,
                "model_version": model.version,  # the run id of the model version that predicted
                "input": counts,
                "min_probability": float(min_probability),
                "top_k": int(top_k),
                "beam": int(width),
                "tokenizer": "python" if model.text_featurizer() is not None else "spark",
                "node_probabilities": node_probabilities,
                "multi_path": float(multi_path),
                "calibrated": model.effective_temperature != 1.0,
                "keep_columns": list(keep),
                "partition_by": partition_by or None,
            }
        )
        if min_probability > 0:
            from pcem_spark.model.schema import abstention_counts

            staged.info["abstention"] = abstention_counts(spark.read.parquet(staged.tmp), model.taxonomy)
            log.info("predict: --min-probability %g: %s", min_probability, staged.info["abstention"])
    log.info("predict: %d predictions -> %s in %.1fs", n_out, args.output, time.perf_counter() - t0)
    return 0


def _check_partition_count(n_values: int, max_partitions: int, name: str, column: str) -> None:
    """Refuse a partitioning into more folders than ``predict.max_partitions`` (one folder per value)."""
    if n_values > max_partitions:
        raise InputError(
            f"{name} = {column!r}: {n_values:,} distinct values would make {n_values:,} folders, over "
            f"predict.max_partitions = {max_partitions:,} (a folder per value costs a file per task in each); "
            "partition by a column with fewer values, or raise predict.max_partitions"
        )


def _output_columns(args, settings):
    """(kept input columns, partition column or "", the names to report them by): flags over [predict]."""
    if args.keep_columns is not None:
        keep = [c.strip() for c in args.keep_columns.split(",") if c.strip()]
        keep_name = "--keep-columns"
    else:
        keep, keep_name = list(settings.predict.keep_columns), "predict.keep_columns"
    if args.partition_by is not None:
        partition_by, partition_name = args.partition_by.strip(), "--partition-by"
    else:
        partition_by, partition_name = settings.predict.partition_by.strip(), "predict.partition_by"
    return keep, partition_by, (keep_name, partition_name)


def cmd_evaluate(args, settings) -> int:
    from pyspark.sql import functions as F

    from pcem_spark.core.taxonomy import load_taxonomy
    from pcem_spark.engine.session import build_session
    from pcem_spark.evaluation.metrics import evaluate_predictions, format_metrics
    from pcem_spark.io.file_system import file_system, session_path
    from pcem_spark.io.outputs import atomic_write_text
    from pcem_spark.io.snapshots import read_pinned
    from pcem_spark.model.path_model import PathModel

    if not (args.taxonomy or args.model):
        raise InputError("evaluate needs --model or --taxonomy (the set of nodes to score)")
    spark = build_session(settings.spark, connect_ok=True)
    if args.output:
        from pcem_spark.io.output_paths import Output

        check_outputs(
            None,
            [Output("--output", args.output, None, directory=False)],
            [("--predictions", args.predictions), ("--model", args.model), ("--taxonomy", args.taxonomy)],
            args.overwrite,
        )
    if args.taxonomy:
        taxonomy = load_taxonomy(args.taxonomy)
    else:
        taxonomy = PathModel.load(args.model).taxonomy
    source = f"--taxonomy {args.taxonomy}" if args.taxonomy else f"the taxonomy of --model {args.model}"

    def score(snap):
        pred = snap.table(spark)
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
        return evaluate_predictions(pred, taxonomy, where=f"{args.predictions} scored against {source}")

    # One version of the predictions, whatever a concurrent predict --overwrite does to the path.
    predictions = session_path(spark, args.predictions)
    metrics = read_pinned(file_system(spark, predictions), predictions, "predictions", score)
    print(format_metrics(metrics))
    if args.output:
        atomic_write_text(args.output, json.dumps(metrics, indent=2))
        log.info("evaluate: metrics -> %s", args.output)
    return 0


def cmd_inspect(args, settings) -> int:
    """Per-node masses, priors and top terms (+ per-level confusion) as plain files (pcem_spark.ops.inspection)."""
    from pcem_spark.engine.session import build_session
    from pcem_spark.io.file_system import file_system, session_path
    from pcem_spark.io.snapshots import read_pinned
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.ops.inspection import check_local_output, inspect_model, inspection_files, write_inspection

    if args.top_terms < 1:
        raise InputError(f"--top-terms must be >= 1, got {args.top_terms}")
    from pcem_spark.io.output_paths import Output
    from pcem_spark.ops.inspection import INSPECT_KIND

    out = check_local_output(args.output)
    # Before starting Spark (local paths only: inspect writes plain files).
    check_outputs(
        None,
        [Output("--output", out, INSPECT_KIND)],
        [("--model", args.model), ("--predictions", args.predictions)],
        args.overwrite,
    )
    t0 = time.perf_counter()
    spark = build_session(settings.spark, connect_ok=True)
    model = PathModel.load(args.model)
    report = inspect_model(model, args.top_terms, model_path=args.model, rank=args.rank_terms)
    confusion, reliability = None, None
    if args.predictions:
        # One version of the predictions for the confusion tables and the reliability diagram alike.
        predictions = session_path(spark, args.predictions)
        confusion, reliability = read_pinned(
            file_system(spark, predictions),
            predictions,
            "predictions",
            lambda snap: _confusion_and_reliability(snap.table(spark), args.predictions, model.taxonomy),
        )
    files = inspection_files(report, confusion)
    if reliability is not None:
        from pcem_spark.ops.reliability import reliability_files

        files.update(reliability_files(reliability))
        log.info("inspect: node-probability ECE %.4f over %d nodes", reliability["ece"], reliability["node_events"])
    elif args.predictions:
        log.info("inspect: no node_probabilities column (pcem predict --node-probabilities): no reliability diagram")
    write_inspection(out, files, overwrite=args.overwrite, info={"model": args.model, "predictions": args.predictions})
    log.info("inspect: %s -> %s (%s) in %.1fs", args.model, out, ", ".join(sorted(files)), time.perf_counter() - t0)
    return 0


def _confusion_and_reliability(pred, source: str, taxonomy):
    """(confusion tables, reliability report or None) of a predictions table, for ``pcem inspect``."""
    from pcem_spark.ops.inspection import confusion_counts, confusion_tables

    cells, n_scored, n_without = confusion_counts(pred)
    if n_scored == 0:
        raise InputError(
            f"--predictions {source}: none of the {n_without} predictions has true "
            "labels to build a confusion table from (predict documents that carry 'labels')"
        )
    if n_without:
        log.warning(
            "inspect: %d of %d predictions have no true labels; not in the confusion tables",
            n_without,
            n_scored + n_without,
        )
    confusion = confusion_tables(cells, taxonomy, n_scored, n_without)
    confusion["predictions"] = source
    if "node_probabilities" not in pred.columns:
        return confusion, None
    from pcem_spark.ops.reliability import reliability_counts, reliability_report

    return confusion, reliability_report(*reliability_counts(pred), source=source)
