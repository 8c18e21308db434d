"""Atomic outputs: a killed run leaves the old complete output or the new one; overlapping runs never mix.

Every output directory this package writes (a model, predictions, a rejects
table, a documents table, an inspection folder) is one *version* at a time
(:mod:`pcem_spark.io.versions`). A writer, holding the output's lease
(:mod:`pcem_spark.io.leases`: one writer at a time, taken before any work):

1. cleans up after dead writers (:func:`pcem_spark.io.versions.recover`);
2. builds the new version in the hidden sibling ``.NAME.pcem-tmp-RUNID``;
3. checks that every part it declared holds data (a model without
   ``metadata/`` is never marked), lists every file with its size (the
   manifest, with each file's SHA-256: :mod:`pcem_spark.io.checksums`) and
   writes the marker ``_PCEM_COMPLETE`` (JSON: kind, format version, run id,
   row counts, manifest, checksums) as its last file;
4. checks that it still holds the lease, then commits: the current version
   is renamed to ``.NAME.pcem-v-RUNID`` (retained for
   ``output.keep_superseded_seconds``, so readers that pinned it can finish),
   and the new one to ``NAME``.

A run killed before step 4 leaves the old output untouched; killed between
the two renames, it leaves no ``NAME`` but a complete temporary version,
which the next writer -- or a reader that finds no live writer -- moves into
place. Readers (:mod:`pcem_spark.io.snapshots`) pin one version and read only
its files, so a reader overlapping a commit gets the old version or the new
one, never a mixture; they refuse a directory without the marker.

Guarantees by file system: renames of directories are atomic on local disk
and HDFS, and so is the lease's exclusive create, so the above holds exactly.
On object stores (S3A, GCS, ABFS without hierarchical namespace) a directory
rename is a copy then a delete, and a file cannot be created exclusively:
a version still never gets a marker before its data (files whose name starts
with ``_`` are copied last), and readers still read only the files of the
version they pinned, but two writers starting within a second of each other
can both take the lease, and a reader can find ``NAME`` missing for the time
a copy takes (it waits up to ``output.commit_wait_seconds``).

Files the package writes on the driver's local disk (experiment CSV,
markdown, figures) go through :func:`atomic_write_bytes` (temp file +
``os.replace``); a local folder of files with a marker (``pcem inspect``)
through :func:`write_local_output`, the same protocol on the local disk.
The file system calls are :class:`pcem_spark.io.hadoop_fs.HadoopFS`'s (the driver's JVM)
on a classic session and :class:`pcem_spark.io.arrow_fs.ArrowFS`'s (``pyarrow.fs``, from
the client) over Spark Connect: the same protocol, with the data written by the
server's DataFrame writer either way.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Dict, Iterator, Optional, Sequence

from pcem_spark.engine.session import is_spark_connect
from pcem_spark.errors import InputError, OutputPathError
from pcem_spark.io import leases
from pcem_spark.io.arrow_fs import ArrowFS
from pcem_spark.io.checksums import checksums_of
from pcem_spark.io.file_system import file_system, session_path
from pcem_spark.io.output_policy import policy
from pcem_spark.io.snapshots import IncompleteOutputError, resolve
from pcem_spark.io.versions import (
    MARKER,
    OLD,
    OUTPUT_FORMAT_VERSION,
    TMP,
    IncompleteWriteError,
    collect_superseded,
    manifest_of,
    marker_at,
    missing_parts,
    needs_recovery,
    new_marker,
    new_run_id,
    parse_marker,
    sealed_marker_text,
    sibling,
    stamp_superseded,
    version_path,
)
from pcem_spark.io.versions import recover as _recover
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


def read_marker(spark, path: str) -> Optional[Dict[str, object]]:
    """The completion marker of ``path`` as a dict, or None when there is none (or it is unreadable)."""
    path = session_path(spark, path)
    return marker_at(file_system(spark, path), path)


def _refuse_other_kind(path: str, existing: Optional[Dict[str, object]], kind: str) -> None:
    # The last line of defence (commands check earlier, pcem_spark.io.output_paths): a complete output
    # of another kind -- a model, the input documents -- is never replaced.
    if existing is not None and existing.get("kind") != kind:
        raise OutputPathError(
            f"{path!r} holds a complete pcem-spark {existing.get('kind')} output; refusing "
            f"to replace it with {kind}, even with overwrite"
        )


def recover(spark, path: str, cleanup: bool = False) -> None:
    """Finish a replacement of ``path`` that a killed run left between its two renames (and, with
    ``cleanup``, delete what dead runs left beside it), under the output's lease.

    Nothing happens while another run holds the lease: it is live, and its
    own files are its business. This thread's own lease is used when it holds one.
    """
    path = session_path(spark, path).rstrip("/")
    fs = file_system(spark, path)
    if leases.held(fs, path) is None:
        if leases.live_holder(fs, path) is not None or not (cleanup or needs_recovery(fs, path)):
            return
        try:
            with leases.hold(fs, path, new_run_id(), "recover"):
                _recover(fs, path, policy().keep_superseded_seconds)
        except leases.OutputBusyError:
            pass
        return
    _recover(fs, path, policy().keep_superseded_seconds)


def require_complete(spark, path: str, kind: Optional[str] = None) -> Dict[str, object]:
    """The marker of the current version of ``path``; raises :class:`IncompleteOutputError` saying what is wrong
    (see :func:`pcem_spark.io.snapshots.resolve`). To read the output, use
    :func:`pcem_spark.io.snapshots.read_pinned`, which keeps to the version it resolved."""
    path = session_path(spark, path)
    return resolve(file_system(spark, path), path, kind).marker


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

    def __init__(self, path: str, tmp: str, run_id: str, parts: Sequence[str] = ()):
        self.path = path  # where it will be
        self.tmp = tmp  # where to write now
        self.run_id = run_id
        self.parts = list(parts)  # sub-directories that must hold data before it is marked ("" = the output)
        self.info: Dict[str, object] = {}  # extra marker fields, e.g. row counts


@contextmanager
def atomic_output(
    spark, path: str, kind: str, overwrite: bool = False, run_id: Optional[str] = None, parts: Sequence[str] = ()
) -> Iterator[StagedOutput]:
    """Write an output directory atomically, as the one writer of ``path``.

    Usage::

        with atomic_output(spark, out, "predictions", overwrite, parts=[""]) as staged:
            df.write.parquet(staged.tmp)
            staged.info["rows"] = n

    The lease of ``path`` is the thread's own when it holds one (a command
    takes it before any work), else taken here (:class:`~pcem_spark.io.leases.OutputBusyError`,
    exit 75, when another run holds it). On normal exit every part of ``parts``
    must hold a data file; then the marker (kind, format version, run id,
    ``staged.info``, the manifest) is written into the temporary directory,
    which then replaces ``path``. On an exception the temporary directory is
    deleted and ``path`` is untouched.
    """
    path = session_path(spark, path).rstrip("/")
    fs = file_system(spark, path)
    run_id = run_id or new_run_id()
    with leases.hold(fs, path, run_id, kind) as lease:
        _recover(fs, path, policy().keep_superseded_seconds)
        if fs.exists(path):
            if not overwrite:
                raise FileExistsError(f"output {path!r} already exists; pass --overwrite to replace it")
            _refuse_other_kind(path, marker_at(fs, path), kind)
        tmp = sibling(path, TMP, run_id)
        staged = StagedOutput(path, tmp, run_id, parts)
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
                raise IncompleteWriteError(f"nothing was written to {tmp} for {path}")
            _mark(fs, tmp, kind, run_id, staged.info, staged.parts, spark)
            maybe_kill(kind, "marked")
        except BaseException:
            try:
                fs.delete(tmp)
            except Exception:  # the JVM may be gone (killed driver): the next writer cleans up
                pass
            raise
        _commit(fs, path, tmp, run_id, kind, lease)


def _mark(fs, tmp: str, kind: str, run_id: str, info: Dict[str, object], parts: Sequence[str], spark=None) -> None:
    """Write the marker of the version in ``tmp``, after checking that every part holds data; it lists every
    file with its size and its SHA-256 (:mod:`pcem_spark.io.checksums`; a large version hashed by ``spark``)."""
    manifest = manifest_of(fs, tmp)
    missing = missing_parts(manifest, parts)
    if missing:
        raise IncompleteWriteError(
            f"{tmp}: {', '.join(missing)} holds no data file although it was written (deleted by another "
            f"process?): not marking this {kind} complete; exit 75: retry"
        )
    checksums = checksums_of(fs, tmp, manifest, spark)
    marker = new_marker(kind, run_id, {**info, "manifest": manifest, "checksums": checksums})
    fs.write_text(f"{tmp}/{MARKER}", sealed_marker_text(marker))


def _commit(fs, path: str, tmp: str, run_id: str, kind: str, lease) -> None:
    """Move the complete ``tmp`` to ``path``; the version it replaces is retained (see the module docstring)."""
    lease.check()
    old, current = None, marker_at(fs, path)
    if fs.exists(path):
        # A version with a marker is retained for the readers that pinned it; anything else (a folder
        # without a marker, replaced with --overwrite) was readable by no one and goes at once.
        old = version_path(path, str(current["run_id"])) if current else sibling(path, OLD, run_id)
        if fs.exists(old):
            fs.delete(old)
        fs.rename(path, old)
        maybe_kill(kind, "old_moved")
    fs.rename(tmp, path)
    if old is not None:
        maybe_kill(kind, "committed")
        if current:
            stamp_superseded(fs, old)
        else:
            fs.delete(old)
    collect_superseded(fs, path, policy().keep_superseded_seconds)
    log.info("%s written (run %s)", path, run_id)


def commit(spark, path: str, tmp: str, run_id: str, kind: str = "") -> None:
    """Move the complete ``tmp`` to ``path``, replacing what is there, as the one writer of ``path``."""
    path = session_path(spark, path).rstrip("/")
    fs = file_system(spark, path)
    with leases.hold(fs, path, run_id, kind) as lease:
        _commit(fs, path, tmp, run_id, kind, lease)


# ------------------------------------------------------------ the driver's local disk
def read_local_marker(directory: str) -> Optional[Dict[str, object]]:
    """:func:`read_marker` of a directory on the driver's local disk, without Spark."""
    try:
        with open(os.path.join(directory, MARKER), encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, ValueError):  # unreadable, or not UTF-8
        return None
    return parse_marker(text)


def write_local_output(
    path: str, files: Dict[str, bytes], kind: str, overwrite: bool = False, info: Optional[Dict[str, object]] = None
) -> str:
    """Write ``files`` (name -> bytes) as the local directory ``path``, atomically, with a marker of ``kind``.

    The protocol of :func:`atomic_output` with plain file I/O on the driver,
    for folders of plain files readable without Spark (``pcem inspect``): under
    the lease of ``path``, the files and the marker (kind, format version, run
    id, ``files``: the names, then ``info``, the manifest) are written to the
    hidden sibling ``.NAME.pcem-tmp-RUNID``, which then replaces ``path`` (the
    version there is retained as ``.NAME.pcem-v-RUNID``). An existing ``path``
    needs ``overwrite`` and is never replaced when it holds a complete output
    of another kind. Files get the modes ``open`` / ``mkdir`` give (the umask
    decides). Returns the absolute path.
    """
    path = os.path.abspath(path.rstrip("/") or "/")
    parent, name = os.path.split(path)
    if not name:
        raise InputError(f"output path {path!r} has no name")
    os.makedirs(parent, exist_ok=True)
    fs = ArrowFS(path)
    run_id = new_run_id()
    with leases.hold(fs, path, run_id, kind) as lease:
        _recover(fs, path, policy().keep_superseded_seconds)
        if os.path.exists(path):
            if not overwrite:
                raise FileExistsError(f"output {path!r} already exists; pass --overwrite to replace it")
            if not os.path.isdir(path):
                raise NotADirectoryError(f"output {path!r} exists and is not a directory")
            _refuse_other_kind(path, read_local_marker(path), kind)
        tmp = os.path.join(parent, f".{name}{TMP}{run_id}")
        os.makedirs(tmp)
        try:
            for fname, data in files.items():
                with open(os.path.join(tmp, fname), "wb") as fh:
                    fh.write(data)
            maybe_kill(kind, "staged")
            _mark(fs, tmp, kind, run_id, {"files": sorted(files), **(info or {})}, ())
            maybe_kill(kind, "marked")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _commit(fs, path, tmp, run_id, kind, lease)
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
