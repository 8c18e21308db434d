"""``pcem suggest-labels``: the unlabelled documents most worth labelling next, written as one version.

Reads ``--docs`` strictly (rejects with reasons, as ``pcem predict``), ranks its
unlabelled documents with the model's calibrated path posteriors
(:func:`pcem_spark.ops.suggestions.suggest_labels`) and writes the ``--budget``
best through the atomic output protocol: Parquet, or JSON Lines (one part file)
with ``--format jsonl`` for labelling tools. A labeller fills in ``labels``; the
file then reads back with ``pcem train --labels``.
"""

from __future__ import annotations

import logging
import time

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

__all__ = ["cmd_suggest_labels"]

log = logging.getLogger("pcem")


def cmd_suggest_labels(args, settings) -> int:
    from pcem_spark.engine.session import build_session
    from pcem_spark.io.output_paths import Output

    # Checked before Spark starts.
    if args.budget < 1:
        raise InputError(f"--budget must be at least 1, got {args.budget}")
    if args.candidates < 2:
        raise InputError(f"--candidates must be at least 2 (the choice shown to a labeller), got {args.candidates}")
    if not args.density_weight >= 0:
        raise InputError(f"--density-weight must be >= 0 (0 = no density weight), got {args.density_weight}")
    if args.criterion == "committee" and args.committee_size < 2:
        raise InputError(f"--committee-size must be at least 2 (one model cannot disagree), got {args.committee_size}")
    preflight(
        settings,
        [Output("--output", args.output, "suggestions"), rejects_output(args, args.output, args.docs)],
        [("--model", args.model), ("--docs", args.docs)],
        args.overwrite,
        models=[("--model", args.model)],
    )
    spark = build_session(settings.spark, connect_ok=True)
    with connect_staging(spark, args.output):
        return _suggest_on(spark, args, settings)


def _suggest_on(spark, args, settings) -> int:
    from pyspark.sql import functions as F

    from pcem_spark.io.output_paths import Output
    from pcem_spark.io.outputs import atomic_output
    from pcem_spark.model.path_model import PathModel
    from pcem_spark.ops.suggestions import Scoring, suggest_labels

    t0 = time.perf_counter()
    rejects = rejects_output(args, args.output, args.docs)
    check_outputs(
        spark,
        [Output("--output", args.output, "suggestions"), rejects],
        [("--model", args.model), ("--docs", args.docs)],
        args.overwrite,
    )
    model = PathModel.load(args.model)
    model.tokenizer = settings.predict.tokenizer
    counts: dict = {}
    from pcem_spark.model.vectors import vector_column

    vectors = vector_column(model)  # a model that scores with document vectors reads them, as predict does
    options = DocsOptions.of(
        args, embedding=vectors.name if vectors else "none", vector_dimension=vectors.dimension if vectors else None
    )
    docs = read_valid_documents(spark, args.docs, rejects.path, args.split, counts, options)
    n_docs = counts["selected"] if args.split is not None else counts["valid"]
    if args.split is None:
        n_labelled = counts["labelled"]  # counted in the validation's pass
    else:
        n_labelled = docs.where(F.col("labels").isNotNull()).count()
    n_unlabelled = n_docs - n_labelled
    if n_unlabelled == 0:
        raise InputError(
            f"{args.docs}: all {n_docs} valid documents are labelled; suggest-labels ranks the unlabelled ones"
        )
    # The batch rule's per-pair limit runs in each partition before its shuffle only up to this many rows per
    # group (Spark's default 1,000): a larger budget would shuffle every document.
    # -1 is the user's "off": kept.
    threshold = "spark.sql.optimizer.windowGroupLimitThreshold"
    if 0 <= int(spark.conf.get(threshold, "1000")) < args.budget:
        spark.conf.set(threshold, str(args.budget))
    picks = suggest_labels(
        model,
        docs,
        args.budget,
        Scoring(args.criterion, args.committee_size, args.density_weight),
        batch=args.batch,
        candidates=args.candidates,
        seed=args.seed,
    )
    with atomic_output(spark, args.output, "suggestions", overwrite=args.overwrite, parts=[""]) as staged:
        if args.output_format == "jsonl":
            # A few thousand rows: one part file, in rank order, that a labelling tool imports as it is.
            # ignoreNullFields off: every row shows "labels": null for the labeller to fill in.
            picks.orderBy("rank").coalesce(1).write.option("ignoreNullFields", "false").json(staged.tmp)
            _editable_in_place(staged.tmp)
            written = spark.read.json(staged.tmp, schema="id string")
        else:
            picks.write.parquet(staged.tmp)
            written = spark.read.parquet(staged.tmp)
        n_out = written.count()
        if n_out != min(args.budget, n_unlabelled):
            # Fewer than asked only when the batch rule counted copies once.
            log.warning(
                "suggest-labels: %d suggestions for a budget of %d (%d unlabelled documents; documents with the "
                "same known words in the same counts count once)",
                n_out,
                args.budget,
                n_unlabelled,
            )
        staged.info.update(
            redact(
                {
                    "rows": n_out,
                    "format": args.output_format,
                    "budget": int(args.budget),
                    "criterion": args.criterion,
                    "batch": args.batch,
                    "candidates": int(args.candidates),
                    "density_weight": float(args.density_weight),
                    "seed": int(args.seed),
                    **({"committee_size": int(args.committee_size)} if args.criterion == "committee" else {}),
                    "model": args.model,
                    "model_version": model.version,
                    "input": {**counts, "labelled": n_labelled, "unlabelled": n_unlabelled},
                }
            )
        )
    log.info(
        "suggest-labels: %d of %d unlabelled documents suggested (%s, batch %s; %d labelled documents not ranked, "
        "%d rejected) -> %s in %.1fs",
        n_out,
        n_unlabelled,
        args.criterion,
        args.batch,
        n_labelled,
        counts["rejected"],
        args.output,
        time.perf_counter() - t0,
    )
    return 0


def _editable_in_place(directory: str) -> None:
    """Delete the ``.crc`` sidecars Hadoop's local file system writes beside each file of a local output.

    A labeller (or a labelling tool) edits the JSON Lines in place; a stale checksum would then make the
    next read (``pcem train --labels``) fail with a checksum error. Without a sidecar the file is read as
    it is. Hadoop's checksummed file system hides the sidecars from its own listings, so they are found
    on the local disk; other file systems (HDFS, object stores) write none.
    """
    import os
    import re

    local = re.sub(r"^file:(//)?", "", directory) if re.match(r"^(file:|/|[^:]*$)", directory) else None
    if local is None or not os.path.isdir(local):
        return
    for name in os.listdir(local):
        if name.startswith(".") and name.endswith(".crc"):
            os.remove(os.path.join(local, name))
