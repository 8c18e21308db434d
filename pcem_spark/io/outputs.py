"""Atomic outputs: a killed run leaves the old complete output or the new complete one, never a mix.

Every output directory this package writes (a model, predictions, a rejects
table) is built in a hidden temporary sibling, ``.NAME.pcem-tmp-RUNID``, and
gets a completion marker, ``_PCEM_COMPLETE`` (JSON: kind, format version, run
id, row counts, time), as its last file. Only then is it moved into place:

1. the old output, if any, is renamed to ``.NAME.pcem-old-RUNID``;
2. the temporary directory is renamed to ``NAME``;
3. the old copy is deleted.

A run killed before step 1 leaves the old output untouched (and a stale
temporary directory that the next writer deletes). A run killed between steps
1 and 2 leaves no ``NAME`` but a complete temporary sibling: :func:`recover`,
which every reader and writer calls first, finishes the move. Killed after
step 2, the new output is in place and the old copy is deleted by the next
writer. Readers (:func:`require_complete`) refuse a directory without the
marker, so Spark's own partial writes (part files without ``_SUCCESS``) or a
directory from an older version are never read as complete.

Guarantees by filesystem: renames of directories are atomic on local disk and
HDFS, so the above holds exactly. On object stores (S3A, GCS, ABFS without
hierarchical namespace) a directory rename is a copy then a delete: while a
writer commits, a reader can find ``NAME`` missing or half-copied, and the
copy may bring the marker before the data. What still holds there: a
temporary or partial directory never gets a marker of its own, a killed
writer is finished or rolled back by the next reader or writer, and after
the writer's exit the output is complete. Readers must run after writers
(as a scheduler's task order does); with S3A, prefer a committer-backed
bucket or write to HDFS and copy.

Files the package writes on the driver's local disk (experiment CSV,
markdown, figures) go through :func:`atomic_write_bytes` (temp file +
``os.replace``); a local folder of files with a marker (``pcem inspect``)
through :func:`write_local_output`, the same protocol with plain file I/O.
The file system calls are :class:`pcem_spark.io.hadoop_fs.HadoopFS`'s (the driver's JVM)
on a classic session and :class:`pcem_spark.io.arrow_fs.ArrowFS`'s (``pyarrow.fs``, from
the client) over Spark Connect: the same protocol, with the data written by the
server's DataFrame writer either way.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from typing import Dict, Iterator, List, Optional

from pcem_spark.engine.session import is_spark_connect
from pcem_spark.errors import InputError, OutputPathError
from pcem_spark.io.file_system import file_system, session_path
from pcem_spark.util.faults import maybe_kill

__all__ = [
    "MARKER",
    "OUTPUT_FORMAT_VERSION",
    "IncompleteOutputError",
    "new_run_id",
    "read_marker",
    "recover",
    "require_complete",
    "check_writable",
    "StagedOutput",
    "atomic_output",
    "commit",
    "read_local_marker",
    "write_local_output",
    "atomic_write_bytes",
    "atomic_write_text",
]

log = logging.getLogger(__name__)

MARKER = "_PCEM_COMPLETE"
OUTPUT_FORMAT_VERSION = 1
_TMP = ".pcem-tmp-"
_OLD = ".pcem-old-"


class IncompleteOutputError(InputError):
    """An output directory lacks its completion marker (partial, foreign or older)."""


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def _split(path: str):
    path = path.rstrip("/")
    parent, name = path.rsplit("/", 1) if "/" in path else (".", path)
    if not name:
        raise InputError(f"output path {path!r} has no name")
    return parent or "/", name


def _sibling(path: str, tag: str, run_id: str) -> str:
    parent, name = _split(path)
    return f"{parent}/.{name}{tag}{run_id}"


def _siblings(fs, path: str, tag: str) -> List[str]:
    parent, name = _split(path)
    prefix = f".{name}{tag}"
    return sorted(f"{parent}/{n}" for n in fs.list_names(parent) if n.startswith(prefix))


def read_marker(spark, path: str) -> Optional[Dict[str, object]]:
    """The completion marker of ``path`` as a dict, or None when there is none (or it is unreadable)."""
    path = session_path(spark, path)
    return _parse_marker(file_system(spark, path).read_text(f"{path.rstrip('/')}/{MARKER}"))


def _parse_marker(text: Optional[str]) -> Optional[Dict[str, object]]:
    """A marker file's text as a dict; None for no text, bad JSON or anything but a complete marker."""
    if text is None:
        return None
    try:
        marker = json.loads(text)
    except ValueError:
        return None
    return marker if isinstance(marker, dict) and marker.get("complete") is True else None


def _new_marker(kind: str, run_id: str, info: Dict[str, object]) -> Dict[str, object]:
    """The completion marker of an output of ``kind`` written by run ``run_id``, with the extra fields ``info``."""
    return {
        "complete": True,
        "kind": kind,
        "format_version": OUTPUT_FORMAT_VERSION,
        "run_id": run_id,
        "written_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **info,
    }


def _refuse_other_kind(path: str, existing: Optional[Dict[str, object]], kind: str) -> None:
    # The last line of defence (commands check earlier, pcem_spark.io.output_paths): a complete output
    # of another kind -- a model, the input documents -- is never replaced.
    if existing is not None and existing.get("kind") != kind:
        raise OutputPathError(
            f"{path!r} holds a complete pcem-spark {existing.get('kind')} output; refusing "
            f"to replace it with {kind}, even with overwrite"
        )


def recover(spark, path: str, cleanup: bool = False) -> None:
    """Finish a replacement of ``path`` that was interrupted between its two renames.

    When ``path`` is missing and a complete temporary sibling exists, the
    newest one is moved into place (the run that made it had finished
    writing). When ``path`` is missing and only an old copy exists, the old
    copy is restored. With ``cleanup`` (writers only: never while another
    writer may be working on the same output), stale temporary and old
    siblings are deleted.
    """
    path = session_path(spark, path).rstrip("/")
    fs = file_system(spark, path)
    if not fs.exists(path):
        complete = [t for t in _siblings(fs, path, _TMP) if read_marker(spark, t) is not None]
        olds = [o for o in _siblings(fs, path, _OLD) if read_marker(spark, o) is not None]
        if complete:
            fs.rename(complete[-1], path)
            log.warning(
                "%s: finished the replacement a killed run had started (moved %s into place)", path, complete[-1]
            )
        elif olds:
            fs.rename(olds[-1], path)
            log.warning("%s: restored the previous output %s (the run replacing it was killed)", path, olds[-1])
    if cleanup:
        for stale in _siblings(fs, path, _TMP) + _siblings(fs, path, _OLD):
            log.info("deleting %s (left by a killed or failed run)", stale)
            fs.delete(stale)


def require_complete(spark, path: str, kind: Optional[str] = None) -> Dict[str, object]:
    """Return the marker of ``path`` or raise :class:`IncompleteOutputError` saying what is wrong."""
    path = session_path(spark, path)
    recover(spark, path)
    fs = file_system(spark, path)
    if not fs.exists(path):
        raise FileNotFoundError(f"{path} does not exist")
    marker = read_marker(spark, path)
    if marker is None:
        raise IncompleteOutputError(
            f"{path} has no completion marker ({MARKER}): it was not written completely by pcem-spark "
            "(a killed or failed run, another tool, or a version before markers). Rerun the command "
            "that writes it"
        )
    if kind is not None and marker.get("kind") != kind:
        raise IncompleteOutputError(f"{path} is a pcem-spark {marker.get('kind')} output, expected {kind}")
    version = marker.get("format_version")
    if version != OUTPUT_FORMAT_VERSION:
        raise IncompleteOutputError(
            f"{path}: output format version {version}, this pcem-spark reads {OUTPUT_FORMAT_VERSION}"
        )
    return marker


def check_writable(spark, path: str, overwrite: bool) -> None:
    """Fail before any work when ``path`` holds a complete output and ``overwrite`` is off.

    A directory without a marker at ``path`` (what a killed run of an older
    version, or Spark's own failed write, leaves) also needs ``overwrite``:
    it may be someone else's data.
    """
    path = session_path(spark, path)
    recover(spark, path)
    if not overwrite and file_system(spark, path).exists(path):
        raise FileExistsError(f"output {path!r} already exists; pass --overwrite to replace it")


class StagedOutput:
    """A temporary directory being filled; see :func:`atomic_output`."""

    def __init__(self, path: str, tmp: str, run_id: str):
        self.path = path  # where it will be
        self.tmp = tmp  # where to write now
        self.run_id = run_id
        self.info: Dict[str, object] = {}  # extra marker fields, e.g. row counts


@contextmanager
def atomic_output(
    spark, path: str, kind: str, overwrite: bool = False, run_id: Optional[str] = None
) -> Iterator[StagedOutput]:
    """Write an output directory atomically.

    Usage::

        with atomic_output(spark, out, "predictions", overwrite) as staged:
            df.write.parquet(staged.tmp)
            staged.info["rows"] = n

    On normal exit the marker (kind, format version, run id, ``staged.info``)
    is written into the temporary directory, which then replaces ``path``. On
    an exception the temporary directory is deleted and ``path`` is untouched.
    """
    path = session_path(spark, path).rstrip("/")
    fs = file_system(spark, path)
    recover(spark, path, cleanup=True)
    if fs.exists(path):
        if not overwrite:
            raise FileExistsError(f"output {path!r} already exists; pass --overwrite to replace it")
        _refuse_other_kind(path, read_marker(spark, path), kind)
    run_id = run_id or new_run_id()
    tmp = _sibling(path, _TMP, run_id)
    staged = StagedOutput(path, tmp, run_id)
    try:
        yield staged
        maybe_kill(kind, "staged")
        if not fs.exists(tmp):
            if is_spark_connect(spark):  # the server wrote where this client cannot see: a deployment error
                raise OutputPathError(
                    f"nothing was written to {tmp} for {path} that this Spark Connect client can see: the "
                    "server wrote elsewhere, so give a path on storage both reach (a shared mount, HDFS, an "
                    "object store; docs/CLUSTER.md)"
                )
            raise RuntimeError(f"nothing was written to {tmp} for {path}")
        fs.write_text(f"{tmp}/{MARKER}", json.dumps(_new_marker(kind, run_id, staged.info), sort_keys=True))
        maybe_kill(kind, "marked")
    except BaseException:
        try:
            fs.delete(tmp)
        except Exception:  # the JVM may be gone (killed driver): the next writer cleans up
            pass
        raise
    commit(spark, path, tmp, run_id, kind)


def commit(spark, path: str, tmp: str, run_id: str, kind: str = "") -> None:
    """Move the complete ``tmp`` to ``path``, replacing what is there (see the module docstring)."""
    path = session_path(spark, path)
    fs = file_system(spark, path)
    old = None
    if fs.exists(path):
        old = _sibling(path, _OLD, run_id)
        fs.rename(path, old)
        maybe_kill(kind, "old_moved")
    fs.rename(tmp, path)
    if old is not None:
        maybe_kill(kind, "committed")
        fs.delete(old)
    log.info("%s written (run %s)", path, run_id)


# ------------------------------------------------------------ the driver's local disk
def read_local_marker(directory: str) -> Optional[Dict[str, object]]:
    """:func:`read_marker` of a directory on the driver's local disk, without Spark."""
    try:
        with open(os.path.join(directory, MARKER), encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, ValueError):  # unreadable, or not UTF-8
        return None
    return _parse_marker(text)


def write_local_output(
    path: str, files: Dict[str, bytes], kind: str, overwrite: bool = False, info: Optional[Dict[str, object]] = None
) -> str:
    """Write ``files`` (name -> bytes) as the local directory ``path``, atomically, with a marker of ``kind``.

    The protocol of :func:`atomic_output` with plain file I/O on the driver,
    for folders of plain files readable without Spark (``pcem inspect``): the
    files and the marker (kind, format version, run id, ``files``: the names,
    then ``info``) are written to the hidden sibling ``.NAME.pcem-tmp-RUNID``,
    which then replaces ``path`` (an existing directory is first renamed to
    ``.NAME.pcem-old-RUNID`` and deleted after): a killed run leaves the old
    folder or the new one. Stale siblings of a killed run are deleted first.
    An existing ``path`` needs ``overwrite`` and is never replaced when it
    holds a complete output of another kind. Files get the modes ``open`` /
    ``mkdir`` give (the umask decides). Returns the absolute path.
    """
    path = os.path.abspath(path.rstrip("/") or "/")
    parent, name = os.path.split(path)
    if not name:
        raise InputError(f"output path {path!r} has no name")
    os.makedirs(parent, exist_ok=True)
    for stale in os.listdir(parent):  # left by a killed run
        if stale.startswith((f".{name}{_TMP}", f".{name}{_OLD}")):
            shutil.rmtree(os.path.join(parent, stale), ignore_errors=True)
    if os.path.exists(path):
        if not overwrite:
            raise FileExistsError(f"output {path!r} already exists; pass --overwrite to replace it")
        if not os.path.isdir(path):
            raise NotADirectoryError(f"output {path!r} exists and is not a directory")
        _refuse_other_kind(path, read_local_marker(path), kind)
    run_id = new_run_id()
    tmp = os.path.join(parent, f".{name}{_TMP}{run_id}")
    os.makedirs(tmp)
    old = None
    try:
        for fname, data in files.items():
            with open(os.path.join(tmp, fname), "wb") as fh:
                fh.write(data)
        maybe_kill(kind, "staged")
        with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as fh:
            json.dump(_new_marker(kind, run_id, {"files": sorted(files), **(info or {})}), fh, sort_keys=True)
        maybe_kill(kind, "marked")
        if os.path.exists(path):
            old = os.path.join(parent, f".{name}{_OLD}{run_id}")
            os.rename(path, old)
            maybe_kill(kind, "old_moved")
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        maybe_kill(kind, "committed")
        shutil.rmtree(old, ignore_errors=True)
    return path


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Replace a local file in one step: a temp file in the same directory, then ``os.replace``.

    The file gets the mode a plain ``open(path, "w")`` would give it, ``0o666 &
    ~umask`` (``mkstemp`` alone makes it 0o600: unreadable for a task running
    as another user). A file that replaces an existing one gets that mode too,
    not the old file's (:mod:`pcem_spark.util.filemodes`).
    """
    from pcem_spark.util.filemodes import file_mode

    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), file_mode())
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
