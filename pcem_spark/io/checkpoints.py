"""A long run's checkpoint on storage: one file per generation, complete or absent.

A checkpoint of the output ``NAME`` is the hidden sibling directory
``.NAME.pcem-checkpoint`` (or ``DIR/NAME.pcem-checkpoint`` when the user moves
it). Each write is a new generation ``state-G.pkl``, written under a
``.partial`` name and renamed when complete, so a reader never sees half a
file; the older generations are then deleted. The file is a header (magic,
format version, length, SHA-256) followed by a pickle: a file that fails its
checksum (a disk that lost a block, a copy cut short) reads as no checkpoint,
with a warning, and the run starts afresh.

The writer is the run that holds the output's lease (:mod:`pcem_spark.io.leases`):
a second writer of the same output fails at the lease before it reads or
writes anything here, and a dead run's checkpoint is taken over with its lease.
The content is the caller's (:mod:`pcem_spark.ml.checkpointing`); pickles are
read only from the checkpoint directory of an output the user names, as trusted
as the model itself.

The file system is the driver's (:func:`pcem_spark.io.file_system.file_system`):
Hadoop's through the JVM, or ``pyarrow.fs`` from a Spark Connect client.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import struct
from typing import Any, List, Optional, Tuple

from pcem_spark.io.versions import split_path

__all__ = ["CHECKPOINT_TAG", "checkpoint_dir_for", "CheckpointStore", "encode", "decode", "input_fingerprint"]

log = logging.getLogger(__name__)

CHECKPOINT_TAG = ".pcem-checkpoint"
_MAGIC = b"PCEMCKPT"
_FORMAT = 1
_HEADER = struct.Struct(">8sIQ32s")  # magic, format, payload length, sha256 of the payload
_PREFIX, _SUFFIX, _PARTIAL = "state-", ".pkl", ".partial"


def checkpoint_dir_for(output_path: str, checkpoint_dir: Optional[str] = None) -> str:
    """Where the checkpoint of ``output_path`` lives: its hidden sibling, or inside ``checkpoint_dir``."""
    parent, name = split_path(output_path)
    if checkpoint_dir:
        return f"{checkpoint_dir.rstrip('/')}/{name}{CHECKPOINT_TAG}"
    return f"{parent}/.{name}{CHECKPOINT_TAG}"


def encode(value: Any) -> bytes:
    """``value`` as a checkpoint file's bytes (header, then the pickle)."""
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(_MAGIC, _FORMAT, len(payload), hashlib.sha256(payload).digest()) + payload


def decode(data: bytes) -> Tuple[Optional[Any], str]:
    """``(value, "")`` of a checkpoint file's bytes, or ``(None, why)`` when they are not a whole one."""
    if len(data) < _HEADER.size:
        return None, f"{len(data)} bytes, shorter than the header"
    magic, version, length, digest = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        return None, "not a pcem-spark checkpoint file"
    if version != _FORMAT:
        return None, f"checkpoint file format {version}, this release reads {_FORMAT}"
    payload = data[_HEADER.size :]
    if len(payload) != length:
        return None, f"{len(payload)} bytes of content where the header says {length} (cut short)"
    if hashlib.sha256(payload).digest() != digest:
        return None, "its content does not match its checksum (damaged)"
    return pickle.loads(payload), ""


class CheckpointStore:
    """The generations of one checkpoint directory on the file system ``fs``."""

    def __init__(self, fs, directory: str):
        self.fs = fs
        self.directory = directory.rstrip("/")

    def _generations(self) -> List[int]:
        if not self.fs.exists(self.directory):
            return []
        found = []
        for name in self.fs.list_names(self.directory):
            if name.startswith(_PREFIX) and name.endswith(_SUFFIX):
                digits = name[len(_PREFIX) : -len(_SUFFIX)]
                if digits.isdigit():
                    found.append(int(digits))
        return sorted(found)

    def _file(self, generation: int) -> str:
        return f"{self.directory}/{_PREFIX}{generation:012d}{_SUFFIX}"

    def read(self) -> Optional[Any]:
        """The newest complete checkpoint's value, or None (no checkpoint, or a damaged one: logged)."""
        generations = self._generations()
        if not generations:
            return None
        path = self._file(generations[-1])
        data = self.fs.read_bytes(path)
        if data is None:  # deleted between the listing and the read (a commit cleaning up)
            return None
        value, why = decode(data)
        if why:
            log.warning("checkpoint %s cannot be used: %s; starting afresh", path, why)
            return None
        return value

    def write(self, value: Any) -> str:
        """Write ``value`` as the next generation (whole or not at all), delete the older ones; its path."""
        generations = self._generations()
        generation = (generations[-1] + 1) if generations else 1
        path = self._file(generation)
        self.fs.mkdirs(self.directory)
        partial = path + _PARTIAL
        self.fs.write_bytes(partial, encode(value))
        self.fs.rename(partial, path)
        for older in generations:
            self.fs.delete(self._file(older))
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
