"""The versions of one output on its file system: markers, manifests, retained versions, recovery.

An output ``NAME`` (a directory) is always one complete *version*: the files
one run wrote, with a completion marker ``_PCEM_COMPLETE`` (JSON: kind,
format version, run id, row counts, and the *manifest*: every file of the
version with its size). Around it, hidden siblings in the same folder:

* ``.NAME.pcem-tmp-RUNID``: a version being written (no marker yet), or
  written and not yet moved into place (marker, not committed);
* ``.NAME.pcem-v-RUNID``: a version that a later commit replaced, *retained*
  for ``output.keep_superseded_seconds`` (its ``_PCEM_SUPERSEDED`` file says
  since when), so that a reader that pinned it can finish reading it;
* ``.NAME.pcem-old-RUNID``: what the previous release of pcem-spark left
  when a run was killed mid-commit (restored or deleted like one of ours);
* ``.NAME.pcem-lease-G``: who writes ``NAME`` (:mod:`pcem_spark.io.leases`).

A version is immutable once marked: nothing writes into it again, it is only
renamed (``tmp`` -> ``NAME`` -> ``v``) and finally deleted. Everything that
changes ``NAME`` runs under its lease, one writer at a time:
:func:`recover` (finish or roll back what a dead writer left, delete its
temporary directory, delete retained versions past their time) and
:mod:`pcem_spark.io.outputs`' commit.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import time
import uuid
from typing import Dict, List, Optional, Sequence, Tuple

from pcem_spark.errors import InputError, TransientError
from pcem_spark.util.strict_json import loads_strict

__all__ = [
    "MARKER",
    "SUPERSEDED",
    "OUTPUT_FORMAT_VERSION",
    "TMP",
    "OLD",
    "VERSION",
    "IncompleteWriteError",
    "new_run_id",
    "split_path",
    "sibling",
    "siblings",
    "version_path",
    "parse_marker",
    "marker_problem",
    "sealed_marker_text",
    "new_marker",
    "marker_at",
    "manifest_of",
    "missing_parts",
    "needs_recovery",
    "recover",
    "stamp_superseded",
    "collect_superseded",
]

log = logging.getLogger(__name__)

MARKER = "_PCEM_COMPLETE"
SUPERSEDED = "_PCEM_SUPERSEDED"
OUTPUT_FORMAT_VERSION = 1
TMP = ".pcem-tmp-"
OLD = ".pcem-old-"
VERSION = ".pcem-v-"


class IncompleteWriteError(TransientError):
    """A version about to be marked lacks a part that was written (something deleted it): not marked, exit 75."""


def new_run_id() -> str:
    """A run id: UTC time to the second (so names sort by time), then 8 random hex digits."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def split_path(path: str) -> Tuple[str, str]:
    """``(parent, name)`` of an output path (InputError for a path without a name)."""
    path = path.rstrip("/")
    parent, name = path.rsplit("/", 1) if "/" in path else (".", path)
    if not name:
        raise InputError(f"output path {path!r} has no name")
    return parent or "/", name


def sibling(path: str, tag: str, run_id: str) -> str:
    """The hidden sibling ``.NAME<tag><run_id>`` of ``path``."""
    parent, name = split_path(path)
    return f"{parent}/.{name}{tag}{run_id}"


def siblings(fs, path: str, tag: str) -> List[str]:
    """Every hidden sibling of ``path`` with ``tag``, sorted by name."""
    parent, name = split_path(path)
    prefix = f".{name}{tag}"
    return sorted(f"{parent}/{n}" for n in fs.list_names(parent) if n.startswith(prefix))


def version_path(path: str, run_id: str) -> str:
    """Where the version ``run_id`` of ``path`` is retained once a later commit replaced it."""
    return sibling(path, VERSION, run_id)


def parse_marker(text: Optional[str]) -> Optional[Dict[str, object]]:
    """A marker file's text as a dict; None for no text, bad JSON or anything but a complete marker."""
    if text is None:
        return None
    return None if marker_problem(text) else json.loads(text)


_SEAL = "marker_sha256"


def _seal_of(marker: Dict[str, object]) -> str:
    body = {k: v for k, v in marker.items() if k != _SEAL}
    return "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def sealed_marker_text(marker: Dict[str, object]) -> str:
    """The text of a marker file: the marker with the SHA-256 of its own content (``marker_sha256``), so that
    a changed byte in the marker itself is found like one in any other file of the version."""
    return json.dumps({**marker, _SEAL: _seal_of(marker)}, sort_keys=True)


def marker_problem(text: Optional[str]) -> str:
    """Why ``text`` is not a complete marker ("" when it is one): not JSON, not complete, or changed since it
    was written (its ``marker_sha256`` differs; markers of releases before it have none)."""
    if text is None:
        return "no marker file"
    try:
        marker = loads_strict(text, "completion marker", allow_nan=True)
    except ValueError as exc:
        return f"not a marker ({exc})"
    if not isinstance(marker, dict) or marker.get("complete") is not True:
        return "not a complete marker"
    seal = marker.get(_SEAL)
    if seal is not None and seal != _seal_of(marker):
        return f"its content has {_seal_of(marker)}, it recorded {seal}"
    return ""


def new_marker(kind: str, run_id: str, info: Dict[str, object]) -> Dict[str, object]:
    """The completion marker of an output of ``kind`` written by run ``run_id``, with the extra fields ``info``."""
    return {
        "complete": True,
        "kind": kind,
        "format_version": OUTPUT_FORMAT_VERSION,
        "run_id": run_id,
        "written_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **info,
    }


def marker_at(fs, directory: str) -> Optional[Dict[str, object]]:
    """The completion marker of ``directory``, or None."""
    return parse_marker(fs.read_text(f"{directory.rstrip('/')}/{MARKER}"))


def _checksum(relative: str) -> bool:
    """Hadoop's local checksum files (``.NAME.crc``): listed by pyarrow, hidden by Hadoop's local file system."""
    name = relative.rsplit("/", 1)[-1]
    return name.startswith(".") and name.endswith(".crc")


def manifest_of(fs, directory: str) -> Dict[str, int]:
    """``{path relative to directory: size}`` of every file of a version: its marker, its superseded stamp and
    checksum files excluded (the same manifest whichever file system client lists it)."""
    return {
        rel: size for rel, size in fs.sizes_below(directory) if rel not in (MARKER, SUPERSEDED) and not _checksum(rel)
    }


def _is_data_file(relative: str) -> bool:
    return not any(part.startswith(("_", ".")) for part in relative.split("/"))


def missing_parts(manifest: Dict[str, int], parts: Sequence[str]) -> List[str]:
    """The ``parts`` (sub-directories; ``""`` for the directory itself) that hold no data file in ``manifest``."""
    missing = []
    for part in parts:
        prefix = f"{part.strip('/')}/" if part else ""
        if not any(rel.startswith(prefix) and _is_data_file(rel) for rel in manifest):
            missing.append(part or "(the output itself)")
    return missing


def _completed(fs, dirs: List[str]) -> List[Tuple[str, Dict[str, object]]]:
    """``(directory, marker)`` of those of ``dirs`` that are complete, oldest first by written_at."""
    found = [(d, marker_at(fs, d)) for d in dirs]
    return sorted(((d, m) for d, m in found if m is not None), key=lambda dm: (str(dm[1].get("written_at")), dm[0]))


def needs_recovery(fs, path: str) -> bool:
    """Whether ``path`` is missing while a dead writer's complete version (or a legacy old copy) waits beside it."""
    if fs.exists(path):
        return False
    return bool(_completed(fs, siblings(fs, path, TMP)) or _completed(fs, siblings(fs, path, OLD)))


def recover(fs, path: str, keep_seconds: float) -> None:
    """Clean up after the writers before this one (call it holding the lease of ``path``).

    * ``path`` missing and a complete temporary version beside it: a writer
      was killed between its two renames; its version is moved into place
      (the newest, if several). With none, the newest legacy old copy comes back.
    * Every other temporary directory is deleted: with the lease held, its
      writer is dead.
    * Legacy old copies are deleted once ``path`` exists.
    * Retained versions get their superseded stamp if a killed writer had not
      written it, and are deleted ``keep_seconds`` after it.
    """
    path = path.rstrip("/")
    if not fs.exists(path):
        complete = _completed(fs, siblings(fs, path, TMP))
        olds = _completed(fs, siblings(fs, path, OLD))
        if complete:
            fs.rename(complete[-1][0], path)
            log.warning(
                "%s: finished the replacement a killed run had started (moved %s into place)", path, complete[-1][0]
            )
        elif olds:
            fs.rename(olds[-1][0], path)
            log.warning("%s: restored the previous output %s (the run replacing it was killed)", path, olds[-1][0])
    for stale in siblings(fs, path, TMP) + (siblings(fs, path, OLD) if fs.exists(path) else []):
        log.info("deleting %s (left by a killed or failed run)", stale)
        fs.delete(stale)
    collect_superseded(fs, path, keep_seconds)


def stamp_superseded(fs, version: str) -> None:
    """Write when ``version`` was replaced (its retention counts from here)."""
    fs.write_text(f"{version}/{SUPERSEDED}", json.dumps({"superseded_at": time.time()}))


def collect_superseded(fs, path: str, keep_seconds: float) -> List[str]:
    """Delete the retained versions of ``path`` replaced more than ``keep_seconds`` ago; returns them."""
    deleted = []
    for version in siblings(fs, path, VERSION):
        try:
            stamp = loads_strict(fs.read_text(f"{version}/{SUPERSEDED}") or "null", SUPERSEDED, allow_nan=True)
            since = float(stamp["superseded_at"])
        except (ValueError, TypeError, KeyError):
            stamp_superseded(fs, version)  # a writer killed before its stamp: the time starts now
            since = time.time()
        if time.time() - since >= keep_seconds:
            fs.delete(version)
            deleted.append(version)
    if deleted:
        log.info("%s: deleted %d retained version(s) older than %gs", path, len(deleted), keep_seconds)
    return deleted
