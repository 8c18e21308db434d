"""One function per ``pcem`` command but ``predict`` (:mod:`pcem_spark.cli.predict_command`) and ``experiment`` /
``report`` (:mod:`pcem_spark.cli.experiment_commands`).

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

from pcem_spark.cli.inputs import (
    DocsOptions,
    LabelsTable,
    check_label_rate,
    check_outputs,
    connect_staging,
    labels_rejects_output,
    preflight,
    read_valid_documents,
    rejects_output,
    taxonomy_for,
)
from pcem_spark.errors import InputError
from pcem_spark.util.redaction import redact

__all__ = [
    "cmd_ingest",
    "cmd_ingest_warc",
    "cmd_train",
    "cmd_evaluate",
    "cmd_inspect",
    "cmd_settings",
    "cmd_quickstart",
    "training_documents",
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
        keep_crawler_records=args.keep_crawler_records,
    )
    return 0


def cmd_train(args, settings) -> int:

    from pcem_spark.engine.session import build_session

    if args.method:
        settings.model.method = args.method
        settings.model.validate()
    check_label_rate(args.label_rate)
    if args.labels and (args.supervision or settings.supervision.kind) != "labels":
        raise InputError(
            "--labels gives documents true labels; it does not apply to weak supervision "
            f"(--supervision {args.supervision or settings.supervision.kind})"
        )
    # Cheap checks before the read: a wrong taxonomy or descriptions path fails in a second.
    given_taxonomy = taxonomy_for(args) if args.taxonomy else None
    for path in (args.descriptions, args.node_embeddings):
        if path and "://" not in path and not os.path.exists(path):
            flag = "--descriptions" if path == args.descriptions else "--node-embeddings"
            raise FileNotFoundError(f"{flag} {path!r} does not exist")
    from pcem_spark.io.output_paths import Output

    preflight(
        settings,
        [Output("--model", args.model, "model"), rejects_output(args, args.model, args.docs)]
        + ([labels_rejects_output(args)] if args.labels else []),
        [
            ("--docs", args.docs),
            ("--labels", args.labels),
            ("--taxonomy", args.taxonomy),
            ("--init-model", args.init_model),
        ],
        args.overwrite,
        models=[("--init-model", args.init_model)],
    )
    spark = build_session(settings.spark, connect_ok=True)
    with connect_staging(spark, args.model):
        return _train_on(spark, args, settings, given_taxonomy)


def _train_on(spark, args, settings, given_taxonomy) -> int:
    """``pcem train`` once the session exists (the staging directory of a Connect session around it)."""
    from pcem_spark.io.output_paths import Output

    t0 = time.perf_counter()

    rejects = rejects_output(args, args.model, args.docs)
    labels_rejects = labels_rejects_output(args) if args.labels else None
    check_outputs(
        spark,
        [Output("--model", args.model, "model"), rejects] + ([labels_rejects] if labels_rejects else []),
        [
            ("--docs", args.docs),
            ("--labels", args.labels),
            ("--taxonomy", args.taxonomy),
            ("--descriptions", args.descriptions or settings.supervision.descriptions),
            ("--node-embeddings", args.node_embeddings),
            ("--init-model", args.init_model),
        ],
        args.overwrite,
    )
    from pcem_spark.cli.train_checkpoint import graceful_stop, open_train_checkpoint

    # Read once this run holds --model's lease (check_outputs): a checkpoint is only ever its owner's.
    checkpoint = open_train_checkpoint(spark, args, settings)
    with graceful_stop(checkpoint, spark, settings.checkpoint.stop_grace_seconds):
        return _train_checkpointed(spark, args, settings, given_taxonomy, checkpoint, t0)


def _train_checkpointed(spark, args, settings, given_taxonomy, checkpoint, t0) -> int:
    """``pcem train`` once its outputs are held and its checkpoint (None: off) is read."""
    from pyspark.sql import functions as F

    from pcem_spark.experiment.protocol import assign_roles
    from pcem_spark.ml import train

    rejects = rejects_output(args, args.model, args.docs)
    labels_rejects = labels_rejects_output(args) if args.labels else None
    warm = None
    if args.init_model:  # read and checked before the documents: a wrong init model fails in seconds
        from pcem_spark.model.warm import WarmStart

        warm = WarmStart.load(args.init_model)
        warm.check(given_taxonomy or warm.model.taxonomy, settings.model, where="--init-model")
    counts: dict = {}
    options = DocsOptions.of(args, embedding=settings.features.embedding)
    docs = read_valid_documents(spark, args.docs, rejects.path, args.split, counts, options)
    labels_table = LabelsTable.read(spark, args.labels, DocsOptions.of(args)) if args.labels else None
    taxonomy = given_taxonomy or (warm.model.taxonomy if warm is not None else None)
    if taxonomy is None and labels_table is not None and docs.where(F.col("labels").isNotNull()).isEmpty():
        # Nothing in --docs is labelled: the labels table's paths are the only ones to infer the tree from.
        log.info("train: no document of --docs is labelled; the taxonomy is inferred from --labels' paths")
        taxonomy = taxonomy_for(args, labels_table.valid)
    if taxonomy is None:
        taxonomy = taxonomy_for(args, docs, counts)
    if labels_table is not None:
        docs, counts["labels_table"] = labels_table.merge_into(spark, docs, taxonomy, labels_rejects.path)
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
            vectors = ["embedding"] if "embedding" in roled.columns else []
            labels = F.when(F.col("role") == "labeled", F.col("labels")).alias("labels")
            docs = roled.select("id", "text", labels, *vectors)
            log.info(
                "train: --label-rate %g (seed %d) keeps the labels of a stratified sample", args.label_rate, args.seed
            )
        if args.tune and not settings.tune.grid and not settings.model.auto_params():
            raise InputError(
                '--tune: nothing to tune; set [tune] grid (e.g. --set \'tune.grid={"smoothing": '
                '[0.03, 0.1, 0.3]}\') or leave model.unlabeled_weight / path_weight at "auto"'
            )
        descriptions = None
        if args.descriptions:  # with true labels, the descriptions add to the category names (model.names)
            from pcem_spark.io.descriptions import load_descriptions

            descriptions = load_descriptions(args.descriptions, taxonomy, every_leaf=False)
        node_vectors = None
        if args.node_embeddings:
            from pcem_spark.io.embeddings import load_node_vectors

            node_vectors = load_node_vectors(args.node_embeddings, taxonomy)
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
            descriptions=descriptions,
            node_vectors=node_vectors,
            checkpoint=checkpoint,
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
    if "labels_table" in counts:  # what came from where
        merged = counts["labels_table"]["merged"]
        counts["labels_table"]["labelled_documents"] = {
            "from_labels_table": merged,
            "from_docs": result.n_labeled - merged,
        }
    model.training_summary = {**(model.training_summary or {}), "input": counts}
    if checkpoint is not None:
        model.training_summary["checkpoint"] = checkpoint.summary()
    model.save(args.model, overwrite=args.overwrite)
    if checkpoint is not None:
        checkpoint.committed()
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


def cmd_evaluate(args, settings) -> int:
    from pyspark.sql import functions as F

    from pcem_spark.core.taxonomy import load_taxonomy
    from pcem_spark.engine.label_columns import has_label_paths
    from pcem_spark.engine.session import build_session
    from pcem_spark.evaluation.metrics import (
        evaluate_predictions,
        format_metrics,
        is_out_of_scope,
        out_of_scope_metrics,
    )
    from pcem_spark.io.file_system import file_system, session_path
    from pcem_spark.io.outputs import atomic_write_text
    from pcem_spark.io.snapshots import read_pinned
    from pcem_spark.model.path_model import PathModel

    if not (args.taxonomy or args.model):
        raise InputError("evaluate needs --model or --taxonomy (the set of nodes to score)")
    from pcem_spark.io.output_paths import Output

    preflight(
        settings,
        [Output("--output", args.output, None, directory=False)] if args.output else [],
        [("--predictions", args.predictions), ("--model", args.model), ("--taxonomy", args.taxonomy)],
        args.overwrite,
        models=[("--model", args.model)],
    )
    spark = build_session(settings.spark, connect_ok=True)
    if args.output:
        from pcem_spark.io.output_paths import Output

        check_outputs(
            None,
            [Output("--output", args.output, None, directory=False)],
            [("--predictions", args.predictions), ("--model", args.model), ("--taxonomy", args.taxonomy)],
            args.overwrite,
        )
    model = PathModel.load(args.model) if args.model else None
    taxonomy = load_taxonomy(args.taxonomy) if args.taxonomy else model.taxonomy
    source = f"--taxonomy {args.taxonomy}" if args.taxonomy else f"the taxonomy of --model {args.model}"
    trained_on = ((model.training_summary or {}).get("input") or {}) if model is not None else {}
    found: dict = {}

    def score(snap):
        seen = found["seen"] = training_documents(snap.marker.get("input") or {}, trained_on)
        if seen:
            log.warning(
                "evaluate: %s: F1 on them flatters the model (its labelled documents are among them); evaluate "
                "predictions of labelled documents kept out of training (predict --split test, or a held-out file)",
                seen,
            )
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
        # Rows marked out of the taxonomy: their recall (an empty path) apart, the others scored.
        out_of_scope = out_of_scope_metrics(pred, (snap.marker or {}).get("min_in_taxonomy"))
        if out_of_scope is not None:
            pred = pred.where(~is_out_of_scope(F.col("labels"), has_label_paths(pred, "labels")))
        # Rows without labels are counted (n_without_labels), not scored. Predictions whose labels or paths the
        # taxonomy does not know: a warning and counts in the metrics, or, for most rows, exit 2 before any output.
        metrics = evaluate_predictions(pred, taxonomy, where=f"{args.predictions} scored against {source}")
        if out_of_scope is not None:
            metrics["out_of_scope"] = out_of_scope
        return metrics

    # One version of the predictions, whatever a concurrent predict --overwrite does to the path.
    predictions = session_path(spark, args.predictions)
    metrics = read_pinned(file_system(spark, predictions), predictions, "predictions", score, spark)
    if model is not None:
        metrics["predicted_training_documents"] = bool(found.get("seen"))
    metrics = redact(metrics)  # the paths it names, printed and stored
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
            spark,
        )
    files = inspection_files(report, confusion)
    if reliability is not None:
        from pcem_spark.ops.reliability import reliability_files

        files.update(reliability_files(reliability))
        log.info("inspect: node-probability ECE %.4f over %d nodes", reliability["ece"], reliability["node_events"])
    elif args.predictions:
        log.info("inspect: no node_probabilities column (pcem predict --node-probabilities): no reliability diagram")
    info = redact({"model": args.model, "predictions": args.predictions})
    write_inspection(out, files, overwrite=args.overwrite, info=info)
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


def cmd_settings(args, settings) -> int:
    """Print the effective settings as JSON: what every other command would run with, from this folder."""
    import json

    from pcem_spark.cli.config import settings_table

    print(json.dumps(settings_table(settings), indent=2, sort_keys=True, default=str))  # secrets redacted
    return 0


def cmd_quickstart(args, settings) -> int:
    """Write the README quick start's sample documents (``train.jsonl``: 84 documents of six categories, two of
    each labelled; ``test.jsonl``: 30 labelled documents kept out of training) into ``--output``."""
    from importlib import resources

    os.makedirs(args.output, exist_ok=True)
    for name in ("train", "test"):
        target = os.path.join(args.output, f"{name}.jsonl")
        if os.path.exists(target) and not args.overwrite:
            raise FileExistsError(f"{target!r} already exists; pass --overwrite to replace it")
        text = resources.files("pcem_spark").joinpath(f"examples/quickstart_{name}.jsonl").read_text(encoding="utf-8")
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
        log.info("quickstart: wrote %s (%d documents)", target, text.count("\n"))
    return 0


def training_documents(predicted: dict, trained: dict) -> str:
    """Why the predicted documents are the model's own training documents ("" when they are not, or unknown).

    ``predicted`` / ``trained``: the ``input`` records of the predictions'
    marker and of the model's training summary (``source``, ``split``). The same
    source with the same split, or without a split on either side, holds the
    model's labelled documents.
    """
    source, train_source = predicted.get("source"), trained.get("source")
    if not source or not train_source or _normalised(source) != _normalised(train_source):
        return ""
    split, train_split = predicted.get("split"), trained.get("split")
    if split is not None and train_split is not None and split != train_split:
        return ""
    where = f" (split {split!r})" if split is not None else ""
    return f"the predictions are of {source}{where}, the documents the model was trained on"


def _normalised(path: str) -> str:
    local = path[len("file:") :] if path.startswith("file:") else path
    return os.path.abspath(local) if "://" not in local else local.rstrip("/")
