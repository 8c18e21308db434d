"""What the commands share: their settings, the taxonomy, and the checks and reads of their inputs and outputs.

:func:`settings_from_args` reads ``--config`` / ``--set`` into settings
objects; :func:`check_outputs` refuses, before any work, an output that would
replace an input, another output or existing data
(:mod:`pcem_spark.io.output_paths`); :func:`rejects_output` names a command's
rejects table; :func:`read_valid_documents` reads a documents input strictly,
writes its rejects (atomically, with the counts) and returns the valid rows.
Spark is never started here: the commands pass their session in.
"""

from __future__ import annotations

import logging
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional, Sequence

from pcem_spark.errors import InputError
from pcem_spark.util.redaction import redact

__all__ = [
    "settings_from_args",
    "taxonomy_for",
    "check_outputs",
    "rejects_output",
    "check_label_rate",
    "DocsOptions",
    "read_valid_documents",
    "connect_staging",
    "preflight",
    "labels_rejects_output",
    "LabelsTable",
]

log = logging.getLogger("pcem")


def settings_from_args(args):
    """The package defaults, then ``$PCEM_CONFIG``, then ``--config``, then the ``--set`` overrides (the same from
    any folder: no settings file is read from the current one unless named)."""
    from pcem_spark.cli.config import load_settings

    settings = load_settings(args.config, args.overrides)
    if getattr(args, "remote", None):  # --remote wins over the settings file and SPARK_REMOTE
        settings.spark.conf["spark.remote"] = args.remote
    from pcem_spark.engine.session import connect_requested

    if connect_requested(settings.spark):
        _share_local_paths(args)
    return settings


@contextmanager
def connect_staging(spark, output: str):
    """Over Spark Connect, large parameters travel as files in a hidden directory beside ``output``
    (storage the server writes, so its executors read it; ``PCEM_STAGING_DIR`` wins), deleted at the end."""
    from pcem_spark.engine import shipping
    from pcem_spark.engine.session import is_spark_connect

    if not is_spark_connect(spark) or os.environ.get(shipping.STAGING_ENV):
        yield
        return
    from pcem_spark.io.arrow_fs import ArrowFS

    parent, name = os.path.split(output.rstrip("/"))
    where = f"{parent}/.{name}.pcem-ship-{uuid.uuid4().hex[:8]}"
    shipping.set_staging_dir(where)
    try:
        yield
    finally:
        shipping.set_staging_dir(None)
        try:
            ArrowFS(where).delete()
        except OSError as exc:
            log.warning("could not delete the staged parameters in %s: %s", where, exc)


# The flags that name files or directories the Spark side reads or writes.
_PATH_FLAGS = (
    "docs",
    "model",
    "output",
    "predictions",
    "rejects",
    "taxonomy",
    "descriptions",
    "init_model",
    "labels",
)


def _share_local_paths(args) -> None:
    """Over Spark Connect, relative local paths made absolute against this (the client's) directory.

    The server resolves a relative path against its own working directory and
    the client's file calls against this one: absolute, both name the same
    directory when they share the disk (docs/CLUSTER.md, "Spark Connect").
    """
    from pcem_spark.io.arrow_fs import shared_path

    for name in _PATH_FLAGS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            setattr(args, name, shared_path(value))


def taxonomy_for(args, docs=None, counts: Optional[dict] = None):
    """``--taxonomy`` when given, else the taxonomy the documents' label paths imply (warning on singleton leaves).

    ``counts``: what :func:`read_valid_documents` counted; when no labelled
    document is left and rows were rejected for their ``labels``, the error says
    so, with the form labels must have.
    """
    from pcem_spark.core.taxonomy import TaxonomyError, load_taxonomy

    if getattr(args, "taxonomy", None):
        return load_taxonomy(args.taxonomy)
    from pcem_spark.model.label_checks import warn_singleton_leaves
    from pcem_spark.model.labels import infer_taxonomy

    try:
        taxonomy = infer_taxonomy(docs)
    except TaxonomyError as exc:
        label_rejects = {
            reason: n for reason, n in ((counts or {}).get("rejected_by_reason") or {}).items() if "labels" in reason
        }
        if not label_rejects:
            raise
        reason, n = max(label_rejects.items(), key=lambda rn: rn[1])
        raise TaxonomyError(
            f"{exc}: every labelled row was rejected for its labels ({sum(label_rejects.values())} rows; most often "
            f"{n} x {reason}; the rejects table {(counts or {}).get('rejects')!r} lists them). labels must be the "
            'path as a JSON array, top node first: {"id": "d1", "text": "...", "labels": ["sports", "football"]} '
            '(not "sports/football"); null or no labels for an unlabelled document'
        ) from None
    # Before --label-rate hides labels: sampling would make false singletons.
    warn_singleton_leaves(docs, taxonomy, where=getattr(args, "docs", None))
    return taxonomy


def check_outputs(spark, outputs, inputs, overwrite: bool, check_existing: bool = True) -> None:
    """Fail before any work if an output would replace an input, another output or existing data.

    With ``check_existing``, the run then becomes the one writer of each output
    directory: its lease is taken (:mod:`pcem_spark.io.leases`) -- exit 75 at once
    when another live run holds it, exit 2 when the folder cannot be written (75 when
    its volume is mounted read-only) -- and
    kept until the command ends, before what exists there is looked at.
    """
    from pcem_spark.io.output_paths import check_output_paths

    if not check_existing:
        check_output_paths(spark, outputs, inputs, overwrite, check_existing=False)
        return
    check_output_paths(spark, outputs, inputs, overwrite, check_existing=False)  # the path rules, first
    _take_leases(spark, outputs)
    check_output_paths(spark, outputs, inputs, overwrite, check_existing=True)


def _local(path: str) -> Optional[str]:
    """The local file name of ``path`` when it is one plain path (``file:`` or no scheme; no glob, no list)."""
    if not path or any(c in path for c in "*?[{,"):
        return None
    if path.startswith("file:"):
        return path[len("file:") :]
    return None if "://" in path else path


def _being_written(name: str) -> bool:
    """Whether a live run holds the lease of the missing local path ``name`` (its first version is on the way:
    the full check says "retry", exit 75)."""
    from pcem_spark.io import leases
    from pcem_spark.io.arrow_fs import ArrowFS

    path = os.path.abspath(name)
    return leases.live_holder(ArrowFS(path), path) is not None


def preflight(settings, outputs, inputs, overwrite: bool, models=()) -> None:
    """The checks of local paths that need no JVM, run before Spark starts, so they fail in a second.

    An existing output without ``--overwrite`` (and the rules of
    :func:`~pcem_spark.io.output_paths.check_output_paths`), an input that does
    not exist, and a model input (``models``: (flag, path) pairs) that is not a
    complete model -- read as a reader would (:func:`~pcem_spark.io.snapshots.resolve`,
    so a model another run is writing still means "retry", exit 75). Only paths
    that surely name local files are looked at (a plain path while pcem runs a
    local master itself, or a ``file:`` one); the full checks run again once
    Spark is up, under the outputs' leases.
    """
    from pcem_spark.engine.session import paths_are_local
    from pcem_spark.io.output_paths import check_output_paths

    plain_is_local = paths_are_local(settings.spark)

    def local(path):
        name = _local(path) if path else None
        if name is None or (not plain_is_local and not path.startswith("file:")):
            return None
        return name

    for flag, path in inputs:
        name = local(path)
        if name is not None and not os.path.lexists(name) and flag not in dict(models) and not _being_written(name):
            raise FileNotFoundError(f"{flag} {path!r} does not exist (current folder: {os.getcwd()})")
    local_outputs = [out for out in outputs if local(out.path) is not None]
    if local_outputs:
        check_output_paths(None, local_outputs, [(f, p) for f, p in inputs if p], overwrite, check_existing=True)
    for flag, path in models:
        name = local(path)
        if name is not None:
            from pcem_spark.io.arrow_fs import ArrowFS
            from pcem_spark.io.snapshots import resolve

            try:
                resolve(ArrowFS(name), os.path.abspath(name), "model")
            except FileNotFoundError:
                what = "the init model to warm-start from" if flag == "--init-model" else "the model to read"
                raise FileNotFoundError(
                    f"{flag} {path!r} does not exist ({what}; current folder: {os.getcwd()})"
                ) from None


def _take_leases(spark, outputs) -> None:
    """Hold the lease of every output directory (a whole-output kind) for the rest of the command."""
    from pcem_spark.io import leases
    from pcem_spark.io.arrow_fs import ArrowFS
    from pcem_spark.io.file_system import file_system, session_path

    for out in outputs:
        if out.kind is None or not out.directory:
            continue  # a results folder or a single file: replaced file by file (os.replace)
        if spark is None:
            leases.keep(ArrowFS(out.path), out.path)
        else:
            path = session_path(spark, out.path)
            leases.keep(file_system(spark, path), path)


def rejects_output(args, main_path: str, docs: str):
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


def check_label_rate(rate: Optional[float]) -> None:
    """``--label-rate`` must be in (0, 1] when given."""
    if rate is not None and not 0.0 < rate <= 1.0:
        raise InputError(f"--label-rate must be in (0, 1], got {rate}")


@dataclass(frozen=True)
class DocsOptions:
    """How a command reads its ``--docs``.

    ``fmt``: ``--format`` (None: detected); ``keep``: more input columns the
    valid rows carry (Parquet; :func:`pcem_spark.io.documents.read_documents`);
    ``allow_incomplete`` / ``require_success``: ``--allow-incomplete-input`` /
    ``--require-success`` (:func:`pcem_spark.io.input_files.input_files`);
    ``distinct``: a kept column whose distinct values (and longest partition
    folder name) are counted in the pass that counts the rows
    (:func:`pcem_spark.io.rejects.split_rejects`).
    """

    fmt: Optional[str] = None
    keep: Sequence[str] = ()
    allow_incomplete: bool = False
    require_success: bool = False
    distinct: Optional[str] = None
    embedding: Optional[str] = None  # features.embedding: the vectors' column (None: not read)
    vector_dimension: Optional[int] = None  # the length every vector must have (None: the usual one)

    @classmethod
    def of(cls, args, **more) -> "DocsOptions":
        """The options a command's flags give (``--format``, ``--allow-incomplete-input``, ``--require-success``)."""
        return cls(
            fmt=getattr(args, "docs_format", None),
            allow_incomplete=bool(getattr(args, "allow_incomplete_input", False)),
            require_success=bool(getattr(args, "require_success", False)),
            **more,
        )


def _read_checked(spark, path: str, options: "DocsOptions", require_text: bool = True, with_source: bool = False):
    """``(source, valid rows, rejects, verdicts, rows stored)`` of a documents or labels table, nothing written."""
    from pcem_spark.io.documents import KEPT_PREFIX, count_input_rows, detect_format, read_documents
    from pcem_spark.io.file_system import session_path
    from pcem_spark.io.input_files import input_files, stored_sizes
    from pcem_spark.io.rejects import split_rejects

    source = input_files(spark, session_path(spark, path), options.allow_incomplete, options.require_success)
    fmt = options.fmt or detect_format(spark, path)
    # One listing, so that a count that disagrees with the parse can tell an input replaced mid-run.
    sizes = stored_sizes(spark, source)
    raw = read_documents(
        spark, source.base, fmt, options.keep, source.files, require_text=require_text, embedding=options.embedding
    )
    verdicts: dict = {}
    # both read one persisted, fully parsed copy
    distinct = KEPT_PREFIX + options.distinct if options.distinct else None
    vector_name = options.embedding if options.embedding and options.embedding.lower() != "auto" else "embedding"
    good, rejects = split_rejects(
        raw,
        require_text=require_text,
        counts=verdicts,
        distinct=distinct,
        with_source=with_source,
        vectors=(vector_name, options.vector_dimension),
    )
    # Counted from the stored rows (lines), not from the parser's output: the checks below then prove
    # that every input row is either valid or rejected.
    n_in = count_input_rows(spark, source.base, fmt, source.files)
    if verdicts["parsed"] != n_in:
        _explain_count_mismatch(path, (verdicts["parsed"], n_in), (sizes, stored_sizes(spark, source)))
    return source, good, rejects, verdicts, n_in


def _explain_count_mismatch(path, counts, sizes) -> None:
    """Raise the right error for a parse and a count of the same input that disagree.

    ``sizes`` holds the input's file sizes before the parse and after the count: when they differ, the
    input changed while this run read it (its writer replaced it in place), and a retry reads one
    version (TransientError, exit 75). When they are the same, the parser and the count do not see the
    same rows (RuntimeError, exit 1).
    """
    from pcem_spark.errors import TransientError

    parsed, stored = counts
    before, after = sizes
    if before != after:
        raise TransientError(
            f"{path} changed while this run read it: {parsed} rows parsed, then {stored} stored (its files' sizes "
            "changed). Its writer replaced it in place during the run. Exit 75: retry once it is finished (a "
            "writer that writes under another name and renames, or a pcem output with its marker, is never read "
            "half-way)"
        )
    raise RuntimeError(f"{path}: {stored} rows stored but {parsed} parsed")


def _write_rejects(spark, rejects_path: str, path: str, source, rejects, n_in: int, n_good: int) -> dict:
    """Write ``rejects`` as the rejects table of ``path`` (atomically, the counts in its marker); return the counts.

    The contract, checked on what was written: every input row is valid or rejected, never lost.
    """
    from pcem_spark.io.outputs import atomic_output
    from pcem_spark.io.rejects import log_counts, redacted_column

    # Stored without the credentials (or a known secret) of the input's paths in a file name or a reason.
    stored = rejects.select(
        *(redacted_column(c, (path, source.base)) if c in ("source_file", "reason") else c for c in rejects.columns)
    )
    with atomic_output(spark, rejects_path, "rejects", overwrite=True, parts=[""]) as staged:
        stored.write.parquet(staged.tmp)
        by_reason = log_counts(path, n_in, n_good, rejects)
        n_rej = spark.read.parquet(staged.tmp).count()
        if n_rej != n_in - n_good:
            raise RuntimeError(f"{path}: {n_in} rows read, {n_good} valid, but {n_rej} rejects written")
        summary = {
            "source": path,
            **({"source_version": source.version} if source.version else {}),
            "rows_read": n_in,
            "valid": n_good,
            "rejected": n_rej,
            "rejected_by_reason": by_reason,
        }
        staged.info.update(redact(summary))  # a marker never holds a path's credentials
    return summary


def read_valid_documents(
    spark,
    path: str,
    rejects_path: str,
    split: Optional[str],
    counts: Optional[dict] = None,
    options: Optional["DocsOptions"] = None,
):
    """Read documents, write the rejects table (atomically), log counts; return the valid rows.

    Rejects are decided on the whole table before ``--split`` filters, so a
    malformed row (whose split is unknown) is never lost to the filter. The
    rejects table belongs to the run's main output, whose existence the
    caller has checked, so a leftover of a failed run is replaced; its marker
    holds the counts (rows read = valid + rejected). ``counts`` (a dict) is
    filled with them for the main output's marker. ``options``
    (:class:`DocsOptions`): the format, the kept columns, how a folder from an
    unfinished job is taken, a column whose distinct values to count. A
    pcem-spark output is pinned to one version for the run.
    """
    from pyspark.sql import functions as F

    options = options or DocsOptions()
    source, good, rejects, verdicts, n_in = _read_checked(spark, path, options)
    n_good = verdicts["valid"]
    summary = _write_rejects(spark, rejects_path, path, source, rejects, n_in, n_good)
    if counts is not None:
        counts.update({**summary, "rejects": rejects_path})
        for key in ("distinct_values", "longest_folder_value", "labelled", "vector_dimension"):
            if key in verdicts:
                counts[key] = verdicts[key]
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


def labels_rejects_output(args):
    """The Output of ``pcem train --labels``'s rejects: MODEL_labels_rejects beside the model."""
    from pcem_spark.io.output_paths import Output

    return Output(
        "--labels' rejects (beside the model)",
        args.model.rstrip("/") + "_labels_rejects",
        "rejects",
        source=args.labels,
    )


@dataclass
class LabelsTable:
    """A labels table (``pcem train --labels``) read and parsed, before the taxonomy is known.

    ``valid``: its rows that parsed, with a unique id (``id``, ``labels``);
    ``rejects``: the others, with their reasons.
    """

    path: str
    source: object
    valid: object
    rejects: object
    n_rows: int
    n_valid: int

    @classmethod
    def read(cls, spark, path: str, options: Optional["DocsOptions"] = None) -> "LabelsTable":
        """Read ``path`` (JSON Lines or Parquet rows ``{"id", "labels"}``; other fields are ignored)."""
        source, valid, rejects, verdicts, n_in = _read_checked(
            spark, path, DocsOptions(allow_incomplete=(options or DocsOptions()).allow_incomplete), False, True
        )
        return cls(path, source, valid.select("id", "labels", "source_file"), rejects, n_in, verdicts["valid"])

    def merge_into(self, spark, docs, taxonomy, rejects_path: str):
        """``(documents with the table's labels, counts)``: :func:`pcem_spark.model.label_merge.merge_labels`,
        with every rejected row of the table (parse errors included) written to ``rejects_path`` (atomically).

        ``counts``: the table's rows read, merged and rejected (by reason), and how many documents had their
        labels added, replaced or confirmed, for the training summary.
        """
        from pcem_spark.model.label_merge import merge_labels

        merged, merge_rejects, counts = merge_labels(docs, self.valid, taxonomy, self.path)
        rejects = self.rejects.unionByName(merge_rejects)
        n_merged = counts["merged"]
        if n_merged + counts["rejected"] != self.n_valid:  # every valid row is merged or rejected
            raise RuntimeError(
                f"{self.path}: {self.n_valid} valid rows, {n_merged} merged, {counts['rejected']} rejected"
            )
        summary = _write_rejects(spark, rejects_path, self.path, self.source, rejects, self.n_rows, n_merged)
        log.info(
            "--labels %s: %d rows, %d merged (labels added to %d documents, replaced on %d, confirmed on %d; %s), "
            "%d rejected -> %s",
            self.path,
            self.n_rows,
            n_merged,
            counts["added"],
            counts["replaced"],
            counts["confirmed"],
            counts["rule"],
            summary["rejected"],
            rejects_path,
        )
        return merged, {
            **summary,
            "rejects": rejects_path,
            **{k: counts[k] for k in ("merged", "added", "replaced", "confirmed", "rule")},
        }
