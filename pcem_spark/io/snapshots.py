"""Reading an output as one version: pin it, read only its files, never a mixture.

:func:`read_pinned` is how every reader of a pcem-spark output (a model,
predictions, rejects, a documents table written by ``ingest``) reads it:

1. **Resolve** (:func:`resolve`): read the marker of ``NAME`` -- the version to
   read, with its run id and manifest. ``NAME`` missing while a writer holds
   its lease and has a complete version waiting means the writer is between
   the two renames of its commit: wait for it (``output.commit_wait_seconds``),
   then exit 75. ``NAME`` missing with no live writer and a dead writer's
   complete version beside it: finish that commit, under the lease.
2. **Check** the manifest: every file of the version present with its size,
   and its content (:meth:`Snapshot.verify`, the SHA-256 of every file against
   the marker's ``checksums``): always for a model, for other outputs up to
   ``output.verify_max_bytes``; a larger output is checked by its Parquet page
   checksums as it is read, and a read that fails has the files it names
   checked in full. A file whose content changed is :class:`DamagedOutputError`
   (exit 2) naming the file and both checksums (:mod:`pcem_spark.io.checksums`).
3. **Read** only those files (:meth:`Snapshot.table` passes Spark the file
   list, never the folder), so data of another version cannot be read: its
   files have other names (Spark names every part file after its write job).
4. **Verify**: the marker of ``NAME`` still names the pinned run -- or the
   pinned version is still retained. A replacement that moved the pinned
   version away mid-read (a missing file) sends the reader after it, to
   ``.NAME.pcem-v-RUNID``, where a replaced version stays for
   ``output.keep_superseded_seconds``; a version already deleted there sends it
   back to step 1 for the new one. After :data:`ATTEMPTS` replacements in a
   row it gives up with :class:`OutputReplacedError` (exit 75).

Outputs of an older pcem-spark have no manifest: they are read by folder, and
step 4 (plus one writer at a time) keeps them unmixed. Outputs written before
checksums are read with one warning, their content unverified.

A documents input that is a pcem-spark output is pinned for the whole run
(:func:`pin`): Spark reads it lazily, during the run. If a writer replaced it
meanwhile, the run's missing-file failure is reported as such, exit 75
(:func:`replaced_pins`), never as bad input.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, List, Optional, TypeVar

from pcem_spark.errors import InputError, TransientError
from pcem_spark.io import leases
from pcem_spark.io.checksums import VERIFY_PAGES, mismatches
from pcem_spark.io.output_policy import policy
from pcem_spark.io.versions import (
    MARKER,
    OUTPUT_FORMAT_VERSION,
    TMP,
    marker_at,
    marker_problem,
    needs_recovery,
    new_run_id,
    recover,
    siblings,
    version_path,
)
from pcem_spark.util.faults import reached

__all__ = [
    "ATTEMPTS",
    "IncompleteOutputError",
    "DamagedOutputError",
    "OutputReplacedError",
    "Snapshot",
    "resolve",
    "read_pinned",
    "verify_before_reading",
    "verify_after_failure",
    "pin",
    "replaced_pins",
    "missing_file",
]

log = logging.getLogger(__name__)

ATTEMPTS = 5
T = TypeVar("T")


class IncompleteOutputError(InputError):
    """An output directory lacks its completion marker (partial, foreign or older)."""


class DamagedOutputError(InputError):
    """A file of a complete version was removed or changed after it was written (not by a replacement): exit 2."""


# Kinds of output verified in full whatever their size (small, and read whole: every byte matters).
ALWAYS_VERIFIED = ("model",)
# Kinds a person is meant to edit before they are read again: suggest-labels' worksheet, whose "labels" the
# labeller fills in and `pcem train --labels` reads back. Their rows are validated one by one instead.
EDITABLE = ("suggestions",)
_UNVERIFIABLE_WARNED: set = set()


class OutputReplacedError(TransientError):
    """A writer replaced the output while it was read, too often or too early to finish: retry (exit 75)."""


class Snapshot:
    """One complete version of the output ``path``: its marker, and where its files are now.

    ``location`` is ``path`` itself while the version is current, or the
    retained ``.NAME.pcem-v-RUNID`` after a later commit replaced it.
    """

    def __init__(self, path: str, location: str, marker: Dict[str, object]):
        self.path, self.location, self.marker = path.rstrip("/"), location.rstrip("/"), marker

    @property
    def run_id(self) -> str:
        return str(self.marker.get("run_id"))

    @property
    def manifest(self) -> Optional[Dict[str, int]]:
        manifest = self.marker.get("manifest")
        return manifest if isinstance(manifest, dict) else None

    def files(self, part: str = "") -> Optional[List[str]]:
        """Full paths of the data files under ``part`` (a sub-directory; "" = all), or None without a manifest."""
        if self.manifest is None:
            return None
        prefix = f"{part.strip('/')}/" if part else ""
        return [
            f"{self.location}/{rel}"
            for rel in sorted(self.manifest)
            if rel.startswith(prefix) and not any(p.startswith(("_", ".")) for p in rel.split("/"))
        ]

    @property
    def checksums(self) -> Optional[Dict[str, str]]:
        checksums = self.marker.get("checksums")
        return checksums if isinstance(checksums, dict) else None

    @property
    def n_bytes(self) -> int:
        return sum(int(size) for size in (self.manifest or {}).values())

    def table(self, spark, part: str = "", fmt: str = "parquet"):
        """The DataFrame of ``part`` read from this version's files only (partition columns kept); Parquet
        with every page's checksum verified as it is read."""
        base = f"{self.location}/{part}" if part else self.location
        files = self.files(part)
        reader = spark.read.format(fmt)
        if fmt == "parquet":
            reader = reader.option(*VERIFY_PAGES)
        if not files:  # an older output without a manifest (or a part with no data file): by folder
            return reader.load(base)
        table = reader.option("basePath", base).load(files)
        # Spark checks that each file exists, then lists it; a file gone in between (a replacement moved
        # the version) is listed as nothing, with a warning, and the read returns fewer rows, not an error.
        listed = len(table.inputFiles())
        if listed < len(files):
            raise FileNotFoundError(
                f"{base}: {len(files) - listed} of its {len(files)} files went away while Spark listed them"
            )
        return table

    def check_files(self, fs) -> None:
        """Raise FileNotFoundError unless every manifest file is present with its size."""
        if self.manifest is None:
            return
        present = dict(fs.sizes_below(self.location))
        for rel, size in self.manifest.items():
            if present.get(rel) != size:
                raise FileNotFoundError(
                    f"{self.location}/{rel}: "
                    + ("missing" if rel not in present else f"{present[rel]} bytes, the manifest says {size}")
                )

    def verify(self, fs, spark=None, relatives=None) -> None:
        """Raise :class:`DamagedOutputError` unless every file (or those of ``relatives``) still has the SHA-256
        recorded when the version was marked; a version written before checksums passes with one warning."""
        if self.checksums is None:
            if self.manifest is not None and (self.path, self.run_id) not in _UNVERIFIABLE_WARNED:
                _UNVERIFIABLE_WARNED.add((self.path, self.run_id))
                log.warning(
                    "%s: written by a release before checksums (run %s): its content cannot be verified; "
                    "rewrite it with the command that made it to have it verified on every read",
                    self.path,
                    self.run_id,
                )
            return
        bad = mismatches(fs, self.location, self.checksums, relatives, spark, self.manifest)
        if bad and (not self.still_readable(fs) or leases.live_holder(fs, self.path) is not None):
            # A commit replaced the version while its files were hashed (the new version's file read under
            # the same name), or a live writer is copying one in (object stores): not damage. The reader
            # follows the version (read_pinned: a missing file).
            raise FileNotFoundError(f"{self.location}: replaced while its files were hashed")
        if bad:
            rel, expected, found = bad[0]
            more = f" (and {len(bad) - 1} more file(s): {', '.join(b[0] for b in bad[1:4])})" if len(bad) > 1 else ""
            raise DamagedOutputError(
                f"{self.location}/{rel} is damaged: its content has {found}, the version written by run "
                f"{self.run_id} recorded {expected}{more}. It was changed after it was written (a disk, a copy "
                "or a person): rewrite it with the command that made it"
            )

    def named_in(self, text: str) -> List[str]:
        """The files of this version that an error's text names (by their relative path)."""
        return [rel for rel in (self.checksums or {}) if rel.rsplit("/", 1)[-1] in text]

    def intact(self, fs) -> bool:
        """Whether every file of this version is still where it is read from (True without a manifest)."""
        try:
            self.check_files(fs)
        except FileNotFoundError:
            return False
        return True

    def moved(self, fs) -> Optional["Snapshot"]:
        """This version where a later commit retained it, if it is there (and complete)."""
        retained = version_path(self.path, self.run_id)
        marker = marker_at(fs, retained)
        if marker is None or marker.get("run_id") != self.run_id:
            return None
        return Snapshot(self.path, retained, marker)

    def still_readable(self, fs) -> bool:
        """Whether this version is still where it was read from (current, or retained)."""
        marker = marker_at(fs, self.location)
        return marker is not None and marker.get("run_id") == self.run_id


def _check_marker(path: str, marker: Dict[str, object], kind: Optional[str]) -> None:
    if kind is not None and marker.get("kind") != kind:
        raise IncompleteOutputError(f"{path} is a pcem-spark {marker.get('kind')} output, expected {kind}")
    version = marker.get("format_version")
    if version != OUTPUT_FORMAT_VERSION:
        raise IncompleteOutputError(
            f"{path}: output format version {version}, this pcem-spark reads {OUTPUT_FORMAT_VERSION}"
        )


def resolve(fs, path: str, kind: Optional[str] = None) -> Snapshot:
    """The current version of ``path`` (step 1 of the module docstring).

    Raises FileNotFoundError (no such output), :class:`IncompleteOutputError`
    (a directory without a marker, or of another kind), or
    :class:`OutputReplacedError` when a writer's commit does not finish within
    ``output.commit_wait_seconds`` or its first version is still being written.
    """
    path = path.rstrip("/")
    deadline = time.monotonic() + policy().commit_wait_seconds
    pause = 0.05
    while True:
        marker = marker_at(fs, path)
        if marker is not None:
            _check_marker(path, marker, kind)
            return Snapshot(path, path, marker)
        if fs.exists(path):
            text = fs.read_text(f"{path}/{MARKER}")
            if text is not None and not marker_problem(text):
                continue  # a commit's second rename landed between the two reads: read the new marker
            if text is not None:
                raise DamagedOutputError(
                    f"{path}/{MARKER} is damaged: {marker_problem(text)}. The version's completion marker was "
                    "changed after it was written (a disk, a copy or a person): rewrite the output with the "
                    "command that made it"
                )
            raise IncompleteOutputError(
                f"{path} has no completion marker ({MARKER}): it was not written completely by pcem-spark "
                "(a killed or failed run, another tool, or a version before markers). Rerun the command "
                "that writes it"
            )
        holder = leases.live_holder(fs, path)
        if holder is not None:
            committing = any(marker_at(fs, t) is not None for t in siblings(fs, path, TMP))
            if not committing:
                raise OutputReplacedError(
                    f"{path} does not exist yet: {holder.describe()} is writing it. Exit 75: retry after it finishes"
                )
            if time.monotonic() >= deadline:
                raise OutputReplacedError(
                    f"{path}: a writer is committing a new version ({holder.describe()}) and did not finish "
                    f"within output.commit_wait_seconds = {policy().commit_wait_seconds:g}. Exit 75: retry"
                )
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
            continue
        if needs_recovery(fs, path):
            try:
                with leases.hold(fs, path, new_run_id(), "recovering a killed commit"):
                    recover(fs, path, policy().keep_superseded_seconds)
            except leases.OutputBusyError:
                pass  # another run is on it: look again
            continue
        raise FileNotFoundError(f"{path} does not exist")


def missing_file(exc: BaseException) -> bool:
    """Whether a read failed because a file it listed is gone (what a replaced version looks like to Spark).

    Never for pcem-spark's own input errors: they say what is wrong with what was read, not that it went.
    """
    if isinstance(exc, InputError):
        return False
    text = _error_text(exc)
    return isinstance(exc, FileNotFoundError) or any(
        m in text
        for m in (
            "FileNotFoundException",
            "NoSuchFileException",
            "PATH_NOT_FOUND",
            "FILE_NOT_EXIST",
            "does not exist",
            "No such file or directory",
        )
    )


def verify_before_reading(fs, snap: Snapshot, kind: Optional[str], spark=None) -> None:
    """Check ``snap``'s content before it is read: in full for a model, and for any output of at most
    ``output.verify_max_bytes`` (a larger one is checked by its Parquet page checksums as it is read)."""
    if getattr(snap, "verified", False) or snap.marker.get("kind") in EDITABLE:
        return  # a pinned input read again in the same run (checked when pinned), or a worksheet
    if kind in ALWAYS_VERIFIED or snap.n_bytes <= policy().verify_max_bytes:
        snap.verify(fs, spark)
    else:
        snap.verify(fs, spark, relatives=[])  # only the warning of a version without checksums
    snap.verified = True


def verify_after_failure(fs, snap: Snapshot, exc: BaseException, spark=None) -> None:
    """After a read of ``snap`` failed: :class:`DamagedOutputError` if a file the error names (or, for an output
    of at most ``output.verify_max_bytes``, any file) no longer has its recorded checksum."""
    if snap.checksums is None:
        return
    named = snap.named_in(_error_text(exc))
    if named:
        snap.verify(fs, spark, relatives=named)
    elif snap.n_bytes <= policy().verify_max_bytes:
        snap.verify(fs, spark)


def _moved_while_verified(fs, snap: Snapshot, exc: BaseException, spark) -> bool:
    """After a read of ``snap`` failed with ``exc``: raise :class:`DamagedOutputError` if a file changed; True
    when the version moved away while its files were hashed (a commit: read it again, where it went)."""
    try:
        verify_after_failure(fs, snap, exc, spark)
    except DamagedOutputError:
        raise
    except Exception:  # noqa: BLE001 - a file went away mid-hash: a replacement, or the original error stands
        if not snap.still_readable(fs) or not snap.intact(fs):
            return True
        raise exc from None
    return False


def _error_text(exc: BaseException) -> str:
    """An exception's type and message, with the Java exception's where py4j carried one."""
    text = f"{type(exc).__name__}: {exc}"
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            text += "\n" + str(java.toString())
        except Exception:  # noqa: BLE001 - the JVM may be gone
            pass
    return text


def read_pinned(fs, path: str, kind: Optional[str], read: Callable[[Snapshot], T], spark=None) -> T:
    """``read(snapshot)`` of one version of ``path``, never a mixture, its content verified (see the module
    docstring; ``spark`` hashes a large version's files on the executors).

    ``read`` must read only through the snapshot (:meth:`Snapshot.table`,
    :meth:`Snapshot.files`) and finish its work (collect, count) before it
    returns: a lazy DataFrame would be read after the pin is gone.
    """
    replaced = 0
    reached(f"{kind}:read:start")
    snap = resolve(fs, path, kind)
    while True:
        reached(f"{kind}:read:resolved")
        try:
            snap.check_files(fs)
            verify_before_reading(fs, snap, kind, spark)
            value = read(snap)
        except Exception as exc:
            # A read that saw the version only in part (a file moved away mid-read) may fail as anything:
            # an empty table is "damaged", a schema cannot be inferred. Whether the pinned files are all
            # still there tells a replacement from a real error.
            if not missing_file(exc) and snap.intact(fs):
                if isinstance(exc, DamagedOutputError) or not _moved_while_verified(fs, snap, exc, spark):
                    raise
            value, snap = None, _after_loss(fs, snap, kind, exc)
        else:
            reached(f"{kind}:read:done")
            if snap.manifest is not None or snap.still_readable(fs):
                # With a manifest, only the pinned version's own files were read: a later replacement
                # cannot have mixed anything in. Without one (an older output), the marker must not have moved.
                return value
            snap = _after_loss(fs, snap, kind, None)
        replaced += 1
        if replaced >= ATTEMPTS:
            raise OutputReplacedError(
                f"{path}: replaced by writers {replaced} times while it was read; exit 75: retry when they are done"
            )
        log.info("%s: replaced while it was read; reading version %s at %s", path, snap.run_id, snap.location)


def _after_loss(fs, snap: Snapshot, kind: Optional[str], exc: Optional[BaseException]) -> Snapshot:
    """Where to read next when the pinned version's files went away: the same version, retained; else the new one."""
    if snap.location == snap.path:
        moved = snap.moved(fs)
        if moved is not None:
            return moved
    elif exc is not None and snap.still_readable(fs):
        raise exc  # the retained version is intact: the missing file is a real error, not a replacement
    try:
        again = resolve(fs, snap.path, kind)
    except FileNotFoundError:
        raise OutputReplacedError(f"{snap.path}: deleted while it was read; exit 75: retry") from exc
    if exc is not None and again.run_id == snap.run_id and again.location == snap.location:
        # Nothing replaced it: the version itself lost or changed a file after it was written.
        raise DamagedOutputError(
            f"{snap.path} is damaged: {exc} (a file of the version written by run {snap.run_id} was removed or "
            "changed since); rewrite it with the command that made it"
        ) from exc
    return again


# ------------------------------------------------------------------ pinned inputs of a run
# Per thread: a command runs in one thread, and two commands in two threads of one process pin apart.
_PINS = threading.local()


def _pins() -> Dict[str, tuple]:
    if not hasattr(_PINS, "by_path"):
        _PINS.by_path = {}
    return _PINS.by_path


def pin(fs, path: str, kind: Optional[str] = None) -> Snapshot:
    """Pin the current version of the input ``path`` for this thread's run (the same snapshot every time)."""
    key = path.rstrip("/")
    if key not in _pins():
        _pins()[key] = (fs, resolve(fs, path, kind))
    return _pins()[key][1]


def replaced_pins(clear: bool = True) -> List[str]:
    """The inputs this thread pinned whose pinned version is no longer where it was read (a writer replaced it).

    ``clear``: forget the pins (the end of a command).
    """
    pins = list(_pins().items())
    if clear:
        _pins().clear()
    gone = []
    for path, (fs, snap) in pins:
        try:
            if not snap.still_readable(fs):
                gone.append(f"{path} (pinned version {snap.run_id})")
        except Exception:  # noqa: BLE001 - cannot look (the JVM is gone): say nothing
            pass
    return gone
