"""Which files of a documents input a run reads: one pinned version, or an upstream folder that is finished.

A documents input (``--docs``) is one of three things:

* a **pcem-spark output** (``pcem ingest-20ng`` / ``ingest-warc`` wrote it;
  it carries ``_PCEM_COMPLETE``): its current version is pinned for the whole
  run (:func:`pcem_spark.io.snapshots.pin`) and exactly the files of its
  manifest are read. A writer that replaces it meanwhile makes the run exit 75
  (the files it read are gone), never read a mixture;
* a **folder written by another job** (Spark, Hive, a crawler): it is refused
  before any work when it shows that its writer has not finished --
  ``_temporary/`` inside it (a Hadoop/Spark job still running, or killed
  before its commit): :class:`IncompleteInputError`, **exit 75**, because
  the writer may still be running and a later retry may find it finished; a
  **zero-byte Parquet part file** (a task killed while writing it, or a copy
  cut short): :class:`~pcem_spark.io.documents.DocumentsError`, **exit 2**,
  because that file will never become readable by waiting. With
  ``--require-success``, a folder without Spark's ``_SUCCESS`` file is
  refused too (exit 75). ``--allow-incomplete-input`` accepts such a folder
  knowingly: the zero-byte files are left out, with a warning that counts them;
* a **file** (JSON Lines, Parquet): read as it is.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

from pcem_spark.errors import InputError, TransientError
from pcem_spark.io.documents import DocumentsError, input_fs
from pcem_spark.io.snapshots import pin, verify_before_reading
from pcem_spark.io.versions import MARKER, marker_at

__all__ = ["IncompleteInputError", "InputFiles", "input_files", "stored_sizes"]

log = logging.getLogger(__name__)

_UNFINISHED = "_temporary"
_SUCCESS = "_SUCCESS"


class IncompleteInputError(TransientError):
    """The input folder's writer has not finished (or was killed): retry once it has (exit 75)."""


@dataclass(frozen=True)
class InputFiles:
    """What to read of an input: ``files`` under ``base`` (None: ``base`` itself, as Spark lists it)."""

    base: str
    files: Optional[List[str]] = None
    version: Optional[str] = None  # the run id of the pinned pcem-spark version


def _hidden(relative: str) -> bool:
    return any(p.startswith(("_", ".")) for p in relative.split("/") if p)


def input_files(spark, path: str, allow_incomplete: bool = False, require_success: bool = False, fs=None) -> InputFiles:
    """What to read of the documents input ``path`` (see the module docstring).

    Raises :class:`IncompleteInputError` (exit 75) or
    :class:`~pcem_spark.io.documents.DocumentsError` (exit 2) naming the folder
    and what was found in it.
    """
    fs = fs or input_fs(spark, path)
    if not fs.exists(path):
        raise DocumentsError(f"documents input {path!r} does not exist")
    if not fs.is_directory(path):
        return InputFiles(path)
    if marker_at(fs, path) is not None or fs.exists(f"{path.rstrip('/')}/{MARKER}"):
        # A marker that is damaged (not JSON, or not its own checksum) is refused by resolve, never read as
        # a plain folder without a manifest: that would skip every check of its files.
        snap = pin(fs, path)
        verify_before_reading(fs, snap, snap.marker.get("kind"), spark)
        if snap.manifest is not None:
            return InputFiles(snap.location, snap.files(), snap.run_id)
        return InputFiles(snap.location, None, snap.run_id)
    names = fs.list_names(path)
    sizes = fs.sizes_below(path)
    unfinished = [rel for rel, _ in sizes if f"{_UNFINISHED}/" in f"/{rel}"] or (
        [_UNFINISHED] if _UNFINISHED in names else []
    )
    empty = [rel for rel, size in sizes if size == 0 and not _hidden(rel) and rel.lower().endswith(".parquet")]
    problems = []
    if unfinished:
        problems.append(
            f"a {_UNFINISHED}/ folder ({len(unfinished)} entries, e.g. {unfinished[0]!r}): the job that writes it "
            "is still running, or was killed before it committed"
        )
    if require_success and _SUCCESS not in names:
        problems.append(f"no {_SUCCESS} file (--require-success): its writer has not reported success")
    if empty and not allow_incomplete:
        raise DocumentsError(
            f"documents input {path!r}: {len(empty)} zero-byte Parquet file(s), e.g. {empty[0]!r}: a task was killed "
            "while writing it, or a copy was cut short; it can never be read. Rewrite the input, or pass "
            "--allow-incomplete-input to read the rest knowingly"
        )
    if problems and not allow_incomplete:
        raise IncompleteInputError(
            f"documents input {path!r} is not finished: {'; '.join(problems)}. Exit 75: retry after its writer "
            "finishes, or pass --allow-incomplete-input to read what is there knowingly"
        )
    if problems or empty:
        log.warning(
            "documents input %s: reading it although it is not finished (--allow-incomplete-input): %s%s",
            path,
            "; ".join(problems) or "",
            f"; {len(empty)} zero-byte Parquet file(s) left out" if empty else "",
        )
    if empty:
        base = path.rstrip("/")
        keep = [f"{base}/{rel}" for rel, size in sizes if not _hidden(rel) and (size > 0 or rel not in empty)]
        if not keep:
            raise InputError(f"documents input {path!r}: every data file is empty")
        return InputFiles(path, keep)
    return InputFiles(path)


def stored_sizes(spark, source: InputFiles) -> Optional[List[Tuple[str, Optional[int]]]]:
    """The sizes of the files ``source`` reads, from one listing; None for a pinned pcem-spark version (it
    never changes) or a path that has gone: a count of its rows that disagrees with its parse compares them
    (an input replaced in place during the run)."""
    from pcem_spark.io.file_system import file_system

    if source.version is not None:
        return None
    fs = file_system(spark, source.base)
    if not fs.exists():
        return None
    local = fs.local()
    if not fs.is_directory():
        return [("", os.path.getsize(local) if local is not None else (fs.sizes_below() or [("", None)])[0][1])]
    return fs.sizes_below()
