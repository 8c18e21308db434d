"""A long run's checkpoint on storage: one file per generation, complete or absent, data only.

A checkpoint of the output ``NAME`` is the hidden sibling directory
``.NAME.pcem-checkpoint`` (or ``DIR/NAME.pcem-checkpoint`` when the user moves
it). Each write is a new generation ``state-G.ckpt``, written under a
``.partial`` name and renamed when complete, so a reader never sees half a
file; the older generations are then deleted. The file is a header (magic,
format version, length, SHA-256) followed by the value in the data-only format
of :mod:`pcem_spark.engine.safe_values` (an ``.npz`` of plain arrays and a JSON
tree, read with ``allow_pickle=False``; only the classes the caller names can
be rebuilt). A file that fails its checksum (a disk that lost a block, a copy
cut short) or is not such a value reads as no checkpoint, with a warning, and
the run starts afresh.

Nothing read here can run code: a checkpoint folder sits on shared scratch
space, and a file planted there must be data at worst. The SHA-256 detects
damage, not forgery (anyone can compute it); what a forged checkpoint can do is
bounded by the fingerprint check of :mod:`pcem_spark.ml.checkpointing` and by
the classes allowed. Generations written by earlier releases (``state-G.pkl``,
pickles) are never unpickled: they are ignored with a warning and deleted by
the next write.

The writer is the run that holds the output's lease (:mod:`pcem_spark.io.leases`):
a second writer of the same output fails at the lease before it reads or
writes anything here, and a dead run's checkpoint is taken over with its lease.
The content is the caller's (:mod:`pcem_spark.ml.checkpointing`).

The file system is the driver's (:func:`pcem_spark.io.file_system.file_system`):
Hadoop's through the JVM, or ``pyarrow.fs`` from a Spark Connect client.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
from typing import Any, Iterable, List, Optional, Tuple

from pcem_spark.engine import safe_values
from pcem_spark.io.versions import split_path

__all__ = ["CHECKPOINT_TAG", "checkpoint_dir_for", "CheckpointStore", "encode", "decode", "input_fingerprint"]

log = logging.getLogger(__name__)

CHECKPOINT_TAG = ".pcem-checkpoint"
_MAGIC = b"PCEMCKPT"
# 1: a pickle (releases before 2026-12; never read again); 2: pcem_spark.engine.safe_values.
_FORMAT = 2
_HEADER = struct.Struct(">8sIQ32s")  # magic, format, payload length, sha256 of the payload
_PREFIX, _SUFFIX, _PARTIAL = "state-", ".ckpt", ".partial"
_LEGACY_SUFFIX = ".pkl"


def checkpoint_dir_for(output_path: str, checkpoint_dir: Optional[str] = None) -> str:
    """Where the checkpoint of ``output_path`` lives: its hidden sibling, or inside ``checkpoint_dir``."""
    parent, name = split_path(output_path)
    if checkpoint_dir:
        return f"{checkpoint_dir.rstrip('/')}/{name}{CHECKPOINT_TAG}"
    return f"{parent}/.{name}{CHECKPOINT_TAG}"


def encode(value: Any, types: Iterable[type] = ()) -> bytes:
    """``value`` as a checkpoint file's bytes (header, then the data-only value; ``types``: the classes
    it may hold, :func:`pcem_spark.engine.safe_values.dumps`)."""
    payload = safe_values.dumps(value, types)
    return _HEADER.pack(_MAGIC, _FORMAT, len(payload), hashlib.sha256(payload).digest()) + payload


def decode(data: bytes, types: Iterable[type] = ()) -> Tuple[Optional[Any], str]:
    """``(value, "")`` of a checkpoint file's bytes, or ``(None, why)`` when they are not a whole one."""
    if len(data) < _HEADER.size:
        return None, f"{len(data)} bytes, shorter than the header"
    magic, version, length, digest = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        return None, "not a pcem-spark checkpoint file"
    if version == 1:
        return None, "checkpoint file format 1 (a pickle, written by an earlier release): pickles are never read"
    if version != _FORMAT:
        return None, f"checkpoint file format {version}, this release reads {_FORMAT}"
    payload = data[_HEADER.size :]
    if len(payload) != length:
        return None, f"{len(payload)} bytes of content where the header says {length} (cut short)"
    if hashlib.sha256(payload).digest() != digest:
        return None, "its content does not match its checksum (damaged)"
    try:
        return safe_values.loads(payload, types), ""
    except safe_values.UnsafeValueError as exc:
        return None, f"its content is not a checkpoint of this release ({exc})"


class CheckpointStore:
    """The generations of one checkpoint directory on the file system ``fs``; ``types``: the classes its
    values may hold (nothing else is ever rebuilt from a file)."""

    def __init__(self, fs, directory: str, types: Iterable[type] = ()):
        self.fs = fs
        self.directory = directory.rstrip("/")
        self.types = tuple(types)

    def _names(self) -> List[str]:
        return self.fs.list_names(self.directory) if self.fs.exists(self.directory) else []

    def _generations(self, names: Optional[List[str]] = None) -> List[int]:
        found = []
        for name in self._names() if names is None else names:
            if name.startswith(_PREFIX) and name.endswith(_SUFFIX):
                digits = name[len(_PREFIX) : -len(_SUFFIX)]
                if digits.isdigit():
                    found.append(int(digits))
        return sorted(found)

    @staticmethod
    def _legacy(names: List[str]) -> List[str]:
        return sorted(n for n in names if n.startswith(_PREFIX) and n.endswith(_LEGACY_SUFFIX))

    def _file(self, generation: int) -> str:
        return f"{self.directory}/{_PREFIX}{generation:012d}{_SUFFIX}"

    def read(self) -> Optional[Any]:
        """The newest complete checkpoint's value, or None (no checkpoint, or a damaged one: logged)."""
        names = self._names()
        legacy = self._legacy(names)
        if legacy:
            log.warning(
                "checkpoint %s: ignoring %s, written by an earlier release as a pickle (pickles are never read: "
                "a file on shared storage must not run as code); it is deleted by this run's first checkpoint",
                self.directory,
                ", ".join(legacy),
            )
        generations = self._generations(names)
        if not generations:
            return None
        path = self._file(generations[-1])
        data = self.fs.read_bytes(path)
        if data is None:  # deleted between the listing and the read (a commit cleaning up)
            return None
        value, why = decode(data, self.types)
        if why:
            log.warning("checkpoint %s cannot be used: %s; starting afresh", path, why)
            return None
        return value

    def write(self, value: Any) -> str:
        """Write ``value`` as the next generation (whole or not at all), delete the older ones; its path."""
        names = self._names()
        generations = self._generations(names)
        generation = (generations[-1] + 1) if generations else 1
        path = self._file(generation)
        self.fs.mkdirs(self.directory)
        partial = path + _PARTIAL
        self.fs.write_bytes(partial, encode(value, self.types))
        self.fs.rename(partial, path)
        for older in [self._file(g) for g in generations] + [f"{self.directory}/{n}" for n in self._legacy(names)]:
            self.fs.delete(older)
        return path

    def delete(self) -> None:
        """Remove the checkpoint (the output it was for has committed)."""
        if self.fs.exists(self.directory):
            self.fs.delete(self.directory)


def input_fingerprint(spark, path: str) -> List[List[Any]]:
    """``[relative name, size, modification time]`` of every file of the input ``path`` (one row for a
    file, ``["", None, None]`` for a path that does not exist): what a checkpoint's fingerprint holds of it."""
    from pcem_spark.io.file_system import file_system, session_path

    fs = file_system(spark, session_path(spark, path))
    if not fs.exists():
        return [["", None, None]]
    if not fs.is_directory():
        local = fs.local()
        size = os.path.getsize(local) if local is not None else (fs.sizes_below() or [("", None)])[0][1]
        return [["", size, fs.mtime()]]
    root = path.rstrip("/")
    return [[rel, size, fs.mtime(f"{root}/{rel}")] for rel, size in fs.sizes_below()]
