"""``pcem predict``: predictions (Parquet) of a saved model, written as one version with its marker.

Flags override ``[predict]``; every option is checked before Spark starts; the
model is read as one pinned version; the partition column's folders are checked
(names, how many) before anything is written.
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

from pcem_spark.cli.inputs import (
    DocsOptions,
    check_outputs,
    connect_staging,
    preflight,
    read_valid_documents,
    rejects_output,
)
from pcem_spark.errors import InputError
from pcem_spark.util.redaction import redact

__all__ = ["cmd_predict"]

log = logging.getLogger("pcem")


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
    from pcem_spark.cli.config import check_min_in_taxonomy

    in_taxonomy_name = "--min-in-taxonomy" if args.min_in_taxonomy is not None else "predict.min_in_taxonomy"
    min_in_taxonomy = settings.predict.min_in_taxonomy if args.min_in_taxonomy is None else args.min_in_taxonomy
    check_min_in_taxonomy(min_in_taxonomy, in_taxonomy_name)
    from pcem_spark.io.output_paths import Output

    preflight(
        settings,
        [Output("--output", args.output, "predictions"), rejects_output(args, args.output, args.docs)],
        [("--model", args.model), ("--docs", args.docs)],
        args.overwrite,
        models=[("--model", args.model)],
    )
    spark = build_session(settings.spark, connect_ok=True)
    options = _PredictOptions(
        min_probability,
        top_k,
        beam,
        beam_name,
        keep,
        partition_by,
        output_names,
        node_probabilities,
        multi_path,
        min_in_taxonomy,
        in_taxonomy_name,
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
    min_in_taxonomy: object  # a number, "suggested" or "none"
    in_taxonomy_name: str  # the flag or setting that gave it


def _predict_on(spark, args, settings, opts: _PredictOptions) -> int:
    """``pcem predict`` once the session exists (the staging directory of a Connect session around it)."""
    from pyspark.sql import functions as F

    from pcem_spark.engine.progress import log_progress
    from pcem_spark.io.outputs import atomic_output
    from pcem_spark.io.partition_folders import FOLDER_NAME_BYTES, check_partition_folders, partition_folder
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.model.schema import LEVEL1, OutputOptions
    from pcem_spark.model.vectors import check_encoder, check_not_kept, vector_column

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
    # "auto" resolved; a beam for a method that has none refused
    width = model.beam_width(opts.beam, opts.beam_name)
    from pcem_spark.model.in_taxonomy import resolve_min_in_taxonomy

    try:  # a number; "suggested" read from the model; refused for a model without the score
        verdict = resolve_min_in_taxonomy(opts.min_in_taxonomy, model)
    except InputError as exc:
        raise InputError(f"{opts.in_taxonomy_name}: {exc}") from None
    max_partitions = settings.predict.max_partitions
    if opts.partition_by == LEVEL1:  # the folders are the level-1 nodes (and one for an empty path): known now
        level1 = [n for n in model.taxonomy.children(model.taxonomy.root) if n in model.taxonomy.real_nodes]
        check_partition_folders(LEVEL1, level1, opts.output_names[1])
        _check_partition_count(len(level1) + 1, max_partitions, opts.output_names[1], LEVEL1)
    counts: dict = {}
    # Not cached again: the valid rows are a filter of the checked rows read_valid_documents persisted,
    # and it has counted them.
    distinct = opts.partition_by if opts.partition_by and opts.partition_by != LEVEL1 else None
    vectors = vector_column(model)  # a model that scores with document vectors reads them, checked
    check_encoder(vectors, settings.features.embedding_model)
    check_not_kept(vectors, opts.keep, "--keep-columns")
    options = DocsOptions.of(
        args,
        keep=opts.keep,
        distinct=distinct,
        embedding=vectors.name if vectors else "none",
        vector_dimension=vectors.dimension if vectors else None,
    )
    docs = read_valid_documents(spark, args.docs, rejects.path, args.split, counts, options)
    n_in = counts["selected"] if args.split is not None else counts["valid"]
    if "distinct_values" in counts:  # counted in the pass that counted the rows: before anything is written
        _check_partition_count(counts["distinct_values"], max_partitions, opts.output_names[1], opts.partition_by)
        longest = len(partition_folder(opts.partition_by, "").split("=", 1)[0]) + 1 + counts["longest_folder_value"]
        if longest > FOLDER_NAME_BYTES:
            raise InputError(
                f"{opts.output_names[1]} = {opts.partition_by!r}: a value of the column would be written to "
                f"a folder named {longest} bytes long, over the {FOLDER_NAME_BYTES} a folder name may have; "
                "partition by another column"
            )
    if opts.partition_by and opts.partition_by != LEVEL1:
        kind = docs.schema[opts.partition_by].dataType.simpleString()
        if kind.startswith(("array", "map", "struct", "binary")):
            raise InputError(
                f"{opts.output_names[1]} = {opts.partition_by!r}: column of type {kind}; a partition column "
                "must be a string, number, date or boolean (its values become folder names)"
            )
    if width > 0:
        log.info(
            "predict: beam search of width %d over %d paths (%s = %r)",
            width,
            model.taxonomy.n_paths,
            opts.beam_name,
            opts.beam,
        )
    outputs = OutputOptions(
        opts.min_probability, opts.top_k, opts.node_probabilities, opts.multi_path, min_in_taxonomy=verdict
    )
    pred = model.transform_outputs(docs, outputs, beam=width, keep_columns=opts.keep)
    writer = pred.write
    if opts.partition_by == LEVEL1:
        pred = pred.withColumn(LEVEL1, F.try_element_at(F.col("path"), F.lit(1)))  # null for an empty path
        writer = pred.write
    if opts.partition_by:
        # Partition values are folder names: Spark escapes the characters a path cannot hold, and reads
        # the column back from them (a null becomes __HIVE_DEFAULT_PARTITION__ on disk, null when read).
        writer = writer.partitionBy(opts.partition_by)
    # Written to a temporary sibling and moved into place with its marker: --overwrite keeps the old
    # predictions until the new ones are complete, and a killed run never leaves part files to be read.
    with atomic_output(spark, args.output, "predictions", overwrite=args.overwrite, parts=[""]) as staged:
        with log_progress(spark, "predict", n_in):
            writer.parquet(staged.tmp)
        n_out = spark.read.parquet(staged.tmp).count()
        if n_out != n_in:  # the contract: exactly one row per valid input document
            raise RuntimeError(f"predict wrote {n_out} rows for {n_in} valid documents")
        staged.info.update(
            redact(
                {
                    "rows": n_out,
                    "model": args.model,
                    "model_version": model.version,  # the run id of the model version that predicted
                    "input": counts,
                    "min_probability": float(opts.min_probability),
                    "top_k": int(opts.top_k),
                    "beam": int(width),
                    "tokenizer": "python" if model.text_featurizer() is not None else "spark",
                    "node_probabilities": opts.node_probabilities,
                    "multi_path": float(opts.multi_path),
                    "min_in_taxonomy": None if verdict == float("-inf") else verdict,
                    "calibrated": model.effective_temperature != 1.0,
                    "keep_columns": list(opts.keep),
                    "partition_by": opts.partition_by or None,
                }
            )
        )
        if verdict > float("-inf"):
            out_of = spark.read.parquet(staged.tmp).where(F.col("in_taxonomy") < verdict).count()
            staged.info["out_of_taxonomy"] = out_of
            log.info(
                "predict: %s %g: %d of %d documents out of the taxonomy",
                opts.in_taxonomy_name,
                verdict,
                out_of,
                n_out,
            )
        if opts.min_probability > 0:
            from pcem_spark.model.schema import abstention_counts

            staged.info["abstention"] = abstention_counts(spark.read.parquet(staged.tmp), model.taxonomy)
            log.info("predict: --min-probability %g: %s", opts.min_probability, staged.info["abstention"])
    log.info("predict: %d predictions -> %s in %.1fs", n_out, args.output, time.perf_counter() - t0)
    return 0


def _check_partition_count(n_values: int, max_partitions: int, name: str, column: str) -> None:
    """Refuse a partitioning into more folders than ``predict.max_partitions`` (one folder per value); warn
    from a tenth of it."""
    if max_partitions // 10 < n_values <= max_partitions:
        log.warning(
            "predict: %s = %r makes %d folders (a file per task in each: slow to write and to list); "
            "a column with fewer values is cheaper",
            name,
            column,
            n_values,
        )
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
